# kiln's meta functions of the linear-algebra ops against torch: matrix
# products over every matmul case, linear, convolution (N-d, groups,
# transposed, 'same'/'valid', unbatched), pooling and attention. Ops whose
# result layout depends on the kernel torch picks for a device (convolution,
# attention) run on both meta and CPU tensors.
import itertools

import pytest
import torch

import kiln._C as _C
from meta_check import aten_op, check_or_raise, compare, layouts

DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def on_cpu(t):
    """A CPU tensor with t's sizes, strides and storage offset."""
    if not isinstance(t, torch.Tensor):
        return t
    extent = t.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    base = torch.randn(max(extent, 1)).to(t.dtype)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def meta(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def channels_last(t):
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return t.to(memory_format=fmt)


def product_cases():
    for dtype in DTYPES:
        for a, b in [((3, 4), (4, 5)), ((0, 4), (4, 5)), ((3, 0), (0, 5)), ((1, 1), (1, 1))]:
            pairs = [(x, meta(b, dtype)) for x in layouts(a, dtype)]
            pairs += [(meta(a, dtype), y) for y in layouts(b, dtype)]
            for x, y in pairs:
                yield "aten::mm", (x, y), {}
                yield "aten::addmm", (meta((a[0], b[1]), dtype), x, y), {}
                yield "aten::addmm", (meta((b[1],), dtype), x, y), {"beta": 2, "alpha": 0.5}
                yield "aten::matmul", (x, y), {}
        yield "aten::mm", (meta((3, 4), dtype), meta((5, 6), dtype)), {}
        for b in (2, 0):
            x, y = meta((b, 3, 4), dtype), meta((b, 4, 5), dtype)
            for xx, yy in [(x, y), (x.transpose(1, 2).contiguous().transpose(1, 2), y), (x, y[:, :, :3])]:
                yield "aten::bmm", (xx, yy), {}
                yield "aten::baddbmm", (meta((1, 3, 1), dtype), xx, yy), {}
                yield "aten::baddbmm", (meta(tuple(xx.shape[:2]) + (yy.shape[2],), dtype), xx, yy), {}
        for m, v in [((3, 4), (4,)), ((0, 4), (4,)), ((3, 0), (0,))]:
            for x in layouts(m, dtype):
                yield "aten::mv", (x, meta(v, dtype)), {}
                yield "aten::addmv", (meta((m[0],), dtype), x, meta(v, dtype)), {}
                yield "aten::addmv", (meta((1,), dtype), x, meta(v, dtype)), {"beta": 0}
        for n in (0, 1, 5):
            yield "aten::dot", (meta((n,), dtype), meta((n,), dtype)), {}
        yield "aten::dot", (meta((3,), dtype), meta((4,), dtype)), {}
    # matmul: 1-d, 2-d and batched operands on either side, with broadcasting.
    shapes_a = [(4,), (3, 4), (2, 3, 4), (1, 3, 4), (5, 2, 3, 4), (0, 3, 4), (2, 1, 3, 4)]
    shapes_b = [(4,), (4, 6), (2, 4, 6), (1, 4, 6), (5, 1, 4, 6), (3, 2, 4, 6), (4, 0)]
    for a, b in itertools.product(shapes_a, shapes_b):
        for x in layouts(a)[:3]:
            yield "aten::matmul", (x, meta(b)), {}
            yield "aten::matmul", (meta(b), x), {}
    yield "aten::matmul", (meta(()), meta((3,))), {}
    yield "aten::matmul", (meta((3, 4)), meta((5,))), {}
    yield "aten::matmul", (meta((2, 3, 4)), meta((3, 4, 5))), {}
    for shape in [(4,), (3, 4), (2, 3, 4), (2, 1, 3, 4), (0, 4)]:
        for x in layouts(shape):
            for weight in (meta((5, 4)), meta((4, 5)).t(), meta((4,))):
                yield "aten::linear", (x, weight), {}
                if weight.dim() == 2:
                    yield "aten::linear", (x, weight, meta((5,))), {}
                    yield "aten::linear", (x, weight, meta(())), {}


def convolution_cases():
    for nd, dtype in itertools.product((1, 2, 3), (torch.float32, torch.float64)):
        spatial = [7, 6, 5][:nd]
        x = meta([2, 4] + spatial, dtype)
        inputs = [x, x.transpose(-1, -2) if nd > 1 else x[..., ::1], meta([2, 4] + [s * 2 for s in spatial], dtype)[..., ::2]]
        if nd >= 2:
            inputs.append(channels_last(x))
        settings = [(1, 1, 0, 1), (2, 2, 1, 2), (1, 2, 0, 1), (2, 1, 1, 2)]
        for inp, (groups, stride, padding, dilation) in itertools.product(inputs, settings):
            w = meta([6, 4 // groups] + [3] * nd, dtype)
            weights = [w] + ([channels_last(w)] if nd >= 2 else [])
            for weight in weights:
                args = (inp, weight, meta((6,), dtype) if stride == 1 else None,
                        [stride] * nd, [padding] * nd, [dilation] * nd)
                yield "aten::convolution", args + (False, [0] * nd, groups), {}
                yield "aten::_convolution", args + (False, [0] * nd, groups, False, False, True, True), {}
                wt = meta([4, 6 // groups] + [3] * nd, dtype)
                out_pad = [stride - 1] * nd
                yield "aten::convolution", (inp, wt, None, [stride] * nd, [padding] * nd, [dilation] * nd,
                                            True, out_pad, groups), {}
        w = meta([6, 4] + [3] * nd, dtype)
        yield "aten::convolution", (x, w, None, [1], [0], [1], False, [0], 1), {}
        yield "aten::convolution", (x, w, None, [1] * nd, [0] * nd, [1] * nd, False, [0] * nd, 3), {}
        yield "aten::convolution", (meta([2, 4] + [2] * nd, dtype), w, None, [1] * nd, [0] * nd, [1] * nd,
                                    False, [0] * nd, 1), {}
        yield "aten::convolution", (meta([0, 4] + spatial, dtype), w, None, [1] * nd, [0] * nd, [1] * nd,
                                    False, [0] * nd, 1), {}
    for name, nd in (("conv1d", 1), ("conv2d", 2)):
        spatial = [7, 6][:nd]
        for batched, dtype in itertools.product((True, False), (torch.float32, torch.float64)):
            shape = ([2] if batched else []) + [4] + spatial
            inputs = [meta(shape, dtype)]
            if nd == 2 and batched:
                inputs.append(channels_last(meta(shape, dtype)))
            for inp in inputs:
                for kernel in (1, 2, 3):
                    w = meta([6, 4] + [kernel] * nd, dtype)
                    yield f"aten::{name}", (inp, w), {}
                    yield f"aten::{name}", (inp, w, meta((6,), dtype), [2] * nd, [1] * nd, [2] * nd), {}
                    yield f"aten::{name}", (inp, w, None, [1], [0], [1], 1), {}
                    for padding in ("same", "valid"):
                        for dilation in (1, 2):
                            yield f"aten::{name}.padding", (inp, w, None, [1] * nd, padding, [dilation] * nd), {}
                    yield f"aten::{name}.padding", (inp, w, None, [2] * nd, "same"), {}
                if nd == 2:
                    yield f"aten::{name}", (inp, channels_last(meta([6, 4, 3, 3], dtype))), {}


def pooling_cases():
    for shape in [(2, 3, 8, 7), (3, 8, 7), (0, 3, 8, 7), (2, 3, 1, 1), (1, 1, 5, 5)]:
        for i, x in enumerate(layouts(shape)[:3] + ([channels_last(meta(shape))] if len(shape) == 4 else [])):
            for kernel, stride, padding, ceil in [([2], [], [0], False), ([3, 2], [2], [1, 0], True),
                                                  ([3], [2, 1], [1], False), ([2, 2], [3, 3], [1, 1], True),
                                                  ([1], [1], [0], False)]:
                for dilation in ([1], [2, 1]):
                    yield "aten::max_pool2d", (x, kernel, stride, padding, dilation, ceil), {}
                    yield "aten::max_pool2d_with_indices", (x, kernel, stride, padding, dilation, ceil), {}
                yield "aten::avg_pool2d", (x, kernel, stride, padding, ceil), {}
                yield "aten::avg_pool2d", (x, kernel, stride, padding, ceil, False, 3), {}
            for output in ([1, 1], [2, 3], [4, 4], [8, 7], [0, 2]):
                yield "aten::adaptive_avg_pool2d", (x, output), {}
                yield "aten::_adaptive_avg_pool2d", (x, output), {}
    for shape in [(2, 3, 4, 5), (1, 5, 3, 3), (2, 3, 1, 1)]:
        t = meta(shape)
        for x in (t, channels_last(t), t.transpose(-1, -2), meta(shape[:3] + (shape[3] * 2,))[..., ::2]):
            for size in ([8, 10], [1, 1], [3, 2]):
                yield "aten::upsample_nearest2d", (x, size), {}
                yield "aten::upsample_nearest2d.vec", (x, size, None), {}
            for scales in ([2, 3], [1.5, 2.3], [0.5, 0.7]):
                yield "aten::upsample_nearest2d.vec", (x, None, scales), {}
                yield "aten::upsample_bilinear2d.vec", (x, None, True, scales), {}
            for size in ([8, 10], [1, 1]):
                yield "aten::upsample_bilinear2d", (x, size, False), {}
                yield "aten::upsample_bilinear2d.vec", (x, size, True, None), {}
    yield "aten::upsample_nearest2d", (meta((3, 4, 5)), [2, 2]), {}
    yield "aten::upsample_nearest2d.vec", (meta((2, 3, 4, 5)), [2, 2], [2.0, 2.0]), {}
    yield "aten::max_pool2d", (meta((2, 3, 2, 2)), [3]), {}
    yield "aten::max_pool2d", (meta((2, 3, 4, 4)), [2], [2], [2]), {}
    yield "aten::avg_pool2d", (meta((2, 3, 4)), [2], [0]), {}


def attention_cases():
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        B, H, L, S, E = 2, 3, 4, 6, 5
        q = meta((B, H, L, E), dtype)
        qt = meta((B, L, H, E), dtype).transpose(1, 2)
        k = meta((B, H, S, E), dtype)
        kt = meta((B, S, H, E), dtype).transpose(1, 2)
        v7 = meta((B, H, S, 7), dtype)
        for query, key in [(q, k), (qt, kt), (q.transpose(-1, -2).contiguous().transpose(-1, -2), k)]:
            yield "aten::scaled_dot_product_attention", (query, key, key), {}
            yield "aten::scaled_dot_product_attention", (query, key, v7), {}
            yield "aten::scaled_dot_product_attention", (query, key, key), {"is_causal": True, "scale": 0.5}
            yield "aten::scaled_dot_product_attention", (query, key, key, meta((L, S), dtype)), {}
            yield "aten::scaled_dot_product_attention", (query, key, key, meta((B, 1, L, S), torch.bool)), {}
            yield "aten::scaled_dot_product_attention", (query, key, key, meta((L, 1, S), dtype)), {}
            yield "aten::scaled_dot_product_attention", (query, key[:1], key[:1]), {}
            yield "aten::scaled_dot_product_attention", (query, key[:, :1], key[:, :1]), {"enable_gqa": True}
            yield "aten::scaled_dot_product_attention", (query, key[:, :1], key[:, :1]), {}
            yield "aten::scaled_dot_product_attention", (query[0], key[0], key[0]), {}
            yield "aten::scaled_dot_product_attention", (query[None], key[None], key[None]), {}
            yield "aten::scaled_dot_product_attention", (query, key[:, :, :0], key[:, :, :0]), {}
            yield "aten::_scaled_dot_product_flash_attention_for_cpu", (query, key, key), {}
            yield "aten::_scaled_dot_product_flash_attention_for_cpu", (query, key, key, 0.0, True), {}
            yield "aten::_scaled_dot_product_flash_attention_for_cpu", (query, key, key), {"attn_mask": meta((L, S), dtype)}


FAMILIES = {
    "products": list(product_cases()),
    "convolution": list(convolution_cases()),
    "pooling": list(pooling_cases()),
    "attention": list(attention_cases()),
}
# Ops torch runs with different kernels (and result layouts) on the CPU.
# Convolutions have their own CPU test below.
DEVICE_DEPENDENT = {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
                    "aten::max_pool2d", "aten::conv2d.padding", "aten::upsample_nearest2d.vec"}


def grouped():
    groups = {}
    for cases in FAMILIES.values():
        for name, args, kwargs in cases:
            first = args[0]
            key = (name, f"{first.dim()}d-{str(first.dtype).split('.')[1]}")
            groups.setdefault(key, []).append((args, kwargs))
    return groups


GROUPS = grouped()


@pytest.mark.parametrize("key", list(GROUPS), ids=[f"{k[0].split('::')[1]}-{k[1]}" for k in GROUPS])
def test_linear_algebra_meta_matches_torch(key):
    name = key[0]
    for args, kwargs in GROUPS[key]:
        check_or_raise(name, *args, **kwargs)
        if name in DEVICE_DEPENDENT:
            cpu_args = [on_cpu(a) for a in args]
            cpu_kwargs = {k: on_cpu(v) for k, v in kwargs.items()}
            check_or_raise(name, *cpu_args, **cpu_kwargs)


@pytest.mark.parametrize("nd,dtype", list(itertools.product((1, 2, 3), (torch.float32, torch.float64, torch.bfloat16))))
def test_convolution_on_cpu_is_channels_last_where_torch_makes_it(nd, dtype):
    # A few configurations per rank and dtype: oneDNN compiles a kernel for
    # each, which makes CPU convolutions slow to test in bulk.
    x = on_cpu(meta([2, 4] + [6] * nd, dtype))
    for transposed, input_cl, weight_cl in itertools.product((False, True), (False, True), (False, True)):
        w = on_cpu(meta([4, 4] + [3] * nd, dtype))
        inp = channels_last(x) if input_cl and nd > 1 else x
        weight = channels_last(w) if weight_cl and nd > 1 else w
        args = (inp, weight, None, [1] * nd, [1] * nd, [1] * nd, transposed, [0] * nd, 1)
        if nd == 3 and dtype == torch.bfloat16 and (input_cl or weight_cl):
            # oneDNN's bfloat16 support depends on the CPU: kiln refuses.
            with pytest.raises(_C.Unsupported):
                _C.infer_meta("aten::convolution", *args)
            continue
        check_or_raise("aten::convolution", *args)
        if nd < 3:
            check_or_raise(f"aten::conv{nd}d", inp, weight, None, [2] * nd)
            check_or_raise(f"aten::conv{nd}d", inp[0], weight)


def test_there_are_plenty_of_linear_algebra_cases():
    assert sum(len(cases) for cases in GROUPS.values()) > 1500


ERRORS = [
    ("aten::mm", (meta((3, 4)), meta((5, 6))), "cannot be multiplied"),
    ("aten::bmm", (meta((2, 3, 4)), meta((3, 4, 5))), "batch2"),
    ("aten::dot", (meta((3,)), meta((4,))), "inconsistent tensor size"),
    ("aten::matmul", (meta(()), meta((3,))), "at least 1D"),
    ("aten::convolution", (meta((2, 3, 7, 7)), meta((6, 4, 3, 3)), None, [1], [0], [1], False, [0], 1),
     "to have 4 channels"),
    ("aten::convolution", (meta((2, 4, 2, 2)), meta((6, 4, 3, 3)), None, [1], [0], [1], False, [0], 1),
     "Kernel size can't be greater"),
    ("aten::conv2d.padding", (meta((2, 4, 7, 7)), meta((6, 4, 3, 3)), None, [2], "same"), "strided"),
    ("aten::max_pool2d", (meta((2, 3, 4, 4)), [2], [2], [2]), "half of"),
]


@pytest.mark.parametrize("name,args,message", ERRORS, ids=[e[0] + "-" + e[2][:12] for e in ERRORS])
def test_linear_algebra_errors_are_actionable(name, args, message):
    with pytest.raises((RuntimeError, IndexError)):
        aten_op(name)(*args)
    with pytest.raises(RuntimeError, match=message):
        _C.infer_meta(name, *args)
