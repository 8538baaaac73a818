# `make bench-dynamic`: the bench's kernel workloads compiled once for every
# size (kiln.compile(dynamic=True): every dim a size symbol, kernels that
# read the sizes from the call) against the same workloads compiled for
# their sizes (dynamic=False), at the workloads' own sizes, side by side in
# one run. Each symbolic program is also called at a second size (every
# dim of every input one larger, where the workload allows it) and checked
# against eager there, without compiling again.
# One run, one machine; writes bench/results/<date>-dynamic-cpu-<threads>-threads.md.
# Depends on torch, kiln, bench.workloads.
import datetime
import os
import statistics

import torch

from bench import environment
from bench.workloads import KERNELS

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SAMPLES, SAMPLE_S = 9, 0.05


def tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors(item)]
    return []


def matches(output, reference):
    got, expected = tensors(output), tensors(reference)
    return len(got) == len(expected) and all(
        a.shape == b.shape and torch.allclose(a, b, rtol=1e-3, atol=1e-3)
        for a, b in zip(got, expected))


def grown(inputs):
    """The inputs with every dim one larger (fresh values)."""
    return tuple(torch.randn(*[size + 1 for size in t.shape]) for t in inputs)


def main():
    arguments, kiln = environment.start(RESULTS)
    torch.manual_seed(0)
    rows = []
    with torch.no_grad():
        for workload in KERNELS:
            fn, inputs = workload.build("cpu")
            reference = fn(*inputs)
            fixed = kiln.compile(fn, dynamic=False)
            symbolic = kiln.compile(fn, dynamic=True)
            ok = matches(fixed(*inputs), reference) and matches(symbolic(*inputs), reference)
            eager, fixed_s, symbolic_s = environment.seconds_per_call((fn, fixed, symbolic), inputs,
                                                                     SAMPLES, SAMPLE_S)
            runner = kiln.cache_info(symbolic)["runners"][0]
            once = "compiled once for every size" in runner
            other = "-"
            if once and not isinstance(fn, torch.nn.Module):
                bigger = grown(inputs)
                other = "yes" if matches(symbolic(*bigger), fn(*bigger)) else "NO"
                if kiln.cache_info(symbolic)["entries"] != 1:
                    other += " (recompiled)"
            rows.append((workload.name, eager, fixed_s, symbolic_s, once, ok, other))

    date = datetime.date.today().isoformat()
    lines = [f"# Kernels compiled once for every size against kernels compiled for their sizes, "
             f"CPU, {arguments.threads} threads ({date})", "",
             f"Processor: {environment.processor_name()}; commit {environment.repository_commit()}; "
             f"torch {torch.__version__}. Plain process, one run. Median of {SAMPLES} samples, "
             "the three columns' samples interleaved. "
             "`fixed`: kiln.compile(dynamic=False); `symbolic`: kiln.compile(dynamic=True), "
             "every dim a size symbol. `one compile`: the symbolic program serves every size "
             "(else it is compiled per size). `other size`: the symbolic program called with "
             "every dim one larger matches eager, without a new capture.", "",
             "| workload | eager ms | fixed ms | symbolic ms | symbolic / fixed | one compile "
             "| matches eager | other size |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- | --- |"]
    ratios = []
    for name, eager, fixed_s, symbolic_s, once, ok, other in rows:
        ratio = symbolic_s / fixed_s
        ratios.append(ratio)
        lines.append(f"| {name} | {eager * 1e3:.4f} | {fixed_s * 1e3:.4f} | {symbolic_s * 1e3:.4f} "
                     f"| {ratio:.2f} | {'yes' if once else 'no'} | {'yes' if ok else 'NO'} "
                     f"| {other} |")
    geomean = statistics.geometric_mean(ratios)
    lines += ["", f"Geomean of symbolic / fixed time: {geomean:.3f} "
              f"(worst {max(ratios):.2f}, on {rows[ratios.index(max(ratios))][0]})."]
    environment.write_table("\n".join(lines) + "\n", arguments.out,
                            f"{date}-dynamic-cpu-{arguments.threads}-threads.md")


if __name__ == "__main__":
    main()
