# In-place ops in user code (nn.ReLU(inplace=True), masked_fill_, x += y)
# on tensors the function itself made are functional ops in kiln's graph:
# they lower and fuse like their out-of-place forms, and writes through views
# of them scatter into them. Writes that the caller can see (a graph
# input's) keep eager's semantics through torch. Values, strides, dtypes and input mutations are
# eager's in every case.
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


def _flat(result):
    items = result if isinstance(result, (tuple, list)) else (result,)
    out = []
    for item in items:
        out.extend(item if isinstance(item, list) else [item])
    return out


def _check(fn, *inputs):
    eager_inputs = [t.clone() for t in inputs]
    kiln_inputs = [t.clone() for t in inputs]
    compiled = kiln.compile(fn)
    expected, actual = _flat(fn(*eager_inputs)), _flat(compiled(*kiln_inputs))
    assert len(expected) == len(actual)
    for e, a in zip(expected, actual):
        assert a.dtype == e.dtype and a.shape == e.shape and a.stride() == e.stride()
        torch.testing.assert_close(a, e)
    for e, a in zip(eager_inputs, kiln_inputs):  # mutations of the inputs
        assert torch.equal(a, e)
    return kiln.cache_info(compiled)["runners"][0]


def chained(x):
    y = x * 2
    y.add_(1).mul_(2)
    return y


def augmented(x):
    y = x * 2
    y += x
    y *= 3
    return y


def read_before_and_after(x):
    y = x * 2
    before = y + 1
    y.mul_(3)
    return before, y + 1


def returned_as_both(x):
    y = x * 2
    z = y.relu_()
    return z, y


def views_after_the_writes(x):
    y = x * 2
    y.clamp_min_(0.5)
    return y.t() * 1, y.view(-1)


def activations(x):
    y = x * 10
    F.relu6(y, inplace=True)
    z = x - 1
    F.leaky_relu(z, 0.1, inplace=True)
    w = x + 1
    torch.sigmoid_(w)
    return y, z, w


def fill_and_copy(x):
    y = x * 2
    y.fill_(3.0)
    z = x + 1
    z.copy_(x.t().contiguous().t())
    return y + x, z


def zeroed(x):
    y = x * 2
    y.zero_()
    return y + x


def masked_scores(x):
    scores = x @ x.t()
    scores.masked_fill_(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1)


def in_a_loop(x):
    ys = [x * i for i in range(3)]
    for y in ys:
        y.add_(1)
    return ys


def channels_last(x):
    y = (x.view(2, 4, 4, 4) * 2).contiguous(memory_format=torch.channels_last)
    y.relu_()
    return y


@pytest.mark.parametrize("fn", [chained, augmented, read_before_and_after, returned_as_both,
                                views_after_the_writes, activations, fill_and_copy, zeroed, masked_scores,
                                in_a_loop, channels_last])
def test_writes_to_the_functions_own_tensors_are_functional_ops(fn):
    runner = _check(fn, torch.randn(8, 16))
    assert runner.startswith("native:") and "0 extern" in runner, runner


def write_to_an_input(x):
    x.mul_(2)
    return x + 1


def dtype_kept(x):
    y = x.half() * 2
    y.add_(x)  # float16 + float32 is float32; add_ keeps float16
    return y


def dtype_promoted_other(x):
    y = x * 2
    y.add_(x.half())
    return y


def written_through_an_expanded_view(x):
    y = x[:, :1] * 2
    y.expand(8, 16).add_(1)  # eager refuses: its elements share memory
    return y


@pytest.mark.parametrize("fn", [write_to_an_input, dtype_kept, dtype_promoted_other])
def test_writes_others_can_see_keep_eagers_semantics(fn):
    _check(fn, torch.randn(8, 16))


def view_before_the_write(x):
    y = x * 2
    v = y[0]
    y.add_(1)
    return v, y


def write_through_a_view(x):
    y = x * 2
    y.view(16, 8).add_(1)
    return y


def column_set(x):
    y = x * 2
    y[:, 0] = 1.0
    return y + 1


def slice_assigned(x):
    y = x.exp()
    y[:, 2:5] = x[:, :3] * 3
    y[1:3] = x[0]  # broadcast
    return y.sum(0), y


def augmented_slice(x):
    y = x * 2
    y[1:, ::2] += 1  # add_ of the view, then copy_ of it into itself
    return y


def old_view_read_after(x):
    y = x.exp()
    v = y[1]
    y[1:, ::2].mul_(3)
    return v * 2, y


def concatenated_by_writes(x):
    out = torch.zeros(8, 20)
    out[:, :16] = x
    out[:, 16:] = x[:, :4].sigmoid()
    out.t()[3].fill_(5)
    return out


def rows_in_a_loop(x):
    y = x.clone()
    for i in range(4):
        y[i] = y[i] * i + y[i + 1]
    return y


def reshaped_view_row(x):
    y = x * 2
    y.view(16, 8)[3].zero_()
    y.view(-1)[5:100:7] = -1.0  # crosses rows: positions from the flat offset
    return y


def channels_last_slice(x):
    y = (x.view(2, 4, 4, 4) * 2).contiguous(memory_format=torch.channels_last)
    y[:, 1:3, :, 1] = 0.0
    return y


def half_precision(x):
    y = x.half() * 2
    y[::3, 1:] *= 0.5
    return y


def returned_view(x):
    y = x * 2
    v = y[:, 1:4]
    v.relu_()
    return v, y


@pytest.mark.parametrize("fn", [view_before_the_write, write_through_a_view, column_set, slice_assigned,
                                augmented_slice, old_view_read_after, concatenated_by_writes, rows_in_a_loop,
                                reshaped_view_row, channels_last_slice, half_precision, returned_view])
def test_writes_through_views_of_the_functions_own_tensors_are_kernels(fn):
    # Each write through a view scatters into the tensor (as_strided_scatter),
    # and views read later are taken again: values, strides, aliasing of
    # returned views and inputs are eager's, with no call into torch.
    runner = _check(fn, torch.randn(8, 16))
    assert runner.startswith("native:") and "0 extern" in runner, runner


def test_a_returned_view_still_aliases_its_base():
    def fn(x):
        y = x * 2
        v = y[:, 1:4]
        y[:, 2] = 0.0
        return v, y
    v, y = kiln.compile(fn)(torch.randn(8, 16))
    assert v.data_ptr() == y.data_ptr() + y.element_size()
    y[0, 1] = 7.0
    assert v[0, 0] == 7.0


def test_a_write_through_an_expanded_view_raises_eagers_error():
    x = torch.randn(8, 16)
    with pytest.raises(RuntimeError) as eager:
        written_through_an_expanded_view(x)
    with pytest.raises(RuntimeError, match="single memory location"):
        kiln.compile(written_through_an_expanded_view)(x)
    assert "single memory location" in str(eager.value)


def test_broadcasting_into_a_written_tensor_raises_eagers_error():
    def fn(x):
        y = x[:, :1] * 2
        y.add_(x)
        return y
    x = torch.randn(8, 16)
    with pytest.raises(RuntimeError) as eager:
        fn(x.clone())
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        kiln.compile(fn)(x.clone())
    assert "doesn't match the broadcast shape" in str(eager.value)


def _cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU6(inplace=True)).eval()


def test_a_cnn_with_in_place_activations_runs_without_torch_and_exports(tmp_path):
    model, x = _cnn(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        compiled = kiln.compile(model)
        torch.testing.assert_close(compiled(x), model(x))
        runner = kiln.cache_info(compiled)["runners"][0]
        assert "aten::relu_" not in runner and "hardtanh_" not in runner, runner
        kiln.export(model, (x,), str(tmp_path), name="cnn")
        exported = kiln.load_exported(str(tmp_path), "cnn")
        result = exported(x)
        result = result[0] if isinstance(result, (tuple, list)) else result
        torch.testing.assert_close(result, model(x))
