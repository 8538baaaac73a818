# `make bench-export`: kiln's own float32 GEMM against torch's (MKL/oneDNN) at
# transformer sizes, in kiln's JIT and in exported code, with GFLOP/s beside
# the machine's peak estimate; and the bench's hand-written GPT exported and run
# from C (the example driver, a process without Python) against the same model
# in eager, under torch.compile (Inductor) and under kiln's JIT (those timed
# round-robin in one process, in rounds with the C driver's process between
# them; medians). One run, one machine; writes
# bench/results/<date>-export-cpu-<threads>-threads.md.
# Depends on torch, kiln, a C compiler.
import datetime
import os
import re
import statistics
import subprocess
import tempfile

import torch

from bench import environment
from bench.models import TinyGpt, _token_ids, VOCABULARY, WIDTH, LAYERS, HEADS
from bench.workloads import _conv_block

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
GEMM_SIZES = [(128, 256, 1024), (512, 768, 3072), (1024, 1024, 1024), (2048, 4096, 4096)]


def peak_gflops(threads):
    """cores x GHz x 2 FMA units x lanes x 2 flops, from /proc/cpuinfo."""
    text = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    mhz = [float(v) for v in re.findall(r"cpu MHz\s*:\s*([\d.]+)", text)]
    lanes = 16 if " avx512f" in text else 8 if " avx2" in text else 4
    ghz = (max(mhz) / 1000) if mhz else 0
    return threads * ghz * 2 * lanes * 2, ghz, lanes


def from_c_driver(directory, name, weights_file, inputs, threads, scratch):
    """A function timing one export's example driver (main.c) on `inputs`
    for about the seconds it is given, in a process without Python; returns
    seconds per run as the driver itself measured them."""
    binary = os.path.join(scratch, name + "_main")
    subprocess.run(["cc", "-O2", os.path.join(directory, "main.c"),
                    os.path.join(directory, name + ".o"), "-lm", "-lpthread", "-o", binary],
                   check=True)
    files = []
    for index, tensor in enumerate(inputs):
        files.append(os.path.join(scratch, f"{name}_input{index}.bin"))
        tensor.contiguous().numpy().tofile(files[-1])
    env = {**os.environ, "KILN_NUM_THREADS": str(threads)}

    def timed(runs):
        run = subprocess.run([binary, weights_file, *files, "-r", str(runs)],
                             capture_output=True, text=True, check=True, env=env)
        return float(re.search(r"mean run time: ([\d.]+) us", run.stdout).group(1)) / 1e6

    per_run = timed(3)
    return lambda seconds: timed(max(3, int(seconds / max(per_run, 1e-6))))


def interleaved(in_process, from_c, seconds, rounds=3):
    """Medians over `rounds` rounds, each timing the in-process functions
    (round-robin) and then the C driver for about `seconds` / `rounds`: the
    driver runs in its own process, so that a drift of the machine's speed
    (other tenants of a shared host) reaches every column alike."""
    samples = [[] for _ in range(len(in_process) + 1)]
    for _ in range(rounds):
        times = environment.seconds_per_call(in_process, samples=3) + [from_c(seconds / rounds)]
        for column, value in zip(samples, times):
            column.append(value)
    return [statistics.median(column) for column in samples]


def gemm_rows(kiln, threads, scratch):
    """torch.mm against kiln's GEMM exported and run from C, and compiled by
    kiln's JIT (called from Python, as users call it)."""
    rows = []
    for m, k, n in GEMM_SIZES:
        a, b = torch.randn(m, k), torch.randn(k, n)
        flops = 2 * m * n * k
        budget = 3.0 if flops > 1e10 else 1.5
        jit = kiln.compile(lambda a, b: a @ b)
        name = f"mm_{m}_{k}_{n}"
        directory = os.path.join(scratch, name)
        result = kiln.export(lambda a, b: a @ b, (a, b), directory, name=name)
        from_c = from_c_driver(directory, name, result.weights_file, (a, b), threads, scratch)
        eager, jitted, c_time = interleaved([lambda: torch.mm(a, b), lambda: jit(a, b)], from_c,
                                            budget)
        rows.append((f"{m}x{k} @ {k}x{n}", flops / eager / 1e9, flops / c_time / 1e9,
                     flops / jitted / 1e9, eager / c_time, eager / jitted))
    return rows


def model_rows(kiln, threads, scratch, model, inputs, name):
    """One model under eager, kiln's JIT, Inductor and exported from C."""
    with torch.no_grad():
        jit = kiln.compile(model)
        columns = {"eager": lambda: model(*inputs), "kiln JIT": lambda: jit(*inputs)}
        inductor_error = None
        try:
            inductor = torch.compile(model)
            inductor(*inputs)
            columns["torch.compile (Inductor)"] = lambda: inductor(*inputs)
        except Exception as error:  # reported, the rest still runs
            inductor_error = environment.describe(error)
        directory = os.path.join(scratch, name)
        result = kiln.export(model, inputs, directory, name=name)
        from_c = from_c_driver(directory, name, result.weights_file, inputs, threads, scratch)
        times = interleaved(list(columns.values()), from_c, 3.0)
    results = dict(zip([*columns, "kiln export, run from C"], times))
    if inductor_error:
        results["torch.compile (Inductor)"] = inductor_error
    return results


def gpt_rows(kiln, threads, scratch):
    model = TinyGpt({"vocabulary": VOCABULARY, "context": 512, "width": WIDTH, "layers": LAYERS,
                     "heads": HEADS, "mlp_ratio": 4, "activation": "gelu",
                     "skip_layers": []}).eval()
    return model_rows(kiln, threads, scratch, model, (_token_ids("cpu"),), "tiny_gpt")


def conv_rows(kiln, threads, scratch):
    model, inputs = _conv_block("cpu")
    return model_rows(kiln, threads, scratch, model, inputs, "conv_block")


def main():
    arguments, kiln = environment.start(RESULTS)
    kiln._C.set_num_threads(arguments.threads)
    peak, ghz, lanes = peak_gflops(arguments.threads)
    with tempfile.TemporaryDirectory() as scratch:
        gemms = gemm_rows(kiln, arguments.threads, scratch)
        gpt = gpt_rows(kiln, arguments.threads, scratch)
        conv = conv_rows(kiln, arguments.threads, scratch)
    date = datetime.date.today().isoformat()
    lines = [f"# kiln export and GEMM, CPU, {arguments.threads} threads ({date})", "",
             f"Processor: {environment.processor_name()}; commit {environment.repository_commit()}; "
             f"torch {torch.__version__}. Peak estimate {peak:.0f} GFLOP/s "
             f"({arguments.threads} cores x {ghz:.2f} GHz x 2 FMA x {lanes} lanes x 2).", "",
             "## float32 GEMM: kiln's against torch.mm (MKL)", "",
             "kiln exported and run from C (the example driver, no Python), and the same "
             "product compiled by kiln's JIT and called from Python.", "",
             "| size | torch GFLOP/s | kiln from C GFLOP/s | kiln JIT GFLOP/s "
             "| from C / torch (speed) | JIT / torch (speed) |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for size, torch_rate, c_rate, jit_rate, c_ratio, jit_ratio in gemms:
        lines.append(f"| {size} | {torch_rate:.1f} | {c_rate:.1f} | {jit_rate:.1f} "
                     f"| {c_ratio:.2f}x | {jit_ratio:.2f}x |")
    for title, rows in ((f"hand-written GPT ({LAYERS} layers, {WIDTH} wide), batch of token ids "
                         f"{tuple(_token_ids('cpu').shape)}", gpt),
                        ("conv + batch norm + ReLU, 4x32x56x56 by 64 3x3 filters", conv)):
        lines += ["", f"## {title}", "",
                  "| how it runs | ms per call | vs kiln JIT |", "| --- | ---: | ---: |"]
        for how, value in rows.items():
            if isinstance(value, str):
                lines.append(f"| {how} | {value} | |")
            else:
                lines.append(f"| {how} | {value * 1e3:.2f} | {rows['kiln JIT'] / value:.2f}x |")
    environment.write_table("\n".join(lines) + "\n", arguments.out,
                            f"{date}-export-cpu-{arguments.threads}-threads.md")


if __name__ == "__main__":
    main()
