# Guards (hit, miss, recompile, cache limit), fallback to CPython for what
# cannot be captured (with kiln.Unsupported under fullgraph), side effects,
# the frame hook, thread safety and reference counts.
import functools
import gc
import sys
import threading
import warnings

import pytest
import torch

import kiln

LOG = []
COUNTER = {"calls": 0}


def add_one(x):
    return x + 1


def test_hit_miss_recompile_on_shape_dtype_and_constant():
    compiled = kiln.compile(lambda x, n: x * n, fullgraph=True)
    compiled(torch.ones(2), 2)
    compiled(torch.zeros(2), 2)  # hit
    info = kiln.cache_info(compiled)
    assert (info["entries"], info["hits"]) == (1, 1)
    compiled(torch.ones(3), 2)  # new shape
    compiled(torch.ones(2, dtype=torch.float64), 2)  # new dtype
    compiled(torch.ones(2), 3)  # new constant
    compiled(torch.ones(4, 2).t(), 2)  # new strides
    assert kiln.cache_info(compiled)["entries"] == 5
    torch.testing.assert_close(compiled(torch.ones(2), 3), torch.full((2,), 3.0))


def test_requires_grad_and_grad_mode_are_guarded():
    compiled = kiln.compile(add_one, fullgraph=True)
    x = torch.randn(3, requires_grad=True)
    y = compiled(x)
    assert y.requires_grad
    with torch.no_grad():
        assert not compiled(x).requires_grad
    assert not compiled(torch.randn(3)).requires_grad
    assert kiln.cache_info(compiled)["entries"] == 3


def test_global_value_is_guarded():
    global SCALE_G
    SCALE_G = 2.0

    def f(x):
        return x * SCALE_G

    compiled = kiln.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    SCALE_G = 5.0
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 5.0))


def test_list_length_is_guarded():
    compiled = kiln.compile(lambda xs: sum(xs), fullgraph=True)
    a = [torch.ones(2)] * 2
    b = [torch.ones(2)] * 3
    torch.testing.assert_close(compiled(a), torch.full((2,), 2.0))
    torch.testing.assert_close(compiled(b), torch.full((2,), 3.0))


def test_recompile_log_names_the_failed_guard(capfd, monkeypatch):
    monkeypatch.setenv("KILN_LOGS", "recompiles,guards,graph")
    kiln.reload_logging()
    try:
        compiled = kiln.compile(add_one)
        compiled(torch.ones(2))
        compiled(torch.ones(3))
    finally:
        monkeypatch.delenv("KILN_LOGS")
        kiln.reload_logging()
    err = capfd.readouterr().err
    assert "[kiln:recompiles]" in err and "L['x']" in err
    assert "[kiln:guards]" in err and "[kiln:graph]" in err and "aten::add" in err


def test_cache_limit_warns_once_and_falls_back():
    # Static shapes: with dynamic=None the second size would make the dim
    # symbolic and one entry would serve every later size.
    compiled = kiln.compile(add_one, cache_limit=2, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 6):
            torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 2.0))
    assert sum("recompiled" in str(w.message) for w in caught) == 1
    info = kiln.cache_info(compiled)
    assert info["runs_in_cpython"] and info["entries"] == 2


def uses_print(x):
    print("hello from eager")
    return x * 2


def uses_item(x):
    if x.sum().item() > 0:
        return x + 1
    return x - 1


def data_dependent_shape(x):
    return x[x > 0].sum() + torch.nonzero(x).shape[0]


def generator_function(x):
    yield x


def raises(x):
    raise ValueError("boom")


def tensor_bool(x):
    if x.sum() > 0:
        return x
    return -x


def mutates_global_list(x):
    LOG.append(x.shape[0])
    return x + 1


def mutates_object(x):
    COUNTER["calls"] = COUNTER["calls"] + 1
    return x * 3


@pytest.mark.parametrize("fn, graph_break", [
    (uses_print, True), (uses_item, True), (data_dependent_shape, True), (tensor_bool, True)])
def test_unsupported_falls_back_with_the_right_answer(fn, graph_break, capfd):
    # What kiln cannot capture runs in CPython: one instruction at a graph
    # break (a jump on a tensor's value is one too: the branch is decided
    # in CPython and each side resumes in a function of its own).
    x = torch.randn(5)
    expected = fn(x)
    compiled = kiln.compile(fn)
    torch.testing.assert_close(compiled(x), expected)
    torch.testing.assert_close(compiled(x), expected)
    info = kiln.cache_info(compiled)
    assert info["runs_in_cpython"] != graph_break
    assert bool(info["breaks"]) == graph_break


def test_side_effects_happen_exactly_as_in_eager():
    LOG.clear()
    compiled = kiln.compile(mutates_global_list)
    compiled(torch.ones(3))
    compiled(torch.ones(4))
    assert LOG == [3, 4]


@pytest.mark.parametrize("fn", [mutates_global_list, mutates_object])
def test_changes_to_the_callers_lists_and_dicts_are_replayed(fn):
    # A list or dict from outside the frame gets, after the graph, the
    # contents the frame left it with: no graph break, even under fullgraph.
    LOG.clear()
    COUNTER["calls"] = 0
    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.randn(5)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(compiled(x), fn(x))
    assert LOG in ([], [5, 5, 5, 5]) and COUNTER["calls"] in (0, 4)
    info = kiln.cache_info(compiled)
    assert not info["breaks"] and not info["runs_in_cpython"]


@pytest.mark.parametrize("fn,construct", [
    (uses_print, "print"),
    (uses_item, "item"),
    (tensor_bool, "tensor"),
])
def test_fullgraph_raises_unsupported_naming_construct_and_line(fn, construct):
    compiled = kiln.compile(fn, fullgraph=True)
    with pytest.raises(kiln.Unsupported) as info:
        compiled(torch.randn(4))
    message = str(info.value)
    assert construct in message
    assert "test_guards_and_fallback.py:" in message


def test_generators_and_exceptions_fall_back():
    compiled = kiln.compile(raises)
    with pytest.raises(ValueError, match="boom"):
        compiled(torch.ones(1))
    gen = kiln.compile(generator_function)
    assert list(gen(torch.ones(1)))[0].item() == 1.0


def inner_helper(x):
    return torch.relu(x) * 2


def outer_with_print(x):
    steps = iter([0])
    for _ in steps:
        print("eager part")  # the loop's iterator is a local too: the frame runs in CPython
    return inner_helper(x) + inner_helper(x + 1)


def test_frame_hook_captures_nested_user_frames_during_fallback(capfd):
    compiled = kiln.compile(outer_with_print)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(compiled(x), outer_with_print(x))
    info = kiln.code_cache_info(inner_helper)
    assert info["entries"] == 1 and info["hits"] >= 4
    # Outside a compiled function the hook is off: plain calls are untouched.
    before = kiln.code_cache_info(inner_helper)["hits"]
    inner_helper(x)
    assert kiln.code_cache_info(inner_helper)["hits"] == before


def test_two_threads_share_one_compiled_function():
    compiled = kiln.compile(lambda x: torch.tanh(x) * 2 + 1)
    errors = []

    def worker(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            for i in range(200):
                x = torch.randn(1 + i % 3, 4, generator=g)
                torch.testing.assert_close(compiled(x), torch.tanh(x) * 2 + 1)
        except Exception as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_no_reference_leaks_over_many_calls():
    compiled = kiln.compile(lambda x, y: (x + y, [x * 2, {"k": y}]))
    x, y = torch.randn(2), torch.randn(2)
    for _ in range(100):
        compiled(x, y)
    gc.collect()
    before = (sys.getrefcount(x), sys.getrefcount(y))
    for _ in range(100_000):
        compiled(x, y)
    gc.collect()
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before


def test_compiled_function_is_freed_with_its_cache():
    import weakref

    compiled = kiln.compile(lambda x: x + 1)
    compiled(torch.ones(2))
    ref = weakref.ref(compiled)
    del compiled
    gc.collect()
    assert ref() is None


def test_methods_can_be_decorated():
    class Thing:
        def __init__(self, k):
            self.k = k

        @kiln.compile
        def apply(self, x):
            return x * self.k

    a, b = Thing(2.0), Thing(3.0)
    torch.testing.assert_close(a.apply(torch.ones(2)), torch.full((2,), 2.0))
    torch.testing.assert_close(b.apply(torch.ones(2)), torch.full((2,), 3.0))


class Registry(dict):
    """A dict subclass read through its methods, as model libraries do."""

    def lookup(self, name):
        return super().get(name) or 1.0


REGISTRY = Registry(scale=2.0)


def reads_registry(x):
    return x * REGISTRY.lookup("scale") + len(REGISTRY.keys()) + ("bias" in REGISTRY)


def test_reads_of_a_dict_subclass_are_guarded():
    compiled = kiln.compile(reads_registry, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), reads_registry(x))
    REGISTRY["scale"] = 5.0  # a value read: guarded
    torch.testing.assert_close(compiled(x), reads_registry(x))
    REGISTRY["bias"] = 0.0  # a new key: guarded by the keys
    torch.testing.assert_close(compiled(x), reads_registry(x))
    assert kiln.cache_info(compiled)["entries"] == 3


def test_seeding_the_generator_inside_a_traced_call_falls_back():
    # A graph cannot replay torch.manual_seed (nor a torch helper that seeds
    # and restores the generator around a random op): such frames run in
    # CPython and draw eager's numbers.
    from torch.testing._utils import wrapper_set_seed

    def seeds(x):
        torch.manual_seed(3)
        return torch.rand_like(x) + x

    def helper_seeds(x):
        return wrapper_set_seed(torch.bernoulli, x)

    x = torch.rand(16)
    for fn in (seeds, helper_seeds):
        torch.manual_seed(0)
        expected = fn(x)
        after_eager = torch.rand(1)
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = kiln.compile(fn)
            actual = compiled(x)
        assert torch.equal(actual, expected)
        assert torch.equal(torch.rand(1), after_eager)
        # The seeding call runs in CPython: at a graph break, or the frame.
        info = kiln.cache_info(compiled)
        reasons = [info["fallback_reason"]] + info["break_reasons"]
        assert any("random generator" in reason for reason in reasons)


def test_a_hook_registered_on_a_submodule_after_the_capture_runs():
    # Module hooks are inlined; their dicts are guarded, so a hook added or
    # removed later captures again instead of being skipped.
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.inner(x) + 1

    model = Outer()
    compiled = kiln.compile(model)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    handle = model.inner.register_forward_hook(lambda module, args, out: out * 0)
    torch.testing.assert_close(compiled(x), torch.ones(2, 3))
    handle.remove()
    model.inner.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
    torch.testing.assert_close(compiled(x), model(x))
    info = kiln.cache_info(compiled)
    assert info["entries"] == 3 and not info["runs_in_cpython"]


class Affine:
    """A callable object of the user's: __call__ is inlined, and what it
    (or the function) reads of the object is guarded."""

    def __init__(self, scale, shift):
        self.scale, self.shift = scale, shift

    def __call__(self, x):
        return x * self.scale + self.shift


def test_a_callable_objects_attributes_are_guarded():
    def fn(x, affine):
        return affine(x), x - affine.shift

    affine = Affine(2.0, 1.0)
    compiled = kiln.compile(fn, fullgraph=True)
    x = torch.randn(3)
    for scale, shift in ((2.0, 1.0), (5.0, 1.0), (5.0, -3.0)):
        affine.scale, affine.shift = scale, shift
        out = compiled(x, affine)
        expected = fn(x, affine)
        torch.testing.assert_close(out[0], expected[0])
        torch.testing.assert_close(out[1], expected[1])
    assert kiln.cache_info(compiled)["entries"] == 3


def test_is_between_input_tensors_is_guarded_both_ways():
    # `x is y` of two inputs is this call's answer, guarded: passing one
    # tensor twice after two (or the reverse) recaptures, never reuses it.
    def same(x, y):
        return x is y, x + y

    compiled = kiln.compile(same, fullgraph=True)
    a, b = torch.randn(3), torch.randn(3)
    for x, y in [(a, b), (a, a), (b, a), (b, b), (a, b)]:
        identical, total = compiled(x, y)
        assert identical is (x is y)
        torch.testing.assert_close(total, x + y)


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


@_decorated
def _alpha(x):
    return x + 1


@_decorated
def _beta(x):
    return x - 1


def _apply_by_name(fn, x):
    return fn(x) * 2 if fn.__name__ == "_alpha" else fn(x) * 3


def test_nested_functions_are_guarded_by_code_and_what_is_read_of_them():
    # Two wrappers of one decorator share their code: the capture is
    # reused only where what it read of them (the name functools.wraps
    # set, the function in the closure) is the same.
    compiled = kiln.compile(_apply_by_name)
    x = torch.randn(3)
    for fn in (_alpha, _beta, _alpha, _beta):
        torch.testing.assert_close(compiled(fn, x), _apply_by_name(fn, x))
    info = kiln.cache_info(compiled)
    assert info["entries"] == 2 and info["hits"] == 2, info
    fresh = _decorated(_alpha.__wrapped__)  # a new wrapper of the same function
    torch.testing.assert_close(compiled(fresh, x), _apply_by_name(fresh, x))
    assert kiln.cache_info(compiled)["entries"] == 2
