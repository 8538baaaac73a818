# Global torch state a captured graph depends on is guarded or makes the call
# run in CPython: the default dtype, autocast. Internal errors during capture
# are fallbacks, never exceptions; bad arguments to kiln are clear errors.
import pytest
import torch

import kiln
from kiln import _C


def test_default_dtype_is_guarded():
    fn = lambda x: torch.ones(3) + x  # noqa: E731
    f = kiln.compile(fn)
    x = torch.tensor(1)
    assert f(x).dtype == torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        expected = fn(x)
        actual = f(x)
    finally:
        torch.set_default_dtype(previous)
    assert actual.dtype == expected.dtype == torch.float64
    torch.testing.assert_close(actual, expected)
    # Back at float32, the function still gives float32.
    assert kiln.compile(fn)(x).dtype == torch.float32


def test_python_float_with_an_integer_tensor_follows_the_default_dtype():
    fn = lambda x: x * 1.5  # noqa: E731
    x = torch.arange(4)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        expected, actual = fn(x), kiln.compile(fn)(x)
    finally:
        torch.set_default_dtype(previous)
    assert actual.dtype == expected.dtype == torch.float64


def test_autocast_calls_give_autocasts_dtypes():
    fn = lambda a, b: (a @ b).relu()  # noqa: E731
    f = kiln.compile(fn)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    assert f(a, b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, actual = fn(a, b), f(a, b)
    assert actual.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(actual, expected)
    # Outside autocast the cached graph still serves.
    assert f(a, b).dtype == torch.float32
    assert not kiln.cache_info(f)["runs_in_cpython"]


def rotary_in_float32(x, inv_freq):
    # The pattern of transformers' rotary embeddings: autocast kept off for
    # the block, whatever spelling.
    with torch.autocast(device_type=x.device.type, enabled=False):
        freqs = (inv_freq[:, None] @ x.float()[None, :]).t()
    with torch.amp.autocast("cpu", enabled=False):
        freqs = freqs * 2
    return torch.cat((freqs, freqs), -1).cos()


def turns_autocast_on(a, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return a @ b


def test_an_autocast_block_that_keeps_it_off_is_captured():
    f = kiln.compile(rotary_in_float32)
    for n in (5, 5, 7):
        x, inv_freq = torch.randn(n), torch.rand(4)
        torch.testing.assert_close(f(x, inv_freq), rotary_in_float32(x, inv_freq))
    info = kiln.cache_info(f)
    assert not info["runs_in_cpython"] and not info["breaks"], info["fallback_reason"]
    # One that turns it on would change the dtypes of the calls in it: a
    # graph break makes it, and the block runs in CPython.
    g = kiln.compile(turns_autocast_on)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    actual, expected = g(a, b), turns_autocast_on(a, b)
    assert actual.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(actual, expected)
    assert "torch.autocast turned on" in kiln.cache_info(g)["break_reasons"][0]


def test_xor_of_tensors():
    fn = lambda a, b: (a ^ b, a ^ 3)  # noqa: E731
    a, b = torch.randint(0, 10, (5,)), torch.randint(0, 10, (5,))
    for expected, actual in zip(fn(a, b), kiln.compile(fn)(a, b)):
        assert torch.equal(actual, expected)


def test_nested_tensors_run_in_cpython():
    fn = lambda t: t * 2  # noqa: E731
    with pytest.warns(UserWarning):
        nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    f = kiln.compile(fn)
    out = f(nested)
    for actual, expected in zip(out.unbind(), fn(nested).unbind()):
        assert torch.equal(actual, expected)
    assert kiln.cache_info(f)["runs_in_cpython"]


def test_an_internal_error_during_capture_is_a_fallback(monkeypatch):
    from kiln import _trace

    def broken(out):
        raise RuntimeError("injected failure inside capture")

    monkeypatch.setattr(_trace, "_layouts", broken)
    fn = lambda x: torch.relu(x) + 1  # noqa: E731
    f = kiln.compile(fn)
    x = torch.randn(5)
    torch.testing.assert_close(f(x), fn(x))
    # The failure ends the capture: a graph break (where the frame's state
    # can be rebuilt) or the whole frame in CPython.
    info = kiln.cache_info(f)
    reasons = [info["fallback_reason"]] + info["break_reasons"]
    assert any("injected failure inside capture" in reason for reason in reasons)


def test_an_internal_error_under_fullgraph_is_unsupported(monkeypatch):
    from kiln import _trace

    def broken(out):
        raise RuntimeError("injected failure inside capture")

    monkeypatch.setattr(_trace, "_layouts", broken)
    f = kiln.compile(lambda x: x + 1, fullgraph=True)
    with pytest.raises(kiln.Unsupported, match="injected failure"):
        f(torch.randn(3))


def test_bad_arguments_to_the_extension_are_errors():
    with pytest.raises(ValueError, match="at least 0"):
        _C.set_num_threads(-1)
    with pytest.raises(KeyError, match="no op named"):
        _C.op_schema("aten::no_such_op")
    assert _C.has_op("aten::add.Tensor") and not _C.has_op("aten::no_such_op")
    with pytest.raises(ValueError, match="unknown kiln backend"):
        _C.CompiledFunction(lambda x: x, backend="no-such-backend")


def test_an_error_inside_a_cached_graph_points_at_the_users_line():
    import traceback

    def gather_rows(x, index):
        y = x * 2
        return torch.gather(y, 0, index)  # the failing line

    f = kiln.compile(gather_rows)
    x = torch.randn(5)
    f(x, torch.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="out of bounds") as caught:
        f(x, torch.tensor([0, 9]))
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert any(frame.name == "gather_rows" and "the failing line" in frame.line
               for frame in frames), frames
