# `make bench-generation`: autoregressive generation with a growing sequence
# (dynamic shapes). The bench's hand-written GPT (bench.models.TinyGpt, no
# key/value cache: every step runs the whole sequence) generates NEW_TOKENS
# tokens greedily from a PROMPT-token prompt, batch 1, in eager, under
# kiln.compile (dynamic=None: automatic dynamic shapes) and under
# torch.compile(dynamic=True) (Inductor). Two passes each: the first includes
# every compile, the second reuses what the first compiled. Reports tokens/s,
# how many graphs each compiler captured and compiled, and whether the tokens
# match eager. A second table sweeps one transformer block of that GPT over
# SWEEP sequence lengths from 1 to 512: how many programs kiln compiles, and
# whether every result matches eager.
# One run, one machine; writes bench/results/<date>-generation-cpu-<threads>-threads.md.
# Depends on torch, kiln.
import datetime
import os
import time

import torch
import torch._dynamo

from bench import environment
from bench.models import TinyGpt, VOCABULARY, WIDTH, LAYERS, HEADS

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
PROMPT, NEW_TOKENS = 8, 64
# 32 sequence lengths from 1 to 512, short ones dense (1, 2, 3, ...).
SWEEP = sorted({1, 2, 3, 4, 5, 7, 9, 12, 16, 20, 25, 31, 40, 50, 63, 64, 65, 80, 100,
                127, 128, 129, 160, 200, 255, 256, 257, 320, 400, 450, 511, 512})


class Block(torch.nn.Module):
    """Block 0 of a TinyGpt: attention and MLP with their residuals."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        block = self.model.blocks[0]
        x = x + self.model.attention(block, block["norm1"](x))
        return x + block["down"](torch.nn.functional.gelu(block["up"](block["norm2"](x))))


def compiled_programs(info):
    """(captures, programs compiled) from kiln.cache_info: a runner compiled
    once for every size counts one program, a dynamic runner that compiles per
    size counts each size."""
    programs = 0
    for runner in info["runners"]:
        if runner.startswith("dynamic") and "compiled once for every size" not in runner:
            programs += int(runner.split(", ")[1].split(" specialisation")[0])
        else:
            programs += 1
    return info["entries"], programs


def sweep(kiln, model):
    """(programs compiled, captures, lengths whose result matched eager)."""
    block = Block(model).eval()
    compiled = kiln.compile(block)
    matched = 0
    with torch.no_grad():
        for length in SWEEP:
            x = torch.randn(1, length, WIDTH, generator=torch.Generator().manual_seed(length))
            matched += torch.allclose(compiled(x), block(x), rtol=1e-4, atol=1e-4)
    captures, programs = compiled_programs(kiln.cache_info(compiled))
    return programs, captures, matched


def generate(model, prompt, count):
    ids = prompt
    for _ in range(count):
        logits = model(ids)
        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def timed_passes(model, prompt):
    """(tokens of the first pass, seconds of the first pass, of the second)."""
    times = []
    with torch.no_grad():
        for _ in range(2):
            start = time.perf_counter()
            tokens = generate(model, prompt, NEW_TOKENS)
            times.append(time.perf_counter() - start)
    return tokens, times[0], times[1]


def main():
    arguments, kiln = environment.start(RESULTS)
    torch.manual_seed(0)
    config = {"vocabulary": VOCABULARY, "context": 512, "width": WIDTH, "layers": LAYERS,
              "heads": HEADS, "mlp_ratio": 4, "activation": "gelu", "skip_layers": []}
    model = TinyGpt(config).eval()
    prompt = torch.randint(0, VOCABULARY, (1, PROMPT), generator=torch.Generator().manual_seed(1))

    rows = []
    reference, first, second = timed_passes(model, prompt)
    rows.append(("eager", first, second, "-", "reference"))

    compiled = kiln.compile(model)
    tokens, first, second = timed_passes(compiled, prompt)
    captures, programs = compiled_programs(kiln.cache_info(compiled))
    graphs = f"{captures} capture(s), {programs} program(s) compiled"
    rows.append(("kiln.compile (dynamic=None)", first, second, graphs,
                 "yes" if torch.equal(tokens, reference) else "NO"))

    try:
        torch._dynamo.reset()
        inductor = torch.compile(model, dynamic=True)
        tokens, first, second = timed_passes(inductor, prompt)
        frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        rows.append(("torch.compile (Inductor, dynamic=True)", first, second,
                     f"{frames} graph(s)", "yes" if torch.equal(tokens, reference) else "NO"))
    except Exception as error:  # noqa: BLE001 - reported in the table
        rows.append(("torch.compile (Inductor, dynamic=True)", None, None,
                     environment.describe(error), "-"))

    date = datetime.date.today().isoformat()
    lines = [f"# Generation with a growing sequence, CPU, {arguments.threads} threads ({date})", "",
             f"Processor: {environment.processor_name()}; commit {environment.repository_commit()}; "
             f"torch {torch.__version__}. Hand-written GPT ({LAYERS} layers, {WIDTH} wide, "
             f"{HEADS} heads, no key/value cache), batch 1, {PROMPT}-token prompt, "
             f"{NEW_TOKENS} new tokens greedily (sequence lengths {PROMPT}..{PROMPT + NEW_TOKENS - 1}). "
             "First pass: compiles included; second pass: the same lengths again.", "",
             "| how it runs | tokens/s, first pass | tokens/s, second pass | graphs | tokens match eager |",
             "| --- | ---: | ---: | --- | --- |"]
    for how, first, second, graphs, match in rows:
        if first is None:
            lines.append(f"| {how} | - | - | {graphs} | {match} |")
        else:
            lines.append(f"| {how} | {NEW_TOKENS / first:.1f} | {NEW_TOKENS / second:.1f} | "
                         f"{graphs} | {match} |")
    programs, captures, matched = sweep(kiln, model)
    lines += ["", f"Sweep: block 0 of the same GPT under kiln.compile (dynamic=None), batch 1, "
              f"{len(SWEEP)} sequence lengths from {SWEEP[0]} to {SWEEP[-1]} "
              f"({', '.join(map(str, SWEEP))}).", "",
              "| captures | programs compiled | results matching eager |", "| ---: | ---: | ---: |",
              f"| {captures} | {programs} | {matched} of {len(SWEEP)} |"]
    environment.write_table("\n".join(lines) + "\n", arguments.out,
                            f"{date}-generation-cpu-{arguments.threads}-threads.md")


if __name__ == "__main__":
    main()
