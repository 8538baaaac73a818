# kiln: a just-in-time compiler for PyTorch programs, on LLVM. The package is
# a thin layer over the native extension kiln._C.
# Depends on kiln._C, kiln._compile, kiln._explain, kiln._backend, torch.
from kiln._version import __version__
from kiln._C import Unsupported
from kiln._compile import (CompiledModule, cache_info, code_cache_info, compile, mark_dynamic,
                           mark_static)
from kiln._C import reload_logging
from kiln._explain import explain
from kiln._export import ExportResult, export, load_exported
from kiln import _backend

__all__ = [
    "compile", "CompiledModule", "Unsupported", "mark_dynamic", "mark_static", "cache_info", "code_cache_info", "explain",
    "export", "ExportResult", "load_exported", "reload_logging", "__version__",
]

# torch.compile(model, backend="kiln") after `import kiln`.
_backend.register()
