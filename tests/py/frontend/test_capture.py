# kiln's own frontend, differentially: each function is compiled with
# kiln.compile(fullgraph=True), so it must be captured whole, and its results
# (values, types, nesting) must equal eager PyTorch's on fresh inputs, on the
# first call (capture) and on later calls (cache hits).
import dataclasses
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln

SCALE = 0.5
TABLE = {"a": 1.5, "b": -2.0}


def assert_same(got, expected):
    assert type(got) is type(expected), f"{type(got)} vs {type(expected)}"
    if isinstance(expected, torch.Tensor):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, equal_nan=True)
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            assert_same(got[k], expected[k])
    else:
        assert got == expected


def fresh(value):
    """Inputs of the same type, shape and layout with new random values."""
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point:
            new = torch.randn(value.shape, dtype=value.dtype)
        elif value.dtype == torch.bool:
            new = torch.rand(value.shape) > 0.5
        else:
            new = torch.randint(0, 5, value.shape, dtype=value.dtype)
        return new.as_strided(value.shape, value.stride()) if value.is_contiguous() else \
            torch.empty_strided(value.shape, value.stride(), dtype=value.dtype).copy_(new)
    if isinstance(value, (list, tuple)):
        return type(value)(fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: fresh(v) for k, v in value.items()}
    return value


def clone(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    return value


def check(fn, *args, **kwargs):
    compiled = kiln.compile(fn, fullgraph=True)
    for call_args in (args, fresh(args)):
        expected = fn(*clone(call_args), **kwargs)
        got = compiled(*clone(call_args), **kwargs)
        assert_same(got, expected)
    info = kiln.cache_info(compiled)
    assert info["entries"] == 1, info
    assert info["hits"] >= 1, info
    return compiled


# --- functions covering each construct ------------------------------------

def f_add(x, y):
    return x + y


def f_scalar_arith(x):
    return (x * 2 - 1) / 3 + 2 ** 2 - (1 - x) * SCALE


def f_reverse_ops(x):
    return 1 - x, 2 / (x.abs() + 1), 3 * x, 2 ** x


def f_compare(x, y):
    return x > y, x <= 0.5, x == y, x != 0


def f_torch_functions(x):
    return torch.relu(torch.tanh(x) + torch.sigmoid(x)) * torch.exp(-x.abs())


def f_functional(x, w):
    return F.gelu(F.linear(x, w)), F.softmax(x, dim=-1), F.silu(x)


def f_methods(x):
    return x.relu().sum(dim=-1).mean(), x.transpose(0, 1).contiguous().view(-1)


def f_inplace(x):
    y = x.clone()
    y += 1
    y.mul_(2)
    return y


def f_shapes(x):
    n, d = x.shape
    return x.reshape(d, n) * x.size(0) + x.dim() + x.size()[1] + x.numel()


def f_dtype_device(x):
    y = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    return (y + x).to(torch.float64), x.dtype == torch.float32


def f_globals(x):
    return x * SCALE + TABLE["a"] - TABLE["b"]


def f_math(x):
    return x * math.sqrt(2.0) + math.pi + math.floor(2.7) + abs(-3)


def f_builtins(x):
    n = len(x)
    m = max(n, 2) + min(3, 4) + int(2.5) + round(1.6)
    return x * m + sum([1, 2, 3]), isinstance(x, torch.Tensor), isinstance(n, int)


def f_range_loop(x):
    for i in range(3):
        x = x + i
    return x


def f_list_loop(x):
    total = x
    for scale in [0.5, 1.5, 2.0]:
        total = total * scale
    return total


def f_tuple_loop(xs):
    out = 0
    for t in xs:
        out = out + t
    return out


def f_dict_loop(d):
    out = []
    for k in d:
        out.append(d[k] * 2)
    for k, v in d.items():
        out.append(v + len(k))
    return out


def f_enumerate_zip(xs, ys):
    out = []
    for i, (a, b) in enumerate(zip(xs, ys)):
        out.append(a * i + b)
    return tuple(out)


def f_build_index_unpack(x):
    items = [x, x + 1, x + 2]
    a, b, c = items
    first, *rest = items
    pair = (a, c)
    d = {"p": pair, "q": b}
    items[1] = items[1] * 10
    items.append(first)
    return d["p"][1] - rest[0], items[1:], len(items)


def f_dict_mutation(x):
    d = {}
    d["a"] = x
    d["b"] = x * 2
    d.update({"c": x + 1})
    return d


def f_slicing(x):
    return x[0], x[:, 1:3], x[..., -1], x[None, ::2], x[1:, None, :2]


def f_index_tensor(x, idx):
    return x[idx], x[:, idx]


def f_setitem(x):
    y = x.clone()
    y[0] = 0.0
    y[:, 1] = y[:, 1] * 2
    return y


def f_control_constant(x, flag):
    if flag:
        return x + 1
    return x - 1


def f_control_shape(x):
    if x.shape[0] > 2:
        return x.sum(0)
    else:
        return x.sum(1)


def f_control_none(x, y=None):
    if y is None:
        return x * 2
    return x + y


def f_control_dtype(x):
    if x.dtype == torch.float32:
        return x.double()
    return x


def f_ternary_bool(x, n):
    return x * (2 if n > 1 and n < 10 else 3) if not n == 0 else x


def helper_scale(t, factor=2.0):
    return t * factor


def helper_kwargs(t, *, bias=1.0, **extra):
    return t + bias + sum(extra.values())


def helper_varargs(*ts):
    return sum(ts)


def f_inline_defaults(x):
    return helper_scale(x), helper_scale(x, 3.0), helper_scale(x, factor=4.0)


def f_inline_kwonly(x):
    return helper_kwargs(x, bias=2.0, a=1.0, b=2.0), helper_varargs(x, x, x)


def f_lambda(x):
    square = lambda t: t * t  # noqa: E731
    return square(x) + (lambda t, k=3: t + k)(x)


def make_closure(factor):
    offset = factor + 1

    def inner(x):
        return x * factor + offset

    return inner


closure_fn = make_closure(3.0)


def f_nested_closure(x):
    y = x + 1

    def add_y(t):
        return t + y

    return add_y(x) * 2


def f_star_call(x):
    args = (x, 2.0)
    kwargs = {"factor": 5.0}
    return helper_scale(*args), helper_scale(x, **kwargs)


def f_assert_fstring(x):
    assert x.dim() == 2, f"expected 2-d, got {x.dim()}"
    name = f"layer{x.shape[0]}_{SCALE:.2f}"
    return x * len(name)


def f_no_grad(x, w):
    with torch.no_grad():
        y = x @ w
    return y * 2, torch.is_grad_enabled()


def f_comprehensions(x):
    squares = [x * i for i in range(4) if i % 2 == 0]
    table = {str(i): x + i for i in range(2)}
    return torch.stack(squares), table


def f_multiple_returns(x):
    values, indices = torch.max(x, dim=1)
    result = x.max(dim=0)
    return values, indices, result.values, result.indices


def f_return_structure(x):
    return {"sum": x.sum(), "parts": [x[0], (x[1], None)], "n": 3, "name": "ok"}


def f_return_input(x, y):
    return x, y * 1


def f_views(x):
    return x.permute(1, 0).unsqueeze(0).expand(3, -1, -1).flatten(0, 1), x.t(), x.T


def f_reductions(x):
    return (x.sum(), x.amax(1), x.argmax(0), x.var(1, correction=0),
            torch.logsumexp(x, 1), x.std(), x.prod(1), (x > 0).any(1))


def f_creation(x):
    return (torch.ones_like(x) + torch.arange(x.shape[1]), torch.full((2, 2), 3.0),
            torch.eye(3), torch.zeros(2, 3, dtype=torch.int64))


def f_cat_stack_split(x):
    a, b = x.split(2, dim=1)
    chunks = x.chunk(2, 0)
    return torch.cat([a, b], 1), torch.stack(chunks), torch.cat((x, x)).shape


def f_where_masked(x):
    return torch.where(x > 0, x, torch.zeros_like(x)), x.masked_fill(x < 0, -1.0)


def f_matmul_family(a, b):
    return a @ b, torch.mm(a, b), torch.matmul(a, b).relu(), torch.bmm(a[None], b[None])


def f_dtype_promotion(i, f):
    return i + f, i * 2, i / 2, i // 2, (i > 1) & (i < 4), i.float().mean()


def f_getattr(x):
    return getattr(torch, "relu")(x), getattr(x, "shape")[0]


def f_unknown_torch_function(x):
    # No table entry: recorded as the ATen ops it runs, with meta shapes.
    return torch.special.erfcx(x) + torch.nan_to_num(x), torch.cdist(x, x)


def f_string_method(x, name):
    return x * len(name.upper()) if name.startswith("l") else x


# Lambdas and closures as the compiled function itself.
lambda_fn = lambda x: x + 1  # noqa: E731


@dataclasses.dataclass
class Config:
    hidden: int = 8
    scale: float = 0.25
    use_bias: bool = True
    act: str = "gelu"


CONFIG = Config()


def f_config(x, cfg):
    y = x * cfg.scale
    if cfg.use_bias:
        y = y + 1
    if cfg.act == "gelu":
        y = F.gelu(y)
    return y[..., : cfg.hidden]


def f_config_dict(x, cfg):
    for _ in range(cfg["layers"]):
        x = x * cfg["scale"]
    return x


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


CASES = [
    (f_add, (rand(3, 4), rand(3, 4))),
    (f_add, (rand(3, 4), rand(4))),
    (f_add, (rand(4, 3).t(), rand(3, 4))),
    (f_add, (rand(1, 4), rand(3, 1))),
    (f_add, (rand(0, 4), rand(4))),
    (f_scalar_arith, (rand(5),)),
    (f_reverse_ops, (rand(2, 3),)),
    (f_compare, (rand(4), rand(4))),
    (f_torch_functions, (rand(3, 5),)),
    (f_functional, (rand(2, 4), rand(6, 4))),
    (f_methods, (rand(4, 6),)),
    (f_inplace, (rand(3),)),
    (f_shapes, (rand(2, 3),)),
    (f_dtype_device, (rand(2, 2),)),
    (f_globals, (rand(3),)),
    (f_math, (rand(3),)),
    (f_builtins, (rand(4, 2),)),
    (f_range_loop, (rand(3),)),
    (f_list_loop, (rand(3),)),
    (f_tuple_loop, ((rand(2), rand(2), rand(2)),)),
    (f_tuple_loop, ([rand(2, 1), rand(1, 3)],)),
    (f_dict_loop, ({"ab": rand(2), "c": rand(2)},)),
    (f_enumerate_zip, ([rand(2), rand(2)], [rand(2), rand(2)])),
    (f_build_index_unpack, (rand(3),)),
    (f_dict_mutation, (rand(2),)),
    (f_slicing, (rand(4, 5),)),
    (f_index_tensor, (rand(5, 5), torch.tensor([0, 2, 4]))),
    (f_setitem, (rand(3, 3),)),
    (f_control_constant, (rand(3), True)),
    (f_control_constant, (rand(3), False)),
    (f_control_shape, (rand(4, 2),)),
    (f_control_shape, (rand(1, 2),)),
    (f_control_none, (rand(3),)),
    (f_control_none, (rand(3), rand(3))),
    (f_control_dtype, (rand(2),)),
    (f_control_dtype, (rand(2, dtype=torch.float64),)),
    (f_ternary_bool, (rand(2), 3)),
    (f_ternary_bool, (rand(2), 0)),
    (f_inline_defaults, (rand(2),)),
    (f_inline_kwonly, (rand(2),)),
    (f_lambda, (rand(3),)),
    (closure_fn, (rand(3),)),
    (f_nested_closure, (rand(3),)),
    (f_star_call, (rand(2),)),
    (f_assert_fstring, (rand(3, 2),)),
    (f_no_grad, (rand(2, 3), rand(3, 2))),
    (f_comprehensions, (rand(3),)),
    (f_multiple_returns, (rand(3, 4),)),
    (f_return_structure, (rand(2, 3),)),
    (f_return_input, (rand(2), rand(2))),
    (f_views, (rand(2, 3),)),
    (f_reductions, (rand(3, 4),)),
    (f_creation, (rand(2, 3),)),
    (f_cat_stack_split, (rand(4, 4),)),
    (f_where_masked, (rand(3, 3),)),
    (f_matmul_family, (rand(2, 3), rand(3, 4))),
    (f_dtype_promotion, (torch.randint(0, 5, (4,)), rand(4))),
    (f_getattr, (rand(3),)),
    (f_unknown_torch_function, (rand(3, 2),)),
    (f_string_method, (rand(2), "layer")),
    (f_string_method, (rand(2), "block")),
    (lambda_fn, (rand(2),)),
    (f_config, (rand(2, 12), CONFIG)),
    (f_config, (rand(2, 12), Config(hidden=4, use_bias=False, act="relu"))),
    (f_config_dict, (rand(3), {"layers": 3, "scale": 0.5})),
    (f_add, (rand(3, dtype=torch.float64), rand(3, dtype=torch.float64))),
    (f_add, (torch.randint(0, 9, (3,)), torch.randint(0, 9, (3,)))),
    (f_add, (rand(3, dtype=torch.bfloat16), rand(3, dtype=torch.bfloat16))),
    (f_add, (rand(2, 6)[:, ::2], rand(2, 3))),
    (f_add, (rand(()), rand(3))),
]


@pytest.mark.parametrize("fn,args", CASES, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_differential(fn, args):
    check(fn, *args)


# --- nn.Module ----------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.norm = nn.LayerNorm(d)
        self.register_buffer("offset", torch.randn(d))

    def forward(self, x):
        return self.norm(x + self.fc2(F.gelu(self.fc1(x)))) + self.offset


class Stack(nn.Module):
    def __init__(self, n=3, d=8):
        super().__init__()
        self.layers = nn.ModuleList([MLP(d) for _ in range(n)])
        self.head = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Dropout(0.1))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) if i % 2 == 0 else x + layer(x)
        return self.head(x)


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


class Derived(Base):
    def forward(self, x):
        return super().forward(x) * 2 + self.extra(x)

    def extra(self, x):
        return x.mean(-1, keepdim=True)


class Attention(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v)) \
            if False else [z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v)]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


MODULE_CASES = [
    (MLP, (rand(2, 8),)),
    (Stack, (rand(2, 5, 8),)),
    (Derived, (rand(3, 4),)),
    (Attention, (rand(2, 5, 16),)),
    (ConvBlock, (rand(2, 3, 8, 8),)),
]


@pytest.mark.parametrize("cls,args", MODULE_CASES, ids=[c[0].__name__ for c in MODULE_CASES])
def test_modules(cls, args):
    model = cls().eval()
    compiled = kiln.compile(model, fullgraph=True)
    with torch.no_grad():
        for call_args in (args, fresh(args)):
            assert_same(compiled(*call_args), model(*call_args))
    # The wrapper behaves like the module.
    assert compiled.training is False
    assert dict(compiled.named_parameters()).keys() == dict(model.named_parameters()).keys()


def test_module_with_grad_inputs_matches_eager_gradients():
    model = MLP()
    compiled = kiln.compile(model, fullgraph=True)
    x = rand(2, 8)
    out = compiled(x).sum()
    out.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(x).sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad)


def test_parameters_are_read_each_call():
    model = MLP().eval()
    compiled = kiln.compile(model, fullgraph=True)
    x = rand(2, 8)
    with torch.no_grad():
        compiled(x)
        model.fc1.weight.mul_(2.0)
        assert_same(compiled(x), model(x))
        model.fc2 = nn.Linear(16, 8)  # a new submodule: guarded by identity
        assert_same(compiled(x), model(x))
    assert kiln.cache_info(compiled)["entries"] == 2


def f_kwargs_mutation(x, **kwargs):
    kwargs["scale"] = kwargs.get("scale", 1.0) * 2
    extra = kwargs.pop("extra", 0.0)
    return x * kwargs["scale"] + extra


def test_star_kwargs_are_owned_by_the_call():
    compiled = check(f_kwargs_mutation, rand(3), scale=3.0, extra=1.0)
    torch.testing.assert_close(compiled(torch.ones(2), scale=3.0, extra=1.0), torch.full((2,), 7.0))


def f_imports_inside(x):
    import math as m
    import torch.nn.functional
    from torch.nn import functional as functional_alias
    from collections import OrderedDict  # noqa: F401 - a loaded module's name

    return torch.nn.functional.relu(x) * m.pi + functional_alias.silu(x)


def f_imports_unloaded(x):
    import antigravity_kiln_missing  # noqa: F401

    return x


def test_imports_of_loaded_modules_are_captured():
    check(f_imports_inside, rand(3))
    compiled = kiln.compile(f_imports_unloaded, fullgraph=True)
    with pytest.raises(kiln.Unsupported, match="not loaded yet"):
        compiled(rand(2))
