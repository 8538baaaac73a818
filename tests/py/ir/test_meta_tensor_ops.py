# kiln's meta functions of the tensor-creation, combining and indexing ops
# against torch: factories and *_like ops over dtypes and memory formats,
# cat/stack promotion and layouts, gather/scatter/index, padding, sorting.
# Ops whose result layout depends on the device (index, roll) run on both
# meta and CPU tensors.
import pytest
import torch

import kiln._C as _C
from meta_check import aten_op, check_or_raise, compare, layouts

DTYPES = (torch.float32, torch.int64, torch.bool, torch.bfloat16)
SHAPES = [(), (0,), (1,), (5,), (2, 3), (3, 1), (0, 4), (2, 3, 4), (2, 3, 4, 5)]
LONG = torch.int64


def on_cpu(t):
    """A CPU tensor with t's sizes, strides and storage offset."""
    if not isinstance(t, torch.Tensor):
        return [on_cpu(x) for x in t] if isinstance(t, list) else t
    extent = t.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    base = torch.zeros(max(extent, 1), dtype=t.dtype)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def meta(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def all_layouts(dtype=torch.float32):
    for shape in SHAPES:
        for i, t in enumerate(layouts(shape, dtype)):
            yield f"{list(shape)}#{i}", t
    cl = meta((2, 3, 4, 5), dtype).to(memory_format=torch.channels_last)
    yield "channels_last", cl
    yield "channels_last_sliced", cl[:, :, 1:, ::2]


def factory_cases():
    sizes = [[], [0], [3], [2, 3], [2, 3, 4, 5]]
    for size in sizes:
        for dtype in (None,) + DTYPES:
            kw = {} if dtype is None else {"dtype": dtype}
            yield "aten::zeros", (size,), kw
            yield "aten::ones", (size,), kw
            yield "aten::empty.memory_format", (size,), kw
            yield "aten::empty_strided", (size, [1] * len(size)), kw
        for value in (True, 2, 2.5):
            yield "aten::full", (size, value), {}
            yield "aten::full", (size, value), {"dtype": torch.float64}
        if len(size) == 4:
            yield "aten::empty.memory_format", (size,), {"memory_format": torch.channels_last}
    yield "aten::zeros", ([2, -1],), {}
    for value in (True, 3, -1.5):
        yield "aten::scalar_tensor", (value,), {}
        yield "aten::scalar_tensor", (value,), {"dtype": LONG}
    for bounds in [(5,), (0,), (2.5,), (True,)]:
        yield "aten::arange", bounds, {}
        yield "aten::arange", bounds, {"dtype": torch.float64}
    for bounds in [(1, 7), (0.5, 3), (3, 3), (7, 1), (-2, 5.5)]:
        yield "aten::arange.start", bounds, {}
        yield "aten::arange.start", bounds, {"dtype": LONG}
    for bounds in [(0, 10, 3), (0.5, 3, 1), (0, 1, 0.1), (10, 0, -3), (0, 5, 1.0), (1, 2, 0),
                   (0.5, 3.5, 1), (-3, 4, 2), (0, -1, 1), (5, 0, -0.7)]:
        yield "aten::arange.start_step", bounds, {}
        yield "aten::arange.start_step", bounds, {"dtype": LONG}
        yield "aten::arange.start_step", bounds, {"dtype": torch.int32}
        yield "aten::arange.start_step", bounds, {"dtype": torch.float16}


def like_cases():
    for label, t in all_layouts():
        for fmt in (None, torch.preserve_format, torch.contiguous_format) + (
                (torch.channels_last,) if t.dim() == 4 else ()):
            kw = {} if fmt is None else {"memory_format": fmt}
            for name in ("aten::empty_like", "aten::zeros_like", "aten::ones_like",
                         "aten::rand_like", "aten::randn_like"):
                yield name, (t,), kw
            yield "aten::full_like", (t, 7), kw
            yield "aten::clone", (t,), kw
        yield "aten::zeros_like", (t,), {"dtype": LONG}
        yield "aten::full_like", (t, 1.5), {"dtype": torch.float64}
        yield "aten::new_zeros", (t, [2, 3]), {}
        yield "aten::new_ones", (t, [0]), {"dtype": torch.bool}
        yield "aten::new_empty", (t, []), {}
        yield "aten::new_full", (t, [4], 2.5), {}
        yield "aten::fill.Scalar", (t, 2), {}
        yield "aten::fill.Tensor", (t, meta(())), {}
        yield "aten::fill.Tensor", (t, meta((1,))), {}
        yield "aten::copy", (t, meta(t.shape[-1:] if t.dim() else ())), {}
        yield "aten::copy", (t, meta(t.shape, torch.float64)), {}
        yield "aten::copy", (t, meta((7,))), {}
        yield "aten::repeat", (t, [2] * t.dim()), {}
        yield "aten::repeat", (t, [1, 3] + [1] * t.dim()), {}
        yield "aten::repeat", (t, [1] * max(t.dim() - 1, 0)), {}
        yield "aten::flip", (t, list(range(t.dim()))), {}
        yield "aten::flip", (t, [-1] if t.dim() else []), {}
        if t.dim() >= 2:
            for diagonal in (-1, 0, 2):
                yield "aten::tril", (t, diagonal), {}
                yield "aten::triu", (t, diagonal), {}
        for pad in ([1, 1], [0, 2, 1, 0], [-1, 0], [-1, -1, 0, 0], [0, 0], [2, -1], [-3, 0]):
            if len(pad) // 2 <= t.dim():
                yield "aten::constant_pad_nd", (t, pad), {}
                yield "aten::constant_pad_nd", (t, pad, 1.5), {}
        for d in range(-1, t.dim()):
            yield "aten::sort", (t, d), {}
            yield "aten::sort", (t,), {"dim": d, "descending": True}
            yield "aten::sort.stable", (t,), {"stable": True, "dim": d}
            size = t.shape[d] if t.dim() else 1
            for k in {0, 1, size}:
                yield "aten::topk", (t, k, d), {}


def combine_cases():
    for label, t in all_layouts():
        nd = t.dim()
        others = [meta(t.shape), t.to(torch.int32) if False else meta(t.shape, torch.int32)]
        for d in range(-nd, nd):
            yield "aten::cat", ([t, t], d), {}
            yield "aten::cat", ([t, others[0]], d), {}
            yield "aten::cat", ([t, others[1], meta((0,), torch.float64)], d), {}
            grown = list(t.shape)
            grown[d] += 2
            yield "aten::cat", ([t, meta(grown, torch.bfloat16)], d), {}
        yield "aten::cat", ([t],), {}
        yield "aten::cat", ([meta((0,)), t],), {}
        for d in range(-nd - 1, nd + 1):
            yield "aten::stack", ([t, t], d), {}
            yield "aten::stack", ([t, others[0], t], d), {}
    cl = meta((2, 3, 4, 5)).to(memory_format=torch.channels_last)
    for d in range(4):
        yield "aten::cat", ([cl, cl], d), {}
        yield "aten::cat", ([cl, meta((2, 3, 4, 5))], d), {}
        yield "aten::cat", ([cl, meta((0,))], d), {}
        yield "aten::stack", ([cl, cl], d), {}
    yield "aten::cat", ([meta((0,)), meta((0,), LONG)],), {}
    yield "aten::cat", ([meta((2, 3)), meta((2, 4))], 0), {}
    yield "aten::cat", ([meta((2, 3)), meta((3,))], 0), {}
    yield "aten::cat", ([meta(())],), {}
    yield "aten::stack", ([meta((2, 3)), meta((3, 2))],), {}


def index_cases():
    for label, t in all_layouts():
        nd = t.dim()
        for d in range(-nd, max(nd, 1)):
            size = t.shape[d] if nd else 1
            for index in (meta((0,), LONG), meta((3,), LONG), meta((), LONG), meta((2,), torch.int32)):
                yield "aten::index_select", (t, d, index), {}
            idx_shape = list(t.shape)
            if nd:
                idx_shape[d] = 2
            index = meta(idx_shape, LONG)
            yield "aten::gather", (t, d, index), {}
            yield "aten::scatter.value", (t, d, index, 1.5), {}
            yield "aten::scatter.src", (t, d, index, meta(t.shape)), {}
            if nd >= 2:
                smaller = list(t.shape)
                smaller[-1 if d % nd != nd - 1 else 0] = max(smaller[-1 if d % nd != nd - 1 else 0] - 1, 0)
                smaller[d] = 3
                yield "aten::gather", (t, d, meta(smaller, LONG)), {}
        if nd >= 1:
            yield "aten::index.Tensor", (t, [meta((4,), LONG)]), {}
            yield "aten::index.Tensor", (t, [meta((2, 3), LONG).t()]), {}
            yield "aten::index_put", (t, [meta((4,), LONG)], meta(t.shape[1:])), {}
            yield "aten::index_put", (t, [meta((2,), torch.bool)], meta(())), {}
        if nd >= 2:
            i, j = meta((2, 3), LONG), meta((3,), torch.int32)
            yield "aten::index.Tensor", (t, [None, i]), {}
            yield "aten::index.Tensor", (t, [i, j]), {}
            yield "aten::index.Tensor", (t, [None, i.t()]), {}
            yield "aten::index_put", (t, [None, i], meta(())), {}
        if nd >= 3:
            i = meta((3, 2), LONG).t()
            yield "aten::index.Tensor", (t, [i, None, i]), {}
            yield "aten::index.Tensor", (t, [None, i, i]), {}
            yield "aten::index.Tensor", (t, [None, None, meta((5, 1, 2), LONG)[:, :, ::2]]), {}
            yield "aten::index_put", (t, [i, None, i], meta((t.shape[1] if nd == 3 else t.shape[-1],))), {}
    weight = meta((10, 4))
    for indices in (meta((3,), LONG), meta((2, 3), LONG), meta((), LONG), meta((0, 2), torch.int32),
                    meta((3, 2), LONG).t()):
        yield "aten::embedding", (weight, indices), {}
        yield "aten::embedding", (weight.t().contiguous().t(), indices, 2), {}


def roll_cases():
    for label, t in all_layouts():
        yield "aten::roll", (t, [1]), {}
        for d in range(t.dim()):
            yield "aten::roll", (t, [2], [d]), {}
            yield "aten::roll", (t, [-1], [d]), {}
            yield "aten::roll", (t, [1, -1], [d, -1]), {}


def pixel_shuffle_cases():
    for dtype in (torch.float32, torch.int64):
        for shape, factor in (((2, 8, 3, 5), 2), ((1, 9, 2, 2), 3), ((8, 3, 5), 2),
                              ((3, 2, 4, 3, 5), 2), ((2, 4, 3, 3), 1), ((0, 8, 3, 5), 2),
                              ((2, 0, 3, 5), 2), ((2, 8, 0, 5), 2), ((2, 5, 3, 3), 2),
                              ((8, 3), 2)):
            for t in layouts(shape, dtype):
                yield "aten::pixel_shuffle", (t, factor), {}
                unshuffled = meta(shape[:-2] + (shape[-2] * factor, shape[-1] * factor), dtype) \
                    if len(shape) >= 2 else meta(shape, dtype)
                yield "aten::pixel_unshuffle", (unshuffled, factor), {}
        cl = meta((2, 8, 4, 6), dtype).to(memory_format=torch.channels_last)
        yield "aten::pixel_shuffle", (cl, 2), {}
        yield "aten::pixel_unshuffle", (cl, 2), {}
        yield "aten::pixel_unshuffle", (meta((2, 2, 5, 6)), 2), {}
        yield "aten::pixel_unshuffle", (meta((2, 2, 6, 5)), 2), {}
        for shape, groups in (((2, 6, 3, 5), 3), ((2, 6, 5), 2), ((0, 6, 3, 5), 3), ((2, 6), 2),
                              ((2, 5, 3, 3), 2), ((2, 4, 3, 3), 0), ((2, 4, 3, 3), -1)):
            for t in layouts(shape, dtype):
                yield "aten::channel_shuffle", (t, groups), {}
        yield "aten::channel_shuffle", (cl, 4), {}


def edge_pad_cases():
    for mode in ("reflection", "replication"):
        for spatial, shapes in ((1, [(3, 5), (2, 3, 5), (2, 0, 5), (5,)]),  # torch's meta is wrong for 4-d
                                (2, [(3, 5, 6), (2, 3, 5, 6), (0, 3, 5, 6), (2, 3, 0, 6), (5, 6)]),
                                (3, [(3, 4, 5, 6), (2, 3, 4, 5, 6)])):
            for shape in shapes:
                for pad in ([1] * (2 * spatial), [0, 2] * spatial, [-1, 2] * spatial, [4, 0] * spatial,
                            [7, 0] * spatial, [-5, 0] * spatial):
                    for t in layouts(shape):
                        yield f"aten::{mode}_pad{spatial}d", (t, pad), {}
        cl = meta((2, 3, 5, 6)).to(memory_format=torch.channels_last)
        yield f"aten::{mode}_pad2d", (cl, [1, 2, 0, 1]), {}


FAMILIES = {
    "factories": list(factory_cases()),
    "like": list(like_cases()),
    "combine": list(combine_cases()),
    "index": list(index_cases()),
    "roll": list(roll_cases()),
    "pixel_shuffle": list(pixel_shuffle_cases()),
    "edge_pad": list(edge_pad_cases()),
}
# Ops whose result layout differs between torch's kernels for devices.
DEVICE_DEPENDENT = {"aten::index.Tensor", "aten::roll", "aten::pixel_shuffle", "aten::pixel_unshuffle",
                    "aten::channel_shuffle", "aten::reflection_pad1d", "aten::reflection_pad2d",
                    "aten::reflection_pad3d", "aten::replication_pad1d", "aten::replication_pad2d",
                    "aten::replication_pad3d"}


def grouped():
    groups = {}
    for family, cases in FAMILIES.items():
        for name, args, kwargs in cases:
            rank = next((a.dim() for a in args if isinstance(a, torch.Tensor)), None)
            if rank is None and args and isinstance(args[0], list) and args[0] and isinstance(args[0][0], torch.Tensor):
                rank = args[0][0].dim()
            key = (name, "-" if rank is None else f"{rank}d")
            groups.setdefault(key, []).append((args, kwargs))
    return groups


GROUPS = grouped()


@pytest.mark.parametrize("key", list(GROUPS), ids=[f"{k[0].split('::')[1]}-{k[1]}" for k in GROUPS])
def test_tensor_op_meta_matches_torch(key):
    name = key[0]
    for args, kwargs in GROUPS[key]:
        check_or_raise(name, *args, **kwargs)
        # On the CPU the (zero) indices must be in bounds.
        if name in DEVICE_DEPENDENT and args[0].numel() > 0:
            check_or_raise(name, *[on_cpu(a) for a in args], **kwargs)


def test_there_are_plenty_of_tensor_op_cases():
    assert sum(len(cases) for cases in GROUPS.values()) > 1500


def test_index_with_a_mask_is_unsupported():
    t = meta((4, 5))
    with pytest.raises(_C.Unsupported, match="mask"):
        _C.infer_meta("aten::index.Tensor", t, [meta((4,), torch.bool)])
    with pytest.raises(_C.Unsupported):
        _C.infer_meta("aten::index.Tensor", t, [None, meta((5,), torch.uint8)])


def test_index_layout_follows_index_tensors_on_cpu():
    t = on_cpu(meta((2, 3, 4, 5)).permute(0, 2, 3, 1))
    i = torch.zeros(3, 2, dtype=LONG).t()
    expected = torch.ops.aten.index.Tensor(t, [None, i])
    compare("aten::index.Tensor", expected, (t, [None, i]), {})
    got = _C.infer_meta("aten::index.Tensor", t, [None, i])[0]
    assert list(got[2]) == list(expected.stride())


ERRORS = [
    ("aten::cat", ([meta((2, 3)), meta((2, 4))], 0), "Sizes of tensors must match"),
    ("aten::cat", ([meta(())],), "zero-dimensional"),
    ("aten::stack", ([meta((2, 3)), meta((3, 2))],), "equal size"),
    ("aten::zeros", ([2, -1],), "negative dimension"),
    ("aten::arange.start_step", (0, 10, 0), "step must be nonzero"),
    ("aten::arange.start_step", (0, -1, 1), "inconsistent with step sign"),
    ("aten::gather", (meta((2, 3)), 0, meta((2, 4), LONG)), "Size does not match"),
    ("aten::topk", (meta((2, 3)), 4), "out of range"),
    ("aten::repeat", (meta((2, 3)), [2]), "can not be smaller"),
    ("aten::constant_pad_nd", (meta((2, 3)), [-2, -2]), "negative output size"),
    ("aten::fill.Tensor", (meta((2, 3)), meta((2,))), "0-dimension"),
    ("aten::tril", (meta((3,)),), "at least 2 dimensions"),
]


@pytest.mark.parametrize("name,args,message", ERRORS, ids=[e[0] + "-" + e[2][:12] for e in ERRORS])
def test_tensor_op_errors_are_actionable(name, args, message):
    with pytest.raises((RuntimeError, IndexError)):
        aten_op(name)(*args)
    with pytest.raises(RuntimeError, match=message):
        _C.infer_meta(name, *args)
