# Inspection logs chosen by the environment variable KILN_LOGS, modelled on
# TORCH_LOGS: a comma list of names ("graph,breaks"; "+name" for verbose,
# "all" for everything). Depends on nothing in kiln.
import os
import sys

#: The names kiln logs under today. "graph": each kiln graph as text;
#: "breaks": each graph break (where, the instruction, why) and each function
#: kiln ran in CPython whole, with the reason;
#: "meta": registered ops kept as externs because kiln's meta function
#: disagreed with torch's metadata.
NAMES = ("graph", "breaks", "meta")

_parsed = (None, frozenset())


def enabled_names():
    """The set of names KILN_LOGS turns on (re-read when it changes)."""
    global _parsed
    text = os.environ.get("KILN_LOGS", "")
    if text != _parsed[0]:
        names = {item.strip().lstrip("+") for item in text.split(",")}
        names.discard("")
        if "all" in names:
            names |= set(NAMES)
        _parsed = (text, frozenset(names))
    return _parsed[1]


def enabled(name):
    return name in enabled_names()


def log(name, message):
    """Writes `message` to stderr when KILN_LOGS names `name`."""
    if enabled(name):
        print(f"[kiln:{name}] {message}", file=sys.stderr, flush=True)
