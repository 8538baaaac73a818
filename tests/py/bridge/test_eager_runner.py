# The eager graph runner on graphs built through kiln._C's graph bindings:
# results equal eager torch for registered ops, extern ops, constants,
# multi-result ops, None and number outputs, non-contiguous inputs; errors
# name the node; nothing crashes the interpreter.
import gc
import warnings
import weakref

import pytest
import torch
from torch.testing import assert_close

import kiln
import kiln._C as _C

MAX_DIM = (
    "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"
)


def transposed(rows, cols):
    """A (rows, cols) tensor whose storage is column-major."""
    return torch.randn(cols, rows).t()


def test_registered_ops_with_keywords_match_eager():
    graph = _C.Graph()
    x = graph.add_input(torch.empty(3, 4), name="x")
    y = graph.add_input((torch.float32, [3, 4]), name="y")
    total = graph.add_op("aten::add.Tensor", x, y, alpha=2)
    shifted = graph.add_op("aten::add.Scalar", total, 0.5)
    graph.set_outputs([shifted, total])
    graph.verify()
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    out = _C.EagerRunner(graph)(a, b)
    assert isinstance(out, tuple) and len(out) == 2
    assert_close(out[0], a + 2 * b + 0.5)
    assert_close(out[1], a + 2 * b)


def test_non_contiguous_and_broadcast_inputs():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [3, 4], [1, 3]))
    y = graph.add_input((torch.float32, [1, 4]))
    graph.set_outputs([graph.add_op("aten::add.Tensor", x, y)])
    a, b = transposed(3, 4), torch.randn(1, 4)
    assert not a.is_contiguous()
    (out,) = _C.EagerRunner(graph)(a, b)
    assert_close(out, a + b)
    # The runner calls torch, so the result has torch's own layout too.
    assert out.stride() == (a + b).stride()


def test_extern_with_several_results_and_non_tensor_outputs():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [5, 6]), name="x")
    values, indices = graph.add_extern(
        MAX_DIM, x, 1, keepdim=True, results=[(torch.float32, [5, 1]), (torch.int64, [5, 1])]
    )
    doubled = graph.add_op("aten::add.Tensor", values, values)
    graph.set_outputs([doubled, indices, None, 7, 2.5, True])
    graph.verify()
    assert "extern aten::max.dim(%x, 1, keepdim=True)" in str(graph)
    a = torch.randn(5, 6)
    out = _C.EagerRunner(graph)(a)
    expected = torch.max(a, 1, keepdim=True)
    assert_close(out[0], expected.values * 2)
    assert torch.equal(out[1], expected.indices)
    assert out[2:] == (None, 7, 2.5, True)


def test_tensor_list_arguments_and_list_results():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2, 3]))
    y = graph.add_input((torch.float32, [2, 3]))
    joined = graph.add_extern(
        "aten::cat(Tensor[] tensors, int dim=0) -> Tensor", [x, y, x], 1, results=[(torch.float32, [2, 9])]
    )
    pieces = graph.add_extern(
        "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
        joined,
        4,
        1,
        results=[
            (torch.float32, [2, 4], [9, 1]),
            (torch.float32, [2, 4], [9, 1]),
            (torch.float32, [2, 1], [9, 1]),
        ],
    )
    graph.set_outputs([pieces[0], pieces[2]])
    graph.verify()
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    first, last = _C.EagerRunner(graph)(a, b)
    expected = torch.cat([a, b, a], 1).split(4, 1)
    assert_close(first, expected[0])
    assert_close(last, expected[2])


def test_optional_tensor_lists_with_none():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [4, 5]))
    index = graph.add_input((torch.int64, [3]))
    picked = graph.add_extern(
        "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
        x,
        [None, index],
        results=[(torch.float32, [4, 3])],
    )
    graph.set_outputs([picked])
    a, i = torch.randn(4, 5), torch.tensor([4, 0, 2])
    (out,) = _C.EagerRunner(graph)(a, i)
    assert_close(out, a[:, i])


def test_constants_are_copied_once_and_keep_their_values():
    bias = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2, 3]))
    constant = graph.add_constant(bias)
    # A tensor passed straight to add_op becomes a constant as well.
    total = graph.add_op("aten::add.Tensor", x, constant)
    total = graph.add_op("aten::add.Tensor", total, torch.full((3,), 10.0))
    graph.set_outputs([total])
    assert "constant()" in str(graph)
    runner = _C.EagerRunner(graph)
    bias.zero_()  # the graph holds its own copy
    a = torch.randn(2, 3)
    (out,) = runner(a)
    assert_close(out, a + torch.arange(6.0).reshape(2, 3) + 10)
    (again,) = runner(a)
    assert_close(again, out)


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.int32, torch.bool, torch.bfloat16, torch.complex64]
)
def test_constants_of_every_kind_of_dtype(dtype):
    value = (torch.randn(3, 2) * 4).to(dtype)
    graph = _C.Graph()
    graph.set_outputs([graph.add_constant(value)])
    (out,) = _C.EagerRunner(graph)()
    assert out.dtype == dtype
    assert torch.equal(out, value)


def test_non_contiguous_constant_is_stored_contiguously():
    value = transposed(3, 4)
    graph = _C.Graph()
    constant = graph.add_constant(value)
    assert constant.stride() == [4, 1]
    graph.set_outputs([constant])
    (out,) = _C.EagerRunner(graph)()
    assert torch.equal(out, value)


def test_output_forms_and_boxed_calls():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2]))
    graph.set_outputs([graph.add_op("aten::add.Scalar", x, 1)])
    a = torch.randn(2)
    assert isinstance(_C.EagerRunner(graph, "list")(a), list)
    single = _C.EagerRunner(graph, "single")(a)
    assert isinstance(single, torch.Tensor)
    assert_close(single, a + 1)
    args = [a]
    out = _C.EagerRunner(graph).run_boxed(args)
    assert args == []  # the boxed convention: the callee empties the list
    assert_close(out[0], a + 1)
    with pytest.raises(RuntimeError, match="output form"):
        _C.EagerRunner(graph, "dict")


def test_inputs_may_be_returned_and_read_twice():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [3]))
    total = graph.add_op("aten::add.Tensor", x, x)
    graph.set_outputs([x, total, total])
    a = torch.randn(3)
    out = _C.EagerRunner(graph)(a)
    assert out[0] is a
    assert out[1] is out[2]
    assert_close(out[1], 2 * a)


def test_intermediates_are_released_after_their_last_use():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [4]))
    value = x
    for _ in range(6):
        value = graph.add_op("aten::add.Scalar", value, 1)
    graph.set_outputs([value])
    runner = _C.EagerRunner(graph)
    assert runner.slot_count == 7

    seen = []
    alive_at_each_call = []

    class Spy(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            alive_at_each_call.append(sum(ref() is not None for ref in seen))
            out = func(*args, **(kwargs or {}))
            seen.append(weakref.ref(out))
            return out

    a = torch.randn(4)
    with Spy():
        out = runner(a)
    # When each op runs, only its own operand is still alive: every earlier
    # intermediate went as soon as its one reader was done.
    assert alive_at_each_call == [0, 1, 1, 1, 1, 1]
    assert seen[-1]() is out[0]


def test_torch_errors_name_the_node_and_keep_their_type():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2, 3]))
    y = graph.add_input((torch.float32, [4, 5]))
    product = graph.add_extern(
        "aten::mm(Tensor self, Tensor mat2) -> Tensor", x, y, results=[(torch.float32, [2, 5])]
    )
    graph.set_outputs([product])
    runner = _C.EagerRunner(graph)
    with pytest.raises(RuntimeError, match=r"kiln: aten::mm failed: .*cannot be multiplied") as info:
        runner(torch.randn(2, 3), torch.randn(4, 5))
    assert isinstance(info.value.__cause__, RuntimeError)
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2, 3]))
    row = graph.add_extern(
        "aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
        x,
        0,
        9,
        results=[(torch.float32, [3])],
    )
    graph.set_outputs([row])
    with pytest.raises(IndexError, match="kiln: aten::select.int failed: .*out of range"):
        _C.EagerRunner(graph)(torch.randn(2, 3))


def test_wrong_number_of_inputs_is_a_type_error():
    graph = _C.Graph()
    graph.add_input((torch.float32, [2]))
    graph.set_outputs([])
    runner = _C.EagerRunner(graph)
    with pytest.raises(TypeError, match="takes 1 inputs, got 2"):
        runner(torch.randn(2), torch.randn(2))
    assert runner(torch.randn(2)) == ()


def test_bad_graph_construction_raises_instead_of_crashing():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2]))
    with pytest.raises(RuntimeError, match="unknown op"):
        graph.add_op("aten::no_such_op", x)
    with pytest.raises(RuntimeError, match="missing the required argument 'other'"):
        graph.add_op("aten::add.Tensor", x)
    with pytest.raises(RuntimeError, match="must be Tensor"):
        graph.add_op("aten::add.Tensor", x, "text")
    with pytest.raises(TypeError, match="results"):
        graph.add_extern("aten::relu(Tensor self) -> Tensor", x)
    with pytest.raises(RuntimeError, match="cannot parse schema"):
        graph.add_extern("aten::relu(Tensor self -> Tensor", x, results=[])
    with pytest.raises(kiln.Unsupported):
        graph.add_op("aten::add.Tensor", x, object())
    other = _C.Graph()
    foreign = other.add_input((torch.float32, [2]))
    with pytest.raises(RuntimeError, match="not a value of this graph"):
        graph.add_op("aten::add.Tensor", x, foreign)
    with pytest.raises(TypeError):
        graph.add_input("not a tensor")
    with pytest.raises(RuntimeError, match="differ in length"):
        graph.add_input((torch.float32, [2, 3], [1]))
    # A graph whose extern names an operator torch does not have fails when
    # the runner resolves it, not when it runs.
    graph.add_extern("aten::no_such_op(Tensor self) -> Tensor", x, results=[(torch.float32, [2])])
    with pytest.raises(RuntimeError, match="torch has no operator aten::no_such_op"):
        _C.EagerRunner(graph)


def test_values_outlive_their_python_graph_handle():
    graph = _C.Graph()
    x = graph.add_input((torch.float32, [2, 2]), name="x")
    del graph
    gc.collect()
    assert x.name == "x" and x.shape == [2, 2] and x.dtype == torch.float32
    assert repr(x) == "<kiln value %x: f32[2, 2]>"


def test_generated_bindings_only_where_the_call_has_one_meaning():
    from kiln._ops import generated_binding

    # addmm's other overloads take an out_dtype or write to out=.
    assert generated_binding("addmm", "default", 3, ()) is torch.addmm
    assert generated_binding("add", "Tensor", 2, ("alpha",)) is torch.add
    # add(x, 0.5) binds to add.Tensor in Python: add.Scalar stays boxed.
    assert generated_binding("add", "Scalar", 2, ()) is None
    # A method-only op binds to the Tensor method.
    assert generated_binding("expand", "default", 2, ()) is not None
    # In-place ops are never taken.
    assert generated_binding("add_", "Tensor", 2, ()) is None


def test_scalar_overloads_never_reach_deprecated_signatures():
    # add.Scalar with alpha at its default is called as add(x, 0.5): were
    # alpha passed too, torch's deprecated add(input, alpha, other) would
    # take it (with a warning, an error here).
    graph = _C.Graph()
    x = graph.add_input(torch.empty(3, 4), name="x")
    y = graph.add_input(torch.empty(3, 4), name="y")
    scaled = graph.add_op("aten::add.Tensor", x, y, alpha=3)
    shifted = graph.add_op("aten::add.Scalar", scaled, 0.5)
    w = graph.add_input(torch.empty(4, 4), name="w")
    product = graph.add_op("aten::addmm", y, x, graph.add_op("aten::t", w))
    graph.set_outputs([shifted, product])
    a, b, c = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _C.EagerRunner(graph)(a, b, c)
    assert_close(out[0], a + 3 * b + 0.5)
    assert_close(out[1], torch.addmm(b, a, c.t()))


@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_defaults_the_binding_reads_otherwise_are_passed(backend):
    # binary_cross_entropy_with_logits' schema defaults reduction to 1 (mean);
    # its Python binding to 0 (none): dropping the argument returned the
    # unreduced loss.
    loss = lambda a, b: torch.nn.functional.binary_cross_entropy_with_logits(a, b)
    a, b = torch.randn(5), torch.rand(5)
    result = kiln.compile(loss, backend=backend)(a, b)
    assert result.shape == ()
    assert_close(result, loss(a, b))


def test_scalar_type_defaults_printed_as_numbers_are_dtypes():
    # torch prints tril_indices' `ScalarType? dtype=long` as `dtype=4`; the
    # call at that default passed the number, which torch refused.
    for fn in (lambda: torch.tril_indices(4, 3, dtype=torch.int64),
               lambda: torch.triu_indices(3, 3, 1, dtype=torch.int64, device="cpu")):
        result = kiln.compile(fn)()
        assert result.dtype == torch.int64 and torch.equal(result, fn())


def test_a_binding_that_refuses_its_arguments_falls_back_to_the_boxed_call(
        monkeypatch):
    import kiln._ops

    calls = []

    def refusing(*args, **kwargs):
        calls.append(args)
        raise TypeError("refused")

    monkeypatch.setattr(kiln._ops, "generated_binding",
                        lambda *args: refusing)
    graph = _C.Graph()
    x = graph.add_input(torch.empty(3, 4), name="x")
    graph.set_outputs([graph.add_op("aten::relu", x)])
    a = torch.randn(3, 4)
    assert_close(_C.EagerRunner(graph)(a)[0], a.relu())
    assert len(calls) == 1
