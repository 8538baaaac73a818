# kiln.compile: argument handling and the module wrapper. Until kiln's own
# bytecode frontend exists, capture goes through TorchDynamo (torch.compile)
# with kiln as its backend. Depends on kiln._options, kiln._backend, torch.
from kiln import _backend
from kiln._options import CompileOptions

__all__ = ["compile", "CompiledModule"]


class CompiledModule:
    """An nn.Module compiled by kiln. Calling it runs the compiled module;
    every other attribute is read from, written to and deleted on the
    module itself (`wrapper.weight`, `wrapper.eval()`, `wrapper.state_dict()`).
    Note that `wrapper.forward(...)` is the module's own, uncompiled forward,
    and that methods returning the module (`eval()`, `to()`) return it, not
    the wrapper."""

    __slots__ = ("_kiln_module", "_kiln_compiled", "_kiln_options")

    def __init__(self, module, compiled, options):
        object.__setattr__(self, "_kiln_module", module)
        object.__setattr__(self, "_kiln_compiled", compiled)
        object.__setattr__(self, "_kiln_options", options)

    @property
    def __wrapped__(self):
        return self._kiln_module

    def __call__(self, *args, **kwargs):
        return self._kiln_compiled(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(object.__getattribute__(self, "_kiln_module"), name)

    def __setattr__(self, name, value):
        setattr(self._kiln_module, name, value)

    def __delattr__(self, name):
        delattr(self._kiln_module, name)

    def __dir__(self):
        return sorted(set(dir(self._kiln_module)) | {"__wrapped__"})

    def __repr__(self):
        return f"kiln.compile({self._kiln_module!r}, backend={self._kiln_options.backend!r})"


def _compile(target, options):
    import torch

    if not callable(target):
        raise TypeError(
            "kiln.compile: fn_or_module must be a function or an nn.Module, "
            f"got {target!r} ({type(target).__name__})"
        )
    backend = _backend.make_dynamo_backend(options.backend)
    compiled = torch.compile(
        target, backend=backend, fullgraph=options.fullgraph, dynamic=options.dynamic
    )
    if isinstance(target, torch.nn.Module):
        return CompiledModule(target, compiled, options)
    return compiled


def compile(fn_or_module=None, *, fullgraph=False, dynamic=None, backend="llvm", mode="default"):
    """Compiles a function or an nn.Module with kiln.

    Usable as ``@kiln.compile``, ``@kiln.compile(backend="eager")`` and
    ``kiln.compile(module)`` (which returns a :class:`CompiledModule`).

    Args:
        fn_or_module: the function or module; None returns a decorator.
        fullgraph: raise on a graph break instead of splitting the function.
        dynamic: None (specialise shapes, go symbolic when they change),
            True (symbolic from the start) or False (always specialise).
            Graphs with symbolic sizes are not supported by kiln yet: they
            run as torch's FX graphs, correctly but uncompiled.
        backend: "llvm", kiln's native backend, or "eager", the reference
            backend. Today both run every graph node by calling torch's ATen
            operators from kiln's graph runner: no op is lowered to LLVM yet.
        mode: "default", "reduce-overhead" or "max-autotune"; accepted and
            validated, but it does not change anything yet.

    Capture goes through TorchDynamo until kiln's own bytecode frontend
    exists; the result is what ``torch.compile`` returns for functions.
    """
    options = CompileOptions(fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode)
    if fn_or_module is None:

        def decorate(target):
            return _compile(target, options)

        return decorate
    return _compile(fn_or_module, options)
