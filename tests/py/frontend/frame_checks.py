# Differential checks shared by the frontend tests: a function compiled by
# kiln against eager on fresh inputs, with what the capture did.
import torch

import kiln


def same(actual, expected):
    """Compares results of any Python structure: tensors by value, objects
    of user classes by type and attributes, the rest by ==."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), (actual, expected)
        torch.testing.assert_close(actual, expected, equal_nan=True)
        return
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, dict):
        assert list(actual.keys()) == list(expected.keys())
        for key in expected:
            same(actual[key], expected[key])
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e)
    elif hasattr(expected, "__dict__") and not callable(expected):
        same(vars(actual), vars(expected))
    elif not isinstance(expected, dict):
        assert actual == expected, (actual, expected)


def check(fn, make_args, calls=3, graphs=None):
    """Runs kiln.compile(fn) and fn on `calls` fresh argument sets from
    make_args() and compares results; returns kiln.cache_info. `graphs`, if
    given, is the graph count the capture must reach (and then nothing of
    the function runs in CPython)."""
    compiled = kiln.compile(fn)
    for _ in range(calls):
        args = make_args()
        expected = fn(*make_copy(args))
        actual = compiled(*args)
        same(actual, expected)
    info = kiln.cache_info(compiled)
    if graphs is not None:
        assert not info["runs_in_cpython"], info["fallback_reason"]
        assert info["graph_count"] == graphs, info
    return info


def make_copy(args):
    import copy
    return copy.deepcopy(args)
