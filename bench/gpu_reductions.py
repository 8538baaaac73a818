# GPU memory-bound kernels (pointwise chains, reductions, normalisations),
# kiln against eager, shape by shape: microseconds a call (the median over
# rounds of 10 back-to-back calls between CUDA events, after warm-up), GB/s
# of the bytes a call must move (inputs read once, outputs written once) and
# the share of the copy bandwidth measured the same way in the same run
# (torch's copy_ of 256 MiB), with the mapping kiln's GPU schedule chose and
# where it ran.
#   python3 bench/gpu_reductions.py [--calls 200] [--only softmax] [--out FILE]
# Depends on torch, kiln, and bench/environment.py (the commit measured).
import argparse
import os
import re
import statistics
import sys
import tempfile

os.environ.setdefault("KILN_LOGS", "schedule")  # read when kiln loads

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.environment import import_kiln, repository_commit  # noqa: E402
from bench.workloads import math_chain, pointwise_chain  # noqa: E402


def _randn(*shape):
    return torch.randn(*shape, device="cuda")


def _layer_norm(rows, columns):
    weight, bias = _randn(columns), _randn(columns)
    return lambda x: F.layer_norm(x, (columns,), weight, bias), (_randn(rows, columns),)


# name: (function and inputs, bytes a call moves beyond its inputs)
WORKLOADS = {
    "pointwise chain 16M floats": lambda: (pointwise_chain, (_randn(16 * 2**20),)),
    "pointwise chain 64M floats": lambda: (pointwise_chain, (_randn(64 * 2**20),)),
    "tanh/sqrt chain 16M floats": lambda: (math_chain, (_randn(16 * 2**20),)),
    "softmax 16384x1024": lambda: (lambda x: torch.softmax(x, -1), (_randn(16384, 1024),)),
    "layer_norm 16384x1024": lambda: _layer_norm(16384, 1024),
    "row sum 16384x1024": lambda: (lambda x: x.sum(-1), (_randn(16384, 1024),)),
    "column sum 16384x1024": lambda: (lambda x: x.sum(0), (_randn(16384, 1024),)),
    "softmax 4096x4096": lambda: (lambda x: torch.softmax(x, -1), (_randn(4096, 4096),)),
    "softmax 64x65536": lambda: (lambda x: torch.softmax(x, -1), (_randn(64, 65536),)),
    "layer_norm 8192x1024": lambda: _layer_norm(8192, 1024),
    "layer_norm 32x65536": lambda: _layer_norm(32, 65536),
    "row sum 256x16384": lambda: (lambda x: x.sum(-1), (_randn(256, 16384),)),
    "column sum 4096x1024": lambda: (lambda x: x.sum(0), (_randn(4096, 1024),)),
    "column sum 16384x4096": lambda: (lambda x: x.sum(0), (_randn(16384, 4096),)),
}


def median_microseconds(fn, inputs, calls, warmup=20, batch=10):
    """Microseconds a call, the median over rounds of `batch` back-to-back
    calls between two CUDA events (`calls` in all): the queue stays full, so
    a round times the GPU's work, not the host's time to launch the first
    call of it (which a busy host adds to an event pair around each call)."""
    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    rounds = max(5, calls // batch)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rounds)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rounds)]
    for start, end in zip(starts, ends):
        start.record()
        for _ in range(batch):
            fn(*inputs)
        end.record()
    torch.cuda.synchronize()
    return 1000.0 * statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) / batch


def copy_bandwidth(calls):
    """GB/s of torch's copy_ between two 256 MiB buffers, reads and writes."""
    source, target = torch.empty(64 * 2**20, device="cuda"), torch.empty(64 * 2**20, device="cuda")
    us = median_microseconds(target.copy_, (source,), calls)
    return 2 * source.numel() * 4 / us / 1e3


def first_call_with_log(fn, inputs):
    """The first call's result and what kiln logged meanwhile (its schedule),
    read from file descriptor 2, where kiln's C++ logging writes."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            result = fn(*inputs)
            torch.cuda.synchronize()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        log = captured.read().decode(errors="replace")
    return result, log


def mappings_of(log):
    # Schedule lines: "step 0 kernel_sum_0: grid=128 block=1024 points=1024
    # mapping=column points=8 lanes=128 shared=4096".
    found = [f"{kernel} {mapping.strip()}"
             for kernel, mapping in re.findall(r"step \d+ (\S+): grid=.*?mapping=(.*)", log)]
    return "; ".join(found) or "-"


def moved_bytes(inputs, output):
    tensors = list(inputs) + [output]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--only", default="", help="run the workloads whose name contains this")
    parser.add_argument("--out", default="", help="also write the table to this file")
    options = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_reductions: no CUDA GPU, nothing to measure")
        return 0
    kiln, why = import_kiln()
    if kiln is None:
        print(why)
        return 1
    copy = copy_bandwidth(options.calls)
    lines = [f"GPU memory-bound kernels on {torch.cuda.get_device_name()}, commit {repository_commit()}, "
             f"torch {torch.__version__}, {options.calls} calls in rounds of 10, median round; "
             f"copy bandwidth "
             f"(torch copy_ of 256 MiB, read + write) {copy:.0f} GB/s", "",
             "| workload | eager us | eager GB/s | kiln us | kiln GB/s | kiln % of copy | speedup "
             "| kiln ran | check | mapping |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for name, build in WORKLOADS.items():
        if options.only not in name:
            continue
        torch.manual_seed(0)
        fn, inputs = build()
        expected = fn(*inputs)
        compiled = kiln.compile(fn)
        actual, log = first_call_with_log(compiled, inputs)
        error = (actual.float() - expected.float()).abs().max().item()
        scale = expected.float().abs().max().item() or 1.0
        check = "ok" if error <= 1e-4 * scale + 1e-5 else f"WRONG (max error {error:.3g})"
        runner = kiln.cache_info(compiled)["runners"][0]
        ran = "native" if runner.startswith("native") else "torch"
        eager_us = median_microseconds(fn, inputs, options.calls)
        kiln_us = median_microseconds(compiled, inputs, options.calls)
        size = moved_bytes(inputs, expected)
        row = (f"| {name} | {eager_us:.1f} | {size / eager_us / 1e3:.0f} | {kiln_us:.1f} | "
               f"{size / kiln_us / 1e3:.0f} | {100 * size / kiln_us / 1e3 / copy:.0f}% | "
               f"{eager_us / kiln_us:.2f}x | {ran} | {check} | "
               f"{mappings_of(log)} |")
        lines.append(row)
        print(row, flush=True)
    if options.out:
        with open(options.out, "w") as out:
            out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
