# The options of kiln.compile and their validation: every mistake is a
# TypeError or ValueError that names the option and lists what is valid.
# Depends on nothing in kiln.
import dataclasses
from typing import Optional

BACKENDS = ("llvm", "eager")
MODES = ("default", "reduce-overhead", "max-autotune")


def _describe(value):
    return f"{value!r} ({type(value).__name__})"


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """What kiln.compile was asked for. `mode` "reduce-overhead" replays GPU
    graphs as CUDA graphs; "max-autotune" is "default" today."""

    fullgraph: bool = False
    dynamic: Optional[bool] = None
    backend: str = "llvm"
    mode: str = "default"
    cache_limit: int = 8

    def __post_init__(self):
        if not isinstance(self.fullgraph, bool):
            raise TypeError(
                f"kiln.compile: fullgraph must be True or False, got {_describe(self.fullgraph)}"
            )
        if self.dynamic is not None and not isinstance(self.dynamic, bool):
            raise TypeError(
                f"kiln.compile: dynamic must be None, True or False, got {_describe(self.dynamic)}"
            )
        if not isinstance(self.backend, str) or self.backend not in BACKENDS:
            raise ValueError(
                f"kiln.compile: unknown backend {self.backend!r}; valid backends are "
                + ", ".join(repr(name) for name in BACKENDS)
            )
        if not isinstance(self.cache_limit, int) or isinstance(self.cache_limit, bool) \
                or self.cache_limit < 1:
            raise ValueError(
                f"kiln.compile: cache_limit must be a positive int, got {_describe(self.cache_limit)}"
            )
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise ValueError(
                f"kiln.compile: unknown mode {self.mode!r}; valid modes are "
                + ", ".join(repr(name) for name in MODES)
            )
