# kiln.compile: argument handling and the module wrapper over kiln's own
# bytecode frontend (kiln._C.CompiledFunction).
# Depends on kiln._C, kiln._options, torch.
from kiln import _C
from kiln._options import CompileOptions

__all__ = ["compile", "CompiledModule", "cache_info", "code_cache_info"]


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


def _module_has_hooks(module):
    import torch.nn.modules.module as module_state

    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
        or module._backward_pre_hooks or module_state._global_forward_hooks
        or module_state._global_forward_pre_hooks or module_state._global_backward_hooks
        or module_state._global_backward_pre_hooks
    )


class _ModuleCall:
    """Calls a module's compiled forward; a module with hooks runs through
    nn.Module.__call__ in CPython so that its hooks run as in eager."""

    __slots__ = ("module", "forward")

    def __init__(self, module, forward):
        self.module = module
        self.forward = forward

    def __call__(self, *args, **kwargs):
        if _module_has_hooks(self.module):
            return self.module(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def cache_info(self):
        return self.forward.cache_info()

    def reset(self):
        self.forward.reset()


def _compile(target, options):
    import inspect

    import torch

    if not callable(target):
        raise TypeError(
            "kiln.compile: fn_or_module must be a function or an nn.Module, "
            f"got {target!r} ({type(target).__name__})"
        )
    settings = dict(backend=options.backend, fullgraph=options.fullgraph,
                    cache_limit=options.cache_limit, mode=options.mode,
                    dynamic=options.dynamic)
    if isinstance(target, torch.nn.Module):
        forward = _C.CompiledFunction(type(target).forward.__get__(target), **settings)
        return CompiledModule(target, _ModuleCall(target, forward), options)
    if inspect.isfunction(target) or inspect.ismethod(target):
        return _C.CompiledFunction(target, **settings)
    # Builtins (torch.relu) and other callables: compile a call of them.
    return _C.CompiledFunction(lambda *args, **kwargs: target(*args, **kwargs), **settings)


def cache_info(compiled):
    """What kiln cached for a compiled function or module: entries (one per
    guard set), hits, misses, fallbacks, whether it now runs in CPython and
    why, each entry's graph and guards as text, its graph breaks (`breaks`:
    reason, location, instruction, resume code), and `graph_count` and
    `break_reasons` counting the resume functions' graphs and breaks too."""
    inner = getattr(compiled, "_kiln_compiled", compiled)
    if not hasattr(inner, "cache_info"):
        raise TypeError(f"kiln.cache_info: {compiled!r} was not made by kiln.compile")
    return inner.cache_info()


def code_cache_info(fn):
    """The cache kiln's frame hook keeps on a function's code object (frames
    captured while a compiled caller ran in CPython), or None."""
    return _C.code_cache_info(getattr(fn, "__code__", fn))


def compile(fn_or_module=None, *, fullgraph=False, dynamic=None, backend="llvm", mode="default",
            cache_limit=8):
    """Compiles a function or an nn.Module with kiln.

    Usable as ``@kiln.compile``, ``@kiln.compile(fullgraph=True)`` and
    ``kiln.compile(module)`` (which returns a :class:`CompiledModule`).

    kiln's own frontend captures the function from its bytecode on the first
    call: tensor work becomes a graph, Python on constants is evaluated,
    helper functions and submodules are inlined, and every assumption is a
    guard. Later calls whose guards pass run the cached graph; a call that
    misses captures again (up to ``cache_limit`` entries). What cannot be
    captured (print, ``.item()`` in control flow, data-dependent shapes,
    side effects on the caller's objects) is a graph break: that instruction
    runs in CPython between the graph before it and a resume function that
    is captured in turn (inside a loop, the rest of the loop); where kiln
    cannot resume (an enumerate over a list, a function making closure
    cells) the whole function runs in CPython. KILN_LOGS=breaks says where
    and why.

    Args:
        fn_or_module: the function or module; None returns a decorator.
        fullgraph: raise kiln.Unsupported, naming the construct and source
            line, instead of running the function in CPython.
        dynamic: None (default): the first call specialises on every size;
            when a later call misses only because sizes changed, the
            dimensions that changed become symbolic and one capture serves
            their later sizes. True: every dimension of the tensor
            arguments (not parameters or buffers) is symbolic from the
            first call. False: every size is specialised. Sizes 0 and 1 are
            always specialised; kiln.mark_dynamic / kiln.mark_static choose
            for single dimensions. KILN_LOGS=guards prints the relations
            between sizes a capture relied on, KILN_LOGS=recompiles which
            dimensions became dynamic.
        backend: "llvm", kiln's native backend (graphs compile to CPU or GPU
            code; ops without a lowering call torch), or "eager", the
            reference backend (every graph node through torch's operators).
        mode: "default"; "reduce-overhead": a graph on a CUDA GPU is
            recorded as a CUDA graph on its second call and replayed after
            (one launch a call; outputs are copied out of the recording);
            "max-autotune": as "default" today.
        cache_limit: how many guard sets to keep before running in CPython.
    """
    options = CompileOptions(fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                             cache_limit=cache_limit)
    if fn_or_module is None:

        def decorate(target):
            return _compile(target, options)

        return decorate
    return _compile(fn_or_module, options)


def _dims_argument(t, dim, what):
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"kiln.{what}: expected a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) and not isinstance(dim, bool) else dim
    if not isinstance(dims, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"kiln.{what}: dim must be an int or a list of ints, got {dim!r}")
    wrapped = []
    for d in dims:
        if not -t.dim() <= d < max(t.dim(), 1):
            raise IndexError(f"kiln.{what}: dim {d} out of range for a {t.dim()}-d tensor")
        wrapped.append(d % t.dim() if t.dim() else 0)
    return wrapped


def mark_dynamic(t, dim):
    """Makes dimension(s) `dim` of tensor `t` symbolic when a compiled
    function captures with `t` as an argument (unless `dynamic=False`): later
    calls with other sizes there reuse the capture. Sizes 0 and 1 stay
    specialised."""
    dims = _dims_argument(t, dim, "mark_dynamic")
    marked = set(getattr(t, "_kiln_dynamic_dims", ()))
    t._kiln_dynamic_dims = tuple(sorted(marked | set(dims)))
    static = set(getattr(t, "_kiln_static_dims", ())) - set(dims)
    t._kiln_static_dims = tuple(sorted(static))


def mark_static(t, dim):
    """Keeps dimension(s) `dim` of tensor `t` specialised, even under
    `dynamic=True` or after its size changed between calls."""
    dims = _dims_argument(t, dim, "mark_static")
    marked = set(getattr(t, "_kiln_static_dims", ()))
    t._kiln_static_dims = tuple(sorted(marked | set(dims)))
    dynamic = set(getattr(t, "_kiln_dynamic_dims", ())) - set(dims)
    t._kiln_dynamic_dims = tuple(sorted(dynamic))
