# The benchmark report: turns the runner's results into a dated Markdown table,
# a JSON file and a PNG chart under bench/results/, plus latest-<device> copies.
# Depends on matplotlib (Agg backend) and the standard library.
import json
import math
import os
import shutil

TIMED = ("ok", "FALLBACK", "WRONG")   # statuses that still have a time to show
ALLOCATOR_LABELS = {"plain": "plain process", "retained": "retained memory"}   # runner's --allocator modes


def format_time(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def ratio(numerator, denominator):
    return numerator["median_s"] / denominator["median_s"] if numerator.get("status") in TIMED and \
        denominator.get("status") in TIMED else None


def geometric_mean(values):
    values = [v for v in values if v]
    return (math.exp(sum(math.log(v) for v in values) / len(values)), len(values)) if values else (None, 0)


class Notes:
    """Numbered footnotes for failure reasons, each reason once."""

    def __init__(self):
        self.reasons = []

    def mark(self, column):
        reason = f"{column['status']}: {column.get('reason', '')}"
        if reason not in self.reasons:
            self.reasons.append(reason)
        return f"{column['status']} [{self.reasons.index(reason) + 1}]"


def speedups(workload):
    columns = workload["columns"]
    return (ratio(columns["eager"], columns["inductor"]), ratio(columns["eager"], columns["kiln"]),
            ratio(columns["inductor"], columns["kiln"]))


def table(run, notes):
    bandwidth = run["bandwidth"]["bytes_per_s"] if run["bandwidth"] else None
    lines = ["| workload | eager | Inductor | kiln | Inductor speedup | kiln speedup | kiln vs Inductor "
             "| 1st call Inductor | 1st call kiln | graphs / breaks Inductor | graphs / breaks kiln "
             "| max rel. err Inductor | max rel. err kiln | % of bandwidth eager / Inductor / kiln |",
             "|" + " --- |" + " ---: |" * 13]
    rows_of_ok = {"inductor": [], "kiln": [], "kiln_vs_inductor": []}
    for workload in run["workloads"]:
        if "skipped" in workload:
            lines.append(f"| {workload['name']} | skipped: {workload['skipped']} |" + " |" * 12)
            continue
        columns = workload["columns"]
        cells = [workload["name"]]
        for name in ("eager", "inductor", "kiln"):
            column = columns[name]
            if column["status"] == "ok":
                cells.append(format_time(column["median_s"]))
            elif column["status"] in TIMED:
                cells.append(f"{format_time(column['median_s'])} {notes.mark(column)}")
            else:
                cells.append(notes.mark(column))
        inductor, kiln, kiln_vs_inductor = speedups(workload)
        cells += [f"{value:.2f}×" if value else "—" for value in (inductor, kiln, kiln_vs_inductor)]
        if columns["inductor"]["status"] == "ok":
            rows_of_ok["inductor"].append(inductor)
        if columns["kiln"]["status"] == "ok":
            rows_of_ok["kiln"].append(kiln)
            if columns["inductor"]["status"] == "ok":
                rows_of_ok["kiln_vs_inductor"].append(kiln_vs_inductor)
        for name in ("inductor", "kiln"):
            column = columns[name]
            cells.append(f"{column['first_call_s']:.2f} s" if "first_call_s" in column else "—")
        for name in ("inductor", "kiln"):
            column = columns[name]
            if column["status"] == "FAILED":
                cells.append("—")
            else:
                graphs, breaks = column.get("graphs"), column.get("graph_breaks")
                cells.append("n/a" if graphs is None else f"{graphs} / {breaks if breaks is not None else 'n/a'}")
        for name in ("inductor", "kiln"):
            error = columns[name].get("max_relative_error")
            cells.append("—" if error is None else f"{error:.1e}")
        if "bytes" in workload and bandwidth:
            cells.append(" / ".join(f"{100 * workload['bytes'] / columns[n]['median_s'] / bandwidth:.0f}%"
                                    if columns[n]["status"] in TIMED else "—" for n in ("eager", "inductor", "kiln")))
        else:
            cells.append("—")
        lines.append("| " + " | ".join(cells) + " |")
    summary = []
    for key, label in (("inductor", "Inductor over eager"), ("kiln", "kiln over eager"),
                       ("kiln_vs_inductor", "kiln vs Inductor")):
        mean, count = geometric_mean(rows_of_ok[key])
        summary.append(f"{label} **{mean:.2f}×** ({count} workloads)" if mean else f"{label} n/a (0 workloads)")
    lines.append("")
    lines.append("**Geometric mean speedup:** " + "; ".join(summary) + ".")
    return lines


def allocator_line(run_at):
    """The malloc variables the benchmark process saw, as a check on its mode."""
    seen = run_at["allocator_env"]
    if seen is None:
        return "Allocator: not recorded (the process died first)."
    if not seen:
        text = "Allocator: glibc's defaults (the process saw no `MALLOC_*` variable)."
    else:
        text = "Allocator: " + ", ".join(f"`{name}={value}`" for name, value in seen.items()) + "."
    return text + (" **Not a plain process.**" if run_at["allocator"] == "plain" and seen else "")


def markdown(run, chart_name):
    environment, settings = run["environment"], run["settings"]
    notes = Notes()
    sample_range = settings["samples"] if settings["min_samples"] == settings["samples"] else \
        f"{settings['min_samples']} to {settings['samples']}"
    lines = [f"# kiln benchmark, {run['date']}, {environment['device']}", "",
             f"- Machine: {environment['processor']}, {environment['cores']} cores; Python {environment['python']}, "
             f"torch {environment['torch']}, transformers {environment['transformers']}.",
             f"- kiln: {environment['kiln']} (column compiled with `{environment['kiln_via']}`); "
             f"repository at `{environment['commit']}`.",
             "- Allocator (`--allocator`; this run: "
             + ", ".join(dict.fromkeys(ALLOCATOR_LABELS[r["allocator"]] for r in run["runs"])) + "): a *plain "
             "process* runs with glibc malloc's defaults, no `MALLOC_*` variable set, as users run; malloc then "
             "hands a freed block above its mmap threshold back to the OS, so a workload with megabyte outputs "
             "may fault their pages in again on every call. A *retained-memory* process sets "
             "`MALLOC_MMAP_THRESHOLD_` and `MALLOC_TRIM_THRESHOLD_` high (`ALLOCATOR_ENV` in bench/runner.py), so "
             "freed memory stays with the process as in a long-running one's steady state, and the times compare "
             "kernels, not page faults. Each table's heading says which; under it, the variables its process saw.",
             f"- Load average (1 min) at start / end: {run['load_average_start'][0]:.2f} / "
             f"{run['load_average_end'][0]:.2f}; the whole run took {run['wall_s']:.0f} s"
             + (" (**--quick**: few samples, numbers are rough)." if run["quick"] else "."),
             f"- Method: one process per thread count and allocator mode, all three columns in it on the same "
             f"inputs; Inductor's cache starts empty for each such process and dynamo is reset between workloads. Time is the median "
             f"of {sample_range} samples (as many as fit in {settings['timing_budget_s']:.0f} s per column) taken "
             f"round-robin across the columns after {settings['warmup']} warm-up call(s), each sample at least {settings['min_sample_s'] * 1e3:.0f} ms of "
             f"back-to-back calls, device-synchronised. Speedup = eager time / compiled time; kiln vs Inductor = Inductor time / kiln "
             f"time (above 1: kiln is faster). 1st call = wrapping plus the first call, compile included (after one "
             f"tiny compile per compiler to pay process start-up). Max rel. err = max |out - eager| / max |eager|. "
             f"% of bandwidth = bytes of inputs and outputs / time / the copy bandwidth (a copy between two buffers of 128 MiB or of twice the "
             f"CPU's last-level cache, whichever is larger; above 100%: the data stayed in cache). Geometric means count "
             f"only workloads whose columns ran and matched eager.",
             "", f"![speedups over eager]({chart_name})", ""]
    for run_at in run["runs"]:
        bandwidth = run_at["bandwidth"]
        lines += [f"## {run_at['threads']} threads, {ALLOCATOR_LABELS[run_at['allocator']]} "
                  f"(`torch.set_num_threads({run_at['threads']})`)", "",
                  allocator_line(run_at) + " " +
                  (f"Memory bandwidth (copy of {bandwidth['bytes'] / 2 ** 21:.0f} MiB, read + write): "
                   f"{bandwidth['bytes_per_s'] / 1e9:.1f} GB/s." if bandwidth else "Memory bandwidth: not measured.") +
                  " One-time start-up, tiny compile: " +
                  ", ".join(f"{name} {value:.1f} s" if isinstance(value, float) else f"{name} failed"
                            for name, value in run_at["warm_start_s"].items()) + ".", ""]
        lines += table(run_at, notes) + [""]
    if notes.reasons:
        lines += ["## Notes", ""] + [f"{index}. {reason}" for index, reason in enumerate(notes.reasons, 1)] + [""]
    return "\n".join(lines)


def chart(run, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    count = max(len(r["workloads"]) for r in run["runs"])
    figure, axes = plt.subplots(1, len(run["runs"]), figsize=(8 * len(run["runs"]), 1.5 + 0.42 * count),
                                squeeze=False)
    for axis, run_at in zip(axes[0], run["runs"]):
        names = [w["name"] for w in run_at["workloads"]]
        for offset, (label, index, colour) in enumerate((("Inductor", 0, "tab:blue"), ("kiln", 1, "tab:orange"))):
            for row, workload in enumerate(run_at["workloads"]):
                value = None if "skipped" in workload else speedups(workload)[index]
                status = "skipped" if "skipped" in workload else \
                    workload["columns"]["inductor" if index == 0 else "kiln"]["status"]
                y = row + (offset - 0.5) * 0.4
                if value:   # a FALLBACK or WRONG bar is hatched and labelled
                    axis.barh(y, value, height=0.4, color=colour, label=label if row == 0 else None,
                              hatch=None if status == "ok" else "//", edgecolor="white")
                if status != "ok":
                    axis.text(value or 1.0, y, f" {label} {status}", va="center", fontsize=7, color=colour)
        axis.set_xscale("log")
        axis.xaxis.set_major_locator(FixedLocator([0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100]))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}×"))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.axvline(1.0, color="black", linewidth=0.8)
        axis.set_yticks(range(len(names)), names, fontsize=8)
        axis.invert_yaxis()
        axis.set_xlabel("speedup over eager (log scale; right of the line is faster)")
        axis.set_title(f"{run['environment']['device']}, {run_at['threads']} threads, "
                       f"{ALLOCATOR_LABELS[run_at['allocator']]}, {run['date']}")
        axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def strict_json(value):
    """The results with infinities and NaNs as strings, so any JSON reader takes the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


def write_text(text):
    """A writer for publish: the file holds `text`."""
    def write_file(path):
        with open(path, "w") as file:
            file.write(text)
    return write_file


def write_json(run):
    """A writer for publish: the file holds `run` as strict JSON."""
    return write_text(json.dumps(strict_json(run), indent=1))


def publish(directory, stem, latest, writers):
    """Writes <stem>.<extension> with each writer(path) of {extension: writer} and
    copies it to <latest>.<extension>; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"{stem}.{extension}") for extension in writers]
    for path, write_file in zip(paths, writers.values()):
        write_file(path)
    copies = [os.path.join(directory, f"{latest}.{extension}") for extension in writers]
    for source, copy in zip(paths, copies):
        shutil.copyfile(source, copy)
    return paths + copies


def write(run, directory):
    """Writes <date>-<device>.md/.json/.png and latest-<device>.* copies; returns the paths."""
    stem = f"{run['date']}-{run['environment']['device']}"
    return publish(directory, stem, f"latest-{run['environment']['device']}",
                   {"md": write_text(markdown(run, f"{stem}.png")), "json": write_json(run),
                    "png": lambda path: chart(run, path)})
