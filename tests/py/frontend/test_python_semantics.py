# Python semantics the evaluator must keep, each once a wrong answer or a
# crash: live dict views, code made by eval() with empty builtins (as
# namedtuple makes), local functions under torch.func transforms.
import collections

import torch

import kiln


def test_dict_views_see_later_insertions():
    def fn(x):
        d = {"a": x}
        keys, values, items = d.keys(), d.values(), d.items()
        d["b"] = x + 1
        return (len(keys), list(values)[-1], list(keys), "b" in keys,
                [k for k, _ in items], type(keys) is type({}.keys()))

    x = torch.randn(3)
    expected, actual = fn(x), kiln.compile(fn)(x)
    assert actual[0] == expected[0] == 2
    torch.testing.assert_close(actual[1], expected[1])
    assert actual[2:] == expected[2:]


def test_a_dict_built_in_a_loop_sums_its_values():
    def fn(x):
        d = {}
        for i in range(3):
            d[str(i)] = x * i
        return sum(v for v in d.values())

    x = torch.randn(4)
    torch.testing.assert_close(kiln.compile(fn)(x), fn(x))


def test_namedtuple_made_inside_the_function():
    # namedtuple compiles its __new__ with eval() and __builtins__ = {}: the
    # module-level code eval runs is no function to capture.
    def fn(x):
        Pair = collections.namedtuple("Pair", ["a", "b"])
        pair = Pair(x, x + 1)
        return pair.a + pair.b

    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(fn)(x), fn(x))


def test_vmap_of_a_local_function():
    def fn(x):
        def double(v):
            return v * 2
        return torch.vmap(double)(x.reshape(3, 1))

    x = torch.randn(3)
    torch.testing.assert_close(kiln.compile(fn)(x), fn(x))


def test_compiled_functions_under_torch_func_transforms():
    def fn(x):
        return (x.sin() * 2).sum()

    compiled = kiln.compile(fn)
    x = torch.randn(4)
    torch.testing.assert_close(torch.func.grad(compiled)(x), torch.func.grad(fn)(x))
    batch = torch.randn(3, 4)
    torch.testing.assert_close(torch.vmap(compiled)(batch), torch.vmap(fn)(batch))
    # Outside the transforms the compiled graph still serves.
    torch.testing.assert_close(compiled(x), fn(x))
    assert not kiln.cache_info(compiled)["runs_in_cpython"]


def test_slice_assignment_on_a_list():
    def fn(x):
        items = [1, 2, 3, 4, 5]
        items[1:3] = [x, x + 1, x + 2]
        items[::3] = [x * 0, x * 5]
        del items[-1:]
        return items

    x = torch.randn(2)
    actual, expected = kiln.compile(fn)(x), fn(x)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert type(a) is type(e)
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
        else:
            assert a == e


def test_a_fresh_partial_of_the_same_function_reuses_the_capture():
    import functools

    def scale(x, k, shift=0):
        return x * k + shift

    def fn(x, op):
        return op(x)

    compiled = kiln.compile(fn)
    x = torch.randn(3)
    for k in (2, 2, 2):
        torch.testing.assert_close(compiled(x, functools.partial(scale, k=k)), x * 2)
    torch.testing.assert_close(compiled(x, functools.partial(scale, k=3, shift=1)), x * 3 + 1)
    torch.testing.assert_close(compiled(x, functools.partial(scale, 4)), x * 4)
    assert kiln.cache_info(compiled)["entries"] == 3


def test_a_compiled_numpy_function_is_not_stepped_into():
    import numpy as np

    def fn(x):
        return x + float(np.random.randn() * 0)

    x = torch.randn(2)
    torch.testing.assert_close(kiln.compile(fn)(x), x)


def test_iter_and_next_are_captured():
    def fn(x, ws):
        it = iter(ws)
        y = x @ next(it)
        for w in it:  # the rest of the same iterator
            y = y @ w
        pairs = iter(zip((1, 2), "ab"))
        return y * next(iter((3, 4))), next(pairs), next(iter(()), "empty")

    compiled = kiln.compile(fn)
    x, ws = torch.randn(3, 4), [torch.randn(4, 4) for _ in range(3)]
    out, pair, empty = compiled(x, ws)
    expected = fn(x, ws)
    torch.testing.assert_close(out, expected[0])
    assert (pair, empty) == ((1, "a"), "empty")
    info = kiln.cache_info(compiled)
    assert info["break_reasons"] == [] and not info["runs_in_cpython"]


def test_next_of_an_iterator_over_a_list_changed_since_runs_in_python():
    def fn(x):
        values = [x, x * 2]
        it = iter(values)
        values.append(x * 3)  # Python's list iterator sees the new item
        return next(it) + next(it) + next(it)

    x = torch.randn(3)
    compiled = kiln.compile(fn)
    torch.testing.assert_close(compiled(x), fn(x))
    assert "changed since" in kiln.cache_info(compiled)["fallback_reason"]


class _Tree(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.ReLU()])
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        p = next(self.parameters())
        names = [name for name, _ in self.named_parameters()]
        total = sum(q.sum() for q in self.parameters())
        buffers = [b for b in self.buffers()]
        kinds = [type(m).__name__ for m in self.modules()]
        children = [name for name, _ in self.named_children()]
        y = self.blocks[1](self.blocks[0](self.lin(x.to(p.dtype))))
        return y * buffers[0] + total, names, kinds, children, len(list(self.parameters(recurse=False)))


def test_module_structure_iterators_are_captured_and_guarded():
    model = _Tree()
    compiled = kiln.compile(model)
    x = torch.randn(2, 4)
    out, names, kinds, children, own = compiled(x)
    expected = model(x)
    torch.testing.assert_close(out, expected[0])
    assert (names, kinds, children, own) == expected[1:]
    info = kiln.cache_info(compiled)
    assert info["break_reasons"] == [] and not info["runs_in_cpython"]
    # A parameter added later changes what the iterators give: the guards
    # on the module tree miss, and the new capture sees it.
    model.extra = torch.nn.Parameter(torch.ones(3))
    out, names, *_ = compiled(x)
    expected = model(x)
    torch.testing.assert_close(out, expected[0])
    assert names == expected[1] and "extra" in names


class _Scaled:
    """A context manager written in Python: its __enter__ and __exit__ are
    inlined, and what __exit__ changes is seen after the block."""

    def __init__(self, factor):
        self.factor = factor
        self.inside = False

    def __enter__(self):
        self.inside = True
        return self.factor

    def __exit__(self, *exc_info):
        self.inside = False
        return False


def test_with_blocks_over_context_managers_written_in_python():
    import contextlib

    def fn(x):
        with contextlib.nullcontext(x * 2) as doubled:
            y = doubled + 1
        scaled = _Scaled(3.0)
        with scaled as factor:
            y = y * factor
            seen = scaled.inside
        with contextlib.nullcontext():
            y = y.sin()
        return y, seen, scaled.inside

    compiled = kiln.compile(fn)
    x = torch.randn(5)
    out, seen, after = compiled(x)
    expected = fn(x)
    torch.testing.assert_close(out, expected[0])
    assert (seen, after) == (True, False) == expected[1:]
    info = kiln.cache_info(compiled)
    assert info["break_reasons"] == [] and not info["runs_in_cpython"]


class _AliasedConfig:
    """Like transformers' PretrainedConfig: attribute reads go through a
    __getattribute__ written in Python."""

    aliases = {"width": "hidden_size"}

    def __init__(self):
        self.hidden_size = 4
        self.scale = 0.5

    def __getattribute__(self, key):
        aliases = object.__getattribute__(self, "aliases")
        return object.__getattribute__(self, aliases.get(key, key))


def test_an_object_whose_getattribute_is_python_code():
    # Kiln's own reads of the object (its guards, a type check) run that
    # __getattribute__ in CPython; hooked, they once recursed without end.
    config = _AliasedConfig()

    def fn(x, config):
        return x[..., : config.width] * getattr(config, "scale", 1.0)

    compiled = kiln.compile(fn)
    for _ in range(3):
        x = torch.randn(3, 6)
        torch.testing.assert_close(compiled(x, config), fn(x, config))
    info = kiln.cache_info(compiled)
    assert info["entries"] == 1 and not info["runs_in_cpython"]
    # Those reads never reached the hook.
    assert kiln.code_cache_info(_AliasedConfig.__getattribute__) is None
    config.scale = 2.0  # a guarded attribute changes: captured again
    x = torch.randn(3, 6)
    torch.testing.assert_close(compiled(x, config), fn(x, config))


def test_builtins_consume_the_iterators_they_read():
    def fn(x):
        it = iter([x, x * 2, x * 3, x * 4])
        pairs = list(zip(it, it))  # each item once: (x, 2x), (3x, 4x)
        rest = list(it)
        again = iter([x, x + 1, x + 2])
        total = sum(again)
        return pairs, rest, total, list(again)

    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.randn(3)
    pairs, rest, total, empty = compiled(x)
    expected = fn(x)
    assert len(pairs) == 2 and rest == [] and empty == []
    for (a, b), (c, d) in zip(pairs, expected[0]):
        torch.testing.assert_close(a, c)
        torch.testing.assert_close(b, d)
    torch.testing.assert_close(total, expected[2])


def test_an_iterator_read_by_an_unfinished_enumerate_runs_in_python():
    def fn(x):
        it = iter([x, x * 2, x * 3])
        numbered = enumerate(it)  # Python's takes items as it goes
        first = next(it)
        return first, list(numbered)

    compiled = kiln.compile(fn)
    x = torch.randn(2)
    out, expected = compiled(x), fn(x)
    torch.testing.assert_close(out[0], expected[0])
    assert len(out[1]) == len(expected[1]) == 2
    assert "unfinished enumerate or zip" in kiln.cache_info(compiled)["fallback_reason"]


def test_type_of_iterators_the_frame_made_is_never_guessed():
    # map, itertools and generators run as Python models or eagerly during
    # capture: isinstance and type() of them fall back to CPython rather
    # than answer with the model's type.
    import itertools

    def fn(x):
        m = map(abs, [1, -2])
        c = itertools.chain([1], [2])
        return isinstance(m, map), type(c).__name__, list(m), x + 1

    x = torch.randn(3)
    got, expected = kiln.compile(fn)(x), fn(x)
    assert got[:3] == expected[:3]
    torch.testing.assert_close(got[3], expected[3])
