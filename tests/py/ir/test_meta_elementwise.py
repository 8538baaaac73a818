# kiln's meta functions of the elementwise ops against torch: generated over
# ops x dtypes x layouts (empty, size-1, 0-d, transposed, sliced, expanded),
# broadcasting and Python scalars. Depends on kiln._C and meta_check.
import itertools

import pytest
import torch

import kiln._C as _C
import meta_check
from meta_check import DEVICE_DISAGREEMENTS, check_like_torch, layouts, meta_tensor

B, U8, I8, I16, I32, I64 = torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64
F16, BF16, F32, F64, C64, C128 = (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                  torch.complex64, torch.complex128)
ALL_DTYPES = (B, U8, I8, I16, I32, I64, F16, BF16, F32, F64, C64, C128)
SOME_DTYPES = (B, U8, I32, I64, F16, BF16, F32, F64, C64)
SCALARS = (True, 3, -2, 2.5)

UNARY = """neg abs exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos
atan sinh cosh tanh sigmoid erf erfc erfinv floor ceil round trunc frac sign sgn nan_to_num relu
gelu silu mish hardswish hardsigmoid hardtanh leaky_relu elu softplus logical_not isnan isinf
isfinite bitwise_not log_sigmoid_forward""".split()
BINARY_TENSOR = """add.Tensor sub.Tensor rsub.Tensor mul.Tensor div.Tensor floor_divide fmod.Tensor
remainder.Tensor pow.Tensor_Tensor atan2 minimum maximum clamp_min.Tensor clamp_max.Tensor eq.Tensor
ne.Tensor lt.Tensor le.Tensor gt.Tensor ge.Tensor logical_and logical_or logical_xor
bitwise_and.Tensor bitwise_or.Tensor bitwise_xor.Tensor""".split()
BINARY_SCALAR = """add.Scalar sub.Scalar rsub.Scalar mul.Scalar div.Scalar floor_divide.Scalar
fmod.Scalar remainder.Scalar pow.Tensor_Scalar clamp_min clamp_max eq.Scalar ne.Scalar lt.Scalar
le.Scalar gt.Scalar ge.Scalar bitwise_and.Scalar bitwise_or.Scalar bitwise_xor.Scalar""".split()
SCALAR_TENSOR = "pow.Scalar remainder.Scalar_Tensor bitwise_and.Scalar_Tensor".split()

checked = []


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print(f"\nelementwise meta cases checked: {len(checked)} "
          f"({checked.count('error')} where torch and kiln both raise); "
          f"meta/CPU disagreements followed the CPU: {len(DEVICE_DISAGREEMENTS)}")
    for name, call in sorted(set(DEVICE_DISAGREEMENTS)):
        print(f"  {name}{call}")


def check(name, *args, **kwargs):
    try:
        checked.append(check_like_torch("aten::" + name, *args, **kwargs))
    except _C.Unsupported:
        # kiln has no complex32, torch's type for float16 with a complex
        # operand of lower priority.
        dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor)}
        assert F16 in dtypes and dtypes & {C64, C128}, f"{name}: kiln refused {args}"
        checked.append("unsupported")


def t(shape, dtype=F32):
    return meta_tensor(shape, dtype)


# Odd layouts of a few shapes, the empty, size-1 and 0-d ones included.
def layout_zoo(dtype=F32):
    return (layouts([2, 3, 4], dtype) + layouts([1, 1, 5], dtype)[1:3]
            + [t([0, 3], dtype), t([], dtype)])


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    for dtype in ALL_DTYPES:
        check(op, t([2, 3], dtype))
    for x in layout_zoo(I32 if op == "bitwise_not" else F32):
        check(op, x)


@pytest.mark.parametrize("op", BINARY_TENSOR)
def test_binary(op):
    # Each type with itself, and mixed with other types as tensors and as 0-d
    # tensors on either side (0-d tensors promote only by category).
    for i, dtype in enumerate(SOME_DTYPES):
        check(op, t([2, 3], dtype), t([2, 3], dtype))
        if i % 2 == 0:
            check(op, t([2, 3], dtype), t([], I64 if dtype.is_floating_point else F64))
            check(op, t([], I32), t([3], dtype))
            check(op, t([3], dtype), t([2, 3], B if dtype.is_floating_point else F32))
    # Layouts, broadcasting and empty and size-1 dimensions.
    dtype = I64 if op.startswith("bitwise") else F32
    zoo = layouts([3, 4], dtype)
    pairs = list(zip(zoo, reversed(zoo))) + [(zoo[1], zoo[0]), (zoo[0], zoo[1]), (zoo[3], zoo[2])]
    for sa, sb in [([3, 1], [1, 4]), ([4], [3, 4]), ([2, 1, 4], [3, 1]), ([0, 4], [1, 4]),
                   ([], [3, 4]), ([1], []), ([5, 1, 1], [1, 1, 1]), ([2, 3], [3, 2])]:
        pairs += [(t(sa, dtype), t(sb, dtype)) if len(pairs) % 2 else (t(sb, dtype), layouts(sa, dtype)[-1])]
    for a, b in pairs:
        check(op, a, b)


@pytest.mark.parametrize("op", BINARY_SCALAR)
def test_binary_python_scalars(op):
    for dtype in SOME_DTYPES:
        for scalar in SCALARS:
            check(op, t([2, 3], dtype), scalar)
    check(op, t([], I32), 2.5)
    check(op, layouts([3, 4])[1], 1)


@pytest.mark.parametrize("op", SCALAR_TENSOR)
def test_scalar_first(op):
    for dtype, scalar in itertools.product(SOME_DTYPES, SCALARS + (1,)):
        check(op, scalar, t([2, 3], dtype))
    for x in layout_zoo(I32):
        check(op, 2, x)


@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_add_sub_alpha(dtype):
    for op, alpha in itertools.product(("add.Tensor", "sub.Tensor", "rsub.Tensor"), (True, 2, 0.5)):
        check(op, t([2, 3], dtype), t([3], I32), alpha=alpha)
    for op, alpha in itertools.product(("add.Scalar", "sub.Scalar", "rsub.Scalar"), (True, 2, 0.5)):
        check(op, t([2, 3], dtype), 2, alpha)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", (B, U8, I64, BF16, F32, C64), ids=str)
def test_division_modes(dtype, mode):
    for other in (B, I32, F16, F64):
        check("div.Tensor_mode", t([2, 3], dtype), t([3], other), rounding_mode=mode)
    for scalar in SCALARS:
        check("div.Scalar_mode", t([2, 3], dtype), scalar, rounding_mode=mode)
    for x in layouts([3, 4], dtype)[1:3]:
        check("div.Tensor_mode", x, t([], F32), rounding_mode=mode)


def test_division_bad_mode():
    check("div.Tensor_mode", t([2]), t([2]), rounding_mode="round")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_activation_arguments(dtype):
    x = t([2, 3], dtype)
    for approximate in ("none", "tanh", "exact"):
        check("gelu", x, approximate=approximate)
    for low, high in ((-1, 1), (0, 6), (-2.5, 0.5), (0.5, 2), (2, -2)):
        check("hardtanh", x, low, high)
    check("leaky_relu", x, 0.2)
    check("elu", x, 1.5, 1, 2)
    check("softplus", x, 2, 10)
    for decimals in (0, 2, -1):
        check("round.decimals", x, decimals=decimals)
    check("nan_to_num", x, 0.0, 1e6, -1e6)


@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_clamp(dtype):
    x = t([2, 3], dtype)
    for low, high in ((None, None), (0, None), (None, 1), (-1, 1), (0.5, 2), (True, None),
                      (None, False), (True, True), (-1.5, None)):
        check("clamp", x, low, high)
    for low, high in ((None, None), (t([], F32), None), (None, t([3], I64)),
                      (t([2, 1], dtype), t([3], dtype)), (t([], B), t([], B))):
        check("clamp.Tensor", x, low, high)
    for y in layouts([3, 4], dtype)[1:4]:
        check("clamp", y, 0, 1)
        check("clamp.Tensor", y, t([], dtype), None)
        check("clamp.Tensor", y, t([4], F64), t([3, 1], I32))


@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_where(dtype):
    for cond in (B, U8, F32):
        check("where.self", t([2, 3], cond), t([3], dtype), t([2, 1], F32))
    check("where.self", t([2, 1], B), t([], dtype), t([3], I64))
    for scalar in SCALARS:
        check("where.ScalarSelf", t([2, 3], B), scalar, t([3], dtype))
        check("where.ScalarOther", t([3], B), t([2, 3], dtype), scalar)
        check("where.Scalar", t([2, 3], B), scalar, 1.5)
        check("where.Scalar", t([2, 3], B), scalar, 1)
    for a, b, c in zip(layouts([3, 4], B), layouts([3, 4], dtype), reversed(layouts([3, 4], F32))):
        check("where.self", a, b, c)
        check("where.self", c.bool(), a, b.to(F64))
        check("where.ScalarSelf", a, 2, b)


@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_masked_fill(dtype):
    for mask in (B, U8):
        check("masked_fill.Scalar", t([2, 3], dtype), t([2, 3], mask), 2.5)
    for value in (True, 1, 2.5):
        check("masked_fill.Scalar", t([3], dtype), t([2, 3], B), value)
    for value in (t([], F64), t([], I32), t([1], F32), t([], dtype)):
        check("masked_fill.Tensor", t([2, 3], dtype), t([3], B), value)
    for x, mask in zip(layouts([3, 4], dtype), reversed(layouts([3, 4], B))):
        check("masked_fill.Scalar", x, mask, 0)


@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_lerp(dtype):
    check("lerp.Scalar", t([2, 3], dtype), t([3], dtype), 0.5)
    check("lerp.Scalar", t([2, 3], dtype), t([3], F32), 0.5)
    check("lerp.Tensor", t([2, 3], dtype), t([3], dtype), t([2, 1], dtype))
    check("lerp.Tensor", t([2, 3], dtype), t([3], dtype), t([], F64))
    for a, b in zip(layouts([3, 4], dtype), reversed(layouts([3, 4], dtype))):
        check("lerp.Scalar", a, b, 0.25)
        check("lerp.Tensor", a, t([4], dtype), b)


def test_pow_exponents():
    for dtype, exponent in itertools.product(SOME_DTYPES, (-2, -1, 0, 1, 2, 0.5, -0.5, True, False)):
        check("pow.Tensor_Scalar", t([2, 3], dtype), exponent)
    for base, dtype in itertools.product((-2, 0, 1, 1.0, 2.5, True, False), SOME_DTYPES):
        check("pow.Scalar", base, t([2, 3], dtype))


CAST_INPUTS = [
    lambda d: layouts([2, 3, 4], d),
    lambda d: layouts([2, 3, 4, 5], d),
    lambda d: [t([2, 3, 4, 5], d).to(memory_format=torch.channels_last),
               t([2, 3, 1, 1], d).to(memory_format=torch.channels_last),
               t([2, 3, 4, 5, 6], d).to(memory_format=torch.channels_last_3d),
               t([0, 3], d), t([1, 1], d).expand(3, 1), t([], d)],
]


@pytest.mark.parametrize("make", CAST_INPUTS)
@pytest.mark.parametrize("dtype", (I32, F32), ids=str)
def test_casts(dtype, make):
    formats = (None, torch.contiguous_format, torch.channels_last, torch.channels_last_3d)
    for x in make(dtype):
        for memory_format in formats:
            check("_to_copy", x, dtype=F64, memory_format=memory_format)
            check("to.dtype", x, dtype, memory_format=memory_format)
        check("_to_copy", x)
        check("to.dtype", x, dtype, copy=True)
        check("to.dtype_layout", x, dtype=F64, layout=torch.strided)
        # A CPU twin would move to another device: meta tensors only.
        check("to.device", x, torch.device("meta"), dtype, meta_only=True)
        check("to.other", x, t([], B), memory_format=torch.preserve_format)


@pytest.mark.parametrize("dtype", (B, I32, F16, F32), ids=str)
def test_python_numbers_for_tensors(dtype):
    # aot_autograd's graphs pass numbers where the schema says Tensor
    # (torch's wrapped numbers): sub.Tensor(x, 1.0).
    x = t([2, 3], dtype)
    for number in (True, 2, 1.5):
        # torch takes them for add, sub, mul, div and floor_divide only.
        for op in ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "floor_divide",
                   "maximum", "eq.Tensor", "pow.Tensor_Tensor", "rsub.Tensor"):
            check(op, x, number)
            check(op, number, x)
        check("div.Tensor_mode", x, number, rounding_mode="floor")


def test_broadcast_errors():
    for op in ("add.Tensor", "mul.Tensor", "eq.Tensor", "atan2", "logical_and"):
        check(op, t([2, 3]), t([4]))
        check(op, t([0]), t([2]))
    check("where.self", t([2], B), t([3]), t([3]))
    check("masked_fill.Scalar", t([2, 3]), t([3, 3], B), 1)
    check("lerp.Tensor", t([2, 3]), t([3]), t([4]))
