# The benchmark runner: times every workload under eager, torch.compile (Inductor)
# and kiln in one process, on the same inputs and thread count, then hands the
# results to report.py. Depends on torch, bench.workloads, bench.models, bench.report.
import argparse
import datetime
import glob
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from bench.environment import describe, import_kiln, processor_name, repository_commit

COLUMNS = ("eager", "inductor", "kiln")
# Samples per column: as many as fit in timing_budget_s, within [min_samples, samples].
QUICK = {"samples": 3, "min_samples": 3, "timing_budget_s": 1.0, "warmup": 1, "min_sample_s": 0.005}
FULL = {"samples": 15, "min_samples": 5, "timing_budget_s": 6.0, "warmup": 2, "min_sample_s": 0.02}


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def time_calls(fn, inputs, device, calls=1):
    """Seconds per call of `calls` back-to-back calls, device-synchronised."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        output = fn(*inputs)
    synchronize(device)
    return (time.perf_counter() - start) / calls, output


def flatten(value):
    """The tensors of a nested output (tuples, lists, dicts, transformers' ModelOutput)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in flatten(item)]
    return []


def max_relative_error(output, reference):
    """max |output - reference| / max |reference|, over all output tensors."""
    outputs, references = flatten(output), flatten(reference)
    if len(outputs) != len(references):
        return math.inf
    worst = 0.0
    for got, want in zip(outputs, references):
        if got.shape != want.shape:
            return math.inf
        got, want = got.detach().double().cpu(), want.detach().double().cpu()
        both_nan = torch.isnan(got) & torch.isnan(want)
        difference = torch.where(both_nan, 0.0, (got - want).abs()).nan_to_num(nan=math.inf)
        scale = want.abs().nan_to_num(nan=0.0, posinf=0.0).max().item() if want.numel() else 0.0
        if difference.numel():
            worst = max(worst, difference.max().item() / max(scale, 1e-30))
    return worst


def as_number(value):
    value = value() if callable(value) else value
    return value if isinstance(value, int) else None


def kiln_graph_stats(kiln, compiled, fn, inputs):
    """Graphs and graph breaks as kiln itself reports them; None where it reports nothing.
    kiln.cache_info says how many graphs a compiled function holds and whether it runs in
    CPython (no graph: a fallback, whose reason is returned third)."""
    if hasattr(kiln, "cache_info"):
        info = kiln.cache_info(compiled)
        if info["runs_in_cpython"]:
            return 0, 0, info["fallback_reason"]
        return info["entries"], 0, None
    graphs = as_number(getattr(compiled, "graph_count", None))
    breaks = as_number(getattr(compiled, "graph_break_count", None))
    if graphs is None and hasattr(kiln, "explain"):
        try:
            explanation = kiln.explain(fn, *inputs)
            read = explanation.get if isinstance(explanation, dict) else lambda key: getattr(explanation, key, None)
            graphs, breaks = as_number(read("graph_count")), as_number(read("graph_break_count"))
        except Exception:
            pass
    return graphs, breaks, None


def dynamo_graph_stats():
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def compile_column(name, fn, kiln, kiln_error, kiln_via):
    """The compiled callable of one column."""
    if name == "eager":
        return fn
    if name == "inductor":
        return torch.compile(fn)
    if kiln is None:
        raise RuntimeError(kiln_error)
    if kiln_via == "torch.compile":
        return torch.compile(fn, backend="kiln")
    return kiln.compile(fn)


def run_workload(workload, device, settings, kiln, kiln_error, kiln_via):
    torch._dynamo.reset()
    torch.manual_seed(0)
    fn, inputs = workload.build(device)
    result = {"name": workload.name, "group": workload.group, "columns": {}}
    callables = {}
    with torch.no_grad():
        for name in COLUMNS:
            column = result["columns"][name] = {"status": "ok"}
            counters.clear()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    synchronize(device)
                    start = time.perf_counter()   # wrapping and first call: compile time included
                    callable_ = compile_column(name, fn, kiln, kiln_error, kiln_via)
                    output = time_calls(callable_, inputs, device)[1]
                    first_call_s = time.perf_counter() - start
            except Exception as error:
                column.update(status="FAILED", reason=kiln_error if kiln is None and name == "kiln" else describe(error))
                continue
            callables[name] = callable_
            column["first_call_s"] = first_call_s
            if name == "eager":
                reference = output
            elif name == "inductor" or kiln_via == "torch.compile":
                column["graphs"], column["graph_breaks"] = dynamo_graph_stats()
            fallbacks = [str(w.message) for w in caught if "fall" in str(w.message).lower()]
            if name == "kiln" and fallbacks:
                column.update(status="FALLBACK", reason=fallbacks[0][:300])

        if "eager" not in callables:
            raise RuntimeError(f"eager failed: {result['columns']['eager']['reason']}")
        # Warm up, then pick per column how many calls make one sample long enough to time.
        calls, longest_sample_s = {}, 0.0
        for name, callable_ in callables.items():
            seconds = min(time_calls(callable_, inputs, device)[0] for _ in range(settings["warmup"]))
            calls[name] = max(1, math.ceil(settings["min_sample_s"] / max(seconds, 1e-9)))
            longest_sample_s = max(longest_sample_s, calls[name] * seconds)
        sample_count = min(settings["samples"], max(settings["min_samples"],
                                                    int(settings["timing_budget_s"] / longest_sample_s)))
        # Round-robin sampling, so a change in machine load hits all columns alike.
        samples = {name: [] for name in callables}
        for _ in range(sample_count):
            for name, callable_ in callables.items():
                samples[name].append(time_calls(callable_, inputs, device, calls[name])[0])
        for name, callable_ in callables.items():
            column = result["columns"][name]
            column.update(median_s=statistics.median(samples[name]), samples_s=samples[name],
                          calls_per_sample=calls[name])
            column["max_relative_error"] = max_relative_error(time_calls(callable_, inputs, device)[1], reference)
            if column["max_relative_error"] > workload.tolerance and column["status"] == "ok":
                column.update(status="WRONG", reason=f"max relative error {column['max_relative_error']:.2e} "
                                                     f"exceeds the tolerance {workload.tolerance:.0e}")
        if "kiln" in callables and kiln_via == "kiln.compile":
            column = result["columns"]["kiln"]
            column["graphs"], column["graph_breaks"], why = kiln_graph_stats(kiln, callables["kiln"], fn, inputs)
            if column["graphs"] == 0 and column["status"] == "ok":
                column.update(status="FALLBACK", reason=f"kiln captured no graph: the workload ran in "
                                                        f"CPython ({(why or 'no reason given')[:300]})")
    if workload.memory_bound:
        result["bytes"] = sum(t.numel() * t.element_size() for t in flatten(inputs) + flatten(reference))
    return result


def last_level_cache_bytes():
    """The CPU's largest cache in bytes (sysfs, else glibc's sysconf), 0 where unknown."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as file:
                text = file.read().strip().upper()
            scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            pass
    if not sizes:
        try:
            sizes.append(os.sysconf("SC_LEVEL3_CACHE_SIZE"))
        except (ValueError, OSError):
            pass
    return max(sizes, default=0)


def bandwidth_probe(device, settings):
    """Bytes per second of a large copy (read + write), the machine's practical
    memory bandwidth. Each buffer is 128 MiB or twice the CPU's last-level
    cache, whichever is larger: on a CPU whose cache holds most of two 128 MiB
    buffers (the GPU host's Xeon has 300 MiB) the copy measured the cache as
    much as the memory, between 118 and 186 GB/s from one run to the next."""
    elements = 32 * 1024 * 1024
    if device == "cpu":
        elements = max(elements, 2 * last_level_cache_bytes() // 4)
    source = torch.rand(elements, device=device)
    destination = torch.empty_like(source)
    copy = destination.copy_
    seconds = min(time_calls(copy, (source,), device)[0] for _ in range(settings["warmup"] + 1))
    calls = max(1, math.ceil(settings["min_sample_s"] / seconds))
    seconds = statistics.median(time_calls(copy, (source,), device, calls)[0] for _ in range(settings["samples"]))
    return {"bytes": 2 * source.numel() * 4, "seconds": seconds, "bytes_per_s": 2 * source.numel() * 4 / seconds}


def warm_start(kiln, kiln_via, device):
    """One tiny compile per compiler before the suite, so the first workload's
    compile time does not carry the process's one-time start-up (imports,
    compile workers). Its seconds are recorded."""
    seconds = {}
    for name in ("inductor", "kiln"):
        torch._dynamo.reset()
        try:
            start = time.perf_counter()
            fn = compile_column(name, lambda x: (x * 2).sin(), kiln, "", kiln_via)
            time_calls(fn, (torch.ones(8, device=device),), device)
            seconds[name] = time.perf_counter() - start
        except Exception as error:
            seconds[name] = describe(error)
    return seconds


def select_workloads(only):
    from bench.models import MODELS
    from bench.workloads import KERNELS
    return [w for w in KERNELS + MODELS
            if not only or only.lower() in w.name.lower() or only.lower() == w.group]


def worker(arguments):
    """Runs the suite at one thread count from workload number `start` on, writing
    its results as JSON after each workload, so a crash loses only the one it was in."""
    torch.set_num_threads(arguments.threads)
    torch.backends.cuda.matmul.allow_tf32 = False   # the same arithmetic as eager
    torch.backends.cudnn.allow_tf32 = False
    settings = QUICK if arguments.quick else FULL
    kiln, kiln_error = import_kiln()
    results = {"threads": torch.get_num_threads(), "kiln_error": kiln_error,
               "allocator_env": malloc_variables(os.environ),   # as this process sees them
               "warm_start_s": warm_start(kiln, arguments.kiln_via, arguments.device),
               "bandwidth": bandwidth_probe(arguments.device, settings), "workloads": []}
    for workload in select_workloads(arguments.only)[arguments.start:]:
        start = time.perf_counter()
        if time.time() > arguments.deadline:
            result = {"skipped": "the suite's time budget ran out"}
        else:
            try:
                result = run_workload(workload, arguments.device, settings, kiln, kiln_error, arguments.kiln_via)
            except Exception as error:  # building the workload or running eager failed
                result = {"skipped": describe(error)}
        result.update(name=workload.name, group=workload.group, wall_s=time.perf_counter() - start)
        print(f"  [{arguments.threads} threads] {workload.name}: {result['wall_s']:.1f} s", flush=True)
        results["workloads"].append(result)
        with open(arguments.worker_output, "w") as file:
            json.dump(results, file)


# glibc's malloc hands blocks above its mmap threshold back to the OS when they
# are freed (and trims the heap above twice that), so a workload whose outputs
# are megabytes faults every page of them in again on each call, for all three
# columns alike. Early in a process that dominated: on the 16-core Xeon the
# first workload ran 3-4x slower in every column (softmax: eager 1163 us and
# 7.0M page faults; 324 us and 213K faults when the same process ran it again).
# A "retained" worker keeps freed memory instead, as a long-running process
# reaches in steady state, so its tables compare kernels, not page faults (an
# allocator setting the caller made stays). Users run plain processes, so a
# "plain" worker runs with glibc's defaults: every MALLOC_* variable removed.
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": str(4 << 30), "MALLOC_TRIM_THRESHOLD_": str(16 << 30)}
ALLOCATOR_MODES = ("plain", "retained")


def malloc_variables(environment):
    return {name: value for name, value in environment.items() if name.startswith("MALLOC_")}


def allocator_environment(mode):
    """The malloc settings a worker runs with: none in a plain process,
    ALLOCATOR_ENV under any the caller made in a retained one."""
    return {} if mode == "plain" else {**ALLOCATOR_ENV, **malloc_variables(os.environ)}


def plain_environment():
    """This process's environment without any MALLOC_* variable."""
    return {name: value for name, value in os.environ.items() if not name.startswith("MALLOC_")}


def worker_environment(cache, mode):
    return {**plain_environment(), **allocator_environment(mode), "TORCHINDUCTOR_CACHE_DIR": cache}


def run_threads(arguments, threads, mode, deadline):
    """The results at one thread count and allocator mode: worker processes sharing
    one fresh Inductor cache, a new one started after the workload where a worker crashed."""
    workloads, results = select_workloads(arguments.only), None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix=f"kiln-bench-inductor-{threads}t-{mode}-") as cache:
        output = os.path.join(cache, "worker-results.json")
        while results is None or len(results["workloads"]) < len(workloads):
            done = 0 if results is None else len(results["workloads"])
            command = [sys.executable, "-m", "bench.runner", "--worker-output", output, "--threads", str(threads),
                       "--device", arguments.device, "--kiln-via", arguments.kiln_via, "--only", arguments.only,
                       "--deadline", str(deadline), "--start", str(done)] + (["--quick"] if arguments.quick else [])
            if os.path.exists(output):
                os.remove(output)
            exit_code = subprocess.run(command, cwd=root, env=worker_environment(cache, mode)).returncode
            part = json.load(open(output)) if os.path.exists(output) else {"workloads": []}
            results = part if results is None else dict(results, workloads=results["workloads"] + part["workloads"])
            if exit_code != 0 and len(results["workloads"]) < len(workloads):
                crashed = workloads[len(results["workloads"])]
                print(f"  [{threads} threads, {mode}] {crashed.name}: the process died (exit code {exit_code})",
                      flush=True)
                results.update({"threads": threads, "bandwidth": None, "warm_start_s": {}, "allocator_env": None}
                               | results)
                results["workloads"].append({"name": crashed.name, "group": crashed.group,
                                             "skipped": f"the benchmark process died (exit code {exit_code})"})
    results["allocator"] = mode
    return results


def environment(device, kiln_via):
    kiln, kiln_error = import_kiln()
    try:
        import transformers
        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = "not installed"
    commit = repository_commit()
    processor = processor_name()
    if device == "cuda":
        processor = f"{torch.cuda.get_device_name()} (host: {processor})"
    return {"device": device, "processor": processor, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers_version, "commit": commit,
            "kiln": getattr(kiln, "__version__", "importable") if kiln else kiln_error, "kiln_via": kiln_via}


def main():
    parser = argparse.ArgumentParser(description="kiln vs eager vs torch.compile (Inductor).")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", default=str(os.cpu_count()),
                        help="comma list of thread counts, each run in a fresh process (default: all cores)")
    parser.add_argument("--quick", action="store_true", help="few samples, for development")
    parser.add_argument("--allocator", default="both", choices=ALLOCATOR_MODES + ("both",),
                        help="plain: glibc's defaults, as users run; retained: freed memory stays with the "
                             "process (ALLOCATOR_ENV); both (default): each thread count in both")
    parser.add_argument("--only", default="",
                        help="run only workloads whose name contains this text, or a group: kernel, model")
    parser.add_argument("--kiln-via", default="kiln.compile", choices=["kiln.compile", "torch.compile"],
                        help="how the kiln column compiles: kiln.compile(fn) or torch.compile(fn, backend='kiln')")
    parser.add_argument("--budget-s", type=float, default=840.0,
                        help="skip the workloads left once this many seconds have passed")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--worker-output", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.worker_output:
        arguments.threads = int(arguments.threads)
        return worker(arguments)
    if arguments.device == "cuda" and not torch.cuda.is_available():
        print("bench-cuda: skipped: no CUDA GPU here (torch.cuda.is_available() is False; "
              f"torch {torch.__version__}). Run it on a GPU machine with a CUDA build of torch.")
        return 0

    if not select_workloads(arguments.only):
        print(f"bench: no workload matches --only {arguments.only!r}")
        return 2
    from bench import report
    start = time.time()
    run = {"date": datetime.date.today().isoformat(), "environment": environment(arguments.device, arguments.kiln_via),
           "settings": QUICK if arguments.quick else FULL, "quick": arguments.quick,
           "load_average_start": os.getloadavg(), "runs": []}
    modes = ALLOCATOR_MODES if arguments.allocator == "both" else (arguments.allocator,)
    for threads in [int(t) for t in arguments.threads.split(",")]:
        for mode in modes:
            print(f"bench: {arguments.device}, {threads} threads, {report.ALLOCATOR_LABELS[mode]}", flush=True)
            run["runs"].append(run_threads(arguments, threads, mode, start + arguments.budget_s))
    run["load_average_end"] = os.getloadavg()
    run["wall_s"] = time.time() - start
    for path in report.write(run, arguments.out):
        print(f"bench: wrote {path}")
    print(f"bench: done in {run['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
