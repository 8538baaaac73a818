# Output tensors made through torch's exported C functions (the AOTInductor
# shim's empty_strided and the Python tensor wrapper): found in the pinned
# torch, and the tensors they make are ordinary torch tensors: eager's
# dtype, device and strides, values, one owner (no leaked reference), a
# storage of their own per call. GPU cases skip without one.
import sys

import pytest
import torch

import kiln
import kiln._C as _C

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def sample(dtype, shape, device):
    if dtype == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    if dtype.is_complex or dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype, device=device)
    return torch.randint(0, 100, shape, device=device).to(dtype)


def test_the_pinned_torch_exports_the_functions():
    # The per-call path takes them; a torch that stops exporting them would
    # silently fall back to torch.empty_strided from Python.
    assert _C.allocates_through_torch_c_functions()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_outputs_are_ordinary_tensors(dtype, device):
    def fn(x):
        return x * 2, x.t() + x.t()

    compiled = kiln.compile(fn)
    for shape in [(3, 5), (1, 1), (0, 4)]:
        x = sample(dtype, shape, device)
        expected = fn(x)
        outputs = compiled(x)
        for out, want in zip(outputs, expected):
            assert out.dtype == want.dtype and out.device == want.device
            assert out.shape == want.shape and out.stride() == want.stride()
            assert torch.equal(out, want)
            # One owner: the caller's name and getrefcount's argument.
            assert sys.getrefcount(out) == sys.getrefcount(want)
            assert torch._C._storage_Use_Count(out.untyped_storage()._cdata) == \
                torch._C._storage_Use_Count(want.untyped_storage()._cdata)
        # Each call's outputs are new tensors.
        again = compiled(x)
        if x.numel():
            assert again[0].data_ptr() != outputs[0].data_ptr()
        outputs[0].zero_()
        assert torch.equal(again[0], expected[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_gpu_outputs_return_to_the_caching_allocator():
    compiled = kiln.compile(lambda x: torch.sin(x) * 3)
    x = torch.randn(1000, device="cuda")
    compiled(x)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(100):
        compiled(x)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
