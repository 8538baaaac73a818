# More differential tests of the Python constructs real model code uses, on the
# harness of test_differential_constructs.py (see its header): each small
# function is compiled with kiln.compile (fullgraph=True unless a comment says
# why not) and checked against eager on a first call, a cached second call
# with fresh values and, where natural, a call with other shapes. These cases
# combine the constructs the way model code does: nested containers as inputs
# and outputs, nn.Module patterns (ModuleList/ModuleDict, config attributes,
# train/eval branches, buffers, attention, weight tying), closures and
# decorators, dataclass/NamedTuple configs and outputs, static control flow,
# dtype/device handling, and size-1, empty and non-contiguous inputs.
import dataclasses
import math
from typing import NamedTuple, Optional

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import test_differential_constructs as base
from test_differential_constructs import R, RI

CASES = []


def case(fn, args, alt=None, *, full=True, state=(), xfail=None):
    """Registers fn(*args) (and fn(*alt), other shapes) in this file's CASES;
    as test_differential_constructs.case (full=False: kiln raises Unsupported
    under fullgraph=True, see the comment at the case)."""
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    name = fn.__name__
    n = sum(1 for c in CASES if c.id == name or c.id.startswith(name + "-"))
    CASES.append(pytest.param(fn, args, alt, full, state, marks=marks,
                              id=name if n == 0 else f"{name}-{n + 1}"))


torch.manual_seed(4321)


# --- nested containers as inputs and outputs, comprehensions ------------------

def nc_dict_of_lists_of_tuples(d):
    return {k: [(p * q).sum(-1) for p, q in pairs] for k, pairs in d.items()}


def nc_nested_output(x):
    return {"enc": [(x, x.sum(0)), (x * 2, x.mean(0))],
            "dec": {"h": [x.relu()], "meta": (x.shape[0], (x.dim(), "f"))}}


def nc_list_of_dicts_input(layers, x):
    for p in layers:
        x = torch.tanh(x @ p["w"] + p["b"])
    return x, [sorted(p) for p in layers]


def nc_dict_comp_condition(d):
    return ({k: v * 2 for k, v in d.items() if v.dim() > 1},
            {k: v.shape[-1] for k, v in d.items() if v.shape[-1] % 2 == 0})


def nc_dict_comp_key_filter(d):
    return {k.upper(): v.sum() for k, v in d.items() if not k.startswith("_")}


def nc_nested_comprehension(x):
    return [[x[i, j] * (i + j) for j in range(x.shape[1])] for i in range(x.shape[0])]


def nc_nested_comp_with_conditions(xs):
    return [t * s for t in xs if t.shape[0] > 1 for s in (1, 2, 3) if s != 2]


def nc_dict_of_list_comps(x):
    return {f"layer{i}": [x[..., j] * i for j in range(i)] for i in range(1, 4)}


def nc_mutate_nested_arg(state, x):
    state["hist"].append(x.sum())
    state["pair"][1].append(x * 2)
    return len(state["hist"]), state["pair"][0] + x


def _flatten(tree):
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for k in sorted(tree) for t in _flatten(tree[k])]
    return [t for item in tree for t in _flatten(item)]


def _tree_map(fn, tree):
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: _tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_tree_map(fn, v) for v in tree)
    return [_tree_map(fn, v) for v in tree]


def nc_flatten_tree(tree):
    leaves = _flatten(tree)
    return torch.cat([t.reshape(-1) for t in leaves]), len(leaves)


def nc_tree_map(tree):
    return _tree_map(lambda t: t * 2 + 1, tree)


def nc_zip_dicts(a, b):
    return {k: a[k] + b[k] for k in a if k in b}, sorted(set(a) ^ set(b))


def nc_list_of_pairs_to_dict(x):
    pairs = [(f"p{i}", x[i]) for i in range(len(x))]
    out = {}
    for name, t in pairs:
        out[name] = out.get(name, 0) + t
    return out


def nc_nested_tuple_unpack_loop(d):
    total = 0
    names = []
    for i, (name, (a, b)) in enumerate(d.items()):
        total = total + (a - b) * i
        names.append(name)
    return total, names



def nc_nested_dict_comprehension(x):
    return {k: {j: x[i, j] for j in range(x.shape[1]) if j != i} for i, k in enumerate("ab")}


def nc_sorted_items_by_shape(d):
    ordered = sorted(d.items(), key=lambda kv: (kv[1].shape[0], kv[0]))
    return [k for k, _ in ordered], [v * 2 for _, v in ordered]


def nc_output_shares_inner_list(x):
    a = [x]
    out = (a, [a], {"a": a})
    a.append(x * 2)
    return out

case(nc_dict_of_lists_of_tuples,
     ({"a": [(R(3), R(3)), (R(2, 3), R(2, 3))], "b": [(R(4), R(4))]},),
     ({"a": [(R(5), R(5)), (R(1, 5), R(1, 5))], "b": [(R(2), R(2))]},))
case(nc_dict_of_lists_of_tuples, ({"a": [(R(3), R(3))]},),  # alt: another nesting
     ({"a": [(R(2), R(2)), (R(2), R(1))], "c": []},))
case(nc_nested_output, (R(3, 2),), (R(1, 4),))
case(nc_list_of_dicts_input, ([{"w": R(3, 3), "b": R(3)}, {"w": R(3, 3), "b": R(3)}], R(2, 3)),
     ([{"w": R(4, 4), "b": R(4)}, {"w": R(4, 4), "b": R(4)}], R(5, 4)))
case(nc_dict_comp_condition, ({"a": R(3), "b": R(2, 4), "c": R(1, 3)},),
     ({"a": R(2), "b": R(3, 3), "c": R(2, 2)},))
case(nc_dict_comp_key_filter, ({"w": R(3), "_cache": R(2), "bias": R(1)},))
case(nc_nested_comprehension, (R(2, 3),), (R(3, 2),))
case(nc_nested_comp_with_conditions, ([R(3), R(1), R(2, 2)],), ([R(1), R(4), R(1, 5)],))
case(nc_dict_of_list_comps, (R(2, 3),), (R(4),))
case(nc_mutate_nested_arg, ({"hist": [], "pair": (R(3), [R(3)])}, R(3)),
     ({"hist": [R(())], "pair": (R(2), [])}, R(2)))
case(nc_nested_dict_comprehension, (R(2, 3),), (R(3, 2),))
case(nc_sorted_items_by_shape, ({"a": R(3), "b": R(1), "c": R(2)},),
     ({"a": R(1), "b": R(2), "c": R(2)},))
case(nc_output_shares_inner_list, (R(2),), (R(1, 3),))
case(nc_flatten_tree, ({"b": [R(2), (R(3), R(1, 2))], "a": R(2, 2)},),
     ({"b": [R(1), (R(2), R(3, 1))], "a": R(1)},))
case(nc_tree_map, ({"x": [R(2), (R(3), R(1))], "y": (R(2, 2),)},))
case(nc_zip_dicts, ({"a": R(3), "b": R(3), "c": R(1)}, {"b": R(3), "a": R(1), "d": R(2)}))
case(nc_list_of_pairs_to_dict, (R(3, 2),), (R(2, 5),))
case(nc_nested_tuple_unpack_loop, ({"q": (R(3), R(3)), "k": (R(3), R(1)), "v": (R(1), R(3))},),
     ({"q": (R(2), R(2)), "k": (R(2), R(2)), "v": (R(2), R(2))},))


# --- unpacking, starred calls, shape arithmetic, len, slices, f-string keys ---

def _combine(a, b, *rest, scale=1.0, bias=0.0):
    return (a * b + sum(rest)) * scale + bias


def up_star_assign(x):
    first, *rest = x.unbind(0)
    *lead, last = x.shape
    a, *mid, z = x.split(1, dim=-1)
    return first, rest, lead, last, len(mid), z - a


def up_starred_call_with_kwargs(x):
    xs = [x, x + 1, x * 2]
    kw = {"scale": 0.5, "bias": 1.0}
    return _combine(*xs, **kw), _combine(*xs[:2]), _combine(x, *xs[1:], **{"bias": -1.0})


def up_multi_target_swap(x):
    a = b = x
    a, b = b * 2, a + 1
    (c, d), e = (a, b), a - b
    return a, b, c + d + e


def up_chained_shape_compare(x):
    n, m = x.shape[0], x.shape[-1]
    if 0 < n <= m < 8:
        y = x * 2
    elif n > m > 0:
        y = x.t()
    else:
        y = x
    return y, 1 <= x.dim() < 3, n == m != 0


def up_half_dim_arith(x):
    h = x.shape[-1] // 2
    left, right = x[..., :h], x[..., h:2 * h]
    ceil_half = -(-x.shape[-1] // 2)
    return left * torch.sigmoid(right), ceil_half, x.shape[-1] % 2, x[..., ceil_half:]


def up_len_drives_code(x, xs):
    acc = x[0] * 0
    for i in range(len(x)):
        acc = acc + x[i] * (len(x) - i)
    big = [t for t in xs if t.numel() > 2]
    return acc, len(big), len(x.shape) == 2, len(xs[0]) if len(xs) else -1


def up_negative_step_slices(x):
    rows = list(x.unbind(0))
    t = tuple(rows)
    return (rows[::-1], rows[-1::-2], t[::-2], rows[-2:0:-1], x.shape[::-1],
            torch.stack(rows[::-1]) + x.flip(0))


def up_fstring_shape_keys(x, y):
    table = {f"{t.shape[0]}x{t.shape[-1]}": t for t in (x, y)}
    key = f"{x.shape[0]}x{x.shape[-1]}"
    return table[key] * 2, sorted(table), f"{tuple(x.shape)}", {f"{x.dtype}": x.sum()}


def up_size_tuple_math(x):
    heads = 2
    new_shape = x.shape[:-1] + (heads, x.shape[-1] // heads)
    y = x.view(new_shape)
    z = x.view(*x.shape[:-1], heads, -1)
    return y, z.transpose(-2, -3).shape, y.flatten(-2).shape == x.shape


def up_permute_reversed(x):
    return x.permute(*reversed(range(x.dim()))), x.permute(*range(x.dim())[::-1]).shape


def up_unpack_shape_in_loop(xs):
    outs = []
    for b, (t, d) in [(i, tuple(x.shape)) for i, x in enumerate(xs)]:
        outs.append(xs[b].reshape(t * d) * b)
    return outs



def up_star_unpack_tensor(x):
    first, *rest = x
    return first, rest, torch.stack([*x]), torch.add(*x[:2])


def up_fstring_format_spec_keys(x):
    return {f"{x.shape[0]:03d}_{x.shape[-1]:>4}": x, f"{x.shape[-1] / 3:.2f}": x.sum()}


def up_shape_min_max_view(x):
    return max(x.shape), min(x.shape[-2:]), x.size(dim=-1), x.view(-1, *x.shape[2:])


def up_negative_floor_division(x):
    n = x.shape[-1]
    return ((-n) // 3, (-n) % 3, n ** -1, divmod(-n, 4), round(n / 3, 2), int(-n / 3),
            x[..., : -n // 2])

case(up_star_assign, (R(3, 4),), (R(2, 2),))
case(up_starred_call_with_kwargs, (R(3),), (R(2, 2),))
case(up_multi_target_swap, (R(3),), (R(1),))
case(up_chained_shape_compare, (R(2, 4),), (R(5, 3),))
case(up_chained_shape_compare, (R(3, 9),), (R(0, 2),))
case(up_half_dim_arith, (R(2, 6),), (R(3, 5),))
case(up_len_drives_code, (R(3, 2), [R(4), R(1, 2)]), (R(2, 3), [R(2, 1)]))
case(up_negative_step_slices, (R(5, 2),), (R(4, 3),))
case(up_fstring_shape_keys, (R(2, 3), R(4, 5)), (R(1, 1), R(3, 2)))
case(up_size_tuple_math, (R(2, 3, 4),), (R(5, 6),))
case(up_star_unpack_tensor, (R(3, 2),), (R(4, 1),))
case(up_fstring_format_spec_keys, (R(3, 2),), (R(12, 5),))
case(up_shape_min_max_view, (R(2, 3, 4),), (R(5, 1, 2),))
case(up_negative_floor_division, (R(2, 7),), (R(5),))
case(up_permute_reversed, (R(2, 3, 4),), (R(3, 2),))
case(up_unpack_shape_in_loop, ([R(2, 3), R(1, 4)],), ([R(3, 3), R(2, 1)],))


# --- nn.Module patterns -------------------------------------------------------

ACT2FN = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu, "tanh": torch.tanh}


@dataclasses.dataclass(frozen=True)
class ModelCfg:
    d: int = 8
    heads: int = 2
    n_layers: int = 2
    act: str = "gelu"
    eps: float = 1e-5
    causal: bool = True
    pre_norm: bool = True


@dataclasses.dataclass
class MutableCfg:
    scale: float = 1.0
    n_repeat: int = 2
    use_skip: bool = True
    tags: list = dataclasses.field(default_factory=lambda: ["a"])


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d, 2 * cfg.d)
        self.fc2 = nn.Linear(2 * cfg.d, cfg.d)
        self.act_name = cfg.act
        self.act = ACT2FN[cfg.act]

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class MlpLookup(Mlp):
    def forward(self, x):
        return self.fc2(ACT2FN[self.act_name](self.fc1(x)))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.q = nn.Linear(cfg.d, cfg.d, bias=False)
        self.k = nn.Linear(cfg.d, cfg.d, bias=False)
        self.v = nn.Linear(cfg.d, cfg.d, bias=False)
        self.o = nn.Linear(cfg.d, cfg.d)
        self.heads = cfg.heads
        self.causal = cfg.causal

    @property
    def head_dim(self):
        return self.o.in_features // self.heads

    def _split(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, pad_mask=None):
        b, n, d = x.shape
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if self.causal:
            mask = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)
            scores = scores.masked_fill(mask, float("-inf"))
        if pad_mask is not None:
            scores = scores.masked_fill(~pad_mask[:, None, None, :], -1e9)
        probs = F.softmax(scores, dim=-1)
        out = (probs @ v).transpose(1, 2).contiguous().view(b, n, d)
        return self.o(out), probs


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pre_norm = cfg.pre_norm
        self.ln1 = nn.LayerNorm(cfg.d, eps=cfg.eps)
        self.ln2 = nn.LayerNorm(cfg.d, eps=cfg.eps)
        self.attn = Attention(cfg)
        self.mlp = Mlp(cfg)

    def forward(self, x, pad_mask=None):
        if self.pre_norm:
            a, probs = self.attn(self.ln1(x), pad_mask)
            x = x + a
            x = x + self.mlp(self.ln2(x))
        else:
            a, probs = self.attn(x, pad_mask)
            x = self.ln1(x + a)
            x = self.ln2(x + self.mlp(x))
        return x, probs


class Encoder(nn.Module):
    n_heads_out = 2  # class attribute read in forward

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.heads = nn.ModuleDict({"cls": nn.Linear(cfg.d, 3), "tok": nn.Linear(cfg.d, 5)})
        self.register_buffer("pos", torch.randn(16, cfg.d) * 0.1)

    def forward(self, x, pad_mask=None, return_all=False):
        x = x + self.pos[: x.shape[1]]
        hidden, attn = [], []
        for i, blk in enumerate(self.blocks):
            x, probs = blk(x, pad_mask=pad_mask)
            hidden.append(x)
            attn.append(probs.mean(1))
        out = {name: head(x[:, 0] if name == "cls" else x) for name, head in self.heads.items()}
        if return_all:
            out["hidden"] = hidden
            out["attn"] = tuple(attn)
        return out


class TinyLM(nn.Module):
    def __init__(self, vocab=11, d=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight  # weight tying

    def forward(self, ids):
        h = self.emb(ids)
        h = self.proj(F.gelu(self.proj(h)))  # the same Linear used twice
        return self.head(h)


class ConfigDriven(nn.Module):
    def __init__(self, d, n_repeat, scale, use_skip):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.n_repeat = n_repeat
        self.scale = scale
        self.use_skip = use_skip

    def forward(self, x):
        for _ in range(self.n_repeat):
            y = self.lin(x) * self.scale
            x = x + y if self.use_skip else y
        return x


class TrainEval(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.register_buffer("shift", torch.randn(d))

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            return y * 0.5, "train"
        return y + self.shift, "eval"


class Buffered(nn.Module):
    def __init__(self, max_len=8, d=4):
        super().__init__()
        self.register_buffer("pos_ids", torch.arange(max_len))
        self.register_buffer("causal", torch.tril(torch.ones(max_len, max_len, dtype=torch.bool)))
        self.register_buffer("scale", torch.tensor(0.5), persistent=False)
        self.pos = nn.Embedding(max_len, d)

    def forward(self, x):
        n = x.shape[1]
        pos = self.pos(self.pos_ids[:n])
        mask = self.causal[:n, :n]
        scores = (x @ x.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
        return scores.softmax(-1) @ (x + pos) * self.scale


class Helpers(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.inp = nn.Linear(d, 2 * d)
        self.out = nn.Linear(d, d)

    def _gate(self, t):
        a, b = t.chunk(2, dim=-1)
        return a * F.silu(b)

    def _project(self, t, residual=None):
        y = self.out(self._gate(self.inp(t)))
        return y if residual is None else y + residual

    @staticmethod
    def _norm(t):
        return t / t.norm(dim=-1, keepdim=True).clamp(min=1e-6)

    @classmethod
    def _n_steps(cls):
        return cls.STEPS

    STEPS = 2

    def forward(self, x):
        for _ in range(self._n_steps()):
            x = self._project(self._norm(x), residual=x)
        return x


class BaseHead(nn.Module):
    def __init__(self, d, n_out):
        super().__init__()
        self.lin = nn.Linear(d, n_out)
        self.temp = 1.0

    def forward(self, x):
        return self.lin(x) / self.temp


class ScaledHead(BaseHead):
    def __init__(self, d, n_out, temp):
        super().__init__(d, n_out)
        self.temp = temp

    def forward(self, x):
        return F.log_softmax(super().forward(x), dim=-1)


class ClampedHead(ScaledHead):
    def forward(self, x):
        return super().forward(x).clamp(min=-5.0)


class NamedLayers(nn.Module):
    def __init__(self, d=4, n=3):
        super().__init__()
        self.n = n
        for i in range(n):
            self.add_module(f"layer{i}", nn.Linear(d, d))
        self.gates = nn.ParameterList([nn.Parameter(torch.randn(d)) for _ in range(n)])

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, f"layer{i}")(x) * torch.sigmoid(self.gates[i])
        return x


class Residual(nn.Module):
    def __init__(self, fn, d=4):
        super().__init__()
        self.fn = fn
        self.norm = RMSNorm(d)

    def forward(self, x):
        return x + self.fn(self.norm(x))


class Conv1dBlock(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.conv = nn.Conv1d(d, d, kernel_size=3, padding=1, groups=d)
        self.bn = nn.BatchNorm1d(d)

    def forward(self, x):  # x: (batch, time, channels)
        y = self.bn(self.conv(x.transpose(1, 2)))
        return F.relu(y).transpose(1, 2) + x


class ShadowedAttr(nn.Module):
    mult = 2.0  # class attribute; the instance may shadow it

    def __init__(self, mult=None):
        super().__init__()
        if mult is not None:
            self.mult = mult

    def forward(self, x):
        return x * self.mult, type(self).mult


class MultiOut(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x, *, return_dict=True, scale=1.0):
        y = self.lin(x) * scale
        if return_dict:
            return {"y": y, "norm": y.norm(dim=-1)}
        return y, y.norm(dim=-1)



class TwoArgSuper(BaseHead):
    def forward(self, x):
        return super(TwoArgSuper, self).forward(x) * 2

torch.manual_seed(11)
CFG = ModelCfg()
CFG_POST = ModelCfg(pre_norm=False, causal=False, act="relu", n_layers=1)
ENC = Encoder(CFG).eval()
ENC_POST = Encoder(CFG_POST).eval()
ATTN = Attention(CFG).eval()
BLOCK = Block(CFG).eval()
MLPS = {act: Mlp(dataclasses.replace(CFG, act=act)).eval() for act in ("gelu", "silu", "tanh")}
MLP_LOOKUP = MlpLookup(dataclasses.replace(CFG, act="relu")).eval()
TINY_LM = TinyLM().eval()
CONFIG_SKIP = ConfigDriven(4, 3, 0.5, True).eval()
CONFIG_NOSKIP = ConfigDriven(4, 1, 2.0, False).eval()
TRAIN_MODE = TrainEval().train()
EVAL_MODE = TrainEval().eval()
BUFFERED = Buffered().eval()
HELPERS = Helpers().eval()
CLAMPED_HEAD = ClampedHead(4, 3, temp=2.0).eval()
NAMED_LAYERS = NamedLayers().eval()
RESIDUALS = nn.Sequential(Residual(nn.Linear(4, 4)), Residual(nn.Sequential(nn.Linear(4, 4),
                                                                            nn.GELU()))).eval()
CONV_EVAL = Conv1dBlock().eval()
CONV_TRAIN = Conv1dBlock().train()
SHADOW_CLS = ShadowedAttr().eval()
SHADOW_INST = ShadowedAttr(0.25).eval()
MULTI_OUT = MultiOut().eval()
TWO_ARG_SUPER = TwoArgSuper(4, 3).eval()
DROPOUT_EVAL = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.ReLU()).eval()
ZIP_LAYERS = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)]).eval()
ZIP_NORMS = nn.ModuleList([RMSNorm(4) for _ in range(3)]).eval()


def md_encoder(m, x):
    return m(x)


def md_encoder_all_outputs(m, x, pad_mask):
    return m(x, pad_mask=pad_mask, return_all=True)


def md_attention_block(m, x):
    out, probs = m(x)
    return out, probs.sum(-1), probs.shape


def md_block_direct(m, x):
    return m(x)


def md_mlp_act_from_dict(m, x):
    return m(x), m.act_name


def md_tied_weights(m, ids):
    logits = m(ids)
    return logits, m.head.weight is m.emb.weight, logits.argmax(-1)


def md_config_attrs(m, x):
    return m(x), m.n_repeat, m.use_skip


def md_train_eval_branch(m, x):
    y, mode = m(x)
    return y, mode, m.training


def md_buffers_in_forward(m, x):
    return m(x), m.pos_ids[: x.shape[1]].sum()


def md_helper_methods(m, x):
    return m(x), m._norm(x), Helpers._n_steps()


def md_inheritance_chain(m, x):
    return m(x), m.temp, isinstance(m, BaseHead), type(m).__mro__[1].__name__


def md_named_layers_getattr(m, x):
    return m(x), [n for n, _ in m.named_children()]


def md_residual_sequential(m, x):
    return m(x), m[0](x) - x


def md_conv_batchnorm(m, x):
    return m(x)


def md_class_vs_instance_attr(m, x):
    return m(x)


def md_kwonly_forward(m, x):
    d = m(x)
    y, n = m(x, return_dict=False, scale=0.5)
    return d["y"] - y, d["norm"], n


def md_modulelist_zip_enumerate(layers, norms, x):
    outs = {}
    for i, (layer, norm) in enumerate(zip(layers, norms)):
        x = norm(layer(x)) + x
        outs[f"h{i}"] = x
    return x, outs, len(layers)


def md_moduledict_access(m, x):
    heads = m.heads
    cls = heads["cls"](x)
    named = {k: v(x).shape[-1] for k, v in heads.items()}
    return cls, named, list(heads.keys()), "tok" in heads


def md_submodule_config_control_flow(m, x):
    cfg = m.cfg
    if cfg.causal and cfg.heads > 1:
        x = x * cfg.heads
    for blk in m.blocks[: cfg.n_layers - 1]:
        x, _ = blk(x)
    return x, cfg.act, cfg.eps < 1e-3


def md_reversed_modulelist(layers, x):
    outs = []
    for layer in reversed(layers):
        x = layer(x)
        outs.append(x)
    return outs[::-1], [i for i, _ in enumerate(layers)][-1]



def md_modulelist_negative_slice(layers, x):
    for layer in layers[::-1]:
        x = layer(x)
    return x, len(layers[:-1])


def md_dropout_eval_and_module_search(m, x):
    has_dropout = any(isinstance(c, nn.Dropout) for c in m.modules())
    return m(x), has_dropout, [type(c).__name__ for c in m if not isinstance(c, nn.Dropout)]


def md_call_with_keyword_input(m, x):
    return m(input=x), m.forward(x)


def md_two_arg_super(m, x):
    return m(x)


def md_genexpr_over_modules(layers, x):
    return (torch.stack(tuple(layer(x) for layer in layers)),
            torch.cat(list(layer(x) for layer in layers), -1))

case(md_encoder, (ENC, R(2, 5, 8)), (ENC, R(1, 3, 8)))
case(md_encoder, (ENC_POST, R(2, 4, 8)), (ENC_POST, R(3, 6, 8)))
case(md_encoder, (ENC, R(2, 4, 8)), (ENC_POST, R(2, 4, 8)))  # alt: another module
case(md_modulelist_negative_slice, (ZIP_LAYERS, R(2, 4)), (ZIP_LAYERS, R(1, 4)))
case(md_dropout_eval_and_module_search, (DROPOUT_EVAL, R(2, 4)), (DROPOUT_EVAL, R(3, 4)))
case(md_call_with_keyword_input, (ZIP_LAYERS[0], R(2, 4)), (ZIP_LAYERS[0], R(4)))
case(md_two_arg_super, (TWO_ARG_SUPER, R(2, 4)), (TWO_ARG_SUPER, R(1, 4)))
case(md_genexpr_over_modules, (ZIP_LAYERS, R(2, 4)), (ZIP_LAYERS, R(4)))
case(md_encoder_all_outputs, (ENC, R(2, 4, 8), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).bool()),
     (ENC, R(1, 3, 8), torch.tensor([[1, 1, 0]]).bool()))
case(md_attention_block, (ATTN, R(2, 5, 8)), (ATTN, R(1, 1, 8)))
case(md_block_direct, (BLOCK, R(1, 3, 8)), (BLOCK, R(2, 6, 8)))
case(md_mlp_act_from_dict, (MLPS["gelu"], R(2, 8)), (MLPS["gelu"], R(3, 2, 8)))
case(md_mlp_act_from_dict, (MLPS["silu"], R(2, 8)), (MLPS["silu"], R(1, 8)))
case(md_mlp_act_from_dict, (MLPS["tanh"], R(8, 2).t()), (MLPS["tanh"], R(8, 5).t()))
case(md_mlp_act_from_dict, (MLP_LOOKUP, R(3, 8)), (MLP_LOOKUP, R(0, 8)))
case(md_tied_weights, (TINY_LM, RI(2, 5, high=11)), (TINY_LM, RI(1, 3, high=11)))
case(md_config_attrs, (CONFIG_SKIP, R(2, 4)), (CONFIG_SKIP, R(3, 4)))
case(md_config_attrs, (CONFIG_NOSKIP, R(2, 4)), (CONFIG_NOSKIP, R(1, 4)))
case(md_train_eval_branch, (TRAIN_MODE, R(2, 4)), (TRAIN_MODE, R(3, 4)))
case(md_train_eval_branch, (EVAL_MODE, R(2, 4)), (EVAL_MODE, R(3, 4)))
case(md_train_eval_branch, (TRAIN_MODE, R(2, 4)), (EVAL_MODE, R(2, 4)))  # alt: the other mode
case(md_buffers_in_forward, (BUFFERED, R(2, 5, 4)), (BUFFERED, R(1, 8, 4)))
case(md_helper_methods, (HELPERS, R(3, 4)), (HELPERS, R(2, 2, 4)))
case(md_inheritance_chain, (CLAMPED_HEAD, R(2, 4)), (CLAMPED_HEAD, R(5, 4)))
case(md_named_layers_getattr, (NAMED_LAYERS, R(2, 4)), (NAMED_LAYERS, R(1, 4)))
case(md_residual_sequential, (RESIDUALS, R(2, 4)), (RESIDUALS, R(3, 2, 4)))
case(md_conv_batchnorm, (CONV_EVAL, R(2, 5, 4)), (CONV_EVAL, R(1, 3, 4)))
case(md_conv_batchnorm, (CONV_TRAIN, R(2, 5, 4)), (CONV_TRAIN, R(3, 2, 4)))
case(md_class_vs_instance_attr, (SHADOW_CLS, R(3),), (SHADOW_CLS, R(2, 2)))
case(md_class_vs_instance_attr, (SHADOW_INST, R(3),), (SHADOW_INST, R(2, 2)))
case(md_kwonly_forward, (MULTI_OUT, R(2, 4)), (MULTI_OUT, R(4)))
case(md_modulelist_zip_enumerate, (ZIP_LAYERS, ZIP_NORMS, R(2, 4)),
     (ZIP_LAYERS, ZIP_NORMS, R(1, 1, 4)))
case(md_moduledict_access, (ENC, R(2, 8)), (ENC, R(1, 8)))
case(md_submodule_config_control_flow, (ENC, R(1, 3, 8)), (ENC, R(2, 2, 8)))
case(md_submodule_config_control_flow, (ENC_POST, R(1, 3, 8)), (ENC_POST, R(2, 2, 8)))
case(md_reversed_modulelist, (ZIP_LAYERS, R(2, 4)), (ZIP_LAYERS, R(4)))


# --- functional calls with keyword arguments, as model code writes them -------

def fx_functional_kwargs(x):
    return (F.softmax(x, dim=-1), F.normalize(x, p=2.0, dim=0, eps=1e-6),
            x.mean(dim=-1, keepdim=True), torch.sum(x, dim=(0,), keepdim=True),
            F.pad(x, (1, 2), value=0.5), F.gelu(x, approximate="tanh"),
            F.leaky_relu(x, negative_slope=0.2), torch.amax(x, dim=-1, keepdim=False))


def fx_where_clamp(x, thr):
    y = torch.where(x.abs() > thr, x.clamp(min=-1.0, max=1.0), torch.zeros_like(x))
    return y, torch.clamp(x, min=thr), x.clamp(max=torch.full_like(x, thr))


def fx_heads_split_merge(x, heads):
    b, n, d = x.shape
    h = x.reshape(b, n, heads, d // heads).permute(0, 2, 1, 3)
    s = torch.einsum("bhqd,bhkd->bhqk", h, h)
    merged = h.transpose(1, 2).contiguous().view(b, n, d)
    return s, merged, h.is_contiguous()


def fx_cat_stack_chunk(x):
    parts = x.chunk(2, dim=-1)
    stacked = torch.stack(parts, dim=0)
    return torch.cat([p.flip(-1) for p in parts], dim=-1), stacked, stacked.unbind(0)[1]


def fx_split_sizes_from_config(x, sizes):
    pieces = torch.split(x, sizes, dim=-1)
    return {f"s{i}": p.sum(dim=-1) for i, p in enumerate(pieces)}, [p.shape[-1] for p in pieces]


def fx_expand_repeat_bias(x, bias):
    b, n, _ = x.shape
    rel = bias[None, :, None].expand(b, -1, n)
    return x @ x.transpose(1, 2) + rel, bias.repeat(b, 1), bias.unsqueeze(0).expand(b, -1).shape


def fx_gather_label_logprobs(logits, labels):
    logp = F.log_softmax(logits, dim=-1)
    picked = logp.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    return picked, picked.mean(), F.nll_loss(logp.view(-1, logp.shape[-1]), labels.view(-1))


def fx_cross_entropy_kwargs(logits, labels):
    return (F.cross_entropy(logits, labels, reduction="none"),
            F.cross_entropy(logits, labels, label_smoothing=0.1),
            F.cross_entropy(logits, labels, ignore_index=0, reduction="sum"))


def fx_position_ids_from_mask(mask):
    pos = mask.long().cumsum(-1) - 1
    pos = pos.masked_fill(mask == 0, 1)
    return pos, torch.cumsum(mask, dim=0), mask.sum(dim=-1)


def fx_greedy_topk(logits, k):
    vals, _ = logits.topk(k, dim=-1)
    thresh = vals[..., -1:]
    filtered = logits.masked_fill(logits < thresh, float("-inf"))
    srt = torch.sort(logits, dim=-1, descending=True).values
    return filtered.softmax(-1), srt[..., :k], logits.argmax(dim=-1), torch.argmax(logits)


def fx_transpose_reshape_view(x):
    return (x.transpose(0, 1).reshape(-1), x.t().contiguous().view(x.shape[1], -1),
            x.reshape(-1, 1).expand(-1, 2), x.contiguous().view(x.numel()))


def fx_one_hot_embedding(ids, table):
    oh = F.one_hot(ids, num_classes=table.shape[0]).to(table.dtype)
    return oh @ table, F.embedding(ids, table, padding_idx=0)


def fx_layer_norm_manual(x, w, b, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    y = (x - mu) / torch.sqrt(var + eps) * w + b
    return y, F.layer_norm(x, normalized_shape=(x.shape[-1],), weight=w, bias=b, eps=eps)


def fx_scaled_dot_product(q, k, v):
    n = q.shape[-2]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return (F.scaled_dot_product_attention(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask))



def fx_sequence_mask_from_lengths(lengths, x):
    n = x.shape[1]
    mask = torch.arange(n, device=x.device)[None, :] < lengths[:, None]
    pooled = (x * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]
    return x.masked_fill(~mask[..., None], 0.0), mask, pooled


def fx_gather_expanded_index(x, idx):
    return x.gather(1, idx[:, :, None].expand(-1, -1, x.shape[-1]))


def fx_softmax_upcast_half(x):
    return (F.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype),
            x.float().masked_fill(x > 0, 0).type_as(x))


def fx_uneven_chunk_split_unfold(x):
    return x.chunk(3, dim=-1), x.split(2, dim=-1), x.unfold(-1, 2, 1)


def fx_einsum_ellipsis_projection(x, w):
    return torch.einsum("...d,de->...e", x, w), torch.einsum("...d,...d->...", x, x)

case(fx_functional_kwargs, (R(3, 4),), (R(2, 5),))
case(fx_where_clamp, (R(3, 4), 0.5), (R(5), 0.5))
case(fx_where_clamp, (R(2, 3), 0.1), (R(4, 1), 0.1))
case(fx_heads_split_merge, (R(2, 3, 4), 2), (R(1, 5, 4), 2))
case(fx_heads_split_merge, (R(2, 3, 6), 3), (R(3, 1, 6), 3))
case(fx_cat_stack_chunk, (R(3, 4),), (R(2, 6),))
case(fx_split_sizes_from_config, (R(2, 6), [1, 2, 3]), (R(4, 6), [1, 2, 3]))
case(fx_split_sizes_from_config, (R(3, 5), (4, 1)), (R(1, 5), (4, 1)))
case(fx_expand_repeat_bias, (R(2, 3, 4), R(3)), (R(1, 5, 2), R(5)))
case(fx_gather_label_logprobs, (R(2, 3, 5), RI(2, 3, high=5)), (R(1, 4, 5), RI(1, 4, high=5)))
case(fx_cross_entropy_kwargs, (R(4, 5), RI(4, high=5)), (R(6, 5), RI(6, high=5)))
case(fx_position_ids_from_mask, (RI(2, 5, high=2),), (RI(3, 4, high=2),))
case(fx_greedy_topk, (R(2, 6), 3), (R(3, 8), 3))
case(fx_sequence_mask_from_lengths, (torch.tensor([2, 4]), R(2, 4, 3)),
     (torch.tensor([1, 3, 0]), R(3, 5, 3)))
case(fx_gather_expanded_index, (R(2, 5, 3), RI(2, 4, high=5)), (R(1, 6, 2), RI(1, 2, high=6)))
case(fx_softmax_upcast_half, (R(2, 5, dtype=torch.float16),), (R(3, dtype=torch.float16),))
case(fx_uneven_chunk_split_unfold, (R(2, 7),), (R(3, 5),))
case(fx_einsum_ellipsis_projection, (R(2, 3, 4), R(4, 5)), (R(4), R(4, 2)))
case(fx_transpose_reshape_view, (R(3, 4),), (R(2, 5),))
case(fx_transpose_reshape_view, (R(4, 3).t(),), (R(6, 4)[::2],))
case(fx_one_hot_embedding, (RI(2, 3, high=6), R(6, 4)), (RI(5, high=6), R(6, 4)))
case(fx_layer_norm_manual, (R(2, 5), R(5), R(5)), (R(3, 2, 4), R(4), R(4)))
case(fx_scaled_dot_product, (R(1, 2, 4, 8), R(1, 2, 4, 8), R(1, 2, 4, 8)),
     (R(2, 1, 3, 8), R(2, 1, 3, 8), R(2, 1, 3, 8)))


# --- closures, decorators, defaults, keyword-only, forwarding, recursion ------

def _times(k):
    return lambda t: t * k


def _double_output(fn):
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


def _repeat(n):
    def deco(fn):
        def wrapper(t, *args, **kwargs):
            for _ in range(n):
                t = fn(t, *args, **kwargs)
            return t
        return wrapper
    return deco


@_double_output
def _decorated_affine(t, w=1.0, *, b=0.0):
    return t * w + b


@_repeat(3)
def _decorated_step(t, rate=0.5):
    return t - rate * torch.tanh(t)


def _inner(a, b, *, scale, extra=0, **rest):
    return (a + b) * scale + extra + len(rest), sorted(rest)


def _middle(*args, **kwargs):
    return _inner(*args, extra=1, **kwargs)


def _outer(*args, **kwargs):
    return _middle(*args, **kwargs)


def _pyramid(t, depth):
    if depth == 0:
        return [t]
    return [t] + _pyramid(F.avg_pool1d(t, kernel_size=2), depth - 1)


def _reduce_tree(ts):
    if len(ts) == 1:
        return ts[0]
    mid = len(ts) // 2
    return _reduce_tree(ts[:mid]) * 0.5 + _reduce_tree(ts[mid:])


def hf_function_returns_lambda(x):
    double, half = _times(2), _times(0.5)
    make = lambda k: (lambda t: t + k)  # noqa: E731
    return double(x), half(double(x)), make(3)(x)


def hf_decorated_local(x):
    @_double_output
    def f(t, k=1):
        return t + k

    @_repeat(2)
    @_double_output
    def g(t):
        return t.relu()

    return f(x), f(x, k=3), g(x)


def hf_decorated_module_level(x):
    return _decorated_affine(x), _decorated_affine(x, 3.0, b=1.0), _decorated_step(x, rate=0.1)


def hf_defaults_and_kwonly(x):
    def pool(t, *, dim, keepdim=False, mode="mean"):
        return t.mean(dim=dim, keepdim=keepdim) if mode == "mean" else t.amax(dim=dim,
                                                                           keepdim=keepdim)

    def scale(t, factor=None, dims=(-1,)):
        factor = t.shape[dims[0]] if factor is None else factor
        return t / factor

    return pool(x, dim=0), pool(x, dim=-1, keepdim=True, mode="max"), scale(x), scale(x, 2.0)


def hf_two_level_forwarding(x):
    return (_outer(x, x, scale=2.0), _outer(x, 1, scale=0.5, tag="a", z=2),
            _outer(*(x, x * 2), **{"scale": 1.0}))


def hf_static_recursion(x):
    levels = _pyramid(x, 2)
    return levels, [t.shape[-1] for t in levels], _reduce_tree(list(x.unbind(0)))


def hf_dispatch_table(x, kind):
    table = {"scale": lambda t: t * 2, "shift": lambda t: t + 1, "both": lambda t: t * 2 + 1}
    return table[kind](x), sorted(table)


def hf_compose(x):
    def compose(*fns):
        def run(t):
            for fn in fns:
                t = fn(t)
            return t
        return run

    pipeline = compose(torch.relu, _times(3), lambda t: t - 1, F.softsign)
    return pipeline(x), compose()(x)


def hf_closure_over_module(x):
    lin = ZIP_LAYERS[0]
    fns = [lambda t, l=l: l(t) for l in ZIP_LAYERS]  # noqa: E741
    apply = lambda t: lin(t) + t  # noqa: E731
    return apply(x), [f(x) for f in fns]


def hf_sorted_by_shape_key(xs):
    order = sorted(range(len(xs)), key=lambda i: (xs[i].shape[-1], -i))
    return [xs[i] * 2 for i in order], order


def hf_callback_with_state(x):
    calls = []

    def hook(name, t):
        calls.append(name)
        return t * len(calls)

    y = hook("a", x)
    y = hook("b", y)
    return y, calls


case(hf_function_returns_lambda, (R(3),), (R(2, 2),))
case(hf_decorated_local, (R(3),), (R(1, 2),))
case(hf_decorated_module_level, (R(3),), (R(4),))
case(hf_defaults_and_kwonly, (R(3, 4),), (R(2, 2),))
case(hf_two_level_forwarding, (R(3),), (R(2),))
case(hf_static_recursion, (R(2, 3, 8),), (R(1, 2, 4),))
case(hf_dispatch_table, (R(3), "scale"), (R(2), "scale"))
case(hf_dispatch_table, (R(3), "both"))
case(hf_compose, (R(3),), (R(2, 2),))
case(hf_closure_over_module, (R(2, 4),), (R(4),))
case(hf_sorted_by_shape_key, ([R(2, 3), R(1), R(4, 1), R(3)],), ([R(5), R(2)],))
case(hf_callback_with_state, (R(3),), (R(1),))


# --- classes: dataclass configs, NamedTuple outputs, properties, inheritance --

class Output(NamedTuple):
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None
    n_tokens: int = 0


class Stats(NamedTuple):
    mean: torch.Tensor
    std: torch.Tensor

    def normalize(self, t):
        return (t - self.mean) / self.std


@dataclasses.dataclass
class Derived:
    d: int
    heads: int = 2
    head_dim: int = dataclasses.field(init=False)

    def __post_init__(self):
        self.head_dim = self.d // self.heads


class Shape:
    kind = "base"

    def __init__(self, t):
        self.t = t

    @property
    def rows(self):
        return self.t.shape[0]

    @property
    def area(self):
        return self.t.shape[0] * self.t.shape[-1]

    @staticmethod
    def pad_to(n, m):
        return (n + m - 1) // m * m

    @classmethod
    def from_rows(cls, rows):
        return cls(torch.stack(rows))

    def describe(self):
        return f"{self.kind}:{self.rows}"


class Square(Shape):
    kind = "square"

    def __init__(self, t):
        super().__init__(t[:, : t.shape[0]])
        self.tag = "sq"

    def describe(self):
        return "[" + super().describe() + "]"


def cl_frozen_config(x, cfg):
    y = ACT2FN[cfg.act](x) * (cfg.d // cfg.heads)
    if cfg.causal:
        y = y.tril()
    return y, cfg.n_layers + 1, cfg.eps


def cl_mutable_config(x, cfg):
    for _ in range(cfg.n_repeat):
        x = x * cfg.scale + (x if cfg.use_skip else 0)
    return x, cfg.tags[0], len(cfg.tags)


def cl_mutable_config_mutated(x, cfg):
    cfg.n_repeat += 1
    cfg.tags.append("seen")
    return x * cfg.n_repeat


def cl_namedtuple_output(x, labels=None):
    logits = x @ x.t()
    loss = None if labels is None else F.cross_entropy(logits, labels)
    return Output(logits, loss, n_tokens=x.shape[0])


def cl_namedtuple_method_and_fields(x):
    s = Stats(x.mean(0), x.std(0) + 1)
    m, sd = s
    return s.normalize(x), s._fields, m + sd, s._asdict()["mean"], Output(x, n_tokens=3)


def cl_dataclass_post_init(x):
    cfg = Derived(x.shape[-1])
    return x.view(*x.shape[:-1], cfg.heads, cfg.head_dim), cfg


def cl_property_static_class(x):
    s = Shape(x)
    sq = Square(x)
    return (s.rows, s.area, Shape.pad_to(s.area, 4), s.describe(), sq.describe(),
            Shape.from_rows(list(x.unbind(0))).t * 2, sq.t, Square.kind, s.kind)


def cl_class_vs_instance_attr(x):
    a, b = Shape(x), Shape(x)
    b.kind = "instance"
    return a.describe(), b.describe(), Shape.kind, type(b).kind, a.kind == b.kind


def cl_isinstance_hierarchy(x):
    objs = [Shape(x), Square(x)]
    return ([isinstance(o, Square) for o in objs], [type(o).__name__ for o in objs],
            issubclass(Square, Shape), [o.t.sum() for o in objs if isinstance(o, Shape)])


case(cl_frozen_config, (R(4, 4), CFG), (R(3, 3), CFG))
case(cl_frozen_config, (R(4, 4), CFG_POST), (R(2, 5), CFG_POST))
case(cl_frozen_config, (R(4, 4), CFG), (R(4, 4), CFG_POST))  # alt: another config
case(cl_mutable_config, (R(3), MutableCfg()), (R(2, 2), MutableCfg()))
case(cl_mutable_config, (R(3), MutableCfg(0.5, 3, False, ["x", "y"])),
     (R(1), MutableCfg(0.5, 3, False, ["x", "y"])))
case(cl_mutable_config_mutated, (R(3), MutableCfg()), (R(2), MutableCfg(n_repeat=5)))
case(cl_namedtuple_output, (R(3, 4),), (R(2, 2),))
case(cl_namedtuple_output, (R(3, 4), RI(3, high=3)), (R(5, 2), RI(5, high=5)))
case(cl_namedtuple_method_and_fields, (R(3, 4),), (R(2, 2),))
case(cl_dataclass_post_init, (R(3, 4),), (R(2, 6),))
case(cl_property_static_class, (R(3, 4),), (R(2, 5),))
case(cl_class_vs_instance_attr, (R(2, 2),))
case(cl_isinstance_hierarchy, (R(2, 3),), (R(3, 3),))


# --- control flow on static values --------------------------------------------

def sc_for_break_continue_else(x, skip):
    seen = []
    for i in range(5):
        if i in skip:
            continue
        if x.shape[-1] <= i:
            break
        x = x + i
        seen.append(i)
    else:
        seen.append("done")
    return x, seen


def sc_while_shape_loop_else(x):
    steps = 0
    while x.shape[-1] > 2:
        x = x[..., ::2] + x[..., 1::2]
        steps += 1
        if steps > 10:
            break
    else:
        steps = -steps
    return x, steps


def sc_try_finally(x):
    log = []
    try:
        y = x * 2
        try:
            y = y + 1
        finally:
            log.append("inner")
    finally:
        log.append("outer")
    return y, log


def sc_return_inside_try(x):
    log = []

    def f(t):
        try:
            return t.relu()
        finally:
            log.append("cleanup")

    return f(x), f(x - 1), log



def sc_finally_in_loop_with_break(x):
    log = []
    for i in range(4):
        try:
            if i == 2:
                break
            x = x + i
        finally:
            log.append(i)
    return x, log


def sc_isinstance_union_types(x, n):
    return (isinstance(n, int | float), isinstance(x, (torch.Tensor, nn.Parameter)),
            isinstance(n, bool), x * n if isinstance(n, (int, float)) else x)

def sc_no_grad_stats(x, w):
    y = x @ w
    with torch.no_grad():
        mu = y.mean(0)
        ema = 0.9 * mu + 0.1 * y.var(0)
    return y - mu, ema, torch.is_grad_enabled()


def sc_assertions(x):
    assert x.dim() == 2, "expects a matrix"
    assert x.shape[-1] % 2 == 0, f"odd last dim {x.shape}"
    assert isinstance(x, torch.Tensor)
    n, m = x.shape
    assert n >= 1 and m >= 2
    return x.view(n, 2, m // 2).sum(1)


def sc_isinstance_dispatch(x, arg):
    if isinstance(arg, bool):
        return x if arg else -x, "bool"
    if isinstance(arg, int):
        return x * arg, "int"
    if isinstance(arg, float):
        return x + arg, "float"
    if isinstance(arg, tuple):
        return x.reshape(arg), "tuple"
    if isinstance(arg, torch.Tensor):
        return x * arg, "tensor"
    return x, type(arg).__name__


def sc_normalize_input_type(xs):
    if isinstance(xs, torch.Tensor):
        xs = [xs]
    elif isinstance(xs, tuple):
        xs = list(xs)
    return torch.cat([t.reshape(-1) for t in xs]), len(xs)


def sc_nested_loop_flag(x):
    found = None
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if (i + 1) * (j + 1) == 4:
                found = (i, j)
                break
        if found is not None:
            break
    return (x[found] if found is not None else x.sum()), found


def sc_early_return_on_shape(x):
    if x.shape[0] == 1:
        return x.squeeze(0), "squeezed"
    if x.numel() == 0:
        return x.new_zeros(x.shape[1:]), "empty"
    return x.mean(0), "mean"


def sc_loop_over_layers_search(m, x):
    for i, layer in enumerate(m):
        if isinstance(layer, nn.Linear) and layer.out_features != layer.in_features:
            idx = i
            break
    else:
        idx = -1
    return m(x), idx


SEARCH_SEQ = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3), nn.Tanh()).eval()
SEARCH_SEQ_SQUARE = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()

case(sc_for_break_continue_else, (R(3), (1,)), (R(2, 6), (1,)))
case(sc_for_break_continue_else, (R(2, 2), (0, 3)), (R(1), (0, 3)))
case(sc_while_shape_loop_else, (R(8),), (R(2, 6),))
case(sc_try_finally, (R(3),), (R(1, 2),))
case(sc_return_inside_try, (R(3),), (R(2),))
case(sc_finally_in_loop_with_break, (R(3),), (R(2, 2),))
case(sc_isinstance_union_types, (R(2), 3), (R(2), 2.5))
case(sc_no_grad_stats, (R(4, 3), R(3, 2, grad=True)), (R(2, 3), R(3, 5, grad=True)))
case(sc_assertions, (R(3, 4),), (R(1, 6),))
case(sc_isinstance_dispatch, (R(2, 3), 3), (R(4), 3))
case(sc_isinstance_dispatch, (R(2, 3), 0.5), (R(4), 0.5))
case(sc_isinstance_dispatch, (R(2, 3), (3, 2)), (R(3, 2), (3, 2)))
case(sc_isinstance_dispatch, (R(2, 3), R(3)), (R(4), R(1)))
case(sc_isinstance_dispatch, (R(2, 3), False), (R(1), False))
case(sc_isinstance_dispatch, (R(2, 3), "s"))
case(sc_isinstance_dispatch, (R(2, 3), 2), (R(2, 3), 2.0))  # alt: int -> float
case(sc_normalize_input_type, (R(2, 3),), (R(4),))
case(sc_normalize_input_type, ((R(2), R(1, 2)),), ((R(3), R(3)),))
case(sc_normalize_input_type, ([R(2), R(0)],), ([R(1, 1)],))
case(sc_nested_loop_flag, (R(3, 4),), (R(1, 2),))
case(sc_early_return_on_shape, (R(1, 3),), (R(1, 5),))
case(sc_early_return_on_shape, (R(3, 2),), (R(0, 2),))
case(sc_loop_over_layers_search, (SEARCH_SEQ, R(2, 4)), (SEARCH_SEQ, R(3, 4)))
case(sc_loop_over_layers_search, (SEARCH_SEQ_SQUARE, R(2, 4)))


# --- dtype and device handling ------------------------------------------------

def dd_float64_roundtrip(x):
    y = x.to(torch.float64)
    z = (y * y).sum(-1).sqrt()
    return z, z.to(x.dtype), y.dtype, x.to(dtype=torch.float64, copy=True) - y


def dd_dtype_branch(x):
    if x.dtype == torch.float32:
        return x * 2, "f32"
    elif x.dtype in (torch.float64, torch.float16):
        return x.float() * 3, "wide-or-half"
    return x.to(torch.float32), str(x.dtype)


def dd_like_and_new(x):
    return (torch.zeros_like(x), torch.ones_like(x, dtype=torch.long), x.new_zeros(x.shape[0], 2),
            x.new_ones(()), x.new_full((2, x.shape[-1]), -1.0), x.new_empty(0).shape,
            torch.full_like(x, 0.5) + x)


def dd_arange_on_device(x):
    n = x.shape[-1]
    pos = torch.arange(n, device=x.device)
    freqs = torch.arange(0, n, 2, device=x.device, dtype=x.dtype) / n
    angles = pos[:, None].to(x.dtype) * freqs[None, :]
    return pos, x + pos, angles.cos(), x.device.type == "cpu", pos.device == x.device


def dd_int_tensor_math(i, j):
    flat = i * 10 + j
    return (flat, flat // 3, torch.remainder(flat, 4), (i == j).sum(), i.float().mean(),
            torch.maximum(i, j), i.max(dim=-1).values, (i - j).abs().argmax(dim=-1))


def dd_bool_mask_combos(x, y, m):
    keep = (x > 0) & (y < 0.5) | ~m
    both = m & ~(x > y)
    return (x.masked_fill(~keep, 0.0), torch.where(both, x, y), keep.sum(-1), both.any(),
            (keep ^ m).long(), keep.float().mean())


def dd_finfo_mask(x, mask):
    neg = torch.finfo(x.dtype).min
    bias = (1.0 - mask.to(x.dtype)) * neg
    return (x + bias).softmax(-1), neg < 0, torch.iinfo(torch.int32).max


def dd_dtype_properties(x):
    return (x.dtype.is_floating_point, x.is_floating_point(), torch.is_floating_point(x),
            x.dtype.itemsize, x.dtype in (torch.float16, torch.bfloat16), x.is_complex(), x)


def dd_promote_types(x, y):
    dt = torch.promote_types(x.dtype, y.dtype)
    return x.to(dt) + y.to(dt), dt, torch.result_type(x, y)


def dd_half_precision_path(x):
    h = x.to(torch.float16)
    y = (h * 2).to(torch.float32)
    return y, h.dtype, x.to(torch.bfloat16).float()


def dd_int_and_float_mixed(ids, x):
    w = ids.to(x.dtype) / ids.max().clamp(min=1)
    return x * w, ids + 0.5, (ids * 2).dtype, (ids / 2).dtype, torch.true_divide(ids, 4)


def dd_device_from_argument(x, y):
    z = torch.zeros(x.shape, device=y.device, dtype=y.dtype)
    return z + x.to(y), torch.tensor(2.0, device=x.device) * x, torch.empty(0, device=x.device)



def dd_nan_inf_handling(x):
    y = x.masked_fill(x > 0, float("nan"))
    return (torch.nan_to_num(y, nan=0.0), y.isnan().sum(), torch.isinf(x / 0).all(),
            x.masked_fill(x < 0, float("-inf")).softmax(-1).isfinite())

case(dd_float64_roundtrip, (R(3, 4),), (R(2, 5),))
case(dd_float64_roundtrip, (R(3, 4, dtype=torch.float64),))
case(dd_dtype_branch, (R(3),), (R(2, 2),))
case(dd_dtype_branch, (R(3, dtype=torch.float64),), (R(1, dtype=torch.float64),))
case(dd_dtype_branch, (RI(3, high=4),), (RI(2, 2, high=4),))
case(dd_dtype_branch, (R(3),), (R(3, dtype=torch.float16),))  # alt: another dtype
case(dd_like_and_new, (R(3, 4),), (R(1, 2),))
case(dd_like_and_new, (R(2, 3, dtype=torch.float64),), (R(0, 3, dtype=torch.float64),))
case(dd_arange_on_device, (R(2, 6),), (R(3, 4),))
case(dd_nan_inf_handling, (R(3, 4),), (R(2, 5),))
case(dd_int_tensor_math, (RI(3, 4, high=7), RI(3, 4, high=7)), (RI(2, 2, high=3), RI(2, 2, high=3)))
case(dd_bool_mask_combos, (R(3, 4), R(3, 4), R(3, 4, dtype=torch.bool)),
     (R(2, 1), R(2, 1), R(2, 1, dtype=torch.bool)))
case(dd_finfo_mask, (R(2, 5), RI(2, 5, high=2)), (R(3, 2), RI(3, 2, high=2)))
case(dd_finfo_mask, (R(2, 5, dtype=torch.float64), RI(2, 5, high=2)))
case(dd_dtype_properties, (R(3),))
case(dd_dtype_properties, (R(3, dtype=torch.float16),))
case(dd_promote_types, (R(3), R(3, dtype=torch.float64)), (RI(2), R(2, dtype=torch.float16)))
case(dd_half_precision_path, (R(3, 4),), (R(5),))
case(dd_int_and_float_mixed, (RI(3, 4, high=6), R(3, 4)), (RI(2, high=3), R(2)))
case(dd_device_from_argument, (R(3), R(1, dtype=torch.float64)),
     (R(2, 2), R(1, dtype=torch.float64)))


# --- size-1, empty and non-contiguous inputs through model-like code ----------

def sh_linear_on_layouts(x):
    lin = ZIP_LAYERS[1]
    return lin(x), F.linear(x, lin.weight), x.contiguous().view(-1, 4).shape


def sh_softmax_attention_layouts(q, k):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return s.softmax(-1), s.shape


def sh_empty_batch_reductions(x):
    return (x.sum(dim=0), x.amax(dim=-1) if x.shape[-1] else x.sum(-1), x.mean(dim=0).isnan().all(),
            x.reshape(-1), torch.cat([x, x], dim=0).shape, len(x))


def sh_size_one_broadcast(x, y):
    z = x + y
    return z, z.squeeze(), z.expand(2, -1, -1) if z.dim() == 2 else z, x.shape == y.shape


def sh_sliced_inputs_in_loop(x):
    outs = []
    for i in range(0, x.shape[0], 2):
        chunk = x[i: i + 2]
        outs.append(chunk.sum(0) * (i + 1))
    return torch.stack(outs), len(outs)


def sh_expanded_input_inplace_copy(x):
    y = x.clone()
    y.mul_(2)
    return y, y.is_contiguous(), x.stride() == y.stride()


case(sh_linear_on_layouts, (R(4, 3).t(),), (R(4, 1).t(),))
case(sh_linear_on_layouts, (R(3, 8)[:, ::2],), (R(0, 4),))
case(sh_linear_on_layouts, (R(1, 1, 4),), (R(2, 4).expand(3, 2, 4),))
case(sh_softmax_attention_layouts, (R(2, 4, 3).transpose(1, 2), R(2, 5, 4)),
     (R(1, 2, 1).transpose(1, 2), R(1, 3, 2)))
case(sh_softmax_attention_layouts, (R(1, 1, 4), R(1, 1, 4)), (R(2, 0, 4), R(2, 3, 4)))
case(sh_empty_batch_reductions, (R(0, 3),), (R(0, 5),))
case(sh_empty_batch_reductions, (R(2, 0),), (R(3, 0),))
case(sh_size_one_broadcast, (R(1, 4), R(3, 1)), (R(1, 1), R(1, 1)))
case(sh_sliced_inputs_in_loop, (R(4, 3),), (R(5, 2).t(),))
case(sh_expanded_input_inplace_copy, (R(1, 4).expand(3, 4),), (R(3, 1).expand(3, 2),))
case(sh_expanded_input_inplace_copy, (R(4, 3).t(),), (R(6, 6)[1::2, ::3],))


@pytest.mark.parametrize("fn,args,alt,full,state", CASES)
def test_differential_more(fn, args, alt, full, state):
    base.check(fn, args, alt, fullgraph=full, state=state)
