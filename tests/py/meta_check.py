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


def compare(name, expected_result, args, kwargs, check_offset=None):
    """Raises AssertionError describing the first difference between kiln's
    meta function and torch's result of `name(*args, **kwargs)`."""
    expected = result_tensors(expected_result)
    got = _C.infer_meta(name, *args, **kwargs)
    assert len(got) == len(expected), f"{name}: {len(got)} results, torch gives {len(expected)}"
    is_view = _C.op_schema(name).count("(a)") > 0 if check_offset is None else check_offset
    for i, (tensor, (dtype, sizes, strides, offset, device)) in enumerate(zip(expected, got)):
        where = f"{name} result {i} for {describe(args, kwargs)}"
        assert dtype == tensor.dtype, f"{where}: dtype {dtype}, torch gives {tensor.dtype}"
        assert tuple(sizes) == tuple(tensor.shape), f"{where}: sizes {sizes}, torch gives {list(tensor.shape)}"
        assert significant_strides_equal(sizes, tensor.stride(), strides), (
            f"{where}: strides {strides}, torch gives {list(tensor.stride())}")
        if is_view:
            assert offset == tensor.storage_offset(), (
                f"{where}: storage offset {offset}, torch gives {tensor.storage_offset()}")
        assert torch.device(device).type == tensor.device.type, f"{where}: device {device} vs {tensor.device}"


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
