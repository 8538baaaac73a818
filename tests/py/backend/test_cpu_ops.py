# The CPU backend op by op: PyTorch's own OpInfo sample inputs (op_db) run
# through kiln.compile and through eager torch, for every dtype the backend
# lowers, and the compiled program must have run natively (no extern call)
# for the ops kiln lowers to loops.
import copy
import functools
import re

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils import _pytree as pytree

import kiln
import torch._prims_common as _prims

# torch 2.13 names it `..._or_false`; 2.11 (the GPU machine) without the suffix.
is_non_overlapping_and_dense = getattr(_prims, "is_non_overlapping_and_dense_or_false", None) or \
    getattr(_prims, "is_non_overlapping_and_dense")

# Ops lowered to loop IR (no extern in the program), by op_db name.
NATIVE_OPS = [
    "abs", "acos", "add", "asin", "atan", "atan2", "ceil", "clamp", "clamp_max",
    "clamp_min", "cos", "cosh", "div.no_rounding_mode", "div.floor_rounding",
    "div.trunc_rounding", "true_divide", "floor_divide", "frac", "sgn",
    "isfinite", "max.binary", "min.binary", "nn.functional.relu6",
    "nn.functional.selu", "eq", "erf", "erfc", "exp", "exp2", "expm1",
    "floor", "fmod", "ge", "gt", "isinf", "isnan", "le", "lerp", "log", "log10",
    "log1p", "log2", "logical_and", "logical_not", "logical_or", "logical_xor",
    "lt", "masked_fill", "maximum", "minimum", "mul", "nan_to_num", "ne", "neg",
    "nn.functional.elu", "nn.functional.gelu", "nn.functional.hardsigmoid",
    "nn.functional.hardswish", "nn.functional.hardtanh", "nn.functional.leaky_relu",
    "nn.functional.mish", "nn.functional.relu", "nn.functional.silu",
    "nn.functional.softplus", "nn.functional.logsigmoid", "pow", "reciprocal", "remainder",
    "round", "rsqrt",
    "rsub", "sigmoid", "sign", "sin", "sinh", "sqrt", "sub", "tan", "tanh",
    "trunc", "where", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "amax", "amin", "argmax", "argmin", "sum", "mean", "prod", "var", "std",
    "logsumexp", "softmax", "log_softmax", "nn.functional.layer_norm",
    "any", "all", "nansum", "var_mean", "std_mean", "max.reduction_with_dim",
    "min.reduction_with_dim", "max.reduction_no_dim", "min.reduction_no_dim",
    "linalg.vector_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
    "tril", "triu", "cat", "stack", "flip", "roll", "repeat",
    "nn.functional.pad.constant", "clone", "contiguous", "permute", "transpose", "t",
    "expand", "reshape", "view", "squeeze", "unsqueeze", "narrow", "select",
    "flatten", "movedim", "full_like", "zeros_like", "ones_like", "arange",
    "chunk", "diagonal", "split", "split.list_args", "split_with_sizes",
    "tensor_split", "hsplit", "vsplit", "unbind", "unflatten", "expand_as",
    "as_strided", "new_zeros", "new_ones", "new_full", "zeros", "ones", "full",
    "fill", "nn.functional.interpolate.nearest", "nn.functional.upsample_nearest",
    "nn.functional.interpolate.bilinear", "nn.functional.upsample_bilinear",
    "mm", "addmm", "bmm", "baddbmm", "nn.functional.linear", "matmul",
    "nn.functional.embedding", "index_select",
    "nn.functional.pixel_shuffle", "nn.functional.pixel_unshuffle", "nn.functional.channel_shuffle",
    "nn.functional.pad.reflect", "nn.functional.pad.replicate", "nn.functional.pad.replicate_negative",
    "nn.functional.glu", "nn.functional.hardshrink", "nn.functional.softshrink",
    "nn.functional.mse_loss", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
    "cumsum", "cumprod", "gather", "nn.functional.nll_loss", "nn.functional.cross_entropy",
    "asinh", "acosh", "atanh", "sinc", "deg2rad", "rad2deg", "logit", "signbit", "isposinf",
    "isneginf", "copysign", "fmax", "fmin", "hypot", "logaddexp", "logaddexp2", "xlogy",
    "addcmul", "addcdiv", "nn.functional.celu", "nn.functional.threshold",
    "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter",
    "nn.functional.binary_cross_entropy_with_logits", "mv", "dot", "addmv",
    "nn.functional.normalize", "norm", "aminmax", "count_nonzero", "trace",
    "nn.functional.prelu", "nn.functional.soft_margin_loss", "addr", "linspace", "logspace",
    "eye", "heaviside", "cross", "linalg.cross",
]
# Small floating-point matrix products are kernels; integer ones call torch.
PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "nn.functional.linear", "matmul", "mv", "dot",
            "addmv", "addr")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16,
          torch.int32, torch.int64, torch.bool]
SAMPLES_PER_CASE = 8

OPS = {op.name if not op.variant_test_name else f"{op.name}.{op.variant_test_name}": op
       for op in op_db}


def _cases():
    for name in NATIVE_OPS:
        op = OPS.get(name)
        if op is None:
            continue
        for dtype in DTYPES:
            if dtype in op.supported_dtypes("cpu"):
                yield pytest.param(op, dtype, id=f"{name}-{str(dtype)[6:]}")


def _tolerance(dtype, op_name):
    if dtype == torch.float16:
        return dict(rtol=2e-3, atol=2e-3)
    if dtype == torch.bfloat16:
        return dict(rtol=1.6e-2, atol=1e-2)
    if dtype == torch.float32:
        return dict(rtol=2e-5, atol=2e-5)
    return {}


def _as_function(op, sample):
    """A plain Python function of the sample's tensors (graph inputs) that
    calls the op with the sample's other arguments as constants, written out
    as source so that kiln's frontend sees an ordinary call."""
    tensors, constants = [], {}

    def encode(value):
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return f"t{len(tensors) - 1}"
        if isinstance(value, list):
            return "[" + ", ".join(encode(item) for item in value) + "]"
        if isinstance(value, tuple):
            return "(" + "".join(encode(item) + ", " for item in value) + ")"
        name = f"c{len(constants)}"
        constants[name] = value
        return name

    arguments = [encode(sample.input)] + [encode(arg) for arg in sample.args]
    arguments += [f"{key}={encode(value)}" for key, value in sample.kwargs.items()]
    parameters = ", ".join(f"t{i}" for i in range(len(tensors)))
    namespace = dict(constants, op=op.op)
    exec(f"def call({parameters}):\n    return op({', '.join(arguments)})\n", namespace)
    return namespace["call"], tensors


def _assert_eager_result(actual, expected, fn, tensors, tolerance):
    """kiln must give eager's answer, except where eager's vector kernel is
    off its own float64 answer: there kiln must give that. torch 2.11's
    AVX-512 bfloat16 fmod(-8.4375, FLT_MIN) is NaN; its scalar path, its
    float32 and float64 ones, and kiln's give -0.0."""
    try:
        assert_close(actual, expected, equal_nan=True, **tolerance)
        return
    except AssertionError as error:
        mismatch = error
    if not any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors):
        raise mismatch
    try:
        exact = fn(*[t.double() if t.is_floating_point() else t for t in tensors])
        reference = pytree.tree_map(
            lambda e, x: x.to(e.dtype) if isinstance(e, torch.Tensor) else x, expected, exact)
    except Exception:  # noqa: BLE001 - no float64 answer to compare with
        raise mismatch from None
    try:
        assert_close(expected, reference, equal_nan=True, **tolerance)
    except AssertionError:  # eager is off its own float64 answer
        assert_close(actual, reference, equal_nan=True, **tolerance)
        return
    raise mismatch


def test_every_listed_op_is_in_op_db():
    # A name op_db does not know would silently test nothing.
    assert [name for name in NATIVE_OPS if name not in OPS] == []


@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_op_matches_eager(op, dtype):
    checked = native = 0
    for sample in list(op.sample_inputs("cpu", dtype, requires_grad=False))[:SAMPLES_PER_CASE]:
        fn, tensors = _as_function(op, sample)
        try:
            expected = fn(*tensors)
        except Exception:
            continue  # eager rejects this sample: nothing to compare
        compiled = kiln.compile(fn)
        actual = compiled(*tensors)
        _assert_eager_result(actual, expected, fn, tensors, _tolerance(dtype, op.name))
        # Results keep eager's strides.
        for a, e in zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected)):
            if isinstance(e, torch.Tensor) and e.numel() > 1:
                assert _keeps_strides(a, e)
        info = kiln.cache_info(compiled)
        checked += 1
        runners = info.get("runners", [])
        if runners and runners[0].startswith("native") and " 0 extern" in runners[0]:
            native += 1
    if checked == 0:
        pytest.skip("no sample ran in eager")
    # Integer division-like ops stay torch calls: torch raises on a zero
    # divisor (or a negative integer power), which kernels cannot.
    integer_extern = (op.name in ("fmod", "remainder", "pow", "floor_divide") + PRODUCTS or
                      op.name == "div" and op.variant_test_name != "no_rounding_mode") \
        and not dtype.is_floating_point
    if not integer_extern:
        assert native > 0, f"no sample of {op.name} ran without an extern call"


def _keeps_strides(actual, expected):
    """Whether kiln's result has eager's strides, where they are defined (a
    dense, non-overlapping result)."""
    return actual.stride() == expected.stride() or not is_non_overlapping_and_dense(expected)


# Factories whose values are whatever the allocator hands out: eager's own
# two calls may agree by chance (the same freed block comes back), so only
# what torch defines about their results is compared.
UNINITIALIZED = {"empty", "empty_like", "empty_permuted", "empty_strided",
                 "new_empty", "new_empty_strided"}


def _assert_same_layout(actual, expected):
    actual, expected = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)
        assert (a.shape, a.dtype, a.device) == (e.shape, e.dtype, e.device)
        assert _keeps_strides(a, e)


def _leaves_equal(a, b):
    try:
        assert_close(a, b, equal_nan=True, rtol=0, atol=0)
        return True
    except Exception:  # noqa: BLE001 - any difference
        return False


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_db_op_gives_eager_results(name):
    # Lowered or not, every op of op_db that eager runs on float32 samples
    # must give eager's answer through kiln (natively, as an extern, or by
    # falling back), never a wrong one or a crash. Samples that draw random
    # numbers (dropout, rrelu in training) are left out: a fused eager
    # kernel draws them in another order. op_db seeds some random ops inside
    # (wrapper_set_seed): those fall back and are compared.
    op = OPS[name]
    if torch.float32 not in op.supported_dtypes("cpu"):
        pytest.skip("no float32")
    checked = 0
    for sample in list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:2]:
        fn, tensors = _as_function(op, sample)
        try:
            torch.manual_seed(0)
            state = torch.get_rng_state()
            expected = fn(*tensors)
            if not torch.equal(state, torch.get_rng_state()):
                continue  # draws random numbers (or seeds the generator)
            torch.manual_seed(1)
            other = fn(*tensors)
        except Exception:
            continue  # eager rejects this sample
        if not _leaves_equal(expected, other) and op.name not in UNINITIALIZED:
            continue  # random all the same
        torch.manual_seed(0)
        actual = kiln.compile(fn)(*tensors)
        if op.name in UNINITIALIZED:
            _assert_same_layout(actual, expected)
        else:
            assert_close(actual, expected, equal_nan=True, **_tolerance(torch.float32, name))
        checked += 1
    if checked == 0:
        pytest.skip("no deterministic sample ran in eager")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norms_return_cpu_statistics(dtype):
    # kiln traces on meta tensors, whose norm kernels model CUDA: float32
    # mean and rstd for half inputs. CPU's return them in the input dtype
    # (and normalize with the float32 ones); kiln must give CPU's answer,
    # lowered (layer and group norm) or as an extern (batch norm training).
    x = torch.randn(4, 6, 9, dtype=dtype)
    w, b = torch.randn(6, dtype=dtype), torch.randn(6, dtype=dtype)
    w9, b9 = torch.randn(9, dtype=dtype), torch.randn(9, dtype=dtype)

    def layer(x, w, b):
        out, mean, rstd = torch.native_layer_norm(x, [9], w, b, 1e-5)
        return out, mean * 2 + 1, rstd.exp()

    def group(x, w, b):
        out, mean, rstd = torch.native_group_norm(x, w, b, 4, 6, 9, 3, 1e-5)
        return out, mean - rstd

    def batch(x, w, b, running_mean, running_var):
        out, mean, rstd = torch.native_batch_norm(x, w, b, running_mean, running_var,
                                                  True, 0.1, 1e-5)
        return out, mean * 2, rstd.sqrt()

    for fn, args in ((layer, (x, w9, b9)), (group, (x, w, b))):
        actual, expected = kiln.compile(fn)(*args), fn(*args)
        assert [t.dtype for t in actual] == [t.dtype for t in expected] == [dtype] * len(expected)
        assert_close(actual, expected)
    stats = (torch.zeros(6, dtype=dtype), torch.ones(6, dtype=dtype))
    eager_stats = tuple(s.clone() for s in stats)
    actual, expected = kiln.compile(batch)(x, w, b, *stats), batch(x, w, b, *eager_stats)
    assert [t.dtype for t in actual] == [t.dtype for t in expected] == [dtype] * 3
    assert_close(actual, expected)
    assert_close(stats, eager_stats)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(8, 16, 12, 12), (2, 3, 5), (3, 5, 2, 3, 4)])
def test_batch_statistics_without_running_ones_are_lowered(dtype, shape):
    # native_batch_norm in training with no running statistics to update
    # (instance norm's call, F.batch_norm(x, None, None, training=True)) is
    # kiln's kernels, not torch's call: its results are eager's, statistics
    # included (in the input dtype, as CPU gives them), within the op tests'
    # tolerances (a bfloat16 rstd can round one ulp away from eager's).
    x = (torch.randn(shape) * 3 + 1).to(dtype)
    w, b = torch.randn(shape[1]).to(dtype), torch.randn(shape[1]).to(dtype)

    def batch(x, w, b):
        out, mean, rstd = torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
        return out, mean * 2, rstd.sqrt()

    cases = [(batch, (x, w, b)),
             (lambda x: F.batch_norm(x.transpose(0, 1), None, None, training=True, eps=1e-3), (x,)),
             (lambda x, w, b: F.instance_norm(x, weight=w, bias=b), (x, w, b)),
             (lambda x: F.instance_norm(torch.ones_like(x)), (x,))]  # variance 0
    for fn, args in cases:
        compiled = kiln.compile(fn)
        actual, expected = compiled(*args), fn(*args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = actual if isinstance(actual, tuple) else (actual,)
        assert [t.dtype for t in actual] == [t.dtype for t in expected]
        assert_close(actual, expected, **_tolerance(dtype, "batch_norm"))
        assert kiln.cache_info(compiled)["runners"][0].endswith(" 0 extern(s)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_module_lowers_in_eval_and_updates_statistics_in_training(dtype):
    # nn.BatchNorm calls native_batch_norm, whose schema writes the running
    # statistics; it does so in training only, so in eval mode kiln fuses it
    # with what follows, and in training torch runs it and updates them.
    block = torch.nn.Sequential(torch.nn.BatchNorm2d(6), torch.nn.ReLU()).to(dtype)
    with torch.no_grad():
        block[0].running_mean.uniform_(-0.5, 0.5)
        block[0].running_var.uniform_(0.5, 2.0)
    x = torch.randn(3, 6, 5, 7, dtype=dtype)
    block.eval()
    compiled = kiln.compile(block)
    with torch.no_grad():  # parameters that need grad run through autograd
        assert_close(compiled(x), block(x))
    assert kiln.cache_info(compiled)["runners"][0].endswith(" 0 extern(s)")

    block.train()
    eager_block = copy.deepcopy(block)
    compiled = kiln.compile(block)
    for _ in range(2):
        x = torch.randn(3, 6, 5, 7, dtype=dtype)
        assert_close(compiled(x), eager_block(x))
    assert_close(block[0].running_mean, eager_block[0].running_mean)
    assert_close(block[0].running_var, eager_block[0].running_var)
    assert block[0].num_batches_tracked.item() == eager_block[0].num_batches_tracked.item() == 2


def _random_of(dtype, shape):
    """Random values of `dtype`: normal floats, integers in [-100, 100), or
    booleans."""
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-100, 100, shape).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int8, torch.bool])
def test_transposes_read_tiles_and_match_eager(dtype):
    # A permute's copy reads along the dim before the one it writes along:
    # kiln reads it in tiles transposed in registers (CpuSchedule's
    # planTranspose), with rows and columns past the last whole tile read
    # one by one. Every element must be eager's, for extents below, at and
    # between whole tiles, size-1 and empty dims, a sliced (strided) input
    # and a pointwise op on the transposed values.
    def make(*shape):
        return _random_of(dtype, shape)

    # (function, input, whether tiles are read: a transposed read walks the
    # dim before the written one contiguously, both over 16 or more; None:
    # as the host's vector lanes decide)
    cases = [
        (lambda x: x.permute(0, 2, 3, 1).contiguous(), make(2, 64, 16, 16), True),  # NCHW to NHWC
        (lambda x: x.permute(0, 2, 3, 1).contiguous(), make(3, 20, 7, 7), True),  # 49 x 20
        (lambda x: x.t().contiguous(), make(64, 48), True),
        (lambda x: x.t().contiguous(), make(33, 130), True),
        (lambda x: x.transpose(1, 2).contiguous(), make(2, 5, 40), None),  # per the host's lanes
        (lambda x: x.transpose(1, 2).contiguous(), make(1, 1, 17), None),
        (lambda x: x.transpose(1, 2).contiguous(), make(2, 0, 17), None),
        (lambda x: x[:, ::2].t().contiguous(), make(40, 64), False),  # stride 2 along u
        (lambda x: x.contiguous(memory_format=torch.channels_last), make(2, 48, 9, 9), True),
    ]
    if dtype != torch.bool:
        cases.append((lambda x: x.t().contiguous() * 2 + 1, make(96, 80), True))
    _C = kiln._C
    for fn, x, tiles in cases:
        compiled = kiln.compile(fn)
        _C.start_log_capture(["schedule"])
        try:
            actual = compiled(x)
        finally:
            schedules = "".join(text for _, text in _C.stop_log_capture())
        expected = fn(x)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert actual.stride() == expected.stride()
        assert torch.equal(actual, expected)
        if tiles is not None:
            assert ("transposed=1" in schedules) == tiles, schedules


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bfloat16, torch.bool])
def test_cat_and_pad_split_their_loop_at_the_seams_and_match_eager(dtype):
    # A cat along the last dim and a pad select between clamped loads by
    # comparing the loop's variable with constants: the CPU kernel runs each
    # stretch between two seams as its own loop, where the comparison is
    # known and the loads are contiguous (no masked loads). Seams on and off
    # vector boundaries, 1-element and empty pieces, a strided input, crops.
    def make(*shape):
        return _random_of(dtype, shape)

    x, y = make(37, 512), make(37, 300)
    v, w = make(100000), make(300001)  # 1-d: thread chunks cross the seams
    img = make(2, 3, 20, 40)
    cases = [
        (lambda: torch.cat([v, w, v]), None),
        (lambda: torch.cat([x, x], 1), True),
        (lambda: torch.cat([x, y, x[:, :7]], -1), True),
        (lambda: torch.cat([x[:, :1], x[:, 1:40], x[:, 40:]], 1), True),
        (lambda: torch.cat([x[:, :0], x, y[:, ::2]], 1), None),
        (lambda: torch.cat([-x[:, 256:], x[:, :256]], -1) if dtype != torch.bool else x, None),
        (lambda: torch.nn.functional.pad(img, (1, 1, 1, 1)), None),
        (lambda: torch.nn.functional.pad(img, (3, 17, 0, 0)), None),
        (lambda: torch.nn.functional.pad(img, (-2, -3, 1, 0)), None),
    ]
    _C = kiln._C
    for fn, unmasked in cases:
        compiled = kiln.compile(fn)
        _C.start_log_capture(["llvm"])
        try:
            actual = compiled()
        finally:
            ir = "".join(text for _, text in _C.stop_log_capture())
        expected = fn()
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert torch.equal(actual, expected)
        if unmasked and "define" in ir:
            assert "masked.load" not in ir


@pytest.mark.parametrize("shape,shifts,dims", [
    ((4, 1024), 3, -1), ((4, 1024), -1000, -1), ((4, 1024), 5000, 1), ((3, 17), 4, 1),
    ((2, 8, 32, 32), (1, -2), (2, 3)), ((5, 64), (70, 1), (1, 0)), ((4, 0), 3, 1), ((1, 1), 1, 0),
])
def test_rolls_read_wrapped_runs_and_match_eager(shape, shifts, dims):
    # A roll's column wraps: kiln reads the two runs either side of the wrap
    # as masked contiguous loads (CpuKernelEmitter::edgedRun); every element
    # must be eager's, for shifts beyond the extent and negative ones.
    x = torch.randn(shape)
    fn = lambda x: torch.roll(x, shifts, dims) * 2
    assert torch.equal(kiln.compile(fn)(x), fn(x))


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced", "empty"])
@pytest.mark.parametrize("shape,factor", [((2, 8, 3, 5), 2), ((1, 18, 4, 7), 3), ((3, 2, 4, 3, 5), 2),
                                          ((4, 3, 5), 2), ((2, 4, 3, 3), 1)])
def test_pixel_shuffles_are_index_maps_that_fuse(shape, factor, layout):
    # pixel_shuffle, pixel_unshuffle and channel_shuffle are copies through
    # an index map,
    # fused with what reads them (one kernel, no call into torch): eager's
    # values and strides (a channels-last input keeps its format, an empty
    # one takes torch's CPU shortcuts: unshuffle returns its input's sizes).
    x = torch.randn(shape)
    if layout == "channels_last" and x.dim() == 4:
        x = x.to(memory_format=torch.channels_last)
    elif layout == "sliced":
        x = torch.randn(shape[:-1] + (shape[-1] * 2,))[..., ::2]
    elif layout == "empty":
        x = torch.randn((0,) + shape[1:])
    for fn in (lambda x: F.pixel_shuffle(x, factor).relu() * 2,
               lambda x: F.pixel_unshuffle(F.pixel_shuffle(x, factor) + 1, factor),
               lambda x: F.pixel_unshuffle(x.transpose(-1, -2), 1) - x.transpose(-1, -2),
               lambda x: (lambda y: F.channel_shuffle(y, 2 - y.shape[1] % 2))(F.pixel_shuffle(x, factor))):
        compiled = kiln.compile(fn)
        actual, expected = compiled(x), fn(x)
        assert actual.shape == expected.shape and actual.stride() == expected.stride()
        assert torch.equal(actual, expected)
        if x.numel():
            runner = kiln.cache_info(compiled)["runners"][0]
            assert runner.startswith("native: 1 kernel(s), 0 extern"), runner


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64])
def test_integer_divisions_by_a_nonzero_number_are_kernels(dtype):
    # x % 10, x // 2, fmod and div with a rounding mode over integers, by a
    # number: no zero divisor can reach eager's ZeroDivisionError, so they
    # are kernels (Python's floor rounding, C's truncation for fmod and
    # trunc), with eager's values at the type's extremes too.
    info = torch.iinfo(dtype)
    x = torch.cat([torch.arange(-20, 21).clamp(info.min, info.max),
                   torch.tensor([info.min, info.min + 1, info.max, info.max - 1])]).to(dtype)
    x = x.view(5, -1)[:, ::2]  # not contiguous
    divisors = [1, 2, 3, 7, 100] + ([] if dtype == torch.uint8 else [-1, -2, -3, -7])
    for d in divisors:
        for fn in (lambda x: x % d, lambda x: x // d, lambda x: torch.fmod(x, d),
                   lambda x: torch.remainder(x, d), lambda x: torch.div(x, d, rounding_mode="floor"),
                   lambda x: torch.div(x, d, rounding_mode="trunc")):
            compiled = kiln.compile(fn)
            expected, actual = fn(x), compiled(x)
            assert actual.dtype == expected.dtype and torch.equal(actual, expected), (d, x, actual, expected)
            runner = kiln.cache_info(compiled)["runners"][0]
            assert "0 extern" in runner, runner
    # A zero divisor raises eager's error.
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        kiln.compile(lambda x: x % 0)(x)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_reflected_and_replicated_pads_are_kernels(mode, layout):
    # reflection_pad{1,2,3}d and replication_pad{1,2,3}d read the input
    # through reflected or clamped positions: one kernel, eager's values and
    # strides (channels-last kept), negative pads trimming, pads as wide as
    # the input allows; too wide a reflection raises eager's error.
    cases = [((2, 3, 5, 6), (1, 2, 2, 1)), ((2, 3, 5, 6), (0, 0, 4, 4)), ((3, 5, 6), (1, 2)),
             ((2, 3, 7), (3, 2)), ((2, 3, 4, 5, 6), (1, 1, 2, 0, 3, 1)), ((2, 3, 5, 6), (-1, 2, 0, 1)),
             ((1, 1, 3, 3), (2, 2, 2, 2)), ((1, 2, 9, 1), (0, 0, 3, 3)), ((2, 4, 20, 40), (3, 3, 1, 1))]
    for shape, pad in cases:
        x = torch.randn(shape)
        if layout == "channels_last" and x.dim() == 4:
            x = x.to(memory_format=torch.channels_last)
        elif layout == "sliced":
            x = torch.randn(shape[:-1] + (shape[-1] * 2,))[..., ::2]
        fn = lambda x: F.pad(x, pad, mode=mode) * 2  # noqa: E731
        compiled = kiln.compile(fn)
        expected, actual = fn(x), compiled(x)
        assert actual.stride() == expected.stride() and torch.equal(actual, expected), (shape, pad)
        runner = kiln.cache_info(compiled)["runners"][0]
        assert runner.startswith("native: 1 kernel(s), 0 extern"), runner
    x = torch.randn(1, 1, 3, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(x, (3, 0, 0, 0), mode="reflect")
    if mode == "reflect":
        with pytest.raises(RuntimeError, match="Padding size should be less than"):
            kiln.compile(lambda x: F.pad(x, (3, 0, 0, 0), mode="reflect"))(x)


def test_pixel_shuffles_of_bad_shapes_raise_eagers_errors():
    for fn, x in ((lambda x: F.pixel_shuffle(x, 2), torch.randn(2, 5, 3, 3)),
                  (lambda x: F.pixel_shuffle(x, 0), torch.randn(2, 4, 3, 3)),
                  (lambda x: F.pixel_unshuffle(x, 2), torch.randn(2, 4, 3, 4)),
                  (lambda x: F.pixel_shuffle(x, 2), torch.randn(8, 3)),
                  (lambda x: F.channel_shuffle(x, 2), torch.randn(2, 5, 3, 3)),
                  (lambda x: F.channel_shuffle(x, 0), torch.randn(2, 4, 3, 3)),
                  (lambda x: F.channel_shuffle(x, 2), torch.randn(2, 4))):
        with pytest.raises(RuntimeError) as eager:
            fn(x)
        with pytest.raises(RuntimeError, match=re.escape(str(eager.value).splitlines()[0])):
            kiln.compile(fn)(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bfloat16, torch.bool])
def test_reductions_into_few_points_split_across_threads_and_match_eager(dtype):
    # A reduction into fewer points than threads (a whole tensor's sum, the
    # norms of a few rows) runs as partials over chunks that the threads
    # share, then a kernel combining them (splitReductionsForCpu); with two
    # threads or more every one of these splits. Values as eager's within
    # a float sum's reordering; integers and booleans exactly.
    kiln._C.set_num_threads(4)
    try:
        big = _random_of(dtype, (1024, 300))
        strided = _random_of(dtype, (600, 1024)).t()  # not contiguous
        rows = _random_of(dtype, (3, 65536))
        cases = [(lambda x: x.sum(), big), (lambda x: x.sum(), strided),
                 (lambda x: x.amax(), big), (lambda x: x.amin(), strided),
                 (lambda x: x.sum(1), rows), (lambda x: x.amax(1), rows),
                 (lambda x: x.sum(dtype=torch.int64) if not x.is_floating_point() else x.sum(), big)]
        if dtype.is_floating_point:
            cases += [(lambda x: x.mean(), big), (lambda x: x.float().norm(), strided),
                      (lambda x: x.var(), big), (lambda x: (x * 2).exp().mean(1), rows),
                      (lambda x: (1 + x.float() * 1e-3).prod(), big)]
        if dtype == torch.bool:
            cases = [(lambda x: x.any(), big), (lambda x: x.all(), strided),
                     (lambda x: x.sum(), big), (lambda x: x.any(1), rows)]
        for fn, x in cases:
            got, want = kiln.compile(fn)(x), fn(x)
            if dtype.is_floating_point:
                tolerance = dict(rtol=1e-2, atol=1e-1) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-3)
                torch.testing.assert_close(got, want, **tolerance)
            else:
                assert torch.equal(got, want), (got, want)
    finally:
        kiln._C.set_num_threads(0)


def test_embeddings_of_input_ids_and_positions_are_kernels_and_raise_as_torch():
    # Rows read at ids that are an input or a view of one (the elements read
    # checked by the runtime before the kernel that reads them) or at an
    # arange's positions (in range by construction) are kernels, fused with
    # what follows; an id out of range, negative ones included, raises
    # torch's IndexError, after the ops before it have run as in eager, and
    # one outside the view read raises nothing, as in eager. Ids computed in
    # the graph are realized and checked the same way.
    table, positions = torch.randn(100, 16), torch.randn(64, 16)

    def embed(ids):
        x = F.embedding(ids, table) + F.embedding(torch.arange(ids.shape[-1]), positions)
        return F.layer_norm(x, (16,))

    def select(x, rows):
        return x.index_select(0, rows) * 2

    def computed(ids):
        return F.embedding(ids % 100, table)

    def part(ids):
        return F.embedding(ids[:, :5], table)

    def after_a_write(y, ids):
        y.add_(1)
        return F.embedding(ids, table) * 2

    ids = torch.randint(0, 100, (4, 32))
    cases = [(embed, (ids,), True), (embed, (ids.to(torch.int32).t().contiguous().t(),), True),
             (select, (torch.randn(50, 8), torch.randint(0, 50, (20,))), True),
             (computed, (ids * 3,), True), (part, (ids,), True)]
    for fn, args, native in cases:
        compiled = kiln.compile(fn)
        assert_close(compiled(*args), fn(*args))
        runner = kiln.cache_info(compiled)["runners"][0]
        assert (" 0 extern" in runner) == native, (fn.__name__, runner)
    shifted = kiln.compile(lambda ids: F.embedding(ids - 50, table) * 2)
    assert_close(shifted(ids + 50), F.embedding(ids, table) * 2)
    with pytest.raises(IndexError, match="index out of range in self"):
        shifted(ids)
    compiled_embed, compiled_select = kiln.compile(embed), kiln.compile(select)
    compiled_embed(ids)
    compiled_select(torch.randn(50, 8), torch.randint(0, 50, (20,)))
    for bad in (100, -1):
        wrong = ids.clone()
        wrong[2, 7] = bad
        with pytest.raises(IndexError, match="index out of range in self"):
            compiled_embed(wrong)
        with pytest.raises(IndexError, match="index out of range in self"):
            compiled_select(torch.randn(50, 8), torch.tensor([0, 50 if bad > 0 else -1]))
    compiled_part = kiln.compile(part)
    outside = ids.clone()
    outside[:, 5:] = 1000
    assert_close(compiled_part(outside), part(outside))
    outside[0, 4] = 1000
    with pytest.raises(IndexError, match="index out of range in self"):
        compiled_part(outside)
    compiled_write = kiln.compile(after_a_write)
    compiled_write(torch.zeros(3), ids)
    y = torch.zeros(3)
    with pytest.raises(IndexError):
        compiled_write(y, torch.full((4, 32), 100))
    assert torch.equal(y, torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64,
                                   torch.bool])
def test_cumulative_sums_and_products_are_kernels(dtype):
    # cumsum and cumprod along any dim as two reduction kernels (blocks of
    # about sqrt(n) elements, then each element from the blocks before its
    # own and its block's elements up to it): eager's values (float32
    # accumulated in float64 as eager's CPU kernel does, integers in int64
    # and wrapping alike), eager's dtypes (integers and bool to int64, a
    # requested dtype), contiguous results of strided inputs, edge sizes.
    def sample(shape):
        if dtype == torch.bool:
            return torch.randn(shape) > 0
        if dtype.is_floating_point:
            return (torch.randn(shape) * 1.5).to(dtype)
        return torch.randint(-9, 10, shape, dtype=dtype)
    cases = [((7,), 0), ((4, 130), 1), ((130, 3), 0), ((2, 3, 50), 1), ((1,), 0), ((3, 17), -1),
             ((2, 1, 5), 1), ((0, 5), 1), ((5, 0), 1), ((), 0)]
    for shape, dim in cases:
        base = sample(shape + (2,))
        for x in (base[..., 0], base[..., 1].contiguous()):
            fns = [lambda x: torch.cumsum(x, dim) * 2, lambda x: x.cumsum(dim, dtype=torch.float64)]
            if dtype != torch.bool:
                fns.append(lambda x: torch.cumprod(x, dim) + 1)
            for fn in fns:
                compiled = kiln.compile(fn)
                expected, actual = fn(x), compiled(x)
                assert actual.dtype == expected.dtype and actual.stride() == expected.stride(), shape
                tolerance = dict(rtol=2e-3, atol=2e-3) if dtype == torch.float16 else {}
                assert_close(actual, expected, **tolerance, equal_nan=True)
                if x.numel() and x.dim():  # torch runs a 0-d tensor's dim ops
                    runner = kiln.cache_info(compiled)["runners"][0]
                    assert "0 extern" in runner, (shape, runner)


def test_cumulative_sums_wrap_products_of_specials_and_positions_of_masks():
    # int64 sums wrap as eager's sequential ones; products through 0, inf
    # and NaN give eager's NaN, inf and 0; the positions of an attention
    # mask, (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1), fuse into
    # kernels; a scan too long to pay for as reductions calls torch where
    # torch runs, and the same function exports (natively) all the same.
    big = torch.tensor([2**62, 2**62, 2**62, -5, 7], dtype=torch.int64)
    assert torch.equal(kiln.compile(lambda x: x.cumsum(0))(big), big.cumsum(0))
    specials = torch.tensor([[2.0, 0.0, float("inf"), 3.0], [float("nan"), 1.0, 2.0, 0.5],
                             [float("inf"), -1.0, 0.0, 4.0]])
    for dim in (0, 1):
        fn = lambda x: x.cumprod(dim)  # noqa: E731
        assert_close(kiln.compile(fn)(specials), fn(specials), equal_nan=True)
    mask = torch.ones(4, 128, dtype=torch.int64)
    mask[1, :17] = 0
    mask[3, 100:] = 0
    positions = lambda m: (m.cumsum(-1) - 1).masked_fill(m == 0, 1)  # noqa: E731
    compiled = kiln.compile(positions)
    assert torch.equal(compiled(mask), positions(mask))
    assert "0 extern" in kiln.cache_info(compiled)["runners"][0]
    long_rows = torch.randn(64, 4096)
    fn = lambda x: x.cumsum(1) * 2  # noqa: E731
    compiled = kiln.compile(fn)
    assert_close(compiled(long_rows), fn(long_rows))
    assert "1 extern(s) [aten::cumsum]" in kiln.cache_info(compiled)["runners"][0]


def test_a_long_cumulative_sum_exports_as_kernels(tmp_path):
    x = torch.randn(8, 3000)
    fn = lambda x: torch.cumsum(x, 1) / 3  # noqa: E731
    kiln.export(fn, (x,), str(tmp_path), name="scan")
    exported = kiln.load_exported(str(tmp_path), "scan")
    x = torch.randn(8, 3000)
    result = exported(x)
    result = result[0] if isinstance(result, (tuple, list)) else result
    assert_close(result, fn(x), rtol=1e-5, atol=1e-4)


def test_advanced_indexing_with_computed_positions_is_a_kernel():
    # x[i, j] with integer index tensors (aten::index.Tensor): the index
    # tensors broadcast, replace adjacent indexed dims in place or lead the
    # result where separated; one kernel where their values are known in
    # range (aranges, shifted, viewed, a buffer of one that several readers
    # share: a mask builder's positions, constants), eager's values and
    # strides.
    x = torch.randn(5, 6, 7)
    two_readers = lambda x: (lambda b, q: x[b, q] + x[b, q].exp() * x[q, b])(  # noqa: E731
        torch.arange(4)[:, None, None], torch.arange(5)[None, :, None])
    cases = [lambda x: x[torch.arange(3)] * 2,
             lambda x: x[torch.arange(3) + 1, torch.arange(3) * 2],
             lambda x: x[:, torch.arange(4).view(2, 2)],
             lambda x: x[:, :, torch.arange(5) + 2],
             lambda x: x[torch.arange(2).view(2, 1), :, torch.arange(3).view(1, 3)],
             lambda x: x.transpose(0, 2)[torch.arange(3)],
             lambda x: x[torch.arange(4).view(4, 1, 1, 1), torch.arange(6).view(1, 1, 6, 1)],
             lambda x: x[torch.tensor([0, 4, 2])] * 2,  # constants, negative ones too
             lambda x: x[:, torch.tensor([[-1, 0], [5, -6]])],
             lambda x: x[torch.tensor([1, 2], dtype=torch.int32)],
             two_readers]
    for fn in cases:
        compiled = kiln.compile(fn)
        expected, actual = fn(x), compiled(x)
        assert actual.stride() == expected.stride()
        assert_close(actual, expected)
        assert "0 extern" in kiln.cache_info(compiled)["runners"][0]
    # An input's positions, negative ones counted from the end as eager
    # does, are checked before the kernel runs: one kernel, eager's values
    # and eager's IndexError. Computed positions not proven in range are
    # realized and checked the same way.
    for fn, args in ((lambda x, i: x[i, i], (x, torch.tensor([-1, 0, 4]))),
                     (lambda x, i: x[:, i] * 2, (x, torch.tensor([[5, -6], [0, 1]]))),
                     (lambda x, i: x[i[:, :1], 2:, i[:, 1:]], (x, torch.tensor([[4, -7], [-5, 6]])))):
        compiled = kiln.compile(fn)
        assert torch.equal(compiled(*args), fn(*args))
        assert "0 extern" in kiln.cache_info(compiled)["runners"][0]
    for i in (torch.tensor([0, 5]), torch.tensor([-6, 1])):
        with pytest.raises(IndexError) as eager:
            x[i, i]
        with pytest.raises(IndexError, match=re.escape(str(eager.value))):
            kiln.compile(lambda x, i: x[i, i])(x, i)
    computed = lambda x: x[torch.arange(3) - 2]  # noqa: E731
    compiled = kiln.compile(computed)
    assert torch.equal(compiled(x), computed(x))
    assert "0 extern" in kiln.cache_info(compiled)["runners"][0]
    too_far = lambda x: x[torch.arange(3) * 4 - 2] * 2  # noqa: E731
    with pytest.raises(IndexError) as eager:
        too_far(x)
    with pytest.raises(IndexError, match=re.escape(str(eager.value))):
        kiln.compile(too_far)(x)
    with pytest.raises(IndexError, match="out of bounds"):
        kiln.compile(lambda x: x[torch.tensor([7])])(x)


def test_advanced_indexing_exports_and_counts_negative_positions_from_the_end(tmp_path):
    # The exported run counts negative positions from the end and refuses
    # one out of [-size, size) with an error, as eager raises.
    x, i = torch.randn(5, 6), torch.tensor([[4, -1], [0, -5]])
    fn = lambda x, i: x[i] * 2  # noqa: E731
    kiln.export(fn, (x, i), str(tmp_path), name="gather_rows")
    exported = kiln.load_exported(str(tmp_path), "gather_rows")
    result = exported(x, i)
    result = result[0] if isinstance(result, (tuple, list)) else result
    assert torch.equal(result, fn(x, i))
    with pytest.raises(RuntimeError, match="index -6 is out of bounds for dimension 0 with size 5"):
        exported(x, torch.tensor([[1, -6], [0, 2]]))


def test_losses_and_gathers_of_input_positions_are_kernels():
    # nll_loss (cross_entropy's second half) and gather read at positions an
    # input holds: checked before the kernel runs, they are kernels, with
    # eager's error for one out of range (ignore_index passes).
    F = torch.nn.functional
    logits, weight = torch.randn(6, 5), torch.rand(5)
    targets = torch.tensor([0, 4, -100, 2, 3, 1])
    cases = [
        (lambda x, t: F.cross_entropy(x, t), (logits, targets)),
        (lambda x, t, w: F.cross_entropy(x, t, weight=w, reduction="sum"), (logits, targets, weight)),
        (lambda x, t, w: F.nll_loss(x, t, weight=w, reduction="none"), (logits, targets, weight)),
        (lambda x, t: F.cross_entropy(x, t, ignore_index=4, label_smoothing=0.2), (logits, targets.abs() % 5)),
        (lambda x, t: F.cross_entropy(x.t(), t[::2]), (torch.randn(5, 6), targets.repeat(2))),
        (lambda x, t: F.cross_entropy(x, t), (torch.randn(2, 5, 3, 4), torch.randint(0, 5, (2, 3, 4)))),
        (lambda x, t: F.cross_entropy(x, t), (torch.randn(5), torch.tensor(3))),
        (lambda x, t: F.cross_entropy(x, t), (logits, torch.full((6,), -100))),  # NaN, as eager
        (lambda x, t: F.cross_entropy(x, t, reduction="sum"), (torch.randn(0, 5), targets[:0])),
        (lambda x, i: torch.gather(x, 1, i) * 2, (logits, torch.randint(0, 5, (6, 7)))),
        (lambda x, i: x.t().gather(0, i[:, ::2]), (logits, torch.randint(0, 5, (3, 8)))),
    ]
    for fn, args in cases:
        compiled = kiln.compile(fn)
        assert_close(compiled(*args), fn(*args), equal_nan=True)
        assert "0 extern" in kiln.cache_info(compiled)["runners"][0], fn
    for fn, args in ((cases[0][0], (logits, torch.tensor([0, 5, 1, 1, 1, 1]))),
                     (cases[0][0], (logits, torch.tensor([0, -1, 1, 1, 1, 1]))),
                     (cases[-2][0], (logits, torch.tensor([[0, 5]]))),
                     (cases[-2][0], (logits, torch.tensor([[-1]]))),
                     (cases[1][0], (logits, targets, weight.double()))):
        with pytest.raises((IndexError, RuntimeError)) as eager:
            fn(*args)
        with pytest.raises(type(eager.value), match=re.escape(str(eager.value))):
            kiln.compile(fn)(*args)


def test_a_classification_loss_exports_and_refuses_a_target_out_of_range(tmp_path):
    logits, targets = torch.randn(4, 3), torch.tensor([2, -100, 0, 1])
    fn = lambda x, t: torch.nn.functional.cross_entropy(x, t)  # noqa: E731
    kiln.export(fn, (logits, targets), str(tmp_path), name="loss")
    exported = kiln.load_exported(str(tmp_path), "loss")
    result = exported(logits, targets)
    result = result[0] if isinstance(result, (tuple, list)) else result
    assert_close(result, fn(logits, targets))
    with pytest.raises(RuntimeError, match="Target 3 is out of bounds"):
        exported(logits, torch.tensor([2, 3, 0, 1]))
