# Dynamic shapes in kiln's own frontend: automatic dynamic dimensions,
# dynamic=True/False, kiln.mark_dynamic/mark_static, size arithmetic and
# control flow on sizes, guards on the relations a capture relied on, and the
# specialisation of sizes 0 and 1. Every result is compared with eager.
import pytest
import torch
import torch.nn.functional as F

import kiln


def close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


# torch before 2.13 specialises the sequence length in matmul's meta
# decomposition of batched 4-d products (a guard s0 == <size>): kiln then
# captures those functions with static shapes (results stay right).
TORCH_SPECIALISES_MATMUL = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 13)


def entries(compiled):
    return compiled.cache_info()["entries"]


def runners(compiled):
    return compiled.cache_info()["runners"]


def rows_softmax(x, w):
    return torch.softmax(x @ w, dim=-1) * 2 + x.sum(-1, keepdim=True)


def test_automatic_dynamic_reuses_one_capture_after_a_size_changes():
    w = torch.randn(16, 8)
    f = kiln.compile(rows_softmax)
    for rows in (4, 6, 9, 13, 21, 30):
        x = torch.randn(rows, 16)
        close(f(x, w), rows_softmax(x, w))
    # The first call specialised; the second learned that dim 0 varies and
    # compiled kernels that read it from each call: one program for 6..30.
    assert entries(f) == 2
    assert "dynamic" in runners(f)[1]
    assert "compiled once for every size" in runners(f)[1]


def test_dynamic_true_is_symbolic_from_the_first_call():
    w = torch.randn(16, 8)
    f = kiln.compile(rows_softmax, dynamic=True)
    for rows in (5, 7, 12, 40):
        x = torch.randn(rows, 16)
        close(f(x, w), rows_softmax(x, w))
    assert entries(f) == 1
    assert "dynamic" in runners(f)[0]
    # w is an argument too: its dims are symbolic, and guarded.
    w2, x = torch.randn(16, 3), torch.randn(5, 16)
    close(f(x, w2), rows_softmax(x, w2))
    assert entries(f) == 1


def test_dynamic_false_specialises_every_size():
    f = kiln.compile(lambda x: x * 2 + 1, dynamic=False)
    for rows in (3, 4, 5):
        x = torch.randn(rows, 8)
        close(f(x), x * 2 + 1)
    assert entries(f) == 3
    assert not any("dynamic" in r for r in runners(f))


def test_mark_dynamic_and_mark_static():
    def fn(x):
        return torch.tanh(x) + x.mean()

    f = kiln.compile(fn)
    for rows in (3, 8, 11):
        x = torch.randn(rows, 5)
        kiln.mark_dynamic(x, 0)
        close(f(x), fn(x))
    assert entries(f) == 1

    g = kiln.compile(fn, dynamic=True)
    for rows in (3, 8):
        x = torch.randn(rows, 5)
        kiln.mark_static(x, 0)
        close(g(x), fn(x))
    assert entries(g) == 2

    with pytest.raises(IndexError):
        kiln.mark_dynamic(torch.randn(2, 3), 2)
    with pytest.raises(TypeError):
        kiln.mark_dynamic([1, 2], 0)


def test_sizes_zero_and_one_are_specialised():
    def fn(x):
        return (x + 1).sum(0)

    f = kiln.compile(fn, dynamic=True)
    for rows in (5, 1, 0, 7, 1, 0):
        x = torch.randn(rows, 3)
        close(f(x), fn(x))
    # One symbolic entry for sizes >= 2, one each for 1 and 0.
    assert entries(f) == 3
    guards = " ".join(f.cache_info()["guards"])
    assert "s0 >= 2" in guards


def test_size_arithmetic_into_views_stays_symbolic():
    def fn(x):
        half = x.shape[0] // 2
        top = x[:half]
        flat = x.reshape(x.size(0), -1)
        pairs = x.view(half, 2, x.shape[1])
        return top * 2, flat.sum(1), pairs.mean(1), x.numel()

    f = kiln.compile(fn, dynamic=True)
    for rows in (4, 6, 10, 32):
        x = torch.randn(rows, 3)
        for a, b in zip(f(x)[:3], fn(x)[:3]):
            close(a, b)
        assert f(x)[3] == x.numel()


def test_control_flow_on_a_size_guards_and_stays_right():
    def fn(x):
        if x.shape[0] > 10:
            return x * 2
        return x - 1

    f = kiln.compile(fn, dynamic=True)
    for rows in (4, 20, 5, 30, 11, 10):
        x = torch.randn(rows, 2)
        close(f(x), fn(x))
    guards = "\n".join(f.cache_info()["guards"])
    assert "s0 > 10" in guards or "s0 <= 10" in guards or "10 < s0" in guards


def test_a_relation_the_graph_relied_on_is_checked():
    def fn(x, y):
        return x + y  # broadcasting needs equal sizes (or 1)

    f = kiln.compile(fn, dynamic=True)
    for rows in (4, 9):
        x, y = torch.randn(rows, 3), torch.randn(rows, 3)
        close(f(x, y), fn(x, y))
    # Equal sizes share a symbol: y's layout is checked against x's.
    guards = "\n".join(f.cache_info()["guards"])
    assert "L['x'] tensor f32[s0, s1]" in guards and "L['y'] tensor f32[s0, s1]" in guards
    x, y = torch.randn(6, 3), torch.randn(1, 3)
    close(f(x, y), fn(x, y))
    with pytest.raises(RuntimeError):
        f(torch.randn(6, 3), torch.randn(5, 3))


def test_non_contiguous_and_transposed_inputs():
    def fn(x):
        return torch.relu(x).sum(-1) + x[:, 0]

    f = kiln.compile(fn, dynamic=True)
    for rows in (3, 7, 12):
        base = torch.randn(5, rows)
        x = base.t()
        close(f(x), fn(x))
        y = torch.randn(rows, 10)[:, ::2]
        close(f(y), fn(y))


def test_returning_a_size_falls_back_to_static_shapes_and_stays_right():
    def fn(x):
        return x * 3, x.shape[0]

    f = kiln.compile(fn, dynamic=True)
    for rows in (4, 7):
        x = torch.randn(rows, 2)
        out, n = f(x)
        close(out, x * 3)
        assert n == rows


class Block(torch.nn.Module):
    def __init__(self, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm(x)).split(width, dim=-1)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / (width // self.heads) ** 0.5
        mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        attention = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attention.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(x)


def test_a_transformer_block_over_many_sequence_lengths_compiles_few_graphs():
    torch.manual_seed(0)
    block = Block().eval()
    compiled = kiln.compile(block)
    with torch.no_grad():
        for length in (2, 3, 5, 8, 13, 21, 34, 55, 64):
            x = torch.randn(1, length, 32)
            torch.testing.assert_close(compiled(x), block(x), rtol=1e-4, atol=1e-4)
    info = kiln.cache_info(compiled)
    if TORCH_SPECIALISES_MATMUL:
        return
    assert info["entries"] <= 3, info["runners"]
    assert "dynamic" in info["runners"][-1]
    # One program for every length after the second: none per length.
    assert "compiled once for every size" in info["runners"][-1]


def test_one_program_serves_every_size_and_its_kernels_read_the_sizes(capfd):
    # A pointwise chain, a reduction over the symbolic dim and one over the
    # static dim, a softmax, a view splitting the static dim: one compile,
    # then calls at sizes the example never had (odd, prime, large) run the
    # same machine code.
    def fn(x, b):
        y = torch.tanh(x * 1.5 + b).softmax(-1)
        return y.sum(0), y.view(x.shape[0], 2, -1).amax(1), x.mean(1)

    f = kiln.compile(fn, dynamic=True)
    b = torch.randn(8)
    for rows in (5, 2, 3, 97, 1000, 17):
        x = torch.randn(rows, 8)
        close(f(x, b), fn(x, b))
    assert entries(f) == 1
    assert "compiled once for every size" in runners(f)[0], runners(f)
    # A transposed input is another layout (its strides are guarded): a
    # capture of its own, again one program for its sizes.
    for rows in (6, 11):
        x = torch.randn(8, rows).t()
        close(f(x, b), fn(x, b))
    assert entries(f) == 2
    assert all("compiled once for every size" in r for r in runners(f)), runners(f)


def test_torch_compile_dynamic_graphs_are_taken_with_their_size_symbols():
    from kiln import _backend

    def fn(x, w):
        y = torch.softmax(x @ w, -1)
        return y.view(x.shape[0] // 2, -1).sum(0) + x[: x.shape[0] // 2].mean()

    torch._dynamo.reset()
    _backend.counters.clear()
    compiled = torch.compile(fn, backend="kiln", dynamic=True)
    w = torch.randn(4, 6)
    for rows in (4, 6, 10, 22):
        x = torch.randn(rows, 4)
        close(compiled(x, w), fn(x, w))
    # Imported, not run as the FX graph it is.
    assert _backend.counters["graphs"] >= 1 and _backend.counters["fallbacks"] == 0
    torch._dynamo.reset()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dynamic_shapes_on_the_gpu():
    torch.manual_seed(0)
    w = torch.randn(16, 8, device="cuda")
    f = kiln.compile(rows_softmax, dynamic=True)
    for rows in (5, 7, 12, 40):
        x = torch.randn(rows, 16, device="cuda")
        close(f(x, w), rows_softmax(x, w))
    assert entries(f) == 1 and "dynamic" in runners(f)[0]
    block = Block().cuda().eval()
    compiled = kiln.compile(block)
    with torch.no_grad():
        for length in (2, 3, 9, 33):
            x = torch.randn(1, length, 32, device="cuda")
            torch.testing.assert_close(compiled(x), block(x), rtol=1e-4, atol=1e-4)
    assert TORCH_SPECIALISES_MATMUL or kiln.cache_info(compiled)["entries"] <= 2


def test_a_graph_break_keeps_dynamic_shapes(capsys):
    def fn(x):
        y = torch.relu(x) * 2
        print("between the graphs")
        return y.sum(0) + x.shape[1]

    f = kiln.compile(fn, dynamic=True)
    for rows in (3, 6, 11):
        x = torch.randn(rows, 4)
        close(f(x), fn(x))
    info = kiln.cache_info(f)
    assert info["entries"] == 1 and "dynamic" in info["runners"][0]
    assert info["breaks"] and "print" in info["breaks"][0]["reason"]
    assert capsys.readouterr().out.count("between the graphs") == 6


def test_a_size_live_at_a_graph_break_falls_back_to_static_shapes(capsys):
    def fn(x):
        n = x.shape[0]
        print("break")
        return x * n

    f = kiln.compile(fn, dynamic=True)
    for rows in (3, 6):
        x = torch.randn(rows, 4)
        close(f(x), fn(x))
    assert not kiln.cache_info(f)["runs_in_cpython"]


@torch.library.custom_op("kiln_dynamic_test::row_scale", mutates_args=())
def _row_scale(x: torch.Tensor) -> torch.Tensor:
    return x * torch.arange(x.shape[0], dtype=x.dtype)[:, None]


@_row_scale.register_fake
def _(x):
    # Like some of torch's own meta functions before 2.13 (matmul's, linear's).
    if not isinstance(x.shape[0], int):
        raise RuntimeError("this fake implementation needs static sizes")
    return torch.empty_like(x)


def test_a_torch_call_that_cannot_take_symbolic_sizes_captures_statically(monkeypatch, capfd):
    # Not a graph break: the whole frame is captured again with static
    # shapes, and later sizes go straight to static captures.
    def fn(x):
        return _row_scale(x.sin()) + 1

    monkeypatch.setenv("KILN_LOGS", "recompiles")
    f = kiln.compile(fn)
    for rows in (3, 4, 5, 6):
        x = torch.randn(rows, 2)
        close(f(x), fn(x))
    info = f.cache_info()
    assert info["break_reasons"] == [] and info["entries"] == 4
    assert not any(r.startswith("dynamic") for r in info["runners"])
    log = capfd.readouterr().err
    assert log.count("no capture with dynamic shapes") == 1
    assert "static shapes from now on" in log


def test_python_work_on_a_size_sees_an_int():
    # Type checks see an int without pinning the size; text and dict keys
    # take its value, guarded, so each size is captured on its own.
    def typed(x):
        n = x.shape[0]
        return x * n, isinstance(n, int), type(n) is int, len(x.shape)

    def named(x):
        n = x.shape[0]
        return x + 1, f"{n}", str(x.shape), "%s" % n, {n: "rows"}

    f = kiln.compile(typed)
    for rows in (3, 5, 8):
        x = torch.randn(rows, 2)
        out, *rest = f(x)
        close(out, x * rows)
        assert rest == [True, True, 2]
    assert any(r.startswith("dynamic") for r in runners(f))
    g = kiln.compile(named)
    for rows in (3, 5, 8):
        x = torch.randn(rows, 2)
        out, *rest = g(x)
        close(out, x + 1)
        assert rest == [str(rows), str(x.shape), str(rows), {rows: "rows"}]


def test_values_carried_between_loops_fall_back_when_a_row_outgrows_their_arrays():
    # softmax carries exp(x - max) from its sum loop to its output loop in a
    # stack array sized for at most 16384 points where the row length
    # varies: a longer row takes the body that computes exp again.
    def fn(x):
        return torch.softmax(x * 2, dim=-1) + 1

    f = kiln.compile(fn, dynamic=True)
    for rows, columns in ((3, 100), (2, 16384), (2, 20000), (4, 37)):
        x = torch.randn(rows, columns)
        close(f(x), fn(x))
    assert entries(f) == 1
    assert "compiled once for every size" in runners(f)[0]
