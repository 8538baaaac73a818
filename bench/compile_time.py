# The compile-time benchmark: the first call (compile included) of kiln and of
# torch.compile (Inductor) on straight-line pointwise graphs of growing size and
# on a GPT-2-small forward. Every number comes from a fresh process with empty
# caches, so it is the cold compile a user's first run pays. Depends on torch,
# transformers (the models), bench.runner and bench.report; a child process
# imports only torch and the compiler before its clock starts.
import argparse
import datetime
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import torch

from bench.environment import describe, import_kiln

SIZES = (250, 500, 1000, 2000, 4000, 8000)
GRAPH_SHAPE = (64, 64)
# Statements of the straight-line graphs, cycled; {c} is a constant of its own per
# statement, so no two kernels are identical and no cache can share them.
STATEMENTS = (("x = x + y", 1), ("x = x * {c}", 1), ("x = torch.tanh(x)", 1), ("x = x - y * {c}", 2),
              ("y = y * x", 1))
PHASE_HEADER = "[kiln:compile_time] "
PHASE_LINE = re.compile(r"^\s+([\d.]+) ms  (.+)$")
COMPILERS = ("kiln", "inductor")


# ---- cases --------------------------------------------------------------------

def straight_line_source(ops):
    """Python source of f(x, y): `ops` pointwise ops, the statements cycling, the
    i-th op's constant 1 + i * 1e-4."""
    lines, count = [], 0
    while count < ops:
        statement, cost = STATEMENTS[len(lines) % len(STATEMENTS)]
        if cost > ops - count:
            statement, cost = STATEMENTS[0]
        lines.append("    " + statement.format(c=f"{1 + count * 1e-4:.4f}"))
        count += cost
    return "def f(x, y):\n" + "\n".join(lines) + "\n    return x, y\n"


def straight_line(ops):
    namespace = {"torch": torch}
    exec(compile(straight_line_source(ops), f"<straight-line graph of {ops} ops>", "exec"), namespace)
    torch.manual_seed(0)
    # In [0, 1): tanh keeps x bounded and y shrinks, so the results stay finite.
    return namespace["f"], (torch.rand(*GRAPH_SHAPE), torch.rand(*GRAPH_SHAPE))


def _gpt2_ids():
    generator = torch.Generator().manual_seed(0)
    return (torch.randint(0, 50257, (1, 128), generator=generator),)


def tiny_gpt_small():
    from bench.models import TinyGpt
    torch.manual_seed(0)
    config = {"vocabulary": 50257, "context": 1024, "width": 768, "layers": 12, "heads": 12,
              "mlp_ratio": 4, "activation": "gelu"}
    return TinyGpt(config).eval(), _gpt2_ids()


def transformers_gpt2_small():
    import transformers
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False)).eval()   # 12 layers, 768 wide
    return model, _gpt2_ids()


MODELS = {"tiny-gpt": ("GPT-2 small, hand-written (bench.models.TinyGpt), 1x128", tiny_gpt_small),
          "hf-gpt2": ("GPT-2 small, transformers GPT2LMHeadModel, 1x128", transformers_gpt2_small)}


def case_name(case):
    return f"straight line, {case.split('-')[1]} ops" if case.startswith("ops-") else MODELS[case][0]


def build(case):
    return straight_line(int(case.split("-")[1])) if case.startswith("ops-") else MODELS[case][1]()


# ---- child: one cold first call -----------------------------------------------

def matches_eager(case, output, reference):
    """The graphs: torch.allclose(rtol 1e-4, atol 1e-5) on every output; the models:
    the suite's max relative error (bench.runner) within its tolerance."""
    from bench.runner import flatten, max_relative_error
    from bench.workloads import Workload
    error = max_relative_error(output, reference)
    if not case.startswith("ops-"):
        return error <= Workload.tolerance, error
    outputs, references = flatten(output), flatten(reference)
    return len(outputs) == len(references) and all(
        got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
        for got, want in zip(outputs, references)), error


def graph_counts(compiler, kiln, compiled):
    if compiler == "inductor":
        from bench.runner import dynamo_graph_stats
        return dict(zip(("graphs", "graph_breaks"), dynamo_graph_stats()))
    from bench.frontend import kiln_status
    status = kiln_status(kiln, compiled)
    return {"graphs": kiln.cache_info(compiled).get("graph_count", status["graph_count"]),   # resume graphs too
            "graph_nodes": sum(status["graph_nodes"]), "fell_back": status["fell_back"]}


def first_call(compiler, case):
    """The cold first call: everything before the clock (imports, building the case)
    is what a user's program does before its first compiled call."""
    start = time.perf_counter()
    if compiler == "kiln":
        kiln, kiln_error = import_kiln()
        if kiln is None:
            return {"status": "FAILED", "reason": kiln_error}
    else:   # the modules `import kiln` loads, so neither clock has them
        for name in ("torch._dynamo", "torch._inductor.config"):
            importlib.import_module(name)
        kiln = None
    result = {"status": "ok", "import_s": time.perf_counter() - start}
    fn, inputs = build(case)
    with torch.no_grad():
        try:
            start = time.perf_counter()
            compiled = kiln.compile(fn) if kiln else torch.compile(fn)
            output = compiled(*inputs)
            result["first_call_s"] = time.perf_counter() - start
        except Exception as error:
            return dict(result, status="FAILED", reason=describe(error))
        reference = fn(*inputs)
    matches, result["max_relative_error"] = matches_eager(case, output, reference)
    result.update(graph_counts(compiler, kiln, compiled))
    result["compile_threads"] = (torch._inductor.config.compile_threads if compiler == "inductor"
                                 else int(os.environ.get("KILN_COMPILE_THREADS", os.cpu_count())))
    if not matches:
        result.update(status="WRONG", reason=f"differs from eager (max relative error "
                                             f"{result['max_relative_error']:.1e})")
    elif result.get("fell_back"):
        result.update(status="FALLBACK", reason=result["fell_back"])
    return result


def child(arguments):
    torch.set_num_threads(arguments.threads)
    result = first_call(arguments.child, arguments.case)
    with open(arguments.child_output, "w") as file:
        json.dump(result, file)


# ---- parent: one child per measurement -------------------------------------------

def child_environment(compiler, scratch, logs):
    """A plain process (no MALLOC_* variable) with kiln's logs only where asked
    and, for Inductor, a new empty cache that its FX graph cache does not use."""
    from bench.runner import plain_environment
    environment = {name: value for name, value in plain_environment().items()
                   if name not in ("KILN_LOGS", "KILN_DUMP_DIR")}
    if logs:
        environment["KILN_LOGS"] = "compile_time"
    if compiler == "inductor":
        environment.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(scratch, "inductor-cache"),
                           TORCHINDUCTOR_FX_GRAPH_CACHE="0")
    return environment


def died(code, stderr):
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    last = [line for line in stderr.splitlines() if line.strip()][-1:] or [""]
    return f"the process died ({how}): {last[0].strip()}"[:300]


def parse_phases(stderr):
    """kiln's KILN_LOGS=compile_time blocks: a header "[kiln:compile_time] title: total ms"
    and lines "   12.3 ms  phase"."""
    blocks = []
    for line in stderr.splitlines():
        if line.startswith(PHASE_HEADER):
            title, _, total = line[len(PHASE_HEADER):].rpartition(": ")
            blocks.append({"title": title, "ms": float(total.split()[0]), "phases": []})
        elif blocks and (match := PHASE_LINE.match(line)):
            blocks[-1]["phases"].append([match.group(2), float(match.group(1))])
    return blocks


def run_child(compiler, case, threads, timeout_s, logs=False):
    """One measurement in a fresh process; a timeout kills its whole process group
    (Inductor's compile workers too)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix="kiln-bench-compile-") as scratch:
        output = os.path.join(scratch, "result.json")
        command = [sys.executable, "-m", "bench.compile_time", "--child", compiler, "--case", case,
                   "--threads", str(threads), "--child-output", output]
        process = subprocess.Popen(command, cwd=root, env=child_environment(compiler, scratch, logs),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            stderr = process.communicate(timeout=timeout_s)[1]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return {"status": "timeout", "reason": f"no result within {timeout_s:.0f} s (--timeout-s)"}
        if not os.path.exists(output):
            return {"status": "CRASHED", "reason": died(process.returncode, stderr)}
        with open(output) as file:
            result = json.load(file)
    if logs:
        result["phases"] = parse_phases(stderr)
    return result


def measure(arguments, case, threads):
    ops = int(case.split("-")[1]) if case.startswith("ops-") else None
    row = {"case": case, "name": case_name(case), "ops": ops}
    for compiler in arguments.compilers:
        if compiler == "inductor" and ops and ops > arguments.inductor_max_ops:
            row[compiler] = {"status": "not run", "reason": f"over {arguments.inductor_max_ops} ops "
                                                            "(--inductor-max-ops)"}
            continue
        runs = [(compiler, False)] + ([("kiln_logged", True)] if compiler == "kiln" else [])
        for key, logs in runs:
            start = time.perf_counter()
            row[key] = run_child(compiler, case, threads, arguments.timeout_s, logs)
            print(f"  [{threads} threads] {row['name']}, {key}: {row[key]['status']}, "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
    return row


# ---- report -------------------------------------------------------------------------

def seconds(column, notes):
    if column is None:
        return "—"
    if column["status"] in ("timeout", "not run"):
        return column["status"]
    if "first_call_s" not in column:
        return notes.mark(column)
    text = f"{column['first_call_s']:.2f} s"
    return text if column["status"] == "ok" else f"{text} {notes.mark(column)}"


def speed_ratio(row, timeout_s):
    """Inductor's first call / kiln's, or a lower bound where Inductor timed out."""
    kiln, inductor = row.get("kiln", {}), row.get("inductor", {})
    if kiln.get("status") != "ok":
        return None, "—"
    if inductor.get("status") == "ok":
        value = inductor["first_call_s"] / kiln["first_call_s"]
        return value, f"{value:.1f}×"
    if inductor.get("status") == "timeout":
        return None, f"> {timeout_s / kiln['first_call_s']:.0f}×"
    return None, "—"


def headline_table(run_at, settings, notes):
    from bench.report import geometric_mean
    lines = ["| graph | ops | kiln graph nodes | kiln graphs | kiln 1st call | Inductor 1st call "
             "| Inductor / kiln | Inductor graphs / breaks | import before the clock kiln / Inductor |",
             "| --- |" + " ---: |" * 8]
    ratios = []
    for row in run_at["cases"]:
        kiln, inductor = row.get("kiln", {}), row.get("inductor", {})
        value, ratio_cell = speed_ratio(row, settings["timeout_s"])
        ratios.append(value)
        imports = " / ".join(f"{c['import_s']:.1f} s" if "import_s" in c else "—" for c in (kiln, inductor))
        lines.append(f"| {row['name']} | {row['ops'] or '—'} | {kiln.get('graph_nodes', '—')} "
                     f"| {kiln.get('graphs', '—')} | {seconds(row.get('kiln'), notes)} "
                     f"| {seconds(row.get('inductor'), notes)} | {ratio_cell} "
                     f"| {inductor.get('graphs', '—')} / {inductor.get('graph_breaks', '—')} | {imports} |")
    mean, count = geometric_mean(ratios)
    lines += ["", f"**Geometric mean, Inductor / kiln first call:** " +
              (f"**{mean:.1f}×** ({count} cases where both ran)." if mean else "n/a (no case where both ran).")]
    return lines


def phase_table(run_at):
    """kiln's logged phases per case: each block's total and the largest phases."""
    rows = [row for row in run_at["cases"] if "phases" in row.get("kiln_logged", {})]
    titles = list(dict.fromkeys(re.sub(r" \(.*\)$", "", b["title"]) for r in rows for b in r["kiln_logged"]["phases"]))
    lines = ["| graph | 1st call with logs | " + " | ".join(titles) + " | outside the logged phases | largest phases |",
             "| --- |" + " ---: |" * (len(titles) + 2) + " --- |"]
    for row in rows:
        logged = row["kiln_logged"]
        totals, phases = dict.fromkeys(titles, 0.0), {}
        for block in logged["phases"]:
            totals[re.sub(r" \(.*\)$", "", block["title"])] += block["ms"]
            for phase, milliseconds in block["phases"]:
                phase = re.sub(r" \(.*\)$", "", phase)
                phases[phase] = phases.get(phase, 0.0) + milliseconds
        largest = sorted(phases.items(), key=lambda item: -item[1])[:3]
        first_call = f"{logged['first_call_s']:.2f} s" if "first_call_s" in logged else logged["status"]
        outside = f"{logged['first_call_s'] * 1e3 - sum(totals.values()):.0f} ms" if "first_call_s" in logged else "—"
        lines.append(f"| {row['name']} | {first_call} | " + " | ".join(f"{totals[t]:.0f} ms" for t in titles)
                     + f" | {outside} | " + "; ".join(f"{name} {ms:.0f} ms" for name, ms in largest) + " |")
    return lines


def markdown(run):
    from bench.report import Notes
    environment, settings = run["environment"], run["settings"]
    notes = Notes()
    lines = [f"# kiln compile-time benchmark, {run['date']}, cpu", "",
             f"- Machine: {environment['processor']}, {environment['cores']} cores; Python {environment['python']}, "
             f"torch {environment['torch']}, transformers {environment['transformers']}.",
             f"- kiln: {environment['kiln']}; repository at `{environment['commit']}`.",
             f"- Load average (1 min) at start / end: {run['load_average_start'][0]:.2f} / "
             f"{run['load_average_end'][0]:.2f}; the whole run took {run['wall_s']:.0f} s.",
             "- Method: every number is the first call of a compiled function in a fresh process: "
             "`kiln.compile(fn)` or `torch.compile(fn)` (Inductor, default mode), then the call, under "
             "`torch.no_grad()`, timed together, nothing subtracted. Before the clock starts each process sets "
             "`torch.set_num_threads`, imports torch and the compiler (`import kiln`, which loads torch._dynamo "
             "and torch._inductor; the Inductor process imports those two, so neither clock has them; "
             "their times are in the last column) and builds its inputs; lazy start-up inside the compiler "
             "(Inductor's compile workers, kiln's LLVM) is in the time. Caches are cold: kiln keeps nothing "
             "across processes, and each Inductor process gets a new empty `TORCHINDUCTOR_CACHE_DIR` and "
             "`TORCHINDUCTOR_FX_GRAPH_CACHE=0`. Processes are plain: no `MALLOC_*` variable and no `KILN_LOGS`. "
             "Compile parallelism is each compiler's default (kiln: `KILN_COMPILE_THREADS` or one thread per "
             "hardware thread; Inductor: `compile_threads`), whatever the thread count. A process that runs "
             f"past {settings['timeout_s']:.0f} s (`--timeout-s`) is killed and shows *timeout*; Inductor runs "
             f"on graphs of at most {settings['inductor_max_ops']} ops (`--inductor-max-ops`).",
             f"- Straight-line graphs: `f(x, y)` on two {GRAPH_SHAPE[0]}x{GRAPH_SHAPE[1]} float32 inputs "
             "(`torch.rand`), generated as Python source and exec'ed, cycling through "
             + ", ".join(f"`{statement.format(c='c_i')}`" for statement, _ in STATEMENTS)
             + " with c_i = 1 + i * 1e-4 for the i-th op, so no two kernels are identical; ops counts ATen "
             "ops (`x - y * c` is two). The result must match eager's by "
             "`torch.allclose(rtol=1e-4, atol=1e-5, equal_nan=True)`. Models: GPT-2 small (12 layers, 768 "
             "wide, 12 heads, vocabulary 50257, context 1024) with random weights (`torch.manual_seed(0)`) on "
             "ids of shape (1, 128): bench.models.TinyGpt and transformers' GPT2LMHeadModel (`use_cache=False`), "
             "which must match eager within the suite's max relative error (1e-3).",
             "- Columns: kiln graph nodes and graphs from `kiln.cache_info` (graphs count resume functions' "
             "too); Inductor / kiln = Inductor's first call / kiln's (above 1: kiln compiles faster; `>` where "
             "Inductor timed out). The phase tables come from a second kiln process with "
             "`KILN_LOGS=compile_time` (its lines on stderr), not from the timed one; \"outside the logged "
             "phases\" is that process's first call minus the phases (capture, guards, Python).", ""]
    for run_at in run["runs"]:
        lines += [f"## {run_at['threads']} threads (`torch.set_num_threads({run_at['threads']})`)", ""]
        lines += headline_table(run_at, settings, notes) + [""]
        if any("phases" in row.get("kiln_logged", {}) for row in run_at["cases"]):
            lines += [f"### kiln's phases, {run_at['threads']} threads (`KILN_LOGS=compile_time`)", ""]
            lines += phase_table(run_at) + [""]
    if notes.reasons:
        lines += ["## Notes", ""] + [f"{index}. {reason}" for index, reason in enumerate(notes.reasons, 1)] + [""]
    return "\n".join(lines)


# ---- command line -----------------------------------------------------------------

def default_threads():
    cores = os.cpu_count() or 2
    return ",".join(str(t) for t in sorted({2, max(2, cores)}))


def main():
    parser = argparse.ArgumentParser(description="kiln vs Inductor: cold first-call (compile) time.")
    parser.add_argument("--threads", default=default_threads(),
                        help="comma list of torch.set_num_threads values (default: 2, and all cores if more)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="ops of the straight-line graphs")
    parser.add_argument("--skip-models", action="store_true", help="no GPT-2-small rows")
    parser.add_argument("--compilers", default=",".join(COMPILERS), help="comma list of kiln, inductor")
    parser.add_argument("--inductor-max-ops", type=int, default=2000,
                        help="run Inductor on straight-line graphs of at most this many ops")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="kill a process that runs longer")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    parser.add_argument("--child", choices=COMPILERS, help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--child-output", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        arguments.threads = int(arguments.threads)
        return child(arguments)

    from bench import report, runner
    arguments.compilers = [c for c in COMPILERS if c in arguments.compilers.split(",")]
    cases = [f"ops-{int(size)}" for size in arguments.sizes.split(",") if size] + \
        ([] if arguments.skip_models else list(MODELS))
    start = time.time()
    run = {"date": datetime.date.today().isoformat(), "environment": runner.environment("cpu", "kiln.compile"),
           "settings": {"sizes": arguments.sizes, "skip_models": arguments.skip_models,
                        "compilers": arguments.compilers, "inductor_max_ops": arguments.inductor_max_ops,
                        "timeout_s": arguments.timeout_s},
           "load_average_start": os.getloadavg(), "runs": []}
    for threads in [int(t) for t in arguments.threads.split(",")]:
        print(f"bench-compile: {threads} threads", flush=True)
        run["runs"].append({"threads": threads, "cases": [measure(arguments, case, threads) for case in cases]})
    run["load_average_end"] = os.getloadavg()
    run["wall_s"] = time.time() - start
    stem = f"{run['date']}-compile-cpu"
    for path in report.publish(arguments.out, stem, "latest-compile-cpu",
                               {"md": report.write_text(markdown(run)), "json": report.write_json(run)}):
        print(f"bench-compile: wrote {path}")
    print(f"bench-compile: done in {run['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
