# Real functions and modules compiled with torch.compile(fn, backend="kiln")
# and with kiln.compile(fn): results equal eager torch on fresh random inputs
# of plain and of odd layouts (non-contiguous, broadcast, size-1, channels
# last), and every graph really went through kiln (no silent fallback).
import collections
import math

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import kiln
from kiln import _backend

GENERATOR = torch.Generator().manual_seed(1234)


def weight(*shape, scale=0.3):
    return torch.randn(*shape, generator=GENERATOR) * scale


def strided(*shape):
    """Random values in a non-contiguous layout: every other element of the
    last dimension."""
    return torch.randn(*shape[:-1], shape[-1] * 2)[..., ::2]


def transposed(*shape):
    """Random values whose storage order is the reverse of their shape."""
    return torch.randn(*reversed(shape)).permute(*reversed(range(len(shape))))


def broadcast(*shape):
    """Random values repeated along the first dimension (stride 0)."""
    return torch.randn(1, *shape[1:]).expand(*shape)


def channels_last(*shape):
    return torch.randn(*shape).contiguous(memory_format=torch.channels_last)


class Case:
    def __init__(self, fn, plain, odd, tolerance=None, mutates=False, check=None):
        self.fn = fn
        self.inputs = {"plain": plain, "odd": odd}
        self.tolerance = tolerance or {}
        self.mutates = mutates
        self.check = check


CASES = {}


def case(plain, odd, **options):
    def register(fn):
        CASES[fn.__name__] = Case(fn, plain, odd, **options)
        return fn

    return register


def module_case(name, module, plain, odd, **options):
    CASES[name] = Case(module, plain, odd, **options)


# --- Multi-layer perceptrons and friends -------------------------------------

W1, B1, W2, B2 = weight(16, 32), weight(32), weight(32, 8), weight(8)


@case(lambda: (torch.randn(8, 16),), lambda: (strided(1, 16),))
def mlp(x):
    return F.relu(x @ W1 + B1) @ W2 + B2


LW1, LB1, LW2 = weight(64, 16), weight(64), weight(16, 64)


@case(lambda: (torch.randn(4, 5, 16),), lambda: (broadcast(3, 5, 16),))
def gelu_mlp(x):
    return F.linear(F.gelu(F.linear(x, LW1, LB1), approximate="tanh"), LW2)


SW1, SW3, SW2 = weight(16, 24), weight(16, 24), weight(24, 16)


@case(lambda: (torch.randn(6, 16),), lambda: (transposed(6, 16),))
def swiglu(x):
    return (F.silu(x @ SW1) * (x @ SW3)) @ SW2


module_case(
    "dropout_mlp_module",
    nn.Sequential(nn.Linear(12, 20), nn.Dropout(0.5), nn.ReLU(), nn.Linear(20, 3)).eval(),
    lambda: (torch.randn(7, 12),),
    lambda: (strided(7, 12),),
)

# --- Normalisation -----------------------------------------------------------

LN_W, LN_B = weight(16) + 1, weight(16)


@case(lambda: (torch.randn(4, 6, 16),), lambda: (strided(4, 1, 16),))
def layer_norm(x):
    return F.layer_norm(x, (16,), LN_W, LN_B, eps=1e-5)


RMS_W = weight(16) + 1


@case(lambda: (torch.randn(3, 5, 16),), lambda: (strided(1, 1, 16),))
def rms_norm(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * RMS_W


GN_W, GN_B = weight(6) + 1, weight(6)


@case(lambda: (torch.randn(2, 6, 5, 5),), lambda: (channels_last(2, 6, 5, 5),))
def group_norm(x):
    return F.group_norm(x, 2, GN_W, GN_B)


@case(lambda: (torch.randn(5, 8), torch.randn(5, 8)), lambda: (transposed(5, 8), broadcast(5, 8)))
def normalize_cosine(x, y):
    return F.normalize(x, dim=-1), F.cosine_similarity(x, y, dim=-1)


# --- Attention and transformer pieces ----------------------------------------


def causal_attention(q, k, v):
    length = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


CASES["causal_attention"] = Case(
    causal_attention,
    lambda: tuple(torch.randn(2, 3, 5, 8) for _ in range(3)),
    # (batch, time, heads, dim) transposed to (batch, heads, time, dim), and
    # a single query position.
    lambda: tuple(torch.randn(2, 1, 3, 8).transpose(1, 2) for _ in range(3)),
)


@case(
    lambda: (torch.randn(2, 6, 6), torch.rand(2, 6, 6) > 0.5),
    lambda: (transposed(2, 6, 6), torch.rand(1, 6) > 0.5),
)
def masked_softmax(x, mask):
    return x.masked_fill(mask, -1e4).softmax(-1)


class TransformerBlock(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = causal_attention(q, k, v).transpose(1, 2).reshape(batch, length, dim)
        x = x + self.proj(attended)
        return x + self.mlp(self.norm2(x))


torch.manual_seed(1234)
module_case(
    "transformer_block_module",
    TransformerBlock().eval(),
    lambda: (torch.randn(2, 5, 16),),
    lambda: (strided(1, 5, 16),),
    tolerance={"atol": 1e-5, "rtol": 1e-4},
)

RES_W1, RES_W2 = weight(16, 32), weight(32, 16)


@case(lambda: (torch.randn(3, 16),), lambda: (strided(3, 16),))
def residual_block(x):
    hidden = F.layer_norm(x, (16,))
    return x + F.relu(hidden @ RES_W1) @ RES_W2


TOKENS, POSITIONS = weight(50, 12), weight(16, 12)


@case(
    lambda: (torch.randint(0, 50, (2, 7)),),
    lambda: (torch.randint(0, 50, (7, 2)).t(),),
)
def embedding_positional(ids):
    positions = torch.arange(ids.shape[1])
    return F.embedding(ids, TOKENS) + F.embedding(positions, POSITIONS)[None]


LSTM_W, LSTM_U, LSTM_B = weight(10, 32), weight(8, 32), weight(32)


@case(
    lambda: (torch.randn(3, 10), torch.randn(3, 8), torch.randn(3, 8)),
    lambda: (torch.randn(3, 10), strided(3, 8), broadcast(3, 8)),
)
def lstm_cell(x, h, c):
    i, f, g, o = (x @ LSTM_W + h @ LSTM_U + LSTM_B).chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


# --- Convolutions and images -------------------------------------------------

torch.manual_seed(4321)
module_case(
    "conv_bn_relu_module",
    nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).eval(),
    lambda: (torch.randn(2, 3, 8, 8),),
    lambda: (channels_last(1, 3, 8, 8),),
    tolerance={"atol": 1e-5, "rtol": 1e-4},
)


@case(lambda: (torch.randn(2, 3, 8, 8),), lambda: (channels_last(1, 3, 8, 8),))
def pooling(x):
    return F.max_pool2d(x, 2) + F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1)


@case(lambda: (torch.randn(1, 2, 4, 4),), lambda: (channels_last(2, 2, 3, 3),))
def interpolate_and_pad(x):
    return (
        F.interpolate(x, scale_factor=2, mode="nearest"),
        F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False),
        F.pad(x, (1, 1, 2, 0), value=0.5),
    )


# --- Reductions, indexing, shapes --------------------------------------------


@case(lambda: (torch.randn(6, 7),), lambda: (transposed(6, 7),))
def reductions(x):
    return (
        x.sum(0),
        x.mean(-1, keepdim=True),
        x.amax(1),
        x.var(0),
        x.std(1, unbiased=False),
        torch.logsumexp(x, 1),
        (x * 0.1 + 1).prod(1),
        x.abs().max(),
    )


@case(
    lambda: (torch.randn(6, 8), torch.tensor([5, 0, 3])),
    lambda: (strided(6, 8), torch.tensor([1, 1, 5])),
)
def indexing_slicing(x, idx):
    return x[1:, ::2] * 2, x[:, idx].sum(1, keepdim=True), x[idx, 2:5], x[-1], x[..., None, 3]


@case(
    lambda: (torch.randn(4, 3), torch.randn(4, 3)),
    lambda: (strided(4, 3), broadcast(4, 3)),
)
def cat_stack(x, y):
    return torch.cat([x, y * 2], 1), torch.stack([x, y]).sum(0), torch.cat([x[:1], y], 0)


@case(lambda: (torch.randn(2, 12, 5),), lambda: (strided(2, 12, 5),))
def views_permutes(x):
    batch = x.shape[0]
    y = x.reshape(batch, 4, 3, 5).permute(0, 3, 1, 2)
    return y.reshape(batch, -1).t().contiguous(), y.flatten(1).unsqueeze(-1).squeeze(-1), x.transpose(0, 2)


@case(lambda: (torch.randn(4, 9),), lambda: (transposed(4, 9),))
def split_chunk(x):
    a, b, c = x.chunk(3, 1)
    return a * b + c, torch.split(x, [1, 3, 5], 1)[2], x.unbind(0)[1]


@case(lambda: (torch.randn(5, 6),), lambda: (transposed(5, 6),))
def topk_sort(x):
    values, indices = torch.topk(x, 3, dim=-1)
    ordered, _ = torch.sort(x, dim=0, descending=True)
    return values, indices, ordered[:2]


@case(lambda: (torch.randn(4, 6),), lambda: (transposed(4, 6),))
def cumulative(x):
    return torch.cumsum(x, 1), torch.cumprod(x * 0.1 + 1, 0), torch.cummax(x, 1).values


@case(lambda: (torch.randn(5, 6),), lambda: (strided(5, 6),))
def argmax_gather(x):
    return x.gather(1, x.argmax(1, keepdim=True)), x.argmin(0).float().sum()


@case(
    lambda: (torch.randn(4, 3), torch.tensor([0, 2, 2, 4])),
    lambda: (strided(4, 3), torch.tensor([1, 1, 1, 1])),
)
def scatter_index_add(x, idx):
    added = torch.zeros(5, 3).index_add(0, idx, x)
    scattered = torch.zeros(5, 3).scatter_add(0, idx[:, None].expand(4, 3), x)
    return added, scattered


# --- Elementwise, types, creation --------------------------------------------


@case(
    lambda: (torch.randn(4, 5), torch.randn(4, 5)),
    lambda: (torch.randn(4, 5), torch.randn(1)),
)
def where_clamp(x, y):
    return torch.where(x > 0, x, y).clamp(-0.5, 0.5) + torch.clamp_min(y, 0)


@case(
    lambda: (torch.randn(4, 5), torch.randn(4, 5)),
    lambda: (strided(4, 5), broadcast(4, 5)),
)
def logical_compare(x, y):
    return ((x > 0) & (y < 0)) | ~(x == y), torch.logical_xor(x > 0.5, y > 0.5), (x >= y).sum()


@case(lambda: (torch.randn(6),), lambda: (strided(6),))
def dtype_conversions(x):
    return (x.to(torch.float64) * 2).sum(), x.half().float(), (x * 10).long() // 3, x.int() * 2.5


@case(lambda: (torch.randn(3, 4),), lambda: (broadcast(3, 4),))
def creation_ops(x):
    n = x.shape[1]
    return (
        x
        + torch.arange(n)
        + torch.ones_like(x) * torch.full((1, n), 0.5)
        + torch.zeros(n).fill_(2)
        + torch.eye(n)[0]
    )


@case(lambda: (torch.randn(2, 3),), lambda: (strided(2, 3),))
def constants_inside(x):
    return x * torch.tensor([1.0, 2.0, 3.0]) + torch.tensor(0.5)


@case(lambda: (torch.randn(5), torch.randn(4)), lambda: (strided(5), torch.randn(1)))
def outer_broadcast(x, y):
    return x[:, None] * y[None, :] - (x**2)[:, None] + torch.outer(x, y)


@case(
    lambda: (torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(2, 3, 3)),
    lambda: (transposed(2, 3, 4), broadcast(2, 4, 5), strided(2, 3, 3)),
)
def einsum(a, b, square):
    return torch.einsum("bij,bjk->bik", a, b) + torch.einsum("bii->b", square)[:, None, None]


@case(
    lambda: (torch.randn(2, 1, 3, 4), torch.randn(5, 4, 6)),
    lambda: (strided(2, 1, 3, 4), transposed(5, 4, 6)),
)
def batched_matmul(a, b):
    return torch.matmul(a, b), torch.bmm(b.transpose(1, 2), b)


@case(
    lambda: (torch.randn(4, 10), torch.randint(0, 10, (4,))),
    lambda: (transposed(4, 10), torch.randint(0, 10, (4,))),
)
def cross_entropy(logits, target):
    return F.cross_entropy(logits, target), F.log_softmax(logits, -1).gather(1, target[:, None])


# --- Mutation and Python-level outputs ---------------------------------------


@case(lambda: (torch.randn(3, 4),), lambda: (strided(3, 4),))
def inplace_on_intermediate(x):
    y = x.clone()
    y.add_(1)
    y.mul_(2)
    y[0] = 0
    return y


@case(lambda: (torch.randn(3, 4), torch.randn(3, 4)), lambda: (torch.randn(3, 4), broadcast(3, 4)), mutates=True)
def input_mutation(x, y):
    x.add_(y)
    return x * 2


@case(lambda: (torch.randn(3, 4),), lambda: (strided(1, 4),))
def non_tensor_outputs(x):
    return x.sum(), None, 3, x.shape[0], x.relu()


# --- Training: forward and backward through kiln ------------------------------


def check_training(compiled, module, inputs):
    """The compiled module's outputs, input gradients and parameter
    gradients equal eager torch's (both graphs of aot_autograd go through
    kiln)."""
    reference = {name: p.detach().clone() for name, p in module.state_dict().items()}
    results = []
    for run in (compiled, module):
        module.load_state_dict(reference)
        module.zero_grad()
        x = inputs.detach().clone().requires_grad_()
        out = run(x)
        out.square().mean().backward()
        grads = [p.grad.clone() for p in module.parameters()]
        results.append((out.detach(), x.grad, grads, [b.clone() for b in module.buffers()]))
    (out, x_grad, grads, buffers), (out_e, x_grad_e, grads_e, buffers_e) = results
    tolerance = {"atol": 1e-5, "rtol": 1e-4}
    assert_close(out, out_e, **tolerance)
    assert_close(x_grad, x_grad_e, **tolerance)
    for g, e in zip(grads, grads_e):
        assert_close(g, e, **tolerance)
    for b, e in zip(buffers, buffers_e):
        assert_close(b, e, **tolerance)


torch.manual_seed(99)
module_case(
    "mlp_training",
    nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 2)),
    lambda: (torch.randn(5, 6),),
    lambda: (strided(5, 6),),
    check=check_training,
)
module_case(
    "conv_bn_training",
    nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU()),
    lambda: (torch.randn(2, 2, 6, 6),),
    lambda: (channels_last(2, 2, 6, 6),),
    check=check_training,
)


# --- The harness ---------------------------------------------------------------


def assert_same(actual, expected, tolerance):
    flat_actual, spec_actual = torch.utils._pytree.tree_flatten(actual)
    flat_expected, spec_expected = torch.utils._pytree.tree_flatten(expected)
    assert spec_actual == spec_expected
    for a, e in zip(flat_actual, flat_expected):
        if isinstance(e, torch.Tensor):
            assert_close(a, e, **tolerance)
        else:
            assert a == e


def clone(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def run_case(name, compile_fn, layout, via="torch.compile"):
    """`via` says which frontend captured: TorchDynamo with kiln as backend
    ("torch.compile"), or kiln's own ("kiln")."""
    torch._dynamo.reset()
    entry = CASES[name]
    before = collections.Counter(_backend.counters)
    compiled = compile_fn(entry.fn)
    # The first call compiles; the second, on fresh inputs of the same
    # layout, runs the cached kiln graph.
    for _ in range(2):
        args = entry.inputs[layout]()
        if entry.check:
            entry.check(compiled, entry.fn, *args)
            continue
        with torch.no_grad():
            eager_args = clone(args)
            expected = entry.fn(*eager_args)
            actual = compiled(*args)
        assert_same(actual, expected, entry.tolerance)
        if entry.mutates:
            assert_same(list(args), eager_args, entry.tolerance)
    if via == "kiln":
        info = kiln.cache_info(compiled)
        assert not info["runs_in_cpython"], info["fallback_reason"]
        assert info["entries"] >= 1 and info["hits"] >= 1, info
        return
    done = collections.Counter(_backend.counters)
    done.subtract(before)
    assert done["graphs"] >= 1, "no graph reached kiln"
    assert done["fallbacks"] == 0, "a graph fell back to FX (see KILN_LOGS=breaks)"


NAMES = sorted(CASES)


def test_there_are_at_least_thirty_functions():
    assert len(NAMES) >= 30


@pytest.mark.parametrize("name", NAMES)
def test_torch_compile_backend_kiln(name):
    run_case(name, lambda fn: torch.compile(fn, backend="kiln"), "odd")


@pytest.mark.parametrize("name", NAMES)
def test_kiln_compile(name):
    run_case(name, kiln.compile, "plain", via="kiln")


@pytest.mark.parametrize("backend", ["eager", "llvm"])
def test_kiln_compile_backends_and_fullgraph(backend):
    run_case("mlp", lambda fn: kiln.compile(fn, backend=backend, fullgraph=True), "odd", via="kiln")
    run_case("transformer_block_module", lambda fn: kiln.compile(fn, backend=backend), "odd",
             via="kiln")


def test_graph_breaks_still_give_eager_answers():
    def branchy(x):
        y = x.relu()
        if y.sum().item() > 3:  # data-dependent: a graph break at .item()
            return y * 2
        return y - 1

    compiled = kiln.compile(branchy)
    for scale in (0.1, 10.0):
        x = torch.randn(8) * scale
        assert_close(compiled(x), branchy(x))
    info = kiln.cache_info(compiled)
    assert not info["runs_in_cpython"] and "tensor.item()" in info["break_reasons"][0]
    with pytest.raises(kiln.Unsupported, match="item"):
        kiln.compile(branchy, fullgraph=True)(torch.randn(8))


def test_dynamic_shapes_share_one_capture_and_stay_right():
    compiled = kiln.compile(mlp, dynamic=True)
    for rows in (3, 5):
        x = torch.randn(rows, 16)
        assert_close(compiled(x), mlp(x))
    assert kiln.cache_info(compiled)["entries"] == 1


def test_compiled_module_forwards_attributes():
    torch.manual_seed(0)
    module = nn.Linear(4, 3)
    compiled = kiln.compile(module)
    assert compiled.weight is module.weight
    assert compiled.in_features == 4
    assert compiled.__wrapped__ is module
    compiled.custom = 5
    assert module.custom == 5
    del compiled.custom
    assert not hasattr(module, "custom")
    assert "weight" in dir(compiled)
    assert repr(compiled).startswith("kiln.compile(Linear(")
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert_close(compiled(x), module(x))
    assert compiled.eval() is module
