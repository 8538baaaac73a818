# Where a compiled GPU call's time goes: `x + 1` on one element through
# eager, kiln (default and reduce-overhead) and Inductor, beside the pieces
# kiln's per-call path is made of (torch's allocation, stream lookup,
# data_ptr, an empty kernel-free kiln call on the CPU). Wall time per call,
# median of repeated loops, synchronising once per loop as a user's loop
# would. Run on a GPU machine: python -m bench.gpu_call_overhead
import statistics
import sys
import time

import torch

import kiln


def per_call_us(fn, calls=2000, repeats=7):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main():
    if not torch.cuda.is_available():
        print("gpu_call_overhead: no CUDA GPU here")
        return 0
    x = torch.zeros(1, device="cuda")
    xc = torch.zeros(1)

    def add(t):
        return t + 1

    rows = []
    rows.append(("eager x + 1", per_call_us(lambda: add(x))))
    compiled = kiln.compile(add)
    rows.append(("kiln x + 1", per_call_us(lambda: compiled(x))))
    print(kiln.cache_info(compiled)["runners"], file=sys.stderr)
    overhead = kiln.compile(add, mode="reduce-overhead")
    rows.append(("kiln reduce-overhead x + 1", per_call_us(lambda: overhead(x))))
    rows.append(("kiln x + 1 (CPU tensor)", per_call_us(lambda: compiled(xc))))
    rows.append(("eager x + 1 (CPU tensor)", per_call_us(lambda: add(xc))))
    size, stride = (1,), (1,)
    rows.append(("torch.empty_strided cuda", per_call_us(
        lambda: torch.empty_strided(size, stride, dtype=torch.float32, device=x.device))))
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw:
        rows.append(("_cuda_getCurrentRawStream", per_call_us(lambda: raw(0))))
    rows.append(("x.data_ptr()", per_call_us(lambda: x.data_ptr())))
    rows.append(("x.clone()", per_call_us(lambda: x.clone())))
    try:
        inductor = torch.compile(add)
        rows.append(("inductor x + 1", per_call_us(lambda: inductor(x))))
        inductor_ro = torch.compile(add, mode="reduce-overhead")
        rows.append(("inductor reduce-overhead x + 1", per_call_us(lambda: inductor_ro(x))))
    except Exception as error:  # noqa: BLE001 - report, do not stop
        print(f"inductor: {type(error).__name__}: {error}", file=sys.stderr)
    for name, us in rows:
        print(f"{name:40s} {us:8.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
