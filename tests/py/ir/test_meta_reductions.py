# kiln's meta functions of the reduction ops against torch: generated over
# ops x dtypes x dims (None, [], negative, several, out of range, repeated) x
# keepdim x layouts, with empty, size-1 and 0-d inputs.
# Depends on kiln._C and meta_check.
import itertools

import pytest
import torch

from meta_check import DEVICE_DISAGREEMENTS, check_like_torch, layouts, meta_tensor

B, U8, I8, I16, I32, I64 = torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64
F16, BF16, F32, F64, C64, C128 = (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                  torch.complex64, torch.complex128)
ALL_DTYPES = (B, U8, I8, I16, I32, I64, F16, BF16, F32, F64, C64, C128)
SOME_DTYPES = (B, U8, I32, I64, F16, F32, F64, C64)

checked = []


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print(f"\nreduction meta cases checked: {len(checked)} "
          f"({checked.count('error')} where torch and kiln both raise)")
    for name, call in sorted(set(DEVICE_DISAGREEMENTS)):
        if "sum" in name or "max" in name or "norm" in name or "exp" in name:
            print(f"  meta/CPU disagree, CPU followed: {name}{call}")


def check(name, *args, **kwargs):
    checked.append(check_like_torch("aten::" + name, *args, **kwargs))


def t(shape, dtype=F32):
    return meta_tensor(shape, dtype)


def inputs(dtype=F32):
    """Shapes and layouts reductions must handle: transposed, sliced,
    expanded, empty, size-1 and 0-d."""
    return (layouts([2, 3, 4], dtype)[1:4] + [t([3, 0, 2], dtype), t([1, 1], dtype),
                                             t([], dtype)])


# Dims for the `int[1]? dim` overloads; each is tried on every input, so
# some are out of range for some inputs (torch and kiln must both raise).
DIM_LISTS = (None, [], [0], [2, 0, 1], [1, -2], [3])
INT_DIMS = (0, -1, 1, 3)

DIM_LIST_OPS = {  # name: extra arguments after self, dim
    "sum.dim_IntList": (), "nansum": (), "mean.dim": (), "amax": (), "amin": (),
    "var.dim": (True,), "std.dim": (False,), "var_mean.dim": (True,), "std_mean.dim": (True,),
    "any.dims": (), "all.dims": (), "logsumexp": (), "linalg_vector_norm": None,
}
CORRECTION_OPS = ("var.correction", "std.correction", "var_mean.correction", "std_mean.correction")
INT_DIM_OPS = ("max.dim", "min.dim", "argmax", "argmin", "prod.dim_int", "any.dim", "all.dim",
               "cumsum", "cumprod")
FULL_OPS = ("sum", "mean", "max", "min", "prod", "any", "all", "var", "std", "var_mean",
            "std_mean")


def call_with_dims(op, x, dims, keepdim):
    if op == "linalg_vector_norm":
        check(op, x, 2, dims, keepdim)
    elif op in ("amax", "amin", "logsumexp") and dims is None:
        check(op, x, [], keepdim)
    else:
        check(op, x, dims, *DIM_LIST_OPS[op], keepdim)


@pytest.mark.parametrize("op", list(DIM_LIST_OPS) + list(CORRECTION_OPS))
def test_dim_list_reductions(op):
    for dtype in ALL_DTYPES if op in ("sum.dim_IntList", "amax", "var.correction") else SOME_DTYPES:
        if op in CORRECTION_OPS:
            check(op, t([2, 3], dtype), [1])
        else:
            call_with_dims(op, t([2, 3], dtype), [1], False)
    for i, (x, dims) in enumerate(itertools.product(inputs(), DIM_LISTS)):
        keepdim = i % 3 == 0
        if op in CORRECTION_OPS:
            check(op, x, dims, correction=0 if keepdim else 1.5, keepdim=keepdim)
        else:
            call_with_dims(op, x, dims, keepdim)


@pytest.mark.parametrize("op", INT_DIM_OPS)
def test_int_dim_reductions(op):
    for dtype in ALL_DTYPES:
        check(op, t([2, 3], dtype), 1)
    for i, (x, dim) in enumerate(itertools.product(inputs(), INT_DIMS)):
        if op in ("cumsum", "cumprod"):
            check(op, x, dim)
        else:
            check(op, x, dim, i % 2 == 0)
    if op in ("argmax", "argmin"):
        for x in inputs():
            check(op, x)
            check(op, x, None, True)


@pytest.mark.parametrize("op", FULL_OPS)
def test_full_reductions(op):
    for dtype in ALL_DTYPES:
        check(op, t([2, 3], dtype))
    for x in inputs():
        check(op, x)


@pytest.mark.parametrize("op", ("sum", "sum.dim_IntList", "nansum", "prod", "prod.dim_int", "mean",
                                "mean.dim", "cumsum", "cumprod", "linalg_vector_norm"))
def test_dtype_argument(op):
    extra = {"sum.dim_IntList": ([1],), "nansum": ([1],), "prod.dim_int": (1,), "mean.dim": ([1],),
             "cumsum": (1,), "cumprod": (1,)}.get(op, ())
    for dtype, target in itertools.product(SOME_DTYPES, (B, I64, F16, F64, C64)):
        check(op, t([2, 3], dtype), *extra, dtype=target)


def test_vector_norm_orders():
    for ord, x in itertools.product((2, 1, 0, -1, 0.5, float("inf"), float("-inf")),
                                    [t([0, 3]), t([3, 0]), t([2, 3]), t([], F64), t([2, 3], C64)]):
        for dims in (None, [], [0], [1], [0, 1]):
            check("linalg_vector_norm", x, ord, dims, dims == [0])


def test_empty_and_identity():
    # Reductions without identity refuse empty inputs unless each reduced
    # dim is non-empty; sums and means are fine.
    for op in ("amax", "amin", "sum.dim_IntList", "mean.dim", "logsumexp", "var.dim"):
        for dims in ([0], [1], [0, 1]):
            check(op, t([0, 3]), dims)
    for op in ("max", "min", "sum", "argmax", "any"):
        check(op, t([0]))
        check(op, t([2, 0, 3]))
