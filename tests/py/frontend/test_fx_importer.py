# The FX importer on make_fx graphs and hand-built FX graphs: graphs import,
# print, verify and run like the GraphModule; ops outside kiln's registry
# become externs; what kiln cannot hold raises kiln.Unsupported naming the
# FX node.
import operator

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing import assert_close

import kiln
import kiln._C as _C


def run_both(gm, args):
    imported = _C.import_fx(gm, list(args))
    imported.graph.verify()
    runner = _C.EagerRunner(imported.graph, imported.output_form)
    return imported, runner(*args), gm(*args)


def assert_same(actual, expected):
    flat_actual, spec_actual = torch.utils._pytree.tree_flatten(actual)
    flat_expected, spec_expected = torch.utils._pytree.tree_flatten(expected)
    assert spec_actual == spec_expected
    for a, e in zip(flat_actual, flat_expected):
        if isinstance(e, torch.Tensor):
            assert_close(a, e)
        else:
            assert a == e


def kinds(graph):
    return [(kind, name) for kind, name, _ in graph.nodes() if kind in ("op", "extern")]


def layer_norm_then_max(x, w):
    y = F.layer_norm(x, (x.shape[-1],))
    values, indices = torch.max(y, dim=1)
    return torch.relu(y @ w) + torch.tensor(2.0), indices, None, 3


FUNCTIONS = {
    "add_registered": (lambda x, y: x + y, lambda: (torch.randn(3, 4), torch.randn(4))),
    "layer_norm_max_constant": (layer_norm_then_max, lambda: (torch.randn(3, 4), torch.randn(4, 5))),
    "softmax_attention": (
        lambda q, k: torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1),
        lambda: (torch.randn(2, 5, 4), torch.randn(2, 5, 4)),
    ),
    "views_and_slices": (
        lambda x: x.view(2, 3, 4).permute(2, 0, 1)[1:, :, ::2].reshape(-1).unsqueeze(0),
        lambda: (torch.randn(6, 4),),
    ),
    "split_and_cat": (
        lambda x: torch.cat([p * i for i, p in enumerate(x.split(2, dim=1))], dim=0),
        lambda: (torch.randn(3, 6),),
    ),
    "index_with_none": (
        lambda x, i: x[:, i] + x[i].sum(),
        lambda: (torch.randn(4, 4), torch.tensor([3, 0, 1])),
    ),
    "creation_ops": (
        lambda x: x + torch.arange(4) + torch.ones(3, 4) * torch.full((1, 4), 0.5),
        lambda: (torch.randn(3, 4),),
    ),
    "dtype_conversions": (
        lambda x: (x.to(torch.float64) * 2, (x > 0).int().sum(), x.half().float()),
        lambda: (torch.randn(5),),
    ),
    "non_contiguous_input": (
        lambda x: (x * x).sum(dim=0, keepdim=True),
        lambda: (torch.randn(5, 3).t(),),
    ),
    "scalar_in_tensor_slot": (
        lambda x: x * 2 + 1 - x.int() * 2.5,
        lambda: (torch.randn(5),),
    ),
    "conv_batch_norm": (
        lambda x, w, m, v: F.relu(F.batch_norm(F.conv2d(x, w, padding=1), m, v)),
        lambda: (torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3), torch.randn(3), torch.rand(3) + 0.5),
    ),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_make_fx_graphs_import_print_verify_and_run(name):
    fn, make_args = FUNCTIONS[name]
    args = make_args()
    gm = make_fx(fn)(*args)
    imported, actual, expected = run_both(gm, args)
    assert str(imported.graph).startswith("graph(")
    assert_same(actual, expected)
    assert_same(actual, fn(*args))
    # Fresh inputs of the same layout: the graph is not tied to the first.
    fresh = make_args()
    assert_same(_C.EagerRunner(imported.graph, imported.output_form)(*fresh), fn(*fresh))


def test_registered_ops_stay_ops_and_others_become_externs():
    gm = make_fx(lambda x, y: torch.relu(x + y).sum(-1))(torch.randn(3, 4), torch.randn(3, 4))
    imported = _C.import_fx(gm)
    assert kinds(imported.graph) == [
        ("op", "aten::add.Tensor"),
        ("op", "aten::relu"),
        ("op", "aten::sum.dim_IntList"),
    ]
    assert imported.notes == []
    text = str(imported.graph)
    assert "= aten::add.Tensor(%x_1, %y_1)" in text
    assert "= aten::relu(" in text
    assert "= aten::sum.dim_IntList(%1, [-1])" in text
    # An op the registry does not know is an extern node.
    gm = make_fx(lambda x: torch.special.erfcx(x))(torch.randn(3))
    assert kinds(_C.import_fx(gm).graph) == [("extern", "aten::special_erfcx")]


def test_printed_graph_of_a_multi_result_op_with_constant_and_non_tensor_outputs():
    gm = make_fx(layer_norm_then_max)(torch.randn(3, 4), torch.randn(4, 5))
    imported = _C.import_fx(gm)
    assert imported.output_form == "tuple"
    lines = str(imported.graph).splitlines()
    assert lines[0] == "graph(%x_1: f32[3, 4], %w_1: f32[4, 5]):"
    assert lines[1].startswith(
        "  %0: f32[3, 4], %1: f32[3, 1], %2: f32[3, 1] = aten::native_layer_norm(%x_1, [4], None, None,"
    )
    assert lines[1].endswith(" 1e-05)")
    assert lines[2] == "  %3: f32[3], %4: i64[3] = aten::max.dim(%0, 1)"
    assert "  %_tensor_constant0: f32[] = constant()" in lines
    assert lines[-1] == "  return (%8, %4, None, 3)"


def test_output_forms():
    single = _C.import_fx(make_fx(lambda x: x + x)(torch.randn(2)))
    assert single.output_form == "single"
    runner = _C.EagerRunner(single.graph, single.output_form)
    assert isinstance(runner(torch.ones(2)), torch.Tensor)
    pair = _C.import_fx(make_fx(lambda x: (x, x + 1))(torch.randn(2)))
    assert pair.output_form == "tuple"
    out = _C.EagerRunner(pair.graph, pair.output_form)(torch.ones(2))
    assert isinstance(out, tuple) and out[0].tolist() == [1.0, 1.0]


def test_custom_operator_in_another_namespace_becomes_an_extern():
    @torch.library.custom_op("kiln_test::scale_rows", mutates_args=())
    def scale_rows(x: torch.Tensor, factor: float) -> torch.Tensor:
        return x * factor * torch.arange(1, x.shape[0] + 1).unsqueeze(1)

    @scale_rows.register_fake
    def _(x, factor):
        return torch.empty_like(x)

    fn = lambda x: scale_rows(x, 0.5).relu()  # noqa: E731
    args = (torch.randn(3, 2),)
    imported, actual, expected = run_both(make_fx(fn)(*args), args)
    assert ("extern", "kiln_test::scale_rows") in kinds(imported.graph)
    assert_close(actual, fn(*args))


def test_meta_disagreement_keeps_the_op_as_an_extern_with_fx_metadata():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    gm = make_fx(lambda x, y: (x + y) * 3)(x, y)
    add = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.add.Tensor)
    # Pretend torch had said the sum is column-major: kiln must believe FX.
    add.meta["val"] = torch.empty_strided((3, 4), (1, 3))
    imported, actual, expected = run_both(gm, (x, y))
    assert kinds(imported.graph)[0] == ("extern", "aten::add.Tensor")
    assert len(imported.notes) == 1
    note = imported.notes[0]
    assert "FX node 'add'" in note and "kiln's meta function gives f32[3, 4]" in note
    assert "f32[3, 4]{strides=[1, 3]}" in note and "kept as an extern" in note
    assert_close(actual, expected)


def test_node_errors_at_run_time_name_the_fx_node():
    gm = make_fx(lambda x, y: x @ y)(torch.randn(2, 3), torch.randn(3, 4))
    imported = _C.import_fx(gm)
    runner = _C.EagerRunner(imported.graph, imported.output_form)
    with pytest.raises(RuntimeError, match=r"aten::mm \(from FX node 'mm'\) failed"):
        runner(torch.randn(2, 3), torch.randn(5, 4))


def fx_graph(build):
    """A GraphModule built by hand: `build(graph)` adds nodes and the output."""
    graph = torch.fx.Graph()
    build(graph)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def placeholder(graph, name, value):
    node = graph.placeholder(name)
    if value is not None:
        node.meta["val"] = value
    return node


def test_placeholders_take_example_inputs_when_fx_has_no_metadata():
    def build(graph):
        x = placeholder(graph, "x", None)
        relu = graph.call_function(torch.ops.aten.relu.default, (x,))
        relu.meta["val"] = torch.empty(2, 3)
        graph.output((relu,))

    gm = fx_graph(build)
    with pytest.raises(kiln.Unsupported, match="FX node 'x': placeholder has no metadata"):
        _C.import_fx(gm)
    a = torch.randn(2, 3)
    imported = _C.import_fx(gm, [a])
    assert_close(_C.EagerRunner(imported.graph)(a)[0], a.relu())


def test_source_lines_from_stack_traces_appear_in_messages():
    def build(graph):
        x = placeholder(graph, "x", torch.empty(2))
        call = graph.call_function(torch.ops.aten.sym_size.int, (x, 0))
        call.meta["val"] = 2
        call.meta["stack_trace"] = (
            'File "/work/model.py", line 3, in outer\n    return inner(x)\n'
            'File "/work/model.py", line 7, in forward\n    n = x.shape[0]\n'
        )
        graph.output((call,))

    with pytest.raises(
        kiln.Unsupported,
        match=r"FX node 'sym_size_int' \(/work/model.py:7 in forward: n = x.shape\[0\]\): "
        r"aten::sym_size.int returns int",
    ):
        _C.import_fx(fx_graph(build))


def test_symbolic_shapes_become_size_symbols():
    def fn(x):
        return x.view(-1) * x.shape[0]

    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(3, 4))
    imported = _C.import_fx(gm)
    assert "s0" in str(imported.graph)
    runner = _C.choose_runner(imported.graph, imported.output_form)
    assert runner.describe().startswith("dynamic")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for rows in (3, 7):
        x = torch.randn(rows, 4)
        args = [x if i in imported.tensor_inputs else rows for i in range(len(placeholders))]
        out = runner.run_boxed([args[i] for i in imported.tensor_inputs])
        if imported.output_form != "single":
            (out,) = out
        torch.testing.assert_close(out, fn(x))


def test_symint_placeholders_raise_unsupported():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    symbol = ShapeEnv().create_unbacked_symint()

    def build(graph):
        n = placeholder(graph, "n", symbol)
        graph.output((n,))

    with pytest.raises(kiln.Unsupported, match="FX node 'n'.*no value in the example.*unbacked"):
        _C.import_fx(fx_graph(build))


@pytest.mark.parametrize(
    "op, args, result, returns",
    [
        (torch.ops.aten.sym_size.int, (0,), 2, "int"),
        (torch.ops.aten._local_scalar_dense.default, (), 1.5, "Scalar"),
        (torch.ops.aten.is_nonzero.default, (), True, "bool"),
    ],
)
def test_non_tensor_results_raise_unsupported(op, args, result, returns):
    def build(graph):
        x = placeholder(graph, "x", torch.empty(2))
        call = graph.call_function(op, (x, *args))
        call.meta["val"] = result
        graph.output((call,))

    with pytest.raises(kiln.Unsupported, match=f"returns {returns}: kiln graphs hold tensor results only"):
        _C.import_fx(fx_graph(build))


def test_non_aten_targets_and_module_calls_raise_unsupported():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x):
            return torch.relu(self.linear(x)).add(1)

    traced = torch.fx.symbolic_trace(Block())
    with pytest.raises(kiln.Unsupported, match="FX node 'linear': call_module nodes are not supported"):
        _C.import_fx(traced, [torch.randn(2, 2)])

    def build_call_function(graph):
        x = placeholder(graph, "x", torch.empty(2))
        call = graph.call_function(torch.relu, (x,))
        call.meta["val"] = torch.empty(2)
        graph.output((call,))

    with pytest.raises(kiln.Unsupported, match="FX node 'relu': calls <built-in method relu.*not an ATen operator"):
        _C.import_fx(fx_graph(build_call_function))

    def build_call_method(graph):
        x = placeholder(graph, "x", torch.empty(2))
        graph.output((graph.call_method("add", (x, 1)),))

    with pytest.raises(kiln.Unsupported, match="FX node 'add': call_method nodes"):
        _C.import_fx(fx_graph(build_call_method))

    def build_packet(graph):
        x = placeholder(graph, "x", torch.empty(2))
        call = graph.call_function(torch.ops.aten.relu, (x,))
        call.meta["val"] = torch.empty(2)
        graph.output((call,))

    with pytest.raises(kiln.Unsupported, match="not an ATen operator overload"):
        _C.import_fx(fx_graph(build_packet))


def test_getitem_on_a_single_result_and_whole_multi_results_raise_unsupported():
    def build_getitem(graph):
        x = placeholder(graph, "x", torch.empty(2, 3))
        relu = graph.call_function(torch.ops.aten.relu.default, (x,))
        relu.meta["val"] = torch.empty(2, 3)
        graph.output((graph.call_function(operator.getitem, (relu, 0)),))

    with pytest.raises(kiln.Unsupported, match="operator.getitem is supported on the results of multi-result"):
        _C.import_fx(fx_graph(build_getitem))

    def build_whole(graph):
        x = placeholder(graph, "x", torch.empty(2, 3))
        result = graph.call_function(torch.ops.aten.max.dim, (x, 1))
        result.meta["val"] = (torch.empty(2), torch.empty(2, dtype=torch.long))
        graph.output((result,))

    with pytest.raises(kiln.Unsupported, match="several results, as a whole"):
        _C.import_fx(fx_graph(build_whole))


def test_externs_without_metadata_and_fake_or_odd_constants_raise_unsupported():
    def build_no_meta(graph):
        x = placeholder(graph, "x", torch.empty(2))
        graph.output((graph.call_function(torch.ops.aten.special_erfcx.default, (x,)),))

    with pytest.raises(kiln.Unsupported, match="not in kiln's registry and FX recorded no metadata"):
        _C.import_fx(fx_graph(build_no_meta))

    module = torch.nn.Module()
    module.register_buffer("table", torch.randn(4, 3).t())
    graph = torch.fx.Graph()
    graph.output((graph.get_attr("table"),))
    with pytest.raises(kiln.Unsupported, match="FX node 'table': a non-contiguous constant"):
        _C.import_fx(torch.fx.GraphModule(module, graph))

    module.table = torch.randn(3, 4, device="meta")
    with pytest.raises(kiln.Unsupported, match="meta device"):
        _C.import_fx(torch.fx.GraphModule(module, graph))


def test_left_out_results_of_backward_ops_import_and_run():
    x, weight = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    grad = torch.randn(1, 3, 3, 3)

    def backward(grad, x, weight):
        # The input gradient is not asked for: its result is None.
        _, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
            grad, x, weight, [3], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [False, True, True]
        )
        return grad_weight, grad_bias

    imported, actual, expected = run_both(make_fx(backward)(grad, x, weight), (grad, x, weight))
    assert "%0: f32[3, 2, 3, 3], %1: f32[3] = extern aten::convolution_backward(" in str(imported.graph)
    assert_same(actual, expected)
