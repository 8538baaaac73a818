# The process-wide cache of compiled CPU kernels: kernels with the same LLVM
# IR (before optimisation) share machine code, within a program (the layers
# of a model) and across live programs; code goes when its last program does.
import gc

import torch
import torch.nn as nn
from torch.testing import assert_close

import kiln


class Block(nn.Module):
    # The product is large enough to call torch (an extern), so each block
    # has kernels of its own: the norm before it, the rest after.
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.softmax(self.linear(self.norm(x)), dim=-1)


class Stack(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def stats():
    return kiln._C.kernel_cache_info()


def test_identical_layers_compile_once():
    model = Stack(64, 6).eval()
    x = torch.randn(5, 64)
    before = stats()
    compiled = kiln.compile(model, fullgraph=True)
    with torch.no_grad():
        assert_close(compiled(x), model(x))
        assert_close(compiled(x[:, :]), model(x))
    after = stats()
    compiled_now = after["compiled"] - before["compiled"]
    reused_now = after["reused"] - before["reused"]
    # Six blocks make seven kernels (the first norm; softmax, residual and
    # the next norm between products; the last softmax): the middle five
    # are one kernel over other buffers. The six products are one GEMM.
    runner = kiln.cache_info(compiled)["runners"][0]
    assert runner.startswith("native: 13 kernel(s)"), runner
    assert compiled_now + reused_now == 13
    assert compiled_now <= 4


def test_live_programs_share_code_and_free_it_together():
    model = Stack(96, 2).eval()
    x = torch.randn(3, 96)
    first = kiln.compile(model, fullgraph=True)
    with torch.no_grad():
        expected = model(x)
        assert_close(first(x), expected)
        before = stats()
        second = kiln.compile(model, fullgraph=True)   # a new wrapper: a new capture
        assert_close(second(x), expected)
    after = stats()
    assert after["compiled"] == before["compiled"]   # every kernel came from the cache
    assert after["reused"] > before["reused"]
    live = after["live"]
    del first, second
    gc.collect()
    assert stats()["live"] < live


def test_same_shape_other_constants_or_aliasing_do_not_share():
    x, y = torch.randn(300), torch.randn(300)
    functions = [lambda a, b: a * 2 + b, lambda a, b: a * 3 + b, lambda a, b: a * 2 + a,
                 lambda a, b: a * 2 - b, lambda a, b: (a * 2 + b)[:299]]
    compiled = [kiln.compile(f, fullgraph=True) for f in functions]
    for _ in range(2):
        for f, c in zip(functions, compiled):
            assert_close(c(x, y), f(x, y), rtol=0, atol=0)


def test_clearing_the_cache_keeps_running_programs():
    f = kiln.compile(lambda a: torch.tanh(a) * 5, fullgraph=True)
    x = torch.randn(1000)
    assert_close(f(x), torch.tanh(x) * 5)
    kiln._C.clear_kernel_cache()
    assert stats()["live"] == 0
    assert_close(f(x), torch.tanh(x) * 5)
    g = kiln.compile(lambda a: torch.tanh(a) * 5, fullgraph=True)
    before = stats()["compiled"]
    assert_close(g(x), torch.tanh(x) * 5)
    assert stats()["compiled"] == before + 1
