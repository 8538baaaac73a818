# Kernel workloads: small functions and modules that each stress one kind of
# kernel (pointwise, reduction, normalisation, matmul, conv) plus call overhead.
# Depends on torch only. Each builder returns (callable, inputs) on a device.
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Workload:
    name: str
    group: str                      # "kernel" or "model"
    build: Callable                 # build(device) -> (callable, tuple of inputs)
    memory_bound: bool = False      # show its time as a fraction of memory bandwidth
    tolerance: float = 1e-3         # max relative error accepted against eager


def pointwise_chain(x):
    # Eleven cheap pointwise ops, so that the fused chain is memory-bound:
    # eager reads and writes memory eleven times, a fusing compiler once.
    y = x * 1.5
    y = y + 0.25
    y = torch.relu(y)
    y = y * x
    y = y - 0.5
    y = torch.abs(y)
    y = torch.minimum(y, x)
    y = y * 0.75
    y = torch.clamp(y, -2.0, 2.0)
    y = y + x
    return y - 1.0


def math_chain(x):
    # Eleven pointwise ops with tanh, sqrt and a division among them: on few
    # cores the fused chain is bound by arithmetic, not memory.
    y = x * 1.5
    y = y + 0.25
    y = torch.tanh(y)
    y = y * y
    y = y - 0.5
    y = y * x
    y = torch.relu(y)
    y = y + 1.0
    y = torch.sqrt(y)
    y = y / 3.0
    return y - x


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x, weight, bias):
    return F.layer_norm(x, (x.shape[-1],), weight, bias)


def row_sum(x):
    return x.sum(dim=-1)


def column_sum(x):
    return x.sum(dim=0)


def row_statistics(x):
    # Four reductions of the same rows (the variance reads the mean back): a
    # compiler that shares the read of each row reads the input once.
    m = x.mean(1, keepdim=True)
    v = ((x - m) ** 2).mean(1)
    return m, v, x.amax(1), x.sum(1)


def causal_attention(q, k, v):
    # Written out by hand (not scaled_dot_product_attention) so a compiler sees
    # the matmuls, the mask and the softmax as separate ops it may fuse.
    sequence = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    mask = torch.ones(sequence, sequence, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def add_one(x):
    return x + 1


class GeluMlp(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def _randn(device, *shape):
    return torch.randn(*shape, device=device)


def _function(fn, *shapes):
    return lambda device: (fn, tuple(_randn(device, *s) for s in shapes))


def _layer_norm(device):
    width = 1024
    return layer_norm, (_randn(device, 4096, width), _randn(device, width), _randn(device, width))


def _gelu_mlp(device):
    return GeluMlp(512, 2048).to(device).eval(), (_randn(device, 256, 512),)


def _attention(device):
    shape = (2, 8, 256, 64)   # batch, heads, sequence, head size
    return causal_attention, tuple(_randn(device, *shape) for _ in range(3))


def _conv_block(device):
    block = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU())
    with torch.no_grad():   # non-trivial running statistics, so batch norm does work
        block[1].running_mean.uniform_(-0.5, 0.5)
        block[1].running_var.uniform_(0.5, 2.0)
    return block.to(device).eval(), (_randn(device, 4, 32, 56, 56),)


def _overhead(device):
    return add_one, (torch.ones(1, device=device),)


KERNELS = [
    Workload("pointwise chain, 4M floats", "kernel", _function(pointwise_chain, (4 * 1024 * 1024,)), memory_bound=True),
    Workload("pointwise chain, 4K floats", "kernel", _function(pointwise_chain, (4 * 1024,)), memory_bound=True),
    Workload("tanh/sqrt chain, 4M floats", "kernel", _function(math_chain, (4 * 1024 * 1024,)), memory_bound=True),
    Workload("softmax 4096x1024", "kernel", _function(softmax, (4096, 1024)), memory_bound=True),
    Workload("layer_norm 4096x1024", "kernel", _layer_norm, memory_bound=True),
    Workload("row sum 8192x1024", "kernel", _function(row_sum, (8192, 1024)), memory_bound=True),
    Workload("column sum 8192x1024", "kernel", _function(column_sum, (8192, 1024)), memory_bound=True),
    Workload("row statistics 4096x1024", "kernel", _function(row_statistics, (4096, 1024)), memory_bound=True),
    Workload("GELU MLP 256x512x2048", "kernel", _gelu_mlp),
    Workload("causal attention 2x8x256x64", "kernel", _attention),
    Workload("conv+batchnorm+relu 4x32x56x56", "kernel", _conv_block),
    Workload("overhead: x + 1, 1 float", "kernel", _overhead),
]
