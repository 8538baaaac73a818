# What the benchmarks report about where they ran: the processor, the
# repository's commit, and whether kiln imports; their start (arguments,
# kiln, threads) and writing their tables. Depends on the standard library
# (and torch, for start()).
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time


def describe(error):
    """The error's type and first line, short enough for a table cell."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def import_kiln():
    """(kiln module, None) or (None, why it cannot be imported)."""
    try:
        import kiln
        return kiln, None
    except Exception as error:  # an ImportError or a broken build: reported, the rest still runs
        return None, f"import kiln failed: {describe(error)}"


def start(default_out):
    """What a table benchmark does first: its --out and --threads, kiln
    imported (the process exits saying why where it cannot be), torch on that
    many threads. Returns (arguments, kiln)."""
    import torch

    arguments = parse_arguments(default_out, torch.get_num_threads())
    kiln, error = import_kiln()
    if kiln is None:
        sys.exit(error)
    torch.set_num_threads(arguments.threads)
    return arguments, kiln


def repository_commit():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root,
                          capture_output=True, text=True).stdout.strip() or "unknown"


def processor_name():
    processor = platform.processor()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as cpuinfo:
            names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
        processor = names[0] if names else processor
    return processor


def calls_per_sample(fn, inputs, sample_s):
    """Back-to-back calls that take about `sample_s`."""
    fn(*inputs)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < sample_s / 5 or calls < 2:
        fn(*inputs)
        calls += 1
    per_call = (time.perf_counter() - start) / calls
    return max(1, int(sample_s / max(per_call, 1e-9)))


def seconds_per_call(functions, inputs=(), samples=9, sample_s=0.05):
    """Median seconds per call of each function over `samples` samples of
    about `sample_s` each, the functions' samples interleaved (a drift of the
    machine's speed during the run then touches each alike)."""
    counts = [calls_per_sample(fn, inputs, sample_s) for fn in functions]
    times = [[] for _ in functions]
    for _ in range(samples):
        for fn, count, taken in zip(functions, counts, times):
            start = time.perf_counter()
            for _ in range(count):
                fn(*inputs)
            taken.append((time.perf_counter() - start) / count)
    return [statistics.median(taken) for taken in times]


def write_table(text, directory, name):
    """Prints a results table and writes it to `directory`/`name`."""
    print(text)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as file:
        file.write(text)
    print("wrote", path)


def parse_arguments(default_out, default_threads):
    """--out (where tables go) and --threads, as the table benchmarks take
    them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=default_out)
    parser.add_argument("--threads", type=int, default=default_threads)
    return parser.parse_args()
