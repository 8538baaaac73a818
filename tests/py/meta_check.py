# Compares kiln's meta functions with what torch itself produces for the same
# call: dtype, sizes, significant strides, storage offset (views) and device.
import torch
import torch.utils._pytree as pytree

import kiln._C as _C


def aten_op(name):
    """`torch.ops.aten.add.Tensor` for "aten::add.Tensor"."""
    namespace, rest = name.split("::")
    packet, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")


def result_tensors(result):
    return [t for t in pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]


def significant_strides_equal(sizes, expected, actual):
    """Strides of size-1 dimensions, and all strides of empty tensors, do not
    change which elements a tensor holds (torch's own meta tests ignore them)."""
    if 0 in sizes:
        return True
    return all(s <= 1 or e == a for s, e, a in zip(sizes, expected, actual))


def compare(name, expected_result, args, kwargs, check_offset=None, check_device=True, got=None):
    """Raises AssertionError describing the first difference between kiln's
    meta function (or `got`, its result) and torch's result of
    `name(*args, **kwargs)`."""
    expected = result_tensors(expected_result)
    if got is None:
        got = _C.infer_meta(name, *args, **kwargs)
    assert len(got) == len(expected), f"{name}: {len(got)} results, torch gives {len(expected)}"
    is_view = _C.op_schema(name).count("(a)") > 0 if check_offset is None else check_offset
    for i, (tensor, (dtype, sizes, strides, offset, device)) in enumerate(zip(expected, got)):
        where = _Where(name, i, args, kwargs)
        assert dtype == tensor.dtype, f"{where}: dtype {dtype}, torch gives {tensor.dtype}"
        assert tuple(sizes) == tuple(tensor.shape), f"{where}: sizes {sizes}, torch gives {list(tensor.shape)}"
        assert significant_strides_equal(sizes, tensor.stride(), strides), (
            f"{where}: strides {strides}, torch gives {list(tensor.stride())}")
        if is_view:
            assert offset == tensor.storage_offset(), (
                f"{where}: storage offset {offset}, torch gives {tensor.storage_offset()}")
        if check_device:
            assert torch.device(device).type == tensor.device.type, f"{where}: device {device} vs {tensor.device}"


class _Where:
    """ "<op> result <i> for <args>", formatted only when an assertion fails."""

    def __init__(self, name, index, args, kwargs):
        self.parts = (name, index, args, kwargs)

    def __str__(self):
        name, index, args, kwargs = self.parts
        return f"{name} result {index} for {describe(args, kwargs)}"

    __format__ = lambda self, spec: format(str(self), spec)


def describe(args, kwargs):
    def one(a):
        if isinstance(a, torch.Tensor):
            return f"{str(a.dtype).replace('torch.', '')}{list(a.shape)}/{list(a.stride())}"
        return repr(a)

    parts = [one(a) for a in pytree.tree_leaves(args)]
    parts += [f"{k}={one(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def check(name, *args, **kwargs):
    """Runs the op in torch on the given tensors and compares kiln's meta."""
    expected = aten_op(name)(*args, **kwargs)
    compare(name, expected, args, kwargs)


def meta_tensor(shape, dtype=torch.float32, strides=None, offset=0):
    """A tensor on the meta device with the given layout (no data)."""
    if strides is None:
        return torch.empty(shape, dtype=dtype, device="meta")
    return torch.empty_strided(shape, strides, dtype=dtype, device="meta").as_strided(
        shape, strides, offset) if offset else torch.empty_strided(shape, strides, dtype=dtype, device="meta")


def layouts(shape, dtype=torch.float32):
    """The same shape in several layouts: contiguous, transposed, sliced
    (non-dense), expanded (stride 0), and with a storage offset."""
    out = [torch.empty(shape, dtype=dtype, device="meta")]
    if len(shape) >= 2:
        out.append(torch.empty(shape[::-1], dtype=dtype, device="meta").t()
                   if len(shape) == 2 else
                   torch.empty(list(shape[:-2]) + [shape[-1], shape[-2]], dtype=dtype, device="meta").transpose(-1, -2))
    if len(shape) >= 1 and shape[-1] > 0:
        big = torch.empty(list(shape[:-1]) + [shape[-1] * 2], dtype=dtype, device="meta")
        out.append(big[..., ::2])
        out.append(torch.empty(list(shape[:-1]) + [1], dtype=dtype, device="meta").expand(*shape))
        out.append(torch.empty(numel(shape) + 3, dtype=dtype, device="meta")[3:].view(shape))
    return out


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def cpu_twin(value):
    """A CPU tensor with the dtype, sizes, strides and storage offset of a
    meta tensor, over a storage of ones (so no kernel divides by zero); other
    values are returned as they are."""
    if not isinstance(value, torch.Tensor) or value.device.type != "meta":
        return value
    extent = 0
    if value.numel() > 0:
        extent = value.storage_offset() + 1 + sum(
            (size - 1) * stride for size, stride in zip(value.shape, value.stride()))
    storage = torch.ones(max(extent, 1), dtype=value.dtype)
    return storage.as_strided(value.shape, value.stride(), value.storage_offset())


# (name, description) of calls where torch's meta device disagrees with its
# CPU kernels and kiln's meta-device answer follows the CPU instead.
DEVICE_DISAGREEMENTS = []


def _same_results(a, b):
    a, b = result_tensors(a), result_tensors(b)
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape
        and significant_strides_equal(list(x.shape), x.stride(), y.stride())
        for x, y in zip(a, b))


def _attempt(function, *args, **kwargs):
    try:
        return function(*args, **kwargs), None
    except Exception as error:  # the caller compares who raises
        return None, error


def check_like_torch(name, *args, meta_only=False, **kwargs):
    """Like check(), and also kiln on CPU twins of the meta tensors against
    torch's CPU kernels (unless meta_only): meta kernels skip the dtype checks
    of real kernels, and some results depend on the device. For each device,
    where torch raises kiln must raise; kiln may also raise where torch raises
    on the other device (it refuses what a real kernel refuses); otherwise
    kiln's result must match torch's on that device, except that kiln's
    meta-device result may follow the CPU where torch's meta device disagrees
    with it (recorded in DEVICE_DISAGREEMENTS). Returns "error" when torch
    raised on every device tried, else "ok"."""
    op = aten_op(name)
    runs = {"meta": (args, kwargs)}
    if not meta_only:
        runs["cpu"] = pytree.tree_map(cpu_twin, (args, kwargs))
    torch_results = {device: _attempt(op, *a, **k) for device, (a, k) in runs.items()}
    for device, (device_args, device_kwargs) in runs.items():
        expected, torch_error = torch_results[device]
        got, kiln_error = _attempt(_C.infer_meta, name, *device_args, **device_kwargs)
        others_raise = any(error for d, (_, error) in torch_results.items() if d != device)
        if torch_error is not None:
            assert kiln_error is not None, (
                f"{name}{describe(args, kwargs)} on {device}: torch raises {type(torch_error).__name__}: "
                f"{str(torch_error).splitlines()[0]}; kiln gives {got}")
            continue
        if kiln_error is not None:
            if others_raise:
                continue
            raise kiln_error
        if device == "meta" and not meta_only and torch_results["cpu"][1] is None:
            cpu_expected = torch_results["cpu"][0]
            if not _same_results(expected, cpu_expected):
                try:
                    compare(name, expected, device_args, device_kwargs, got=got)
                except AssertionError:
                    compare(name, cpu_expected, device_args, device_kwargs,
                            check_device=False, got=got)
                    DEVICE_DISAGREEMENTS.append((name, describe(args, kwargs)))
                continue
        compare(name, expected, device_args, device_kwargs, got=got)
    all_raise = all(error is not None for _, error in torch_results.values())
    return "error" if all_raise else "ok"


def check_or_raise(name, *args, **kwargs):
    """Compares with torch where torch succeeds; expects kiln to refuse the
    call where torch refuses it."""
    import pytest

    try:
        expected = aten_op(name)(*args, **kwargs)
    except (RuntimeError, IndexError, ValueError):
        with pytest.raises(RuntimeError):
            _C.infer_meta(name, *args, **kwargs)
        return
    compare(name, expected, args, kwargs)
