# kiln.explain: runs a function once under kiln and reports what kiln made of
# it: the graphs it captured (with op counts), every place where Python ran
# instead (with the reason and source line), the guards, and how each graph
# runs. Like torch._dynamo.explain. Depends on kiln._C and kiln._compile.
import dataclasses
import re

from kiln import _C

_ARTIFACTS = ["graph", "guards", "breaks", "recompiles"]
# "f runs in CPython: reason [at file.py:12 in f, CALL]",
# "f has a graph break at file.py:12 (CALL): reason [at file.py:30 in g, CALL]"
_BREAK = re.compile(r"^(?P<function>.*?) (?P<how>runs in CPython|runs through torch's operators|"
                    r"has a graph break at (?P<location>.*?) \((?P<instruction>[A-Z_]+)\)): "
                    r"(?P<reason>.*?)(?: \[at (?P<where>[^\]]*)\])?$", re.S)


@dataclasses.dataclass
class Graph:
    """One captured graph: the function it came from and its text."""
    function: str
    text: str

    @property
    def op_count(self):
        return sum(1 for line in self.text.splitlines() if " = " in line and "%" in line)


@dataclasses.dataclass
class Break:
    """A function (or part of one) that kiln left to Python or to torch's
    operators, and why."""
    function: str
    reason: str
    where: str  # "file.py:12 in f, CALL", or "" where kiln did not say
    runs_in_cpython: bool  # the whole function; else see graph_break
    # A graph break: the graph before it and the resume function after it
    # are captured; one instruction of the function runs in CPython.
    graph_break: bool = False
    location: str = ""  # a graph break's "file.py:12" in the function
    instruction: str = ""  # and the instruction there ("CALL")


@dataclasses.dataclass
class ExplainOutput:
    graphs: list
    breaks: list
    guards: list  # the guard text of each graph, in order
    recompiles: list  # why a later call captured again
    result: object = dataclasses.field(repr=False, default=None)

    @property
    def graph_count(self):
        return len(self.graphs)

    @property
    def break_count(self):
        return len(self.breaks)

    @property
    def op_count(self):
        return sum(graph.op_count for graph in self.graphs)

    def __str__(self):
        lines = [f"Graph Count: {self.graph_count}",
                 f"Graph Break Count: {self.break_count}",
                 f"Op Count: {self.op_count}"]
        if self.breaks:
            lines.append("Break Reasons:")
            for number, item in enumerate(self.breaks, 1):
                if item.graph_break:
                    how = f"has a graph break at {item.location} ({item.instruction})"
                elif item.runs_in_cpython:
                    how = "runs in CPython"
                else:
                    how = "runs through torch's operators"
                lines.append(f"  {number}. {item.function} {how}: {item.reason}")
                if item.where:
                    lines.append(f"     at {item.where}")
        for number, graph in enumerate(self.graphs, 1):
            lines.append(f"Graph {number} ({graph.function}, {graph.op_count} ops):")
            lines.extend("  " + line for line in graph.text.rstrip().splitlines())
        for number, guards in enumerate(self.guards, 1):
            lines.append(f"Guards of graph {number}:")
            lines.extend("  " + line for line in guards.rstrip().splitlines()[1:])
        for reason in self.recompiles:
            lines.append(f"Recompiled: {reason}")
        return "\n".join(lines)


def _parse_break(text):
    match = _BREAK.match(text.strip())
    if not match:
        return Break(function="?", reason=text.strip(), where="", runs_in_cpython=True)
    return Break(function=match["function"], reason=match["reason"], where=match["where"] or "",
                 runs_in_cpython=match["how"] == "runs in CPython",
                 graph_break=match["location"] is not None, location=match["location"] or "",
                 instruction=match["instruction"] or "")


def explain(fn, *args, **kwargs):
    """Compiles `fn` afresh with kiln.compile, calls it once with the given
    arguments (its effects happen, as with torch._dynamo.explain) and
    returns an ExplainOutput: graphs with op counts, breaks with reasons and
    source lines, guards; print() it for a report. The call's result is in
    `.result`. Functions `fn` calls that kiln captures on their own (while
    `fn` runs in CPython) are reported too."""
    from kiln._compile import compile as kiln_compile

    compiled = kiln_compile(fn)
    _C.start_log_capture(_ARTIFACTS)
    try:
        result = compiled(*args, **kwargs)
    finally:
        records = _C.stop_log_capture()
    output = ExplainOutput(graphs=[], breaks=[], guards=[], recompiles=[], result=result)
    for name, text in records:
        if name == "graph":
            header, _, body = text.partition("\n")
            function = header[len("captured "):] if header.startswith("captured ") else header
            output.graphs.append(Graph(function=function, text=body))
        elif name == "guards":
            output.guards.append(text)
        elif name == "breaks":
            output.breaks.append(_parse_break(text))
        elif name == "recompiles":
            output.recompiles.append(text.strip())
    return output
