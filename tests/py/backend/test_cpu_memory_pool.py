# kiln's pool of large CPU blocks: outputs from 1 MiB come from it and go
# back to it when their tensors die, so a plain process does not fault
# fresh pages in on every call. Checks reuse, the limit, small outputs left
# to torch, and that pooled outputs are ordinary tensors (values, layouts,
# dtypes, in-place use, saving) against eager.
import gc
import io

import pytest
import torch

import kiln
from kiln import _C


@pytest.fixture(autouse=True)
def pool_limit():
    limit = _C.memory_pool_info()["limit_bytes"]
    _C.set_memory_pool_limit(1 << 30)
    yield
    _C.set_memory_pool_limit(limit)


def test_a_dropped_output_block_serves_the_next_call():
    f = kiln.compile(lambda x: x * 2 + 1)
    x = torch.randn(1024, 512)
    first = f(x)
    address = first.data_ptr()
    assert torch.equal(first, x * 2 + 1)
    del first
    before = _C.memory_pool_info()["reused"]
    second = f(x)
    assert second.data_ptr() == address
    assert _C.memory_pool_info()["reused"] == before + 1
    assert torch.equal(second, x * 2 + 1)


def test_live_outputs_keep_their_own_blocks():
    f = kiln.compile(lambda x: x + 1)
    x = torch.randn(512, 1024)
    outputs = [f(x) for _ in range(3)]
    assert len({out.data_ptr() for out in outputs}) == 3
    outputs[0].fill_(7)
    assert torch.equal(outputs[1], x + 1) and torch.equal(outputs[2], x + 1)


def test_small_outputs_are_left_to_torch():
    f = kiln.compile(lambda x: x * 3)
    before = _C.memory_pool_info()
    out = f(torch.randn(100, 100))
    after = _C.memory_pool_info()
    assert (after["reused"], after["mapped"]) == (before["reused"], before["mapped"])
    del out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.uint8, torch.int8, torch.bool])
def test_pooled_outputs_match_eager_in_every_dtype(dtype):
    def fn(x):
        return x.to(dtype), (x > 0).logical_not()
    x = torch.randn(1024, 600)
    for got, expected in zip(kiln.compile(fn)(x), fn(x)):
        assert got.dtype == expected.dtype and got.stride() == expected.stride()
        assert torch.equal(got, expected)


def test_pooled_outputs_keep_eager_layouts_and_views():
    def fn(x):
        y = x * 2
        return y.transpose(0, 2), y[:, ::2], y.permute(2, 0, 1).contiguous()
    x = torch.randn(64, 128, 48).permute(1, 0, 2)
    for got, expected in zip(kiln.compile(fn)(x), fn(x)):
        assert got.shape == expected.shape and got.stride() == expected.stride()
        assert torch.equal(got, expected)


def test_pooled_outputs_are_ordinary_tensors():
    f = kiln.compile(lambda x: x * 4)
    x = torch.randn(1024, 512)
    out = f(x)
    out.add_(1)
    assert torch.equal(out, x * 4 + 1)
    buffer = io.BytesIO()
    torch.save(out, buffer)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer), out)
    assert out.numpy().shape == (1024, 512)
    out.resize_(10)   # shrinking needs no new storage
    assert out.shape == (10,)
    shared = f(x).share_memory_()
    assert shared.is_shared() and torch.equal(shared, x * 4)


def test_outputs_outlive_their_compiled_function():
    f = kiln.compile(lambda x: x - 1)
    x = torch.randn(2048, 256)
    out = f(x)
    del f
    gc.collect()
    assert torch.equal(out, x - 1)


def test_the_limit_bounds_what_the_pool_keeps():
    f = kiln.compile(lambda x: x * 5)
    x = torch.randn(1024, 1024)
    _C.set_memory_pool_limit(0)
    assert _C.memory_pool_info()["cached_bytes"] == 0
    mapped = _C.memory_pool_info()["mapped"]
    del_me = f(x)
    del del_me
    assert _C.memory_pool_info()["cached_bytes"] == 0
    assert _C.memory_pool_info()["mapped"] == mapped + 1
    _C.set_memory_pool_limit(1 << 30)
    out = f(x)
    del out
    assert _C.memory_pool_info()["cached_bytes"] >= 4 << 20
    _C.trim_memory_pool()
    assert _C.memory_pool_info()["cached_bytes"] == 0
    with pytest.raises(ValueError, match="at least 0"):
        _C.set_memory_pool_limit(-1)
