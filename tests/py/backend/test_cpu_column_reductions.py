# Reductions down columns (x.sum(0), a [B, T, C] mean over T, statistics
# of channels-last images): the CPU kernel runs its vectorised columns
# inside each row of the reduction, accumulating in stack arrays
# (CpuSchedule's rowwiseColumns, in tiles of columns), and a column reduction with fewer leading points
# than threads splits its rows into a chunk per thread. Every result must be
# eager's, for column counts on and off vector widths, rows that do not
# divide into chunks, empty and one-row inputs, strided and broadcast
# inputs, and every dtype a sum accumulates differently.
import pytest
import torch
from torch.testing import assert_close

import kiln

_C = kiln._C


def _schedules(compiled, *args):
    _C.start_log_capture(["schedule"])
    try:
        result = compiled(*args)
    finally:
        text = "".join(message for _, message in _C.stop_log_capture())
    return result, text


def _make(dtype, *shape):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-100, 100, shape).to(dtype)


COLUMN_CASES = [
    ("sum", lambda x: x.sum(0)),
    ("mean", lambda x: x.mean(0)),
    ("amax", lambda x: x.amax(0)),
    ("amin and sum", lambda x: (x.amin(0), x.sum(0) * 2)),
    ("any and all", lambda x: ((x > 2).any(0), (x > -3).all(0))),  # booleans
    ("integer max", lambda x: (x * 100).int().amax(0)),
    ("variance", lambda x: x.var(0)),  # a mean, then squares about it
    ("softmax over rows", lambda x: torch.softmax(x, 0)),  # not rowwise: stores per row
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name,fn", COLUMN_CASES, ids=[c[0] for c in COLUMN_CASES])
@pytest.mark.parametrize("shape", [(8192, 1024), (1000, 100), (777, 37), (257, 3), (1, 65), (0, 40), (300, 1)],
                         ids=str)
def test_column_reductions_match_eager(name, fn, shape):
    x = torch.randn(*shape)
    compiled = kiln.compile(fn)
    try:
        expected = fn(x)
    except Exception as error:  # amax of no rows: eager's error, compiled too
        with pytest.raises(type(error)):
            compiled(x)
        return
    actual = compiled(x)
    # Sums of n float32 normals round in blocks: errors of about
    # sqrt(n) ulps of 1, as eager's.
    assert_close(actual, expected, rtol=1e-5, atol=3e-6 * max(shape[0], 1) ** 0.5, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
                                   torch.int64])
def test_column_sums_of_every_dtype(dtype):
    x = _make(dtype, 2048, 200)
    compiled = kiln.compile(lambda x: x.sum(0))
    expected = x.sum(0)
    actual = compiled(x)
    assert actual.dtype == expected.dtype
    if dtype.is_floating_point:
        assert_close(actual, expected, rtol=2e-2 if dtype.itemsize == 2 else 1e-5, atol=1e-2)
    else:
        assert torch.equal(actual, expected)


def test_middle_dims_channels_last_strided_and_broadcast_inputs():
    cases = [
        (lambda x: x.mean(1), torch.randn(3, 500, 96)),  # [B, T, C] over T
        (lambda x: x.sum((0, 1)), torch.randn(20, 30, 48)),
        (lambda x: x.sum(0), torch.randn(200, 20003)),  # tiles of columns, the last one short
        (lambda x: (x.amax(0), x.mean(0), x.var(0)), torch.randn(200, 3000)),
        (lambda x: x.mean((2, 3)), torch.randn(4, 64, 14, 14).contiguous(memory_format=torch.channels_last)),
        (lambda x: x[::2, 1:].sum(0), torch.randn(600, 130)),  # strided rows, offset columns
        (lambda x: x.t().sum(1), torch.randn(400, 90)),  # a transposed row sum is a column sum
        (lambda x: (x + 1).expand(300, 64).sum(0), torch.randn(1, 64)),  # broadcast rows
        (lambda x: (x * x).sum(0).sqrt() + x[0], torch.randn(700, 50)),  # a row read after the sum
    ]
    for fn, x in cases:
        compiled = kiln.compile(fn)
        assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-4)


def test_long_column_reductions_run_rowwise_and_short_windows_do_not():
    # A column sum of many rows takes the rowwise order; a 3x3 pool over
    # channels-last (a window of 9 points per vectorised output) keeps its
    # taps unrolled; a row sum is not an outer-vectorised kernel at all.
    x = torch.randn(4096, 256)
    actual, text = _schedules(kiln.compile(lambda x: x.sum(0)), x)
    assert_close(actual, x.sum(0), rtol=1e-5, atol=2e-4)
    assert "rowwise=256" in text, text
    image = torch.randn(2, 64, 16, 16).contiguous(memory_format=torch.channels_last)
    pool = lambda x: torch.nn.functional.avg_pool2d(x, 3, 1, 1)
    actual, text = _schedules(kiln.compile(pool), image)
    assert_close(actual, pool(image))
    assert "rowwise" not in text, text
    actual, text = _schedules(kiln.compile(lambda x: x.sum(1)), x)
    assert_close(actual, x.sum(1), rtol=1e-5, atol=1e-4)
    assert "rowwise" not in text, text


def test_a_column_sum_adds_in_compensated_blocks():
    # A million times 0.1: a plain running float32 sum drifts by about a
    # percent (past 65536 each 0.1 adds 0.09375 or 0.1015625); sums of
    # blocks folded with compensation stay within a few millionths.
    x = torch.full((1 << 20, 8), 0.1)
    compiled = kiln.compile(lambda x: x.sum(0))
    expected = x.double().sum(0).float()
    assert_close(compiled(x), expected, rtol=1e-5, atol=0)
