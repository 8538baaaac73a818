# kiln.export: captures a function or module on example inputs as one graph,
# compiles it ahead of time into an object file, a shared library and a C
# header (kiln._C.export_graph does the work), and optionally checks the result
# against eager PyTorch. kiln.load_exported runs an export from Python.
# Depends on kiln._C, torch, ctypes.
import ctypes
import dataclasses
import inspect
import os
import re

from kiln import _C

__all__ = ["export", "load_exported", "ExportResult"]

# kiln's dtype numbering (ir/DType.h), as the exported header's kiln_dtype.
_DTYPES = None


def _dtypes():
    global _DTYPES
    if _DTYPES is None:
        import torch

        _DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                   torch.float16, torch.bfloat16, torch.float32, torch.float64]
    return _DTYPES


@dataclasses.dataclass
class ExportResult:
    """What kiln.export wrote."""
    directory: str
    name: str
    files: list
    inputs: list  # C API input names, in order
    outputs: list  # C API output names, in order
    weights: list  # weight names, in the weights file's order
    kernels: int
    milliseconds: float
    notes: list = dataclasses.field(default_factory=list)

    @property
    def library(self):
        return os.path.join(self.directory, self.name + ".so")

    @property
    def weights_file(self):
        return os.path.join(self.directory, self.name + ".weights")


def _resolve_callable(fn):
    """(function, self, description) for a module, a bound method or a function."""
    import torch

    if isinstance(fn, torch.nn.Module):
        from kiln._compile import _module_has_hooks

        if _module_has_hooks(fn):
            raise _C.Unsupported(
                f"export: {type(fn).__name__} has forward or backward hooks; an exported "
                "program runs forward only: remove the hooks, or export a function that "
                "calls the module's parts")
        forward = fn.forward
        if not inspect.ismethod(forward) or not inspect.isfunction(forward.__func__):
            raise TypeError(f"kiln.export: {type(fn).__name__}.forward is not a Python method")
        return forward.__func__, fn, type(fn).__name__
    if inspect.ismethod(fn) and inspect.isfunction(fn.__func__):
        return fn.__func__, fn.__self__, fn.__qualname__
    if inspect.isfunction(fn):
        return fn, None, fn.__qualname__
    raise TypeError("kiln.export takes a Python function, a bound method or an nn.Module, "
                    f"got {type(fn).__name__}")


def _example_tensors(function, self, args, kwargs):
    """The tensors of the example inputs in argument order, each with a C
    name (its parameter's name, with the position inside a list or dict)."""
    import torch

    try:
        signature = inspect.signature(function)
        bound = signature.bind(*(([self] if self is not None else []) + list(args)), **kwargs)
        named = list(bound.arguments.items())
        if self is not None:
            named = named[1:]
    except (TypeError, ValueError):
        named = [(f"input{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    tensors = []

    def visit(name, value):
        if isinstance(value, torch.Tensor):
            tensors.append((re.sub(r"\W", "_", name), value))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(f"{name}_{i}", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                visit(f"{name}_{key}", item)

    for name, value in named:
        visit(name, value)
    return tensors


def _weight_name(source, self_name):
    """`L['self'].layers[0].weight` -> `layers.0.weight`."""
    name = source
    if self_name:
        name = re.sub(r"^L\['" + re.escape(self_name) + r"'\]\.?", "", name)
    name = re.sub(r"^[LGC]\['([^']*)'\]", r"\1", name)
    name = re.sub(r"\[(?:'([^']*)'|(\d+))\]", lambda m: "." + (m.group(1) or m.group(2)), name)
    return name.strip(".") or "weight"


def export(fn, example_inputs, directory, *, name=None, target=None, embed_weights=False,
           example_kwargs=None, compiler=None, check=True):
    """Compiles `fn` (a function, a bound method or an nn.Module) ahead of time
    for the example inputs' shapes and writes into `directory`:
    `<name>.o` and `<name>.so` (the program and its kernels, position-
    independent), `<name>.h` (its C interface), `<name>.weights` (parameters,
    buffers and other tensors it reads, checked on load), `main.c` (an
    example driver) and `README.md`. The artifact needs libc, libm and
    libpthread only: no Python, no torch, no LLVM.

    `target` is an LLVM CPU name (e.g. "x86-64-v3" for AVX2 machines,
    "skylake-avx512"); None compiles for this machine's CPU. With
    `embed_weights`, the object also holds the weights (`create(NULL, ...)`).
    With `check` (the default, on the host's CPU only), the exported library is
    loaded and run on the example inputs and compared with eager PyTorch.

    Raises kiln.Unsupported, naming the construct and its source line, when the
    function cannot run without Python or torch (a graph break, an op kiln
    does not compile, a side effect); nothing is written then."""
    import torch

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise TypeError("kiln.export: example_inputs must be a tuple of arguments, got "
                        f"{type(example_inputs).__name__}")
    example_kwargs = dict(example_kwargs or {})
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"kiln.export: directory must be a path, got {type(directory).__name__}")
    function, self, description = _resolve_callable(fn)
    if name is None:
        name = re.sub(r"\W", "_", description.split(".")[-1]).lower()
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"kiln.export: name must be a C identifier, got {name!r}")
    if target is not None and not isinstance(target, str):
        raise TypeError(f"kiln.export: target must be an LLVM CPU name, got {target!r}")
    examples = _example_tensors(function, self, example_inputs, example_kwargs)
    for _, tensor in examples:
        if tensor.device.type != "cpu":
            raise _C.Unsupported(f"export: example inputs must be on the CPU, got {tensor.device}")

    with torch.no_grad():
        graph, inputs, sources, output_names, notes = _C.capture_for_export(
            function, self, tuple(example_inputs), example_kwargs)
    position = {}
    for index, (_, tensor) in enumerate(examples):
        position.setdefault(id(tensor), index)
    read = sorted({position[id(t)] for t in inputs if id(t) in position})
    api_names = {index: examples[index][0] for index in read}
    roles, weights, used_names = [], [], set()
    self_name = None
    if self is not None:
        parameters = list(inspect.signature(function).parameters)
        self_name = parameters[0] if parameters else None
    for tensor, source in zip(inputs, sources):
        if id(tensor) in position:
            index = position[id(tensor)]
            roles.append((api_names[index], False, 0, read.index(index)))
            continue
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu" or tensor.is_sparse:
            raise _C.Unsupported(f"export: {source} is not a dense CPU tensor")
        weight = _weight_name(source, self_name)
        while weight in used_names:
            weight += "_"
        used_names.add(weight)
        weights.append(weight)
        roles.append((weight, True, tensor.data_ptr(), -1))
    api_inputs = [api_names[index] for index in read]
    info = _C.export_graph(graph, name, os.fspath(directory), target or "", bool(embed_weights),
                           compiler or "", roles, list(output_names))
    result = ExportResult(directory=os.fspath(directory), name=name, files=info["files"],
                          inputs=api_inputs, outputs=list(output_names),
                          weights=weights, kernels=info["kernels"],
                          milliseconds=info["milliseconds"], notes=list(notes))
    if check and target in (None, "native", "host"):
        _check_export(result, fn, example_inputs, example_kwargs,
                      [examples[index][1] for index in read])
    return result


def _check_export(result, fn, example_inputs, example_kwargs, api_inputs):
    """Runs the exported library on the example inputs and compares with eager."""
    import torch

    with torch.no_grad():
        expected = fn(*example_inputs, **example_kwargs)
    flat = []

    def collect(value):
        if isinstance(value, torch.Tensor):
            flat.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)

    collect(expected)
    program = load_exported(result.directory, result.name)
    outputs = program(*api_inputs)
    if len(outputs) != len(flat):
        return  # outputs repeated or constant: nothing one-to-one to compare
    for index, (got, want) in enumerate(zip(outputs, flat)):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise _C.Unsupported(f"export: output {index} of the exported program is "
                                 f"{got.dtype}{list(got.shape)}, eager gives "
                                 f"{want.dtype}{list(want.shape)}")
        if want.is_floating_point():
            # Absolute error relative to the output's scale: a long sum
            # summed in another order (a GEMM's k blocks) differs by float
            # rounding of its terms, not of its (possibly tiny) result.
            finite = want[torch.isfinite(want)]
            scale = max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
            ok = torch.allclose(got, want, rtol=1e-3, atol=1e-4 * scale, equal_nan=True)
        else:
            ok = torch.equal(got, want)
        if not ok:
            raise _C.Unsupported(f"export: output {index} of the exported program differs from "
                                 "eager PyTorch on the example inputs (largest difference "
                                 f"{(got.double() - want.double()).abs().max().item():.3g})")


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("sizes", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64))]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("sizes", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64))]


class ExportedProgram:
    """An exported program loaded from its shared library: call it with torch
    tensors; it returns copies of its outputs as a list of tensors."""

    def __init__(self, directory, name, weights_path=None, num_threads=0):
        self.name = name
        self._library = ctypes.CDLL(os.path.join(os.fspath(directory), name + ".so"))
        prefix = f"kiln_{name}_"
        self._function = lambda suffix: getattr(self._library, prefix + suffix)
        self._function("last_error").restype = ctypes.c_char_p
        self._function("num_inputs").restype = ctypes.c_size_t
        self._function("num_outputs").restype = ctypes.c_size_t
        self._function("destroy").argtypes = [ctypes.c_void_p]
        self._handle = ctypes.c_void_p()
        if weights_path is None:
            weights_path = os.path.join(os.fspath(directory), name + ".weights")
        path = None if weights_path == "" else os.fsencode(weights_path)
        self._check(self._function("create")(path, ctypes.c_int(num_threads),
                                             ctypes.byref(self._handle)))
        self.num_inputs = self._function("num_inputs")()
        self.num_outputs = self._function("num_outputs")()
        self.inputs = [self._info("input_info", i) for i in range(self.num_inputs)]
        self.outputs = [self._info("output_info", i) for i in range(self.num_outputs)]

    def _check(self, status):
        if status != 0:
            raise RuntimeError(self._function("last_error")().decode())

    def _info(self, which, index):
        info = _TensorInfo()
        self._check(self._function(which)(ctypes.c_size_t(index), ctypes.byref(info)))
        return (info.name.decode(), _dtypes()[info.dtype], list(info.sizes[:info.rank]),
                list(info.strides[:info.rank]))

    def __call__(self, *inputs):
        import torch

        keep = []
        array = (_Tensor * max(1, len(inputs)))()
        for i, tensor in enumerate(inputs):
            sizes = (ctypes.c_int64 * max(1, tensor.dim()))(*tensor.shape)
            strides = (ctypes.c_int64 * max(1, tensor.dim()))(*tensor.stride())
            keep += [sizes, strides]
            code = _dtypes().index(tensor.dtype) if tensor.dtype in _dtypes() else 99
            array[i] = _Tensor(tensor.data_ptr(), code, tensor.dim(), sizes, strides)
        outputs = (_Tensor * max(1, self.num_outputs))()
        self._check(self._function("run")(self._handle, array, ctypes.c_size_t(len(inputs)),
                                          outputs, ctypes.c_size_t(self.num_outputs)))
        results = []
        for o in range(self.num_outputs):
            out = outputs[o]
            sizes = list(out.sizes[:out.rank])
            strides = list(out.strides[:out.rank])
            dtype = _dtypes()[out.dtype]
            span = 1 + sum((s - 1) * st for s, st in zip(sizes, strides)) if all(sizes) else 0
            # The program's own output memory, copied once with a plain
            # memmove: a torch copy would start torch's worker threads, whose
            # spinning after it takes cores from the program's next run.
            owned = torch.empty(max(span, 0), dtype=dtype)
            if span:
                ctypes.memmove(owned.data_ptr(), out.data, span * owned.element_size())
            results.append(owned.as_strided(sizes, strides) if span else
                           torch.empty(sizes, dtype=dtype))
        return results

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._function("destroy")(handle)
            self._handle = None


def load_exported(directory, name, weights_path=None, num_threads=0):
    """Loads `<directory>/<name>.so` (an export of kiln.export) into this
    process: the returned callable takes the C API's inputs as torch tensors
    and returns its outputs as new tensors. weights_path "" uses the embedded
    weights."""
    return ExportedProgram(directory, name, weights_path, num_threads)
