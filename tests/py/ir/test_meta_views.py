# kiln's meta functions of the view ops against torch on meta tensors: sizes,
# strides and storage offsets over empty, size-1, transposed, sliced,
# expanded and offset layouts, and the same errors where torch refuses.
import pytest
import torch

import kiln._C as _C
from meta_check import aten_op, check, check_or_raise, compare, layouts

SHAPES = [(), (0,), (1,), (5,), (2, 3), (3, 1), (0, 4), (2, 3, 4), (1, 4, 1, 3), (2, 3, 4, 5)]


def inputs():
    for shape in SHAPES:
        for i, t in enumerate(layouts(shape)):
            yield f"{list(shape)}#{i}", t
        yield f"{list(shape)}i64", torch.empty(shape, dtype=torch.int64, device="meta")
    cl = torch.empty(2, 3, 4, 5, device="meta").to(memory_format=torch.channels_last)
    yield "channels_last", cl
    yield "channels_last_sliced", cl[:, :, 1:, ::2]


def view_targets(shape):
    n = 1
    for s in shape:
        n *= s
    targets = [[-1], list(reversed(shape)), list(shape) + [1], [1] + list(shape)]
    if shape and shape[-1] % 2 == 0 and shape[-1] > 0:
        targets.append(list(shape[:-1]) + [2, shape[-1] // 2])
    if len(shape) >= 2:
        targets.append([-1, shape[-1]])
        targets.append([shape[0] * shape[1]] + list(shape[2:]))
    if n > 0:
        targets.append([n, -1])
    return targets


def cases():
    for label, t in inputs():
        shape = list(t.shape)
        nd = t.dim()
        for target in view_targets(shape):
            yield label, "aten::view", (t, target), {}
            yield label, "aten::reshape", (t, target), {}
            yield label, "aten::_unsafe_view", (t, target), {}
        yield label, "aten::_reshape_alias", (t, shape, list(t.stride())), {}
        yield label, "aten::permute", (t, list(range(nd))[::-1]), {}
        yield label, "aten::permute", (t, [d - nd for d in range(nd)]), {}
        yield label, "aten::transpose.int", (t, 0, -1), {}
        yield label, "aten::transpose.int", (t, -1, -1), {}
        yield label, "aten::t", (t,), {}
        expanded = [3 if s == 1 else s for s in shape]
        yield label, "aten::expand", (t, expanded), {}
        yield label, "aten::expand", (t, [2] + expanded), {}
        yield label, "aten::expand", (t, [2] + [-1] * nd), {}
        yield label, "aten::expand_as", (t, torch.empty([4] + expanded, device="meta")), {}
        yield label, "aten::squeeze", (t,), {}
        yield label, "aten::squeeze.dims", (t, list(range(nd))), {}
        yield label, "aten::unsqueeze", (t, 0), {}
        yield label, "aten::unsqueeze", (t, -1), {}
        yield label, "aten::unsqueeze", (t, nd // 2), {}
        yield label, "aten::contiguous", (t,), {}
        yield label, "aten::alias", (t,), {}
        yield label, "aten::detach", (t,), {}
        yield label, "aten::lift_fresh_copy", (t,), {}
        yield label, "aten::flatten.using_ints", (t,), {}
        yield label, "aten::movedim.int", (t, 0, -1), {}
        yield label, "aten::as_strided", (t, [2, 2], [1, 2]), {}
        yield label, "aten::as_strided", (t, [2], [3], 1), {}
        if nd == 4:
            yield label, "aten::contiguous", (t,), {"memory_format": torch.channels_last}
        if nd >= 2:
            yield label, "aten::flatten.using_ints", (t, 1, -1), {}
            yield label, "aten::flatten.using_ints", (t, 0, -2), {}
            yield label, "aten::flatten.using_ints", (t, 1, 1), {}
            for offset in (-1, 0, 1, 5):
                yield label, "aten::diagonal", (t, offset), {}
            yield label, "aten::diagonal", (t, 1, -1, 0), {}
        for d in range(nd):
            size = shape[d]
            yield label, "aten::squeeze.dim", (t, d), {}
            yield label, "aten::squeeze.dim", (t, d - nd), {}
            for start, end, step in [(None, None, 1), (1, None, 2), (-3, -1, 1), (10, 20, 1),
                                     (-100, 100, 3), (2, 1, 1), (0, size, 1)]:
                yield label, "aten::slice.Tensor", (t, d, start, end, step), {}
            yield label, "aten::select.int", (t, d, 0), {}
            yield label, "aten::select.int", (t, d, -1), {}
            yield label, "aten::unbind.int", (t, d), {}
            yield label, "aten::split.Tensor", (t, 2, d), {}
            yield label, "aten::split.Tensor", (t, 1, d - nd), {}
            yield label, "aten::split_with_sizes", (t, [size // 2, size - size // 2], d), {}
            yield label, "aten::chunk", (t, 2, d), {}
            yield label, "aten::chunk", (t, 3, d), {}
            yield label, "aten::narrow", (t, d, 0, size // 2), {}
            yield label, "aten::narrow", (t, d, -1, min(size, 1)), {}
            yield label, "aten::unflatten.int", (t, d, [1, -1]), {}
            if size % 2 == 0 and size > 0:
                yield label, "aten::unflatten.int", (t, d, [2, size // 2]), {}
    for shape in [(3,), (2, 3), (4, 2, 3)]:
        for i, t in enumerate(layouts(shape, torch.complex64)):
            yield f"c64{list(shape)}#{i}", "aten::view_as_real", (t,), {}


CASES = list(cases())


def grouped(cases):
    """Cases grouped by op and input shape, one test each: pytest's cost per
    test outweighs a meta check's many times over."""
    groups = {}
    for label, name, args, kwargs in cases:
        groups.setdefault((name, f"{args[0].dim()}d"), []).append((args, kwargs))
    return groups


GROUPS = grouped(CASES)


@pytest.mark.parametrize("key", list(GROUPS), ids=[f"{k[0].split('::')[1]}-{k[1]}" for k in GROUPS])
def test_view_meta_matches_torch(key):
    for args, kwargs in GROUPS[key]:
        check_or_raise(key[0], *args, **kwargs)


def test_there_are_plenty_of_view_cases():
    assert len(CASES) > 1000


ERRORS = [
    ("aten::view", (torch.empty(4, 6, device="meta").t(), [24]), "view size is not compatible"),
    ("aten::view", (torch.empty(4, 6, device="meta"), [5, -1]), "invalid for input of size 24"),
    ("aten::view", (torch.empty(4, 6, device="meta"), [-1, -1]), "only one dimension"),
    ("aten::expand", (torch.empty(2, 3, device="meta"), [4, 3]), "must match the existing size"),
    ("aten::select.int", (torch.empty(2, 3, device="meta"), 0, 2), "out of range"),
    ("aten::transpose.int", (torch.empty(2, 3, device="meta"), 0, 2), "Dimension out of range"),
    ("aten::slice.Tensor", (torch.empty(2, 3, device="meta"), 0, 0, 2, 0), "step must be positive"),
    ("aten::narrow", (torch.empty(2, 3, device="meta"), 1, 2, 2), "exceeds dimension size"),
    ("aten::split_with_sizes", (torch.empty(2, 3, device="meta"), [1, 1], 1), "sum exactly to 3"),
    ("aten::t", (torch.empty(2, 3, 4, device="meta"),), "<= 2 dimensions"),
    ("aten::diagonal", (torch.empty(2, 3, device="meta"), 0, 1, 1), "cannot be identical"),
    ("aten::view_as_real", (torch.empty(2, device="meta"),), "complex"),
]


@pytest.mark.parametrize("name,args,message", ERRORS, ids=[e[0] + e[2][:10] for e in ERRORS])
def test_view_errors_are_actionable(name, args, message):
    with pytest.raises((RuntimeError, IndexError)):
        aten_op(name)(*args)
    with pytest.raises(RuntimeError, match=message):
        _C.infer_meta(name, *args)


def test_reshape_of_non_viewable_copies_with_offset_zero():
    t = torch.empty(10, device="meta")[2:].view(2, 4).t()
    check("aten::reshape", t, [8])
    got = _C.infer_meta("aten::reshape", t, [8])[0]
    assert got[3] == 0 and list(got[2]) == [1]
