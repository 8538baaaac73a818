# Differential tests of dynamic shapes by op family: each function is
# compiled with dynamic=True and called at several sizes (fresh random
# inputs, a transposed or strided one among them); every result must match
# eager, and sizes of at least 2 must share one capture. Families: pointwise
# and broadcasting, reductions over symbolic and static dims, normalizations,
# views and reshapes, cat/split/stack, slicing with symbolic bounds, indexing,
# matrix products, factories sized by the input.
import pytest
import torch
import torch.nn.functional as F

import kiln


def _sizes_2d(n):
    return (n, 6)


# Running mean and variance, weight and bias of a 6-channel batch norm.
_STATS = (torch.randn(6), torch.rand(6) + 0.5, torch.randn(6), torch.randn(6))


CASES = {
    # pointwise and broadcasting
    "chain": (lambda x: torch.sigmoid(x * 2 + 1) - x.abs().sqrt(), _sizes_2d),
    "broadcast_row": (lambda x: x + x[:1], _sizes_2d),
    "broadcast_column": (lambda x: x * x.sum(1, keepdim=True), _sizes_2d),
    "where": (lambda x: torch.where(x > 0, x, x * 0.1), _sizes_2d),
    "outer": (lambda x: x[:, 0:1] * x[:, 1].unsqueeze(0), _sizes_2d),
    # reductions
    "sum_symbolic_dim": (lambda x: x.sum(0), _sizes_2d),
    "mean_static_dim": (lambda x: x.mean(1), _sizes_2d),
    "amax_all": (lambda x: x.amax(), _sizes_2d),
    "var": (lambda x: x.var(0), _sizes_2d),
    "argmax": (lambda x: x.argmax(0), _sizes_2d),
    "cumsum": (lambda x: x.cumsum(0), _sizes_2d),
    # normalizations
    "softmax_symbolic": (lambda x: torch.softmax(x, 0), _sizes_2d),
    "log_softmax": (lambda x: F.log_softmax(x, -1), _sizes_2d),
    "layer_norm": (lambda x: F.layer_norm(x, (6,)), _sizes_2d),
    "batch_norm_eval": (lambda x: F.relu(F.batch_norm(x, _STATS[0], _STATS[1], _STATS[2],
                                                      _STATS[3], training=False)), _sizes_2d),
    # views and reshapes
    "flatten": (lambda x: x.reshape(-1) * 2, _sizes_2d),
    "view_split_dim": (lambda x: x.view(x.shape[0], 2, 3).sum(-1), _sizes_2d),
    "transpose_contiguous": (lambda x: x.t().contiguous() + 1, _sizes_2d),
    "permute_3d": (lambda x: x.view(x.shape[0], 3, 2).permute(2, 0, 1) * 3, _sizes_2d),
    "expand": (lambda x: x[:, :1].expand(-1, 4) + 1, _sizes_2d),
    "unsqueeze_squeeze": (lambda x: x.unsqueeze(1).squeeze(1) - 1, _sizes_2d),
    # cat, split, stack
    "cat_self": (lambda x: torch.cat([x, x * 2], 0), _sizes_2d),
    "cat_columns": (lambda x: torch.cat([x, x[:, :2]], 1), _sizes_2d),
    "split": (lambda x: x.split(3, dim=1)[1] * 2, _sizes_2d),
    "chunk_symbolic": (lambda x: x[: x.shape[0] // 2 * 2].chunk(2, 0)[0] + 1, _sizes_2d),
    "stack": (lambda x: torch.stack([x, -x], 0).sum(0), _sizes_2d),
    # slicing with symbolic bounds
    "slice_half": (lambda x: x[: x.shape[0] // 2], _sizes_2d),
    "slice_tail": (lambda x: x[1:] - x[:-1], _sizes_2d),
    "slice_step": (lambda x: x[::2] * 2, _sizes_2d),
    "narrow": (lambda x: x.narrow(0, 1, x.shape[0] - 1), _sizes_2d),
    # indexing
    "index_select": (lambda x: x.index_select(1, torch.tensor([0, 2])), _sizes_2d),
    "flip": (lambda x: x.flip(0), _sizes_2d),
    # an op left to torch whose argument is a size: evaluated in each call
    "roll_by_half": (lambda x: torch.roll(x * 2, x.shape[0] // 2, 0) + 1, _sizes_2d),
    # matrix products (extern calls)
    "matmul": (lambda x: x @ x.t(), _sizes_2d),
    "bmm_like": (lambda x: torch.einsum("ij,kj->ik", x, x).softmax(-1), _sizes_2d),
    # factories sized by the input
    "arange": (lambda x: x + torch.arange(x.shape[0]).unsqueeze(1), _sizes_2d),
    "ones_like": (lambda x: torch.ones_like(x) + torch.zeros(x.shape[0], 1), _sizes_2d),
    "tril_mask": (lambda x: (x @ x.t()).masked_fill(
        torch.ones(x.shape[0], x.shape[0], dtype=torch.bool).triu(1), 0.0), _sizes_2d),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_family_matches_eager_at_every_size(name):
    fn, shape_of = CASES[name]
    compiled = kiln.compile(fn, dynamic=True)
    for n in (4, 7, 12, 9):
        x = torch.randn(*shape_of(n))
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
    # A transposed input: another stride layout, a capture of its own.
    x = torch.randn(6, 9).t()
    torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
    info = kiln.cache_info(compiled)
    assert not info["runs_in_cpython"], info["fallback_reason"]
    # Sizes 4, 7, 9 and 12 share a capture (plus the transposed layout's);
    # a function torch cannot trace symbolically specialises instead.
    assert info["entries"] <= 2 or not any(r.startswith("dynamic") for r in info["runners"])
    # Each dynamic capture is one program whose kernels read the sizes (ops
    # kiln lowers only at fixed sizes run as torch calls inside it).
    for runner in info["runners"]:
        if runner.startswith("dynamic"):
            assert "compiled once for every size" in runner, runner


def test_two_symbols_and_their_relation():
    def fn(x, y):
        return (x @ y).sum(1) + x.shape[1]

    compiled = kiln.compile(fn, dynamic=True)
    for n, k, m in ((3, 4, 5), (6, 2, 7), (9, 9, 9)):
        x, y = torch.randn(n, k), torch.randn(k, m)
        torch.testing.assert_close(compiled(x, y), fn(x, y))
    with pytest.raises(RuntimeError):
        compiled(torch.randn(3, 4), torch.randn(5, 6))


def test_an_odd_size_fails_a_divisibility_guard_and_recompiles():
    def fn(x):
        return x.view(x.shape[0] // 2, 2, x.shape[1]).sum(1)

    compiled = kiln.compile(fn, dynamic=True)
    for n in (4, 8, 10):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), fn(x))
    entries = kiln.cache_info(compiled)["entries"]
    # The relations the view relied on are guards, printed as expressions.
    guards = "\n".join(kiln.cache_info(compiled)["guards"])
    assert "s0 >= 2" in guards and "s0//2" in guards, guards
    with pytest.raises(RuntimeError):
        fn(torch.randn(5, 3))
    with pytest.raises(RuntimeError):
        compiled(torch.randn(5, 3))
    assert kiln.cache_info(compiled)["entries"] >= entries
