# Runs a torch call on meta tensors and records the ATen operator calls it
# makes. kiln's symbolic evaluator turns each recorded call into a graph node,
# so any torch function, tensor method, operator or indexing expression is
# captured as the ATen ops eager PyTorch would run.
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Recorder(TorchDispatchMode):
    def __init__(self, default_device):
        super().__init__()
        self.calls = []
        self.default_device = default_device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        run_kwargs = kwargs
        device = kwargs.get("device")
        if device is not None:
            device = torch.device(device)
            if device.type == "meta":
                # Injected by the meta default device: the program meant its
                # own default device.
                kwargs = dict(kwargs, device=self.default_device)
            else:
                run_kwargs = dict(kwargs, device=torch.device("meta"))
        out = func(*args, **run_kwargs)
        self.calls.append((func, args, kwargs, out))
        return out


def trace(fn, args, kwargs):
    """Calls fn(*args, **kwargs) with meta tensors standing for graph values.
    Returns (result, [(op_overload, args, kwargs, result), ...])."""
    recorder = _Recorder(torch.get_default_device())
    with torch.device("meta"), recorder:
        out = fn(*args, **kwargs)
    return out, recorder.calls


def meta_tensor(dtype, sizes, strides, offset):
    """A meta tensor with the given layout."""
    t = torch.empty_strided(sizes, strides, dtype=dtype, device="meta")
    if offset:
        t = t.as_strided(sizes, strides, offset)
    return t
