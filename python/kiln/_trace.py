# Runs a torch call on meta tensors and records the ATen operator calls it
# makes. kiln's symbolic evaluator turns each recorded call into a graph node,
# so any torch function, tensor method, operator or indexing expression is
# captured as the ATen ops eager PyTorch would run.
import types

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kiln import _symbolic

_C_CALLABLES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType)


class _KilnOp:
    """What the trace needs to know of an operator, once per operator."""

    def __init__(self, func):
        from kiln import _C

        schema = func._schema
        registered = _C.has_op(func.name())
        # Per result: a fresh tensor (not a view of an input, not a list).
        self.fresh = tuple(registered and r.alias_info is None and str(r.type) == "Tensor"
                           for r in schema.returns)
        # Whether kiln's own meta function may stand in for torch's (a
        # registered, functional op returning fresh tensors). torch's meta
        # kernels are often Python reference implementations and dominate
        # capture time; kiln's, in C++, are checked against torch's by the
        # tests.
        self.fast = registered and not schema.is_mutable and len(self.fresh) >= 1 and all(self.fresh)


_OPS = {}


def _kiln_op(func):
    info = _OPS.get(func)
    if info is None:
        info = _OPS[func] = _KilnOp(func)
    return info


def _fast_meta_results(func, args, kwargs, device):
    """kiln's meta function's results for a `fast` op, or None where it
    fails (torch's own meta kernel decides then)."""
    from kiln import _C

    try:
        metas = _C.infer_meta_on(device, func.name(), *args, **kwargs)
    except Exception:  # noqa: BLE001 - torch's own meta kernel decides then
        return None
    outs = [torch.empty_strided(sizes, strides, dtype=dtype, device="meta")
            for dtype, sizes, strides, _offset, _device in metas]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _device_faithful(func, args, kwargs, out, device):
    """torch's meta kernels model CUDA where a result's dtype depends on the
    device: native_layer_norm and native_batch_norm keep float16/bfloat16
    statistics on CPU, in float32 on CUDA and meta. Where kiln's meta
    function for `device` disagrees with the meta kernel on a dtype, torch's
    fake tensors, which model the device, decide. Returns `out` with the
    dtypes on `device`."""
    fresh = _kiln_op(func).fresh
    outs = out if isinstance(out, tuple) else (out,)
    if not any(fresh) or len(outs) != len(fresh):
        return out
    from kiln import _C

    try:
        metas = _C.infer_meta_on(device, func.name(), *args, **kwargs)
    except Exception:  # noqa: BLE001 - torch's meta kernel stands then
        return out
    if len(metas) != len(outs) or all(
            not isinstance(o, torch.Tensor) or meta[0] == o.dtype for meta, o in zip(metas, outs)):
        return out
    faithful = _fake_results(func, args, kwargs, device)
    if faithful is None or len(faithful) != len(outs):
        return out
    fixed = []
    for o, f, own in zip(outs, faithful, fresh):
        if own and isinstance(o, torch.Tensor) and isinstance(f, torch.Tensor) and f.dtype != o.dtype:
            o = meta_tensor(f.dtype, o.shape, o.stride(), o.storage_offset())
        fixed.append(o)
    return tuple(fixed) if isinstance(out, tuple) else fixed[0]


def _fake_results(func, args, kwargs, device):
    """Runs func on fake tensors on `device` standing for the meta tensors in
    args; None where torch cannot."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.utils import _pytree as pytree

    mode = FakeTensorMode()

    def fake(value):
        if isinstance(value, torch.Tensor) and value.device.type == "meta":
            return FakeTensor(mode, value, device)
        return value

    try:
        fake_args, fake_kwargs = pytree.tree_map(fake, (args, kwargs))
        with mode:
            result = func(*fake_args, **fake_kwargs)
    except Exception:  # noqa: BLE001 - no better answer than the meta kernel's
        return None
    return result if isinstance(result, tuple) else (result,)


class _Recorder(TorchDispatchMode):
    def __init__(self, default_device, device, fast=True, watch_generator=True,
                 options_from_tensors=False, symbolic=False):
        super().__init__()
        self.calls = []
        # Tracing on fake tensors with symbolic sizes (kiln._symbolic).
        self.symbolic = symbolic
        self.default_device = default_device
        # The device the meta tensors stand for.
        self.device = device if device is not None else torch.device(default_device)
        # Whether the traced call reads tensors: a C++ composite (the
        # scaled_dot_product_attention math path) then makes its tensors
        # with its inputs' options, whose device is the meta tensors' own.
        self.options_from_tensors = options_from_tensors
        self.fast = fast
        # Ops on meta tensors draw no random numbers: the CPU generator
        # changes during a trace only where Python code seeds it (as
        # torch.testing's wrapper_set_seed does), which a graph would lose.
        self.generator_state = torch.get_rng_state() if watch_generator else None

    def check_generator(self):
        if self.generator_state is None:
            return
        if not torch.equal(torch.get_rng_state(), self.generator_state):
            raise RuntimeError("the call seeds or sets torch's random generator, "
                               "which a graph cannot replay")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        run_kwargs = kwargs
        device = kwargs.get("device")
        if device is not None:
            device = torch.device(device)
            if device.type == "meta":
                # Injected by the meta default device (the program meant its
                # own default device), or taken from a meta input's options
                # (the device that input stands for).
                meant = self.device if self.options_from_tensors else self.default_device
                kwargs = dict(kwargs, device=meant)
            else:
                run_kwargs = dict(kwargs, device=torch.device("meta"))
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.check_generator()
        if self.symbolic:
            out = func(*args, **run_kwargs)
            # Torch's decompositions query sizes and devices through the
            # dispatcher on fake tensors (aten.size, aten.sym_numel,
            # prim.device); those are not operations.
            if func.namespace != "prim" and _returns_tensors(func):
                layouts = _layouts(out, _symbolic.layout)
                self.calls.append((func, args, kwargs, out, layouts))
            return out
        kiln_meta = self.fast and _kiln_op(func).fast
        out = _fast_meta_results(func, args, run_kwargs, self.device) if kiln_meta else None
        if out is None:
            out = func(*args, **run_kwargs)
            # Where kiln's meta function just failed, it has nothing to check.
            if self.device.type != "meta" and not kiln_meta:
                out = _device_faithful(func, args, run_kwargs, out, self.device)
        self.calls.append((func, args, kwargs, out, _layouts(out)))
        return out


def _static_layout(tensor):
    return (tuple(tensor.shape), tensor.stride(), tensor.storage_offset())


def _layouts(out, layout_of=_static_layout):
    """(sizes, strides, storage offset) of each tensor in `out` (None for a
    None), flat in order, as they are when the op returns: a later op of the
    same traced call may change them in place (resize_, unsqueeze_). For
    fake tensors with symbolic sizes, `layout_of` is kiln._symbolic.layout
    (hints, and the symbolic layout)."""
    if isinstance(out, torch.Tensor):
        return [layout_of(out)]
    if out is None:
        return [None]
    if isinstance(out, (tuple, list)):
        return [layout for item in out for layout in _layouts(item, layout_of)]
    return []


_RETURNS_TENSORS = {}


def _returns_tensors(func):
    """Whether an operator's schema returns a tensor (or tensors)."""
    found = _RETURNS_TENSORS.get(func)
    if found is None:
        found = _RETURNS_TENSORS[func] = any(
            "Tensor" in str(r.type) for r in func._schema.returns)
    return found


def trace(fn, args, kwargs, device=None, symbolic=None):
    """Calls fn(*args, **kwargs) with meta tensors standing for graph values
    on `device` (None: the default device); with `symbolic` (a
    kiln._symbolic.SymbolicCapture), fake tensors of its mode. Returns
    (result, [(op_overload, args, kwargs, result, layouts), ...]), layouts as
    _layouts gives them when each op returned."""
    # Functions written in C (torch.add, Tensor.view) cannot seed the
    # generator; watching it costs 20 us a call, so only Python ones are.
    reads_tensors = any(isinstance(leaf, torch.Tensor)
                        for leaf in torch.utils._pytree.tree_leaves((args, kwargs)))
    recorder = _Recorder(torch.get_default_device(), device,
                         watch_generator=not isinstance(fn, _C_CALLABLES),
                         options_from_tensors=reads_tensors,
                         symbolic=symbolic is not None)
    if symbolic is not None:
        with torch.device("meta"), symbolic.mode, recorder:
            out = fn(*args, **kwargs)
    else:
        with torch.device("meta"), recorder:
            out = fn(*args, **kwargs)
    recorder.check_generator()
    return out, recorder.calls


def meta_tensor(dtype, sizes, strides, offset):
    """A meta tensor with the given layout."""
    t = torch.empty_strided(sizes, strides, dtype=dtype, device="meta")
    if offset:
        t = t.as_strided(sizes, strides, offset)
    return t
