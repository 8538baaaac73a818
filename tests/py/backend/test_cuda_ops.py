# The GPU backend op by op: PyTorch's own OpInfo sample inputs (op_db) on a
# CUDA device, through kiln.compile and through eager torch, for the ops the
# CPU backend lowers; plus layouts and special values. Skips without a GPU.
# The counts of natively compiled cases go to bench/results (GPU machine).
import collections

import pytest
import torch
from torch.utils import _pytree as pytree

import kiln

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

try:  # op_db needs torch's test dependencies (expecttest)
    from backend.test_cpu_ops import (DTYPES, NATIVE_OPS, OPS, _as_function,  # noqa: E402
                                      _assert_eager_result, _keeps_strides)
except ImportError as error:
    OP_DB_MISSING = str(error)
    DTYPES, NATIVE_OPS, OPS = [], [], {}

    def _assert_eager_result(actual, expected, fn, tensors, tolerance):
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance)
else:
    OP_DB_MISSING = ""

SAMPLES_PER_CASE = 4
NATIVE_COUNTS = collections.Counter()


def _tolerance(dtype):
    if dtype == torch.float16:
        return dict(rtol=2e-3, atol=2e-3)
    if dtype == torch.bfloat16:
        return dict(rtol=1.6e-2, atol=1e-2)
    if dtype == torch.float32:
        return dict(rtol=3e-5, atol=3e-5)
    return {}


def _cases():
    for name in NATIVE_OPS:
        op = OPS.get(name)
        if op is None:
            continue
        for dtype in DTYPES:
            if dtype in op.supported_dtypes("cuda"):
                yield pytest.param(op, dtype, id=f"{name}-{str(dtype)[6:]}")


def _ran_natively(compiled):
    runners = kiln.cache_info(compiled).get("runners", [])
    return bool(runners) and runners[0].startswith("native")


@pytest.mark.parametrize("op,dtype", list(_cases()) if torch.cuda.is_available() else [])
def test_op_matches_eager_on_the_gpu(op, dtype):
    checked = 0
    for sample in list(op.sample_inputs("cuda", dtype, requires_grad=False))[:SAMPLES_PER_CASE]:
        fn, tensors = _as_function(op, sample)
        try:
            expected = fn(*tensors)
        except Exception:
            continue  # eager rejects this sample
        compiled = kiln.compile(fn)
        actual = compiled(*tensors)
        torch.cuda.synchronize()
        _assert_eager_result(actual, expected, fn, tensors, _tolerance(dtype))
        for a, e in zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected)):
            if isinstance(e, torch.Tensor):
                assert a.device == e.device
                if e.numel() > 1:
                    assert _keeps_strides(a, e)
        checked += 1
        NATIVE_COUNTS["native" if _ran_natively(compiled) else "eager"] += 1
    if checked == 0:
        pytest.skip("no sample ran in eager")


LAYOUT_FUNCTIONS = {
    "pointwise chain": lambda x, y: torch.tanh(x * 2 + y).sigmoid() - x.exp() / (1 + y.abs()),
    "softmax": lambda x, y: torch.softmax(x + y, dim=-1),
    "layer_norm": lambda x, y: torch.nn.functional.layer_norm(x * y, x.shape[-1:]),
    "row sum": lambda x, y: (x * y).sum(-1),
    "column sum": lambda x, y: (x + y).sum(0),
    "full reduction": lambda x, y: (x - y).abs().max() + x.mean(),
    "argmax": lambda x, y: (x + y).argmax(-1),
    "gelu": lambda x, y: torch.nn.functional.gelu(x) * y,
    "where": lambda x, y: torch.where(x > y, x.log1p().nan_to_num(), y.cos()),
}


def _layouts(dtype, device="cuda"):
    def make(*shape):
        return torch.randn(*shape, device=device).to(dtype)
    yield "contiguous", make(64, 257), make(64, 257)
    yield "transposed", make(257, 64).t(), make(64, 257)
    yield "sliced", make(64, 600)[:, 3:260], make(64, 257)
    yield "broadcast", make(64, 257), make(257)
    yield "size-1", make(1, 1), make(1, 1)
    yield "large rows", make(8, 5000), make(8, 5000)
    special = make(4, 10)
    special.view(-1)[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e30])
    yield "special values", special, make(4, 10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(LAYOUT_FUNCTIONS))
def test_layouts_and_special_values_on_the_gpu(name, dtype):
    fn = LAYOUT_FUNCTIONS[name]
    for layout, x, y in _layouts(dtype):
        expected = fn(x, y)
        compiled = kiln.compile(fn)
        actual = compiled(x, y)
        torch.cuda.synchronize()
        _assert_eager_result(actual, expected, fn, [x, y], _tolerance(dtype))
        assert actual.device == expected.device, layout
        NATIVE_COUNTS["native" if _ran_natively(compiled) else "eager"] += 1


def test_core_workloads_run_natively_on_the_gpu():
    # Reductions over long rows run through torch until they map onto warps.
    x = torch.randn(128, 512, device="cuda")
    for name in ("pointwise chain", "gelu", "where"):
        compiled = kiln.compile(LAYOUT_FUNCTIONS[name])
        torch.testing.assert_close(compiled(x, x), LAYOUT_FUNCTIONS[name](x, x), rtol=3e-5, atol=3e-5,
                                   equal_nan=True)
        runner = kiln.cache_info(compiled)["runners"][0]
        assert runner.startswith("native") and " 0 extern" in runner, (name, runner)


def test_kernels_queue_on_the_current_stream():
    fn = kiln.compile(lambda x: (x * 3 + 1).relu())
    stream = torch.cuda.Stream()
    x = torch.randn(1 << 20, device="cuda")
    with torch.cuda.stream(stream):
        y = x.sin()  # queued on `stream`: kiln's kernel must run after it
        out = fn(y)
    stream.synchronize()
    torch.testing.assert_close(out, (x.sin() * 3 + 1).relu())


def test_many_short_rows_reduce_natively_on_the_gpu():
    x = torch.randn(65536, 8, device="cuda")
    for fn in (lambda x: x.softmax(-1), lambda x: (x * 2).sum(-1), lambda x: x.argmax(-1)):
        compiled = kiln.compile(fn)
        torch.testing.assert_close(compiled(x), fn(x), rtol=3e-5, atol=3e-5)
        runner = kiln.cache_info(compiled)["runners"][0]
        assert runner.startswith("native"), runner


def test_empty_and_zero_sized_on_the_gpu():
    fn = kiln.compile(lambda x: (x + 1).sum(-1))
    x = torch.randn(0, 7, device="cuda")
    torch.testing.assert_close(fn(x), (x + 1).sum(-1))
    x = torch.randn(5, 0, device="cuda")
    torch.testing.assert_close(fn(x), (x + 1).sum(-1))


def test_zz_report_native_counts(capsys):
    with capsys.disabled():
        print(f"\nkiln GPU cases: {dict(NATIVE_COUNTS)}")


def test_causal_attention_makes_its_mask_on_the_gpu():
    # The math path of scaled_dot_product_attention builds its causal mask
    # with the query's options: on the GPU, not on the default device.
    q, k, v = (torch.randn(2, 4, 64, 32, device="cuda") for _ in range(3))

    def attend(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = kiln.compile(attend)
    torch.testing.assert_close(compiled(q, k, v), attend(q, k, v), rtol=1e-4, atol=1e-4)
    graph = kiln.cache_info(compiled)["graphs"][0]
    assert "device=cpu" not in graph, graph


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_long_rows_reduce_natively_with_a_warp_each(dtype):
    x = torch.randn(4096, 1024, device="cuda").to(dtype)
    x[0, :8] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e4, -1e4, 3.0])
    tolerance = _tolerance(dtype)
    for name in ("softmax", "layer_norm", "row sum", "argmax"):
        fn = LAYOUT_FUNCTIONS[name]
        compiled = kiln.compile(fn)
        actual, expected = compiled(x, x), fn(x, x)
        torch.testing.assert_close(actual, expected, equal_nan=True, **tolerance)
        runner = kiln.cache_info(compiled)["runners"][0]
        assert runner.startswith("native") and " 0 extern" in runner, (name, runner)


# Reductions the GPU schedule maps with more lanes than a warp: few long rows
# get a block each, column reductions blocks of columns with each column
# split across lanes. Inputs have a nonzero mean and planted extremes, so a
# lost or doubled partial (a warp, a lane, a loop's last points) changes the
# answer beyond the tolerance; each case also checks where it ran.
def _reduction_input(shape, dtype, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(*shape, device="cuda", generator=generator) + 0.5
    else:
        x = torch.randint(-1000, 1000, shape, device="cuda", generator=generator)
    return x.to(dtype)


def _plant_extremes(x, dim):
    # Along `dim`: a maximum far above the rest at a random position, at the
    # first position in some lines, the last in others, and twice in others
    # (argmax: the first of equal maxima). In place: `x` keeps its layout.
    length = x.shape[dim]
    if length < 2 or x.numel() == 0:
        return x
    moved = x.movedim(dim, -1)  # a view: scatter_ writes through to x
    generator = torch.Generator().manual_seed(1)
    positions = torch.randint(0, length, moved.shape[:-1], generator=generator)
    line = torch.arange(positions.numel()).view(positions.shape)
    positions[line % 4 == 1] = 0
    positions[line % 4 == 2] = length - 1
    ties = torch.where(line % 4 == 3, torch.full_like(positions, length - 1), positions)
    big = 1000.0 if x.dtype.is_floating_point else 5000
    for where in (positions, ties):
        moved.scatter_(-1, where.unsqueeze(-1).to(x.device), big)
    return x


def _check_reduction(fn, x, native, tolerance, scale=1.0):
    expected = fn(x)
    compiled = kiln.compile(fn)
    actual = compiled(x)
    torch.cuda.synchronize()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if not expected.dtype.is_floating_point:
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual.float() * scale, expected.float() * scale,
                                   equal_nan=True, **tolerance)
    runner = kiln.cache_info(compiled)["runners"][0]
    if native:
        assert runner.startswith("native") and " 0 extern" in runner, runner
    return runner


ROW_REDUCTIONS = {
    "softmax": (lambda x: torch.softmax(x, -1), True),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), True),
    "layer_norm": (lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]), True),
    "var": (lambda x: x.var(-1), True),
    "mean": (lambda x: x.mean(-1), True),
    "sum": (lambda x: x.sum(-1), False),
    "amax": (lambda x: x.amax(-1), False),
    "argmax": (lambda x: x.argmax(-1), False),
}
ROW_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]


def _reduction_tolerance(dtype, name="", length=1):
    # Sums of thousands of terms differ by their order of additions; a lost
    # or doubled partial moves a result by percents.
    if dtype == torch.float32:
        return dict(rtol=1e-4, atol=1e-5)
    tolerance = dict(_tolerance(dtype))
    if name == "softmax" and dtype == torch.float16:
        # Compared times the row length (about 1 each): float16 holds the
        # 1e-5 probabilities of a 100000-long row as subnormals, 6e-8 apart.
        tolerance["atol"] = max(tolerance["atol"], 1.2e-7 * length)
    return tolerance


@pytest.mark.parametrize("dtype", ROW_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape", [(8, 100000), (3, 5000), (1, 70000)], ids=str)
@pytest.mark.parametrize("name", list(ROW_REDUCTIONS))
def test_gpu_reduction_few_long_rows_get_a_block_each(name, shape, dtype):
    fn, floats_only = ROW_REDUCTIONS[name]
    if floats_only and not dtype.is_floating_point:
        pytest.skip("a floating-point op")
    x = _reduction_input(shape, dtype)
    if name in ("amax", "argmax"):
        x = _plant_extremes(x, -1)
    scale = shape[-1] if name == "softmax" else 1.0
    _check_reduction(fn, x, True, _reduction_tolerance(dtype, name, shape[-1]), scale)


COLUMN_REDUCTIONS = {
    "sum": lambda x: x.sum(0),
    "amax": lambda x: x.amax(0),
    "argmax": lambda x: x.argmax(0),
    "mean": lambda x: x.mean(0),
}
# (100000, 7): one block would read 781 rows a lane; torch runs it.
COLUMN_SHAPES = {(4096, 1024): True, (5000, 3): True, (100000, 7): False, (17, 33): True}


@pytest.mark.parametrize("dtype", ROW_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("shape", list(COLUMN_SHAPES), ids=str)
@pytest.mark.parametrize("name", list(COLUMN_REDUCTIONS))
def test_gpu_reduction_columns_split_across_lanes(name, shape, dtype):
    if name == "mean" and not dtype.is_floating_point:
        pytest.skip("mean of integers is an error in eager")
    x = _reduction_input(shape, dtype)
    if name in ("amax", "argmax"):
        x = _plant_extremes(x, 0)
    _check_reduction(COLUMN_REDUCTIONS[name], x, COLUMN_SHAPES[shape], _reduction_tolerance(dtype))


def _column_layouts():
    base = _reduction_input((1024, 4096), torch.float32, seed=2)
    yield "transposed", base.t(), True  # dim 0 walks contiguous rows
    wide = _reduction_input((4096, 2048), torch.float32, seed=3)
    yield "sliced columns", wide[:, ::2], True
    yield "offset rows", wide[7:3007, 5:1029], True
    yield "middle dim", _reduction_input((64, 128, 33), torch.float32, seed=4).transpose(0, 1), True
    yield "broadcast", _reduction_input((1, 1024), torch.float32, seed=5).expand(4096, 1024), True


@pytest.mark.parametrize("name", list(COLUMN_REDUCTIONS))
def test_gpu_reduction_columns_of_non_contiguous_inputs(name):
    fn = COLUMN_REDUCTIONS[name]
    for layout, x, native in _column_layouts():
        if layout != "broadcast" and name in ("amax", "argmax"):
            x = _plant_extremes(x, 0)
        try:
            _check_reduction(fn, x, native, _reduction_tolerance(x.dtype))
        except AssertionError as error:
            raise AssertionError(f"{layout}: {error}") from error


@pytest.mark.parametrize("name", list(COLUMN_REDUCTIONS) + ["softmax", "row sum"])
def test_gpu_reduction_empty_and_size_one_dims(name):
    functions = dict(COLUMN_REDUCTIONS, softmax=lambda x: torch.softmax(x, 0),
                     **{"row sum": lambda x: x.sum(-1)})
    fn = functions[name]
    for shape in [(0, 1024), (4096, 0), (1, 1024), (4096, 1), (1, 1), (2, 1, 70000)]:
        x = _reduction_input(shape, torch.float32, seed=6)
        try:
            expected = fn(x)
        except (RuntimeError, IndexError):
            continue  # eager rejects it (amax or argmax over an empty dim)
        compiled = kiln.compile(fn)
        actual = compiled(x)
        torch.cuda.synchronize()
        assert actual.shape == expected.shape, shape
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
def test_gpu_reduction_special_values_in_long_rows_and_columns(dtype):
    rows = _reduction_input((4, 30000), dtype, seed=7)
    rows[0, 12345] = float("nan")
    rows[1, 29999] = float("inf")
    rows[2, 0] = -float("inf")
    rows[3, 777] = float("nan")
    rows[3, 20000] = float("inf")
    for name in ("softmax", "sum", "amax", "argmax", "mean"):
        _check_reduction(ROW_REDUCTIONS[name][0], rows, True, _reduction_tolerance(dtype, name, 30000),
                         30000 if name == "softmax" else 1.0)
    columns = _reduction_input((4096, 64), dtype, seed=8)
    columns[4000, 3] = float("nan")
    columns[5, 10] = float("inf")
    columns[0, 11] = -float("inf")
    columns[:, 12] = float("nan")
    for name in ("sum", "amax", "argmax", "mean"):
        _check_reduction(COLUMN_REDUCTIONS[name], columns, True, _reduction_tolerance(dtype))


def test_cpu_work_inside_a_gpu_graph_runs_through_torch_and_the_rest_natively():
    # Model code often builds positions or masks on the CPU and moves them
    # (transformers' GPT-2, LLaMA and ViT did): those nodes are torch calls,
    # the GPU work around them still compiles to native kernels.
    x = torch.randn(4, 16, 32, device="cuda")

    def fn(x):
        positions = torch.cat([torch.arange(8), torch.arange(8) + 8]).cumsum(0).float()
        scale = positions.to(x.device).view(1, -1, 1)
        return torch.softmax(x * scale / 100.0, -1) + 1, positions * 2

    compiled = kiln.compile(fn)
    actual, expected = compiled(x), fn(x)
    torch.testing.assert_close(actual, expected)
    assert actual[0].device == x.device and actual[1].device.type == "cpu"
    runners = kiln.cache_info(compiled)["runners"]
    assert runners[0].startswith("native"), runners


def test_safe_softmax_of_masked_attention_fuses_on_the_gpu():
    q, k, v = (torch.randn(2, 3, 7, 8, device="cuda") for _ in range(3))
    mask = torch.ones(7, 7, dtype=torch.bool, device="cuda").tril()

    def fn(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    compiled = kiln.compile(fn)
    torch.testing.assert_close(compiled(q, k, v), fn(q, k, v), rtol=1e-4, atol=1e-4, equal_nan=True)
    runners = kiln.cache_info(compiled)["runners"]
    assert runners[0].startswith("native") and "_safe_softmax" not in runners[0], runners


def test_results_of_ops_on_gpu_tensor_lists_are_on_the_gpu():
    # cat and index take their tensors in a list: their results are on the
    # GPU in the captured graph (they were once taken for CPU tensors, and
    # every node after them ran through torch).
    x, y = torch.randn(4, 5, device="cuda"), torch.randn(4, 3, device="cuda")
    rows = torch.tensor([3, 0, 1], device="cuda")

    def fn(x, y):
        joined = torch.cat([x, y], 1) * 2
        return joined[rows].exp() + 1

    compiled = kiln.compile(fn)
    torch.testing.assert_close(compiled(x, y), fn(x, y))
    graph = kiln.cache_info(compiled)["graphs"][0]
    for line in graph.splitlines():
        if " = " in line and "[" in line.split(" = ")[0]:
            assert "@cuda" in line.split(" = ")[0], (line, graph)
    runners = kiln.cache_info(compiled)["runners"]
    assert runners[0].startswith("native") and "cat" not in runners[0], runners


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("shape", [(1 << 20,), (4096, 4096), (3, 1000, 999), (7, 300000),
                                   (300000, 7), (16384, 1024)])
def test_full_and_few_point_reductions_split_across_blocks(dtype, shape):
    # Millions of elements into one point (or a few): partials over many
    # blocks, then their combination, natively (once the whole graph ran
    # through torch).
    x = (torch.randn(shape, device="cuda") * 4 + 1).to(dtype)
    if dtype.is_floating_point:
        functions = {
            "sum": lambda x: x.sum(),
            "mean": lambda x: x.float().mean(),
            "amax": lambda x: x.amax(),
            "squares": lambda x: (x.float() ** 2).sum() / x.numel(),
            "rows": lambda x: x.float().sum(-1) * 2,
            "columns": lambda x: x.float().sum(0) - 1,
        }
        tolerance = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=2e-2, atol=1.0)
    else:
        functions = {"sum": lambda x: x.sum(), "amin": lambda x: x.amin(), "any": lambda x: (x > 20).any()}
        tolerance = {}
    for name, fn in functions.items():
        compiled = kiln.compile(fn)
        actual, expected = compiled(x), fn(x)
        torch.testing.assert_close(actual, expected, **tolerance, msg=lambda m: f"{name}: {m}")
        assert _ran_natively(compiled), (name, kiln.cache_info(compiled)["runners"])


def _grouped_inputs(dtype, rows, columns):
    # Contiguous (vector loads), a view one element in (the scalar body: its
    # address is not 16-byte aligned), a view four elements in (aligned
    # again), and a broadcast row.
    def make(*shape):
        if dtype == torch.bool:
            return torch.rand(shape, device="cuda") > 0.5
        if dtype.is_floating_point:
            return torch.randn(shape, device="cuda").to(dtype)
        return torch.randint(-50, 50, shape, device="cuda", dtype=dtype)

    wide = make(rows, columns + 4)
    return {
        "contiguous": make(rows, columns),
        "offset by one": wide[:, 1:columns + 1],
        "offset by four": wide[:, 4:],
        "flat offset by one": make(rows * columns + 1)[1:].view(rows, columns),
        "broadcast row": make(1, columns).expand(rows, columns),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32,
                                   torch.int64, torch.bool], ids=lambda d: str(d)[6:])
def test_pointwise_groups_load_four_wide_aligned_or_not(dtype):
    # 1M points: a thread takes 4 consecutive ones, one vector access each
    # where the buffers are aligned, the scalar body where a view is not.
    bias = _grouped_inputs(dtype, 1, 1024)["contiguous"].view(1024)
    if dtype == torch.bool:
        fn = lambda x, b: (x ^ b) | ~x  # noqa: E731
    elif dtype.is_floating_point:
        fn = lambda x, b: torch.tanh(x * 2 + b) - x  # noqa: E731
    else:
        fn = lambda x, b: (x * 3 + b) // 2  # noqa: E731
    for layout, x in _grouped_inputs(dtype, 1024, 1024).items():
        compiled = kiln.compile(fn)
        torch.testing.assert_close(compiled(x, bias), fn(x, bias), **_tolerance(dtype),
                                   msg=lambda m: f"{layout}: {m}")
        assert _ran_natively(compiled), (layout, kiln.cache_info(compiled)["runners"])


def _ulp_errors(actual, truth):
    """|actual - truth| in units of the float32 spacing at truth (float64),
    where both are finite; the special values must match exactly."""
    rounded = truth.float()
    finite = rounded.isfinite()
    assert torch.equal(actual.isnan(), rounded.isnan())
    assert torch.equal(actual[~finite & ~rounded.isnan()], rounded[~finite & ~rounded.isnan()])
    magnitude = rounded[finite].abs()
    spacing = (torch.nextafter(magnitude, torch.full_like(magnitude, float("inf"))) - magnitude).double()
    return ((actual[finite].double() - truth[finite]).abs() / spacing).max().item()


@pytest.mark.parametrize("name", ["exp", "tanh", "erf", "sigmoid"])
def test_float32_math_is_as_accurate_as_eagers_on_the_gpu(name):
    # Inputs from exp's underflow to its overflow, where tanh, erf and
    # sigmoid saturate, random ones and special values: kiln's float32 exp
    # (2^x from the special-function unit after a two-part reduction) and
    # what builds on it stay within 2 ulps of eager's own error against
    # float64.
    fn = getattr(torch, name)
    x = torch.cat([torch.linspace(-110, 110, 1 << 20), torch.randn(1 << 16) * 4,
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30,
                                 -1e-30, 88.72, 88.73, -87.33, -103.9, -104.0])]).cuda()
    truth = fn(x.double())
    compiled = kiln.compile(fn)
    ours, eagers = _ulp_errors(compiled(x), truth), _ulp_errors(fn(x), truth)
    assert _ran_natively(compiled), kiln.cache_info(compiled)["runners"]
    assert ours <= eagers + 2, (name, ours, eagers)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=lambda d: str(d)[6:])
def test_one_compiled_graph_serves_aligned_and_misaligned_addresses(dtype):
    # The same sizes and strides at different addresses are one compiled
    # graph: its vector kernels run where the buffers are 16-byte aligned,
    # their scalar forms (compiled at the first call that needs them) where
    # a view starts one element in, in any order.
    def fn(x, y):
        return torch.softmax(x * 2, -1) + y

    compiled = kiln.compile(fn)
    rows, columns = 512, 1024
    def pair():  # an aligned tensor and a view one element into another
        flat = torch.randn(rows * columns + 1, device="cuda").to(dtype)
        return torch.randn(rows, columns, device="cuda").to(dtype), flat[1:].view(rows, columns)

    (aligned, shifted), (other, other_shifted) = pair(), pair()
    calls = [(aligned, other), (shifted, aligned), (aligned, shifted), (shifted, other_shifted),
             (other, aligned)]
    tolerance = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for index, (x, y) in enumerate(calls):
        torch.testing.assert_close(compiled(x, y), fn(x, y), **tolerance,
                                   msg=lambda m: f"call {index}: {m}")
    info = kiln.cache_info(compiled)
    assert info["entries"] == 1 and info["misses"] == 1, info
    assert _ran_natively(compiled), info["runners"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", ["softmax", "layer_norm", "rms"])
def test_kept_row_groups_load_four_wide_aligned_or_not(name, dtype):
    weight = torch.randn(1024, device="cuda").to(dtype)
    bias = torch.randn(1024, device="cuda").to(dtype)
    functions = {
        "softmax": lambda x: torch.softmax(x.float() * 0.5, -1),
        "layer_norm": lambda x: torch.nn.functional.layer_norm(x, (1024,), weight, bias),
        "rms": lambda x: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(dtype) * weight,
    }
    fn = functions[name]
    tolerance = dict(rtol=2e-2, atol=2e-2) if dtype != torch.float32 else dict(rtol=1e-4, atol=1e-4)
    for layout, x in _grouped_inputs(dtype, 4096, 1024).items():
        compiled = kiln.compile(fn)
        torch.testing.assert_close(compiled(x), fn(x), **tolerance, msg=lambda m: f"{layout}: {m}")
        assert _ran_natively(compiled), (layout, kiln.cache_info(compiled)["runners"])


def _written_in_place(x):
    y = x * 2
    y.relu_()
    y += x
    y.masked_fill_(y > 1, 0.5)
    return y


_INDEX_MAPS_AND_LOSSES = {
    "pixel_shuffle": (lambda x: torch.nn.functional.pixel_shuffle(x, 2) * 2, (2, 8, 6, 10)),
    "pixel_unshuffle": (lambda x: torch.nn.functional.pixel_unshuffle(x, 2) + 1, (2, 8, 6, 10)),
    "channel_shuffle": (lambda x: torch.nn.functional.channel_shuffle(x, 2) * 2, (2, 8, 6, 10)),
    "reflect": (lambda x: torch.nn.functional.pad(x, (1, 2, 2, 1), mode="reflect") * 2, (2, 8, 6, 10)),
    "replicate": (lambda x: torch.nn.functional.pad(x, (1, 2, 2, 1), mode="replicate") * 2, (2, 8, 6, 10)),
    "glu": (lambda x: torch.nn.functional.glu(x, 1), (16, 12)),
    "softshrink": (lambda x: torch.nn.functional.softshrink(x, 0.3), (16, 12)),
    "mse": (lambda x: torch.nn.functional.mse_loss(x, x.flip(0)), (16, 12)),
    "smooth_l1": (lambda x: torch.nn.functional.smooth_l1_loss(x, x.flip(0), reduction="sum", beta=0.5),
                  (16, 12)),
    "integer division": (lambda x: (x * 10).long() % 7 + (x * 10).long() // -3, (16, 12)),
    "in-place writes": (_written_in_place, (16, 12)),
    "cumsum": (lambda x: x.cumsum(1) * 2, (16, 300)),
    "cumprod": (lambda x: (x * 0.1 + 1).cumprod(0), (40, 12)),
    "integer cumsum": (lambda x: (x > 0).cumsum(-1) - 1, (4, 128)),
    "advanced indexing": (lambda x: x[torch.arange(4, device=x.device)[:, None],
                                      torch.arange(6, device=x.device)[None, :] + 3] * 2, (16, 12)),
}


@pytest.mark.parametrize("name", list(_INDEX_MAPS_AND_LOSSES))
def test_index_maps_losses_and_in_place_writes_are_gpu_kernels(name):
    # The lowerings of sessions 37 and 38 (pixel and channel shuffles,
    # reflected and replicated pads, glu, shrinks, pointwise losses, integer
    # division by a number, in-place writes as functional ops, cumulative
    # sums and products, indexing with computed positions) are the GPU's too.
    fn, shape = _INDEX_MAPS_AND_LOSSES[name]
    x = torch.randn(shape, device="cuda")
    compiled = kiln.compile(fn)
    actual, expected = compiled(x), fn(x)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected)
    assert "0 extern" in kiln.cache_info(compiled)["runners"][0]
