# A compiled function's outputs alias as eager's do: an output that eager
# returns as a new view of an input (x[:], x.detach(), a no-op reshape) is a
# new tensor object viewing the input, never the input itself; an output that
# eager returns as the input itself (x.contiguous() of a contiguous x) is it.
import pytest
import torch

import kiln

VIEWS_OF_THE_INPUT = {
    "ellipsis": lambda x: x[...],
    "detach": lambda x: x.detach(),
    "full_slice": lambda x: x[:],
    "narrow_all": lambda x: x.narrow(0, 0, x.shape[0]),
    "reshape_same": lambda x: x.reshape(x.shape),
    "view_same": lambda x: x.view(x.shape),
    "expand_same": lambda x: x.expand(x.shape),
    "permute_identity": lambda x: x.permute(0, 1),
    "squeeze_non_one": lambda x: x.squeeze(0),
    "transpose_twice": lambda x: x.t().t(),
}
THE_INPUT_ITSELF = {
    "identity": lambda x: x,
    "contiguous": lambda x: x.contiguous(),
    "to_same_dtype": lambda x: x.to(torch.float32),
}


def _storage(t):
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("name", sorted(VIEWS_OF_THE_INPUT))
def test_a_view_output_is_a_new_tensor_viewing_the_input(name):
    fn = VIEWS_OF_THE_INPUT[name]
    x = torch.randn(2, 3)
    expected, actual = fn(x), kiln.compile(fn)(x)
    assert expected is not x
    assert actual is not x
    assert _storage(actual) == _storage(x)
    assert actual.shape == expected.shape and actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected)
    # Changing the output's metadata leaves the caller's tensor alone.
    actual.unsqueeze_(0)
    assert x.shape == (2, 3)
    actual.requires_grad_()
    assert not x.requires_grad


@pytest.mark.parametrize("name", sorted(THE_INPUT_ITSELF))
def test_an_output_eager_returns_as_the_input_is_the_input(name):
    fn = THE_INPUT_ITSELF[name]
    x = torch.randn(2, 3)
    assert fn(x) is x
    assert kiln.compile(fn)(x) is x


def test_the_same_view_returned_twice_is_one_object_and_not_the_input():
    def fn(x):
        y = x[:]
        return x, y, y

    x = torch.randn(4)
    a, b, c = kiln.compile(fn)(x)
    assert a is x and b is not x and b is c
    assert _storage(b) == _storage(x)


def test_a_view_of_a_computed_output_is_another_object_on_its_storage():
    def fn(x):
        y = x * 2
        return y, y.view(y.shape)

    x = torch.randn(3, 4)
    y, v = kiln.compile(fn)(x)
    assert y is not v
    assert _storage(y) == _storage(v)
    torch.testing.assert_close(v, x * 2)
