# kiln's meta functions of the normalization ops against torch: softmax,
# layer, batch and group norm over dtypes (parameters of the input's type or
# float32), layouts (transposed, channels-last, empty, 0-d) and bad shapes.
# Depends on kiln._C and meta_check.
import itertools

import pytest
import torch

from meta_check import check_like_torch, layouts, meta_tensor

B, U8, I32, I64 = torch.bool, torch.uint8, torch.int32, torch.int64
F16, BF16, F32, F64, C64 = torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64
DTYPES = (B, I64, F16, BF16, F32, F64, C64)
FLOATS = (F16, BF16, F32, F64)

checked = []


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print(f"\nnormalization meta cases checked: {len(checked)} "
          f"({checked.count('error')} where torch and kiln both raise)")


def check(name, *args, meta_only=False, **kwargs):
    checked.append(check_like_torch("aten::" + name, *args, meta_only=meta_only, **kwargs))


def t(shape, dtype=F32):
    return meta_tensor(shape, dtype)


def channels_last(shape, dtype=F32):
    return t(shape, dtype).to(memory_format=torch.channels_last)


@pytest.mark.parametrize("op", ["_softmax", "_log_softmax"])
def test_softmax_kernels(op):
    for dtype, half_to_float in itertools.product(DTYPES, (False, True)):
        check(op, t([2, 3], dtype), 1, half_to_float)
    for i, x in enumerate(layouts([2, 3, 4]) + [t([0, 3]), t([1, 1]), t([])]):
        for dim in (0, -1, 3):
            check(op, x, dim, False)
        check(op, x.to(F16), 0, True, meta_only=True)


@pytest.mark.parametrize("op", ["softmax.int", "log_softmax.int"])
def test_softmax(op):
    for dtype, target in itertools.product(DTYPES, (None, F64, F16, I64)):
        check(op, t([2, 3], dtype), 1, target)
    for x in layouts([2, 3, 4]) + [t([0, 3]), t([])]:
        for dim in (0, -1, 1, 3):
            check(op, x, dim)


@pytest.mark.parametrize("op", ["native_layer_norm", "layer_norm"])
def test_layer_norm(op):
    eps = (1e-5,) if op == "native_layer_norm" else ()
    for dtype, parameter in itertools.product(DTYPES, (None, "same", F32, F64)):
        p = None if parameter is None else t([4], dtype if parameter == "same" else parameter)
        check(op, t([2, 3, 4], dtype), [4], p, p, *eps)
    check(op, t([2, 3, 4], F16), [4], t([4], F16), t([4]), *eps)
    for x in layouts([2, 3, 4])[:3] + [t([0, 4]), t([4]), t([3, 1, 4])]:
        for normalized in ([4], [3, 4], [2, 3, 4], [], [5], [1, 4]):
            weight = t(normalized) if normalized and len(normalized) <= 2 else None
            check(op, x, normalized, weight, None, *eps)
    check(op, t([2, 3, 4]), [4], t([3]), None, *eps)
    check(op, t([2, 3, 4]), [4], None, t([1, 4]), *eps)


BATCH_NORMS = ["native_batch_norm", "_native_batch_norm_legit", "batch_norm",
               "_native_batch_norm_legit_no_training", "_native_batch_norm_legit.no_stats"]


def call_batch_norm(op, x, weight, bias, mean, var, training, meta_only=False):
    if op == "_native_batch_norm_legit_no_training":
        if mean is not None and var is not None:
            check(op, x, weight, bias, mean, var, 0.1, 1e-5, meta_only=meta_only)
    elif op == "_native_batch_norm_legit.no_stats":
        check(op, x, weight, bias, training, 0.1, 1e-5, meta_only=meta_only or not training)
    elif op == "_native_batch_norm_legit":
        if mean is not None and var is not None:
            check(op, x, weight, bias, mean, var, training, 0.1, 1e-5, meta_only=meta_only)
    else:
        extra = (False,) if op == "batch_norm" else ()
        # torch's CPU kernels crash in eval mode without running statistics.
        meta_only = meta_only or (not training and mean is None)
        check(op, x, weight, bias, mean, var, training, 0.1, 1e-5, *extra, meta_only=meta_only)


@pytest.mark.parametrize("op", BATCH_NORMS)
def test_batch_norm(op):
    # The variants share kiln's meta function: the full dtype matrix for
    # native_batch_norm, a sample for the others.
    dtypes = DTYPES if op == "native_batch_norm" else (F16, F64)
    for dtype, parameter, training in itertools.product(dtypes, (None, "same", F32), (True, False)):
        p = None if parameter is None else t([3], dtype if parameter == "same" else parameter)
        call_batch_norm(op, t([2, 3, 4], dtype), p, p, p, p, training)
    call_batch_norm(op, t([2, 3, 4], F16), t([3], F16), None, t([3]), t([3]), True)
    inputs = [t([2, 3, 4]), layouts([2, 3, 4])[1], layouts([2, 3, 4, 5])[1],
              channels_last([2, 3, 4, 5]), channels_last([2, 3, 1, 1]), t([2, 3]), t([0, 3, 4]), t([3]),
              t([2, 3, 2, 2, 2]).to(memory_format=torch.channels_last_3d)]
    if op == "native_batch_norm":
        inputs += layouts([2, 3, 4])[2:]
    for x in inputs:
        for training in (True, False):
            call_batch_norm(op, x, t([3]), t([3]), t([3]), t([3]), training)
        call_batch_norm(op, x, None, None, None, None, op != "native_batch_norm")
    # Parameters of the wrong size (torch's CPU kernel reads past them).
    call_batch_norm(op, t([2, 3, 4]), t([4]), None, None, None, True, meta_only=True)
    call_batch_norm(op, t([2, 3, 4]), None, None, t([2]), t([3]), True, meta_only=True)


@pytest.mark.parametrize("op", ["native_group_norm", "group_norm"])
def test_group_norm(op):
    def call(x, groups, weight=None, bias=None):
        if op == "group_norm":
            check(op, x, groups, weight, bias)
        else:
            spatial = 1
            for size in x.shape[2:]:
                spatial *= size
            check(op, x, weight, bias, x.shape[0], x.shape[1], spatial, groups, 1e-5)

    for dtype, parameter in itertools.product(DTYPES, (None, "same", F32)):
        p = None if parameter is None else t([4], dtype if parameter == "same" else parameter)
        call(t([2, 4, 3], dtype), 2, p, p)
    for x in (layouts([2, 4, 3]) + [channels_last([2, 4, 3, 5]), channels_last([2, 4, 1, 1]),
                                    t([2, 4]), t([0, 4, 3]), t([2, 4, 3, 2])]):
        for groups in (1, 2, 4, 3, 0):
            call(x, groups)
    call(t([2, 4, 3]), 2, t([3]))
    call(t([2, 4, 3]), 2, None, t([4, 1]))
    if op == "native_group_norm":
        check(op, t([2, 4, 3]), None, None, 3, 4, 3, 2, 1e-5)
