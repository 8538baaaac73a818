# kiln as a torch.compile backend: TorchDynamo captures, aot_autograd turns
# the capture into ATen graphs, and each graph is imported into kiln (C++),
# compiled to native CPU kernels and run by kiln's native runner. Registered as "kiln" on import and
# through the `torch_dynamo_backends` entry point.
# Depends on kiln._C, kiln._logging, torch._dynamo and torch._functorch.
import collections
import functools

from kiln import _C, _logging

#: What the backend did since the process started (or since a test cleared
#: it): "graphs" imported into kiln, "fallbacks" run as FX graphs instead,
#: "nodes" and "extern_nodes" in the imported graphs.
counters = collections.Counter()


def _run_fx_graph(gm):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(gm)


def compile_fx_graph(gm, example_inputs, *, backend="llvm"):
    """aot_autograd's compiler: imports one ATen FX graph into a kiln graph,
    compiles it and returns a boxed callable that runs it.

    Backend "llvm" compiles the graph to native CPU kernels (ops without a
    lowering, such as mm or conv, call torch from inside the compiled
    program); "eager" runs every node through torch's own operators, the
    reference. A graph the native backend cannot take (another device) runs
    eagerly, and a graph kiln cannot represent at all (non-tensor results,
    non-ATen calls) runs as the FX graph it is; the reason goes to
    KILN_LOGS=breaks. A graph with symbolic sizes (dynamic=True) keeps them
    as size symbols and is compiled for each set of sizes it is called
    with.
    """
    from torch.utils._python_dispatch import _disable_current_modes

    # aot_autograd calls its compilers with its fake-tensor mode active;
    # constants must be read and made as real tensors.
    with _disable_current_modes():
        try:
            imported = _C.import_fx(gm, list(example_inputs))
        except _C.Unsupported as error:
            counters["fallbacks"] += 1
            _logging.log("breaks", f"kiln cannot take this graph, running it as it is: {error}")
            return _run_fx_graph(gm)
        runner = _C.choose_runner(imported.graph, imported.output_form, backend,
                                  "a torch.compile graph")
        if runner.describe().startswith("native"):
            counters["native_graphs"] += 1
    for note in imported.notes:
        _logging.log("meta", note)
    nodes = imported.graph.nodes()
    counters["graphs"] += 1
    counters["nodes"] += sum(kind in ("op", "extern") for kind, _, _ in nodes)
    counters["extern_nodes"] += sum(kind == "extern" for kind, _, _ in nodes)
    if _logging.enabled("graph"):
        _logging.log("graph", f"backend {backend!r}, {runner.describe()}:\n{imported.graph}")
    run = runner.run_boxed
    tensor_inputs = list(imported.tensor_inputs)
    placeholders = sum(node.op == "placeholder" for node in gm.graph.nodes)

    if len(tensor_inputs) == placeholders:
        def compiled(args):
            return run(args)
    else:
        # torch.compile(dynamic=True) passes sizes (SymInts) too; the graph
        # reads them from its tensors' sizes.
        def compiled(args):
            tensors = [args[i] for i in tensor_inputs]
            args.clear()
            return run(tensors)

    compiled._boxed_call = True
    compiled.kiln_graph = imported.graph
    compiled.kiln_runner = runner
    return compiled


def make_dynamo_backend(backend="llvm"):
    """A TorchDynamo backend (gm, example_inputs) -> callable that compiles
    through aot_autograd and kiln with the named kiln backend."""
    from torch._dynamo.backends.common import aot_autograd

    fw_compiler = functools.partial(compile_fx_graph, backend=backend)

    def kiln_dynamo_backend(gm, example_inputs, **kwargs):
        # A fresh AotAutograd per graph: it keeps per-call state in itself.
        return aot_autograd(fw_compiler=fw_compiler)(gm, example_inputs, **kwargs)

    kiln_dynamo_backend.__name__ = f"kiln_{backend}"
    kiln_dynamo_backend.__qualname__ = kiln_dynamo_backend.__name__
    return kiln_dynamo_backend


#: torch.compile(model, backend="kiln"): the native ("llvm") backend.
kiln_backend = make_dynamo_backend("llvm")
kiln_backend.__name__ = kiln_backend.__qualname__ = "kiln"


def register():
    """Registers "kiln" with TorchDynamo unless TorchDynamo already has it or
    will load it itself from kiln's `torch_dynamo_backends` entry point
    (registering twice is an error in torch's registry)."""
    from torch._dynamo.backends import registry

    compiler_fns = getattr(registry, "_COMPILER_FNS", {})
    entry_points = getattr(registry, "_BACKENDS", {})
    if "kiln" in compiler_fns or entry_points.get("kiln") is not None:
        return
    registry.register_backend(kiln_backend, name="kiln")
