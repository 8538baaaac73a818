# The CPU backend on the layouts eager torch must handle: contiguous,
# transposed, sliced, broadcast, expanded, empty, size-1 and NaN/Inf inputs,
# for pointwise ops, reductions and normalizations, over the float dtypes;
# plus fusion as a user sees it (kernel counts) and outputs that alias.
import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import kiln
import torch._prims_common as _prims

# torch 2.13 names it `..._or_false`; 2.11 (the GPU machine) without the suffix.
is_non_overlapping_and_dense = getattr(_prims, "is_non_overlapping_and_dense_or_false", None) or \
    getattr(_prims, "is_non_overlapping_and_dense")


def layouts(shape, dtype):
    """(name, tensor) pairs of one logical shape in different layouts."""
    full = torch.randn(*shape).to(dtype)
    yield "contiguous", full
    yield "transposed", torch.randn(*reversed(shape)).to(dtype).permute(*reversed(range(len(shape))))
    yield "sliced", torch.randn(*shape[:-1], shape[-1] * 2).to(dtype)[..., ::2]
    yield "expanded", torch.randn(1, *shape[1:]).to(dtype).expand(*shape)
    special = full.clone()
    flat = special.view(-1)
    flat[::3] = float("nan")
    flat[1::5] = float("inf")
    flat[2::7] = -float("inf")
    yield "nan_inf", special
    yield "size1", torch.randn(1, *shape[1:]).to(dtype)
    yield "empty", torch.randn(0, *shape[1:]).to(dtype)


UNARY = {
    "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
    "log1p": lambda x: torch.log1p(x.abs()), "relu": F.relu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "sqrt_abs": lambda x: torch.sqrt(x.abs()), "chain": lambda x: ((x * 2 + 1).sin() - x.cos()).abs(),
    "clamp": lambda x: x.clamp(-0.5, 0.5), "round": torch.round, "sign": torch.sign,
}
BINARY = {
    "add": torch.add, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
    "pow": lambda a, b: torch.pow(a.abs(), b), "atan2": torch.atan2,
    "where": lambda a, b: torch.where(a > b, a, b), "remainder": torch.remainder,
}
REDUCTIONS = {
    "sum_last": lambda x: x.sum(-1), "sum_first": lambda x: x.sum(0), "sum_all": lambda x: x.sum(),
    "amax": lambda x: x.amax(-1), "mean_keepdim": lambda x: x.mean(0, keepdim=True),
    "var": lambda x: x.var(-1), "argmax": lambda x: x.argmax(-1),
    "softmax": lambda x: x.softmax(-1), "log_softmax": lambda x: x.log_softmax(0),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "logsumexp": lambda x: x.logsumexp(-1),
}
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: {},
             torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}


def check(fn, *inputs, dtype, expected=None):
    if expected is None:
        expected = fn(*inputs)
    compiled = kiln.compile(fn, fullgraph=True)
    actual = compiled(*inputs)
    assert_close(actual, expected, equal_nan=True, **TOLERANCE[dtype])
    if expected.numel() > 1 and is_non_overlapping_and_dense(expected):
        assert actual.stride() == expected.stride()
    runner = kiln.cache_info(compiled)["runners"][0]
    assert runner.startswith("native"), runner
    return runner


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_layouts(name, dtype):
    for layout, x in layouts((6, 37), dtype):
        expected = UNARY[name](x)
        # torch 2.11's AVX-512 gelu gives NaN for +inf (its float64 and
        # scalar paths give inf): where eager makes a NaN of a number, the
        # float64 result is the reference.
        exact = UNARY[name](x.double()).to(dtype)
        expected = torch.where(expected.isnan() & ~x.isnan(), exact, expected)
        check(UNARY[name], x, dtype=dtype, expected=expected)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_layouts_and_broadcast(name, dtype):
    for layout, x in layouts((5, 19), dtype):
        check(BINARY[name], x, torch.randn(x.shape).to(dtype), dtype=dtype)
        check(BINARY[name], x, torch.randn(19).to(dtype), dtype=dtype)  # broadcast


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_and_normalizations(name, dtype):
    for layout, x in layouts((7, 130), dtype):
        if layout == "empty" and name in ("amax", "argmax", "softmax", "log_softmax", "logsumexp", "var", "layer_norm"):
            continue
        check(REDUCTIONS[name], x, dtype=dtype)


# Lengths around the code generator's vector widths (one vector, several
# vectors per step, the scalar tail) and its summation blocks.
LENGTHS = [1, 3, 8, 9, 31, 32, 33, 47, 64, 100, 257, 2049, 5000]
REDUCE_OPS = {
    "sum": lambda x, d: x.sum(d), "prod": lambda x, d: (x.sign() * 0.5 + 0.75).prod(d),
    "amax": lambda x, d: x.amax(d), "amin": lambda x, d: x.amin(d),
    "argmax": lambda x, d: x.argmax(d), "argmin": lambda x, d: x.argmin(d),
    "any": lambda x, d: (x > 2).any(d), "all": lambda x, d: (x > -2).all(d),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", list(REDUCE_OPS))
def test_reductions_over_vector_width_boundaries(name, dtype):
    # Values from a few integers, so that arg reductions meet ties (the
    # first position wins) across lanes and accumulators.
    for length in LENGTHS:
        for dim, shape in ((-1, (3, length)), (0, (length, 37))):
            x = torch.randint(-3, 4, shape).to(dtype)
            if dtype.is_floating_point and length > 1:  # NaN wins max/min/arg
                x[(1, length // 2) if dim == -1 else (length // 2, 5)] = float("nan")
                x[(2, length - 1) if dim == -1 else (length - 1, 6)] = float("nan")
            fn = lambda x, name=name, dim=dim: REDUCE_OPS[name](x, dim)
            expected = fn(x)
            compiled = kiln.compile(fn, fullgraph=True)
            assert_close(compiled(x), expected, equal_nan=True, check_dtype=True)
            assert kiln.cache_info(compiled)["runners"][0].startswith("native")


def test_integer_and_bool_ops():
    a = torch.randint(-50, 50, (9, 13), dtype=torch.int32)
    b = torch.randint(-50, 50, (13,), dtype=torch.int64)
    for fn in (lambda a, b: a + b * 3, lambda a, b: (a > b) & (a < 10), lambda a, b: a.abs().sum(-1),
               lambda a, b: torch.maximum(a, b), lambda a, b: (a * 1.5 + b).floor(),
               lambda a, b: a.to(torch.float16) * 2, lambda a, b: (a != 0).any(-1)):
        expected = fn(a, b)
        compiled = kiln.compile(fn)
        assert_close(compiled(a, b), expected)
        assert kiln.cache_info(compiled)["runners"][0].startswith("native")


def kernels_of(compiled):
    runner = kiln.cache_info(compiled)["runners"][0]
    return int(runner.split()[1]), int(runner.split()[3])


def test_fusion_as_a_user_sees_it():
    x = torch.randn(64, 256)
    w = torch.randn(256)
    chain = kiln.compile(lambda x: ((x + 1) * 2).exp().tanh().sigmoid() - x)
    chain(x)
    assert kernels_of(chain) == (1, 0)
    softmax = kiln.compile(lambda x: torch.softmax(x * 0.5, -1))
    softmax(x)
    assert kernels_of(softmax) == (1, 0)
    norm = kiln.compile(lambda x, w: F.layer_norm(x, (256,), w, w) * 2)
    norm(x, w)
    assert kernels_of(norm) == (1, 0)
    # Attention's masked softmax: its reductions run over [batch*heads,
    # rows] once loops coalesce, and its normalising store over the
    # [batch*heads, rows, cols] view the second bmm reads; one kernel
    # between the two products, which are kiln's GEMMs reading the inputs
    # (k transposed) in place.
    mask = torch.ones(32, 32, dtype=torch.bool).tril()

    def attention(q, k, v):
        scores = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores / 4.0, -1) @ v

    q, k, v = (torch.randn(2, 4, 32, 16) for _ in range(3))
    compiled = kiln.compile(attention)
    assert_close(compiled(q, k, v), attention(q, k, v))
    assert kernels_of(compiled) == (3, 0)


def test_outputs_alias_like_eager():
    def f(x):
        y = x * 2
        return y, y.t(), x.t(), x[1:]

    x = torch.randn(4, 6)
    y, yt, xt, xs = kiln.compile(f)(x)
    assert yt.data_ptr() == y.data_ptr() and yt.stride() == (1, 6)
    assert xt.data_ptr() == x.data_ptr() and xs.data_ptr() == x[1:].data_ptr()
    assert_close(yt, (x * 2).t())


def test_large_pointwise_uses_threads_and_matches():
    x = torch.randn(1 << 20)
    fn = kiln.compile(lambda x: torch.tanh(x) * x + 1)
    assert_close(fn(x), torch.tanh(x) * x + 1)


@pytest.mark.parametrize("shape", [(2, 3, 40, 129), (3, 100, 77), (1, 1, 5000, 33)])
def test_kernels_whose_first_loop_is_short_split_over_several(shape):
    # Leading outer loops are flattened into the range the thread pool
    # splits: every point of each must still be computed exactly once.
    def f(x, y):
        return torch.softmax(x, -1) + y.sum(-1, keepdim=True), (x * y).amax(-2)

    kiln._C.set_num_threads(3)
    try:
        x, y = torch.randn(shape), torch.randn(shape).transpose(-1, -2).contiguous().transpose(-1, -2)
        for got, want in zip(kiln.compile(f)(x, y), f(x, y)):
            assert_close(got, want)
    finally:
        kiln._C.set_num_threads(0)


def test_mutation_inside_the_graph_is_seen_by_later_reads():
    def f(x):
        y = x * 2
        z = y + 1
        y.add_(10)
        return z, y * 3

    x = torch.randn(5, 5)
    assert_close(kiln.compile(f)(x), f(x))


def test_extern_between_kernels():
    def f(x, w):
        return torch.relu(torch.sigmoid(x) @ w + 1).sum(-1)

    x, w = torch.randn(16, 32), torch.randn(32, 8)
    compiled = kiln.compile(f)
    assert_close(compiled(x, w), f(x, w))
    assert "extern" in kiln.cache_info(compiled)["runners"][0]


def test_autograd_inputs_run_through_torch():
    x = torch.randn(4, 4, requires_grad=True)
    compiled = kiln.compile(lambda x: (x * 2).sin().sum())
    compiled(x).backward()
    assert_close(x.grad, 2 * torch.cos(2 * x.detach()))
    assert kiln.cache_info(compiled)["runners"][0].startswith("eager")


def test_torch_compile_backend_runs_native():
    from kiln import _backend
    torch._dynamo.reset()
    before = _backend.counters["native_graphs"]
    fn = torch.compile(lambda x: torch.softmax(x, -1) * 3, backend="kiln")
    x = torch.randn(8, 33)
    assert_close(fn(x), torch.softmax(x, -1) * 3)
    assert _backend.counters["native_graphs"] > before


def test_softmax_computes_each_exp_once(capfd, monkeypatch):
    # The sum loop keeps exp(x - max) in a stack array that the store loop
    # reads back; exp appears in the LLVM IR of the sum loop only.
    monkeypatch.setenv("KILN_LOGS", "llvm")
    try:
        compiled = kiln.compile(lambda x: torch.softmax(x, -1), fullgraph=True)
        x = torch.randn(5, 300)
        assert_close(compiled(x), torch.softmax(x, -1))
    finally:
        monkeypatch.delenv("KILN_LOGS")
    ir = capfd.readouterr().err
    assert "%carried = alloca float, i64 300" in ir
    # The store loops of the widths that 300 takes (32 and 8 lanes and a
    # tail of 4 with AVX2; 64 and 16 lanes and a tail of 12 with AVX-512) load what
    # the sum loops stored: at least one vector width and the tail each way.
    assert ir.count("ptr %carried") >= 2 + 2


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: str(d)[6:])
def test_small_matrix_products_are_fused_kernels(dtype):
    a, b = torch.randn(6, 9).to(dtype), torch.randn(11, 9).to(dtype)
    bias = torch.randn(11).to(dtype)
    nan_bias = torch.full((6, 11), float("nan")).to(dtype)
    cases = [
        (lambda a, b, c: torch.relu(F.linear(a, b, c)), (a, b, bias)),
        (lambda a, b, c: torch.addmm(c, a, b.t(), beta=0.5, alpha=2), (a, b, bias)),
        (lambda a, b, c: torch.addmm(c, a, b.t(), beta=0), (a, b, nan_bias)),  # NaN ignored
        (lambda a, b, c: torch.bmm(a.view(2, 3, 9), b[:, :, ::2]), (a, torch.randn(2, 9, 22).to(dtype), bias)),
        (lambda a, b, c: (a[:, :0] @ b[:, :0].t()) + c, (a, b, bias)),  # empty reduction
    ]
    for fn, inputs in cases:
        compiled = kiln.compile(fn, fullgraph=True)
        assert_close(compiled(*inputs), fn(*inputs), equal_nan=True, **TOLERANCE[dtype])
        assert kernels_of(compiled) == (1, 0), kiln.cache_info(compiled)["runners"]


def test_large_matrix_products_run_kilns_gemm():
    # float32 products are kiln's GEMM kernels (the relu computed as the GEMM
    # writes its result); a product with nothing after it writes the result
    # itself, no copy; other dtypes call torch's BLAS.
    a, b = torch.randn(128, 64), torch.randn(64, 96)
    compiled = kiln.compile(lambda a, b: torch.relu(a @ b), fullgraph=True)
    assert_close(compiled(a, b), torch.relu(a @ b))
    assert kernels_of(compiled) == (1, 0)
    plain = kiln.compile(lambda a, b: a @ b.t(), fullgraph=True)
    bt = torch.randn(96, 64)
    assert_close(plain(a, bt), a @ bt.t())
    assert kernels_of(plain) == (1, 0)
    doubles = kiln.compile(lambda a, b: torch.relu(a @ b), fullgraph=True)
    assert_close(doubles(a.double(), b.double()), torch.relu(a.double() @ b.double()))
    assert kernels_of(doubles) == (1, 1)


@pytest.mark.parametrize("case", [
    # input, weight, stride, padding, dilation: windows that do not overlap
    ((2, 3, 32, 32), (64, 3, 8, 8), 8, 0, 1),              # patches, fewer than channels
    ((3, 5, 40), (16, 5, 4), 4, 0, 1),                      # 1-d
    ((2, 2, 8, 8, 8), (32, 2, 4, 4, 4), 4, 0, 1),           # 3-d
    ((4, 4, 20, 20), (16, 4, 2, 3), (5, 4), (1, 0), (2, 1)),  # more windows than channels
], ids=["patches", "1d", "3d", "strided"])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "no_bias"])
def test_non_overlapping_convolutions_run_kilns_gemm(case, layout):
    # A convolution whose windows do not overlap (a vision transformer's
    # patch embedding) is kiln's GEMM over its windows, no call to oneDNN;
    # as a vision transformer reads it (positions, then channels) too.
    shape, weight_shape, stride, padding, dilation = case
    x, w, b = torch.randn(shape), torch.randn(weight_shape), torch.randn(weight_shape[0])
    if layout == "channels_last":
        x = x.transpose(1, -1).contiguous().transpose(1, -1)
    if layout == "no_bias":
        b = None
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(shape)]

    def patches(x, w, b):
        return conv(x, w, b, stride, padding, dilation)

    def tokens(x, w, b):
        return patches(x, w, b).flatten(2).transpose(1, 2) * 2 + 1

    for fn in (patches, tokens):
        compiled = kiln.compile(fn, fullgraph=True)
        assert_close(compiled(x, w, b), fn(x, w, b), rtol=1e-4, atol=1e-4)
        assert kiln.cache_info(compiled)["runners"][0].endswith(" 0 extern(s)")


def test_overlapping_convolutions_call_onednn():
    x = torch.randn(2, 8, 16, 16)
    w = torch.randn(16, 8, 3, 3)
    compiled = kiln.compile(lambda x, w: F.conv2d(x, w), fullgraph=True)
    assert_close(compiled(x, w), F.conv2d(x, w), rtol=1e-4, atol=1e-4)
    assert not kiln.cache_info(compiled)["runners"][0].endswith(" 0 extern(s)")


@pytest.mark.parametrize("case", [
    # input, weight, stride, padding, dilation
    ((4, 32, 56, 56), (64, 32, 3, 3), 1, 1, 1),     # the bench's conv block
    ((2, 5, 17, 16), (13, 5, 3, 3), 1, 1, 1),       # odd sizes
    ((1, 3, 20, 20), (8, 3, 5, 5), 1, 2, 1),        # 3 channels, 5x5
    ((1, 4, 16, 18), (6, 4, 3, 3), 1, 2, 2),        # dilated, "same"
    ((2, 8, 34, 34), (128, 8, 3, 3), 2, 1, 1),      # stride 2: gathers
    ((2, 6, 19, 23), (128, 6, 3, 3), 1, 0, 1),      # no padding: gathers
    ((2, 6, 300), (7, 6, 5), 1, 2, 1),              # 1-d
    ((1, 2, 8, 8, 8), (4, 2, 3, 3, 3), 1, 1, 1),    # 3-d
], ids=["block", "odd", "5x5", "dilated", "stride2", "valid", "1d", "3d"])
@pytest.mark.parametrize("form", ["bias", "batch_norm", "residual", "view"])
def test_convolutions_of_nchw_inputs_run_kilns_gemm_over_their_windows(case, form):
    # A convolution of several taps over an NCHW input with many positions
    # is kiln's GEMM over the input's windows where they are (no columns,
    # no call to oneDNN), its bias, a batch norm and ReLU, or a residual
    # add computed as it writes the result; a view of an input (a slice, a
    # transpose) is read through its strides. Eager's values and strides.
    shape, weight_shape, stride, padding, dilation = case
    torch.manual_seed(len(shape) * 100 + weight_shape[0])
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(shape)]
    channels = weight_shape[0]
    x, w, b = torch.randn(shape), torch.randn(weight_shape) / 4, torch.randn(channels)
    mean, var = torch.randn(channels), torch.rand(channels) + 0.5
    if form == "view":
        x = torch.randn(*shape[:-1], shape[-1] + 3)[..., 1:-2]
        if len(shape) == 4:
            x = torch.randn(shape[0], shape[1], shape[3], shape[2]).transpose(2, 3)
    residual = torch.randn_like(conv(x, w, b, stride, padding, dilation))

    def block(x, w, b, mean, var, residual):
        y = conv(x, w, b, stride, padding, dilation)
        if form == "batch_norm":
            return F.relu(F.batch_norm(y, mean, var, None, None, False, 0.1, 1e-5))
        if form == "residual":
            return F.relu(y + residual)
        return y

    args = (x, w, b, mean, var, residual)
    compiled = kiln.compile(block, fullgraph=True)
    for fresh in range(2):
        actual, expected = compiled(*args), block(*args)
        assert_close(actual, expected, rtol=1e-4, atol=1e-4)
        assert actual.stride() == expected.stride()
        args = (torch.randn_like(x), *args[1:])
        if form == "view":
            args = (x + 1, *args[1:])
    kernels, externs = kernels_of(compiled)
    assert externs == 0
    assert kernels <= 2   # the product (and a batch norm's scale and shift)


def test_stacked_convolutions_over_windows_pass_nchw_results_on():
    # conv, batch norm, ReLU twice and a residual add: each convolution
    # kiln's GEMM over the windows of the NCHW result before it, its batch
    # norm and ReLU (and the residual add) its epilogue.
    torch.manual_seed(3)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16)).eval()
    with torch.no_grad():
        for norm in (block[1], block[4]):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)

    def residual(x):
        y = block(x)
        return torch.relu(y + y.mean())

    x = torch.randn(2, 8, 20, 18)
    compiled = kiln.compile(block, fullgraph=True)
    with torch.no_grad():
        assert_close(compiled(x), block(x), rtol=1e-4, atol=1e-4)
        assert kernels_of(compiled)[1] == 0
        summed = kiln.compile(residual, fullgraph=True)
        assert_close(summed(x), residual(x), rtol=1e-4, atol=1e-4)


def test_a_convolution_before_a_pool_stays_with_onednn_channels_last():
    # A pool's windows read channels as vectors from oneDNN's channels-last
    # result; from kiln's NCHW one its stride-2 windows would gather.
    x, w = torch.randn(2, 8, 32, 32), torch.randn(16, 8, 3, 3)

    def stem(x, w):
        return F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 3, 2, 1)

    compiled = kiln.compile(stem, fullgraph=True)
    assert_close(compiled(x, w), stem(x, w), rtol=1e-4, atol=1e-4)
    assert kernels_of(compiled)[1] == 1


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("shape", [(8, 32, 14, 14), (1, 3, 5, 7), (3, 17, 9, 2)])
def test_pointwise_filters_run_kilns_gemm_with_batch_norm_as_its_epilogue(layout, stride, shape):
    # A 1x1 convolution is kiln's GEMM over the input's positions (no call
    # to oneDNN), the batch norm (running statistics) and ReLU after it
    # computed as the GEMM writes the result: with a channels-last input at
    # stride 1, the batch norm's per-channel scale and shift and the product
    # are the only kernels. Values and strides as eager's.
    channels, out_channels = shape[1], 24
    x = torch.randn(shape)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    w = torch.randn(out_channels, channels, 1, 1)
    mean, var = torch.randn(out_channels), torch.rand(out_channels) + 0.5
    gamma, beta = torch.randn(out_channels), torch.randn(out_channels)

    def block(x, w, mean, var, gamma, beta):
        y = F.conv2d(x, w, stride=stride)
        return F.relu(F.batch_norm(y, mean, var, gamma, beta, False, 0.1, 1e-5))

    args = (x, w, mean, var, gamma, beta)
    compiled = kiln.compile(block, fullgraph=True)
    actual, expected = compiled(*args), block(*args)
    assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert actual.stride() == expected.stride()
    assert kiln.cache_info(compiled)["runners"][0].endswith(" 0 extern(s)")
    large = shape[0] * shape[2] * shape[3] * 24 * channels > 8192
    if layout == "channels_last" and stride == 1 and large:
        assert kernels_of(compiled) == (2, 0)
    if layout == "contiguous" and large:
        # The input's columns (channels innermost) computed from its ReLU
        # as they are written (no kernel of its own), the product, its copy
        # into NCHW (where that is no epilogue of the product).
        rectified = kiln.compile(lambda x, w: F.conv2d(torch.relu(x), w, stride=stride))
        assert_close(rectified(x, w), F.conv2d(torch.relu(x), w, stride=stride), rtol=1e-4, atol=1e-4)
        kernels, externs = kernels_of(rectified)
        assert kernels <= 3 and externs == 0


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


@pytest.mark.parametrize("batch, heads, kv_heads, length, width", [
    (2, 4, 2, 32, 16), (1, 3, 3, 7, 8), (2, 2, 1, 65, 4), (1, 1, 1, 1, 2)])
def test_attention_operands_computed_in_their_sources_order(batch, heads, kv_heads, length, width):
    # Attention with rotary embeddings and grouped keys, as transformers
    # write it: k's rotated, repeated transpose is computed into the GEMM's
    # operand in k's own order (the GEMM then reads it transposed), so the
    # results must match eager for every shape, odd and size-1 ones included.
    def attention(q, k, v, cos, sin):
        q = rotary(q, cos, sin)
        k = rotary(k, cos, sin)
        groups = q.shape[1] // k.shape[1]
        k = k[:, :, None].expand(-1, -1, groups, -1, -1).reshape(q.shape[0], -1, *k.shape[2:])
        v = v[:, :, None].expand(-1, -1, groups, -1, -1).reshape(q.shape[0], -1, *v.shape[2:])
        scores = (q @ k.transpose(-1, -2)) * width ** -0.5
        return scores.softmax(-1) @ v
    compiled = kiln.compile(attention, fullgraph=True)
    for _ in range(2):
        # q, k and v as a projection's output viewed as heads: transposed.
        q = torch.randn(batch, length, heads, width).transpose(1, 2)
        k = torch.randn(batch, length, kv_heads, width).transpose(1, 2)
        v = torch.randn(batch, length, kv_heads, width).transpose(1, 2)
        cos, sin = torch.randn(length, width), torch.randn(length, width)
        assert_close(compiled(q, k, v, cos, sin), attention(q, k, v, cos, sin),
                     rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, k, n", [(7, 1024, 65), (65, 2048, 7), (1, 1024, 1), (33, 3072, 40)])
def test_computed_operands_with_rows_4_kib_apart(m, k, n):
    # An operand computed for the GEMM whose rows are a multiple of 4 KiB
    # long gets a line of padding per row (read in place by the GEMM): the
    # products must not see it, as A, as B and transposed.
    compiled = kiln.compile(lambda a, b, c: (F.gelu(a) @ b, torch.exp(c).t() @ a.t()),
                            fullgraph=True)
    for _ in range(2):
        a, b, c = torch.randn(m, k), torch.randn(k, n), torch.randn(k, m) / 4
        got, want = compiled(a, b, c), (F.gelu(a) @ b, torch.exp(c).t() @ a.t())
        for x, y in zip(got, want):
            assert_close(x, y, rtol=1e-4, atol=1e-4)


def test_pointwise_after_a_product_runs_in_the_gemms_epilogue():
    # A bias, a ReLU, a scale and a residual add after a float32 product are
    # computed as kiln's GEMM writes its result (one kernel), at odd sizes,
    # with k split in blocks (1000), transposed and broadcast operands; so
    # are GELU's erfc and a SwiGLU's SiLU (costly: over the stored tile of C
    # once, after its last k block); where the epilogue reads the tensor the
    # product lands in, it stays apart.
    def relu_mlp(x, w, b):
        return F.relu(F.linear(x, w, b))

    def residual(x, w, r):
        return torch.clamp(x @ w, -1, 1) * r + 1

    def scaled(a, b, bias):
        return torch.bmm(a, b) * 0.125 + bias

    def gelu_mlp(x, w, b):
        return F.gelu(F.linear(x, w, b))

    def swiglu(x, gate, up):
        return F.silu(x @ gate) * (x @ up)

    def gated_residual(x, w, r):
        return torch.sigmoid(x @ w) * r + F.softplus(r)

    for m, k, n in [(1, 64, 300), (7, 1000, 65), (65, 257, 33), (13, 7, 1000)]:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        r = torch.randn(m, n)
        cases = [(relu_mlp, (x, w, b), 1), (residual, (x, w.t(), r), 1),
                 (residual, (x.t().contiguous().t(), w.t().contiguous(), r[:1]), 1),
                 (scaled, (torch.randn(3, m, k), torch.randn(3, k, n), torch.randn(m, n)), 1),
                 (gelu_mlp, (x, w, b), 1),
                 (gelu_mlp, (x.t().contiguous().t(), w[:, :1].expand(n, k), b), 1),
                 (swiglu, (x, w.t(), torch.randn(k, n)), 2),
                 (gated_residual, (x, w.t(), r), 1)]
        for fn, args, kernels in cases:
            compiled = kiln.compile(fn, fullgraph=True)
            assert_close(compiled(*args), fn(*args), rtol=1e-4, atol=1e-4)
            assert kernels_of(compiled) == (kernels, 0), (fn.__name__, m, k, n)

    def unrelated_between(x, w, a):
        # The kernel right after the product does not read it: no epilogue
        # (its reader, the transpose copy, comes later).
        y = x @ w
        return a * 2, y.t().contiguous()

    x, w, a = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64, 64)
    for actual, expected in zip(kiln.compile(unrelated_between)(x, w, a), unrelated_between(x, w, a)):
        assert_close(actual, expected)

    def into_residual(x, w):
        x.add_(torch.relu(x @ w))
        return x

    x, w = torch.randn(64, 64), torch.randn(64, 64)
    expected = into_residual(x.clone(), w)
    assert_close(kiln.compile(into_residual)(x.clone(), w), expected)


def test_product_written_into_its_own_operand():
    # Products whose results land in one of their own operands match eager
    # (a GEMM must never store into what it still reads).
    def into_a(a, b):
        a.copy_(a @ b)
        return a

    def into_b(a, b):
        b[:, :32] = a @ b[:, 32:]
        return b

    for fn in (into_a, into_b):
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        expected = fn(a.clone(), b.clone())
        assert_close(kiln.compile(fn)(a.clone(), b.clone()), expected)


def test_elementwise_results_take_tensoriterators_fast_set_up_layouts():
    # Operands of the result's shape that are all contiguous (size-1 dims
    # ignored), all channels-last, or dense with one set of strides give the
    # result that layout; with a Python number among the operands the stride
    # sort decides (fuzz seed 603655: an expanded bool ^ a sliced uint8).
    sliced = torch.arange(17, dtype=torch.uint8).reshape(17, 1, 1)[..., ::2]   # (1, 1, 2)
    expanded = torch.ones(1, 1, 1, dtype=torch.bool).expand(17, 1, 1)
    channels_last = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    permuted = torch.randn(4, 5, 6).permute(2, 0, 1)
    cases = [
        (lambda a, b: a ^ b, (expanded, sliced)),
        (lambda a, b: b ^ b, (expanded, sliced)),
        (lambda a, b: b + 1, (expanded, sliced)),
        (lambda a, b: a * b, (channels_last, channels_last.clone())),
        (lambda a, b: a - b, (permuted, permuted.clone().mul_(2))),
        (lambda a, b: a + b, (permuted, permuted.contiguous())),
        (lambda a, b: torch.where(a > 0, a, b), (permuted, permuted.clone())),
    ]
    for fn, inputs in cases:
        expected, actual = fn(*inputs), kiln.compile(fn)(*inputs)
        assert actual.stride() == expected.stride(), (actual.stride(), expected.stride())
        assert torch.equal(actual, expected)


def _cbr(i, o, k=3, s=1, g=1, d=1):
    return [torch.nn.Conv2d(i, o, k, s, d * (k // 2), dilation=d, groups=g, bias=False),
            torch.nn.BatchNorm2d(o), torch.nn.ReLU()]


class _Residual(torch.nn.Module):
    def __init__(self, i, o, s):
        super().__init__()
        self.body = torch.nn.Sequential(*_cbr(i, o, 3, s), torch.nn.Conv2d(o, o, 3, 1, 1), torch.nn.BatchNorm2d(o))
        self.skip = torch.nn.Conv2d(i, o, 1, s) if s != 1 or i != o else torch.nn.Identity()

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def _networks():
    yield "conv block", torch.nn.Sequential(*_cbr(8, 16)), (2, 8, 20, 20)
    yield "residual stack", torch.nn.Sequential(
        *_cbr(3, 8, 7, 2), torch.nn.MaxPool2d(3, 2, 1), _Residual(8, 8, 1), _Residual(8, 16, 2),
        _Residual(16, 64, 2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()), (2, 3, 48, 48)
    yield "depthwise separable", torch.nn.Sequential(
        *_cbr(3, 8, 3, 2), *_cbr(8, 8, 3, 1, g=8), *_cbr(8, 16, 1), *_cbr(16, 16, 3, 2, g=16)), (2, 3, 33, 31)
    yield "grouped, dilated", torch.nn.Sequential(*_cbr(8, 16, 3, g=4, d=2), *_cbr(16, 16, 5, 2)), (3, 8, 17, 23)
    # 64 filters of 32x3x3 over 3x3 positions: the weight outweighs the result.
    yield "deep layer", torch.nn.Sequential(*_cbr(32, 64), *_cbr(64, 64)), (1, 32, 3, 3)
    yield "3-d", torch.nn.Sequential(torch.nn.Conv3d(4, 8, 3, padding=1), torch.nn.ReLU()), (2, 4, 6, 10, 10)


@pytest.mark.parametrize("case", list(_networks()), ids=lambda case: case[0])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_convolution_networks_match_eager_values_and_strides(case, layout):
    # Convolutions torch runs take channels-last operands where their
    # weights are small, and the kernels between them keep that layout; what
    # the caller gets is eager's, values and strides.
    _, model, shape = case
    model = model.eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
    x = torch.randn(shape)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    if layout == "sliced":
        x = torch.randn(*shape[:-1], shape[-1] * 2)[..., ::2]
    with torch.no_grad():
        expected = model(x)
        compiled = kiln.compile(model, fullgraph=True)
        for _ in range(2):
            actual = compiled(x)
            assert_close(actual, expected, rtol=1e-4, atol=1e-4)
            assert actual.stride() == expected.stride()


def test_convolution_results_returned_and_reused_keep_eager_layouts():
    w = torch.randn(16, 8, 3, 3)

    def fn(x):
        y = F.conv2d(x, w, padding=1)
        return y, torch.relu(y) * 2, y.sum((2, 3))

    x = torch.randn(2, 8, 24, 24)
    compiled = kiln.compile(fn, fullgraph=True)
    for actual, expected in zip(compiled(x), fn(x)):
        assert_close(actual, expected, rtol=1e-4, atol=1e-4)
        assert actual.stride() == expected.stride()


@pytest.mark.parametrize("shape", [(2, 64, 56, 56), (2, 16, 20, 20), (2, 5, 19, 19), (1, 3, 7, 9), (0, 8, 20, 20)])
def test_channels_last_to_contiguous_copies(shape):
    # Pointwise kernels that write another layout than they read: long
    # inner loops are tiled (the read's lines reused from L1); same values.
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)

    def fn(x):
        return (torch.relu(x) * 2 + 1).contiguous()

    compiled = kiln.compile(fn, fullgraph=True)
    actual = compiled(x)
    assert_close(actual, fn(x))
    assert actual.is_contiguous()
    t = torch.randn(300, 1000)
    transposed = kiln.compile(lambda t: (t.t() + 1).contiguous(), fullgraph=True)
    assert_close(transposed(t), (t.t() + 1).contiguous())


def test_views_of_values_kept_channels_last():
    # A value computed from a channels-last convolution result and read
    # twice is kept channels-last; views of it are still eager's views.
    w = torch.randn(16, 8, 3, 3)

    def fn(x):
        y = torch.relu(F.conv2d(x, w, padding=1))
        return y.permute(0, 2, 3, 1), y[:, :4], y.transpose(2, 3) * 1, y.flatten(1), y.sum()

    x = torch.randn(2, 8, 24, 24)
    compiled = kiln.compile(fn, fullgraph=True)
    for actual, expected in zip(compiled(x), fn(x)):
        assert_close(actual, expected, rtol=1e-4, atol=1e-4)
        assert actual.stride() == expected.stride()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_pools_of_channels_last_values_match_eager(layout):
    # Pools over a convolution's (channels-last) result store channels-last
    # where the next convolution reads them; returned, viewed or with their
    # indices they are eager's values and strides, NaN and -inf included.
    w, w2 = torch.randn(16, 8, 3, 3), torch.randn(16, 16, 3, 3)

    def fn(x):
        y = torch.relu(F.conv2d(x, w, padding=1))
        y = torch.where(y > 2.5, torch.nan, y)
        pooled, indices = F.max_pool2d(y, 3, 2, 1, return_indices=True)
        averaged = F.avg_pool2d(y, 2)
        adaptive = F.adaptive_avg_pool2d(y, (3, 5))
        z = F.conv2d(pooled, w2, padding=1) + F.conv2d(F.max_pool2d(y, 2), w2, padding=1)
        return z, pooled.permute(0, 2, 3, 1), indices, averaged[:, :3], adaptive, F.conv2d(averaged, w2)

    x = torch.randn(2, 8, 18, 18)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    compiled = kiln.compile(fn, fullgraph=True)
    for _ in range(2):
        for actual, expected in zip(compiled(x), fn(x)):
            assert_close(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
            assert actual.stride() == expected.stride()


def _image(sizes, layout):
    """A random image batch: contiguous, channels-last, or every other column of a wider one."""
    if layout == "sliced":
        return torch.randn(*sizes[:-1], sizes[-1] * 2)[..., ::2]
    x = torch.randn(sizes)
    return x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x


@pytest.mark.parametrize("sizes, target", [
    ((2, 3, 5, 7), {"scale_factor": 2}), ((2, 3, 5, 7), {"scale_factor": 3}),
    ((2, 3, 6, 8), {"scale_factor": 0.5}), ((1, 4, 7, 10), {"size": (10, 7)}),
    ((2, 3, 4, 6), {"size": (12, 9)}), ((2, 2, 5, 5), {"scale_factor": (1.5, 2.5)}),
    ((0, 3, 4, 4), {"scale_factor": 2}), ((1, 1, 1, 1), {"size": (3, 5)}),
    # torch's float scale picks another row than the exact ratio somewhere:
    ((1, 2, 14, 5), {"size": (46, 5)}), ((1, 2, 4, 4), {"scale_factor": 1.7})])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_nearest_upsampling_matches_eager(sizes, target, layout):
    # Nearest upsampling reads position floor(o * in / out) where that is the
    # position torch's float arithmetic picks at every o (whole ratios
    # always), a kernel fused with what reads it; otherwise torch runs it.
    x = _image(sizes, layout)

    def fn(x):
        return F.interpolate(x * 2, mode="nearest", **target) + 1

    compiled = kiln.compile(fn, fullgraph=True)
    actual, expected = compiled(x), fn(x)
    assert_close(actual, expected)
    assert actual.stride() == expected.stride()
    float_rounded = target in ({"size": (46, 5)}, {"scale_factor": 1.7})
    assert kernels_of(compiled)[1] == (1 if float_rounded else 0), kiln.cache_info(compiled)["runners"]


@pytest.mark.parametrize("sizes, target", [
    ((2, 3, 5, 7), {"scale_factor": 2}), ((1, 4, 7, 10), {"size": (10, 7)}),
    ((2, 3, 6, 8), {"scale_factor": 0.5}), ((2, 3, 8, 8), {"size": (3, 5)}),
    ((1, 1, 1, 1), {"size": (3, 5)}), ((0, 3, 4, 4), {"scale_factor": 2}),
    # torch's float positions are not the exact ratio's somewhere: torch runs it.
    ((1, 2, 14, 5), {"size": (46, 5)}), ((1, 3, 100, 60), {"size": (224, 224)})])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_bilinear_upsampling_matches_eager(sizes, target, align_corners, layout):
    # Each output mixes the four inputs around its source position, weighted
    # as torch's CPU kernel does, where those positions are exact ratios.
    x = _image(sizes, layout)

    def fn(x):
        return F.interpolate(x * 2, mode="bilinear", align_corners=align_corners, **target) + 1

    compiled = kiln.compile(fn, fullgraph=True)
    actual, expected = compiled(x), fn(x)
    assert_close(actual, expected)
    assert actual.stride() == expected.stride()
    float_placed = target in ({"size": (46, 5)}, {"size": (224, 224)})
    native = not float_placed and sizes[0] > 0
    assert (kernels_of(compiled)[1] == 0) == native, kiln.cache_info(compiled)["runners"]
