// Python bindings of the graph IR and the eager runner: build graphs from
// Python (tests, tools), print and verify them, run them.
// Depends on ir/, backend/cpu/CpuBackend.h (threads, kernel cache),
// bridge/, pybind11.
#include "backend/aot/AotExport.h"
#include "backend/cpu/CpuBackend.h"
#include "bridge/DynamicRunner.h"
#include "bridge/EagerRunner.h"
#include "bridge/NativeRunner.h"
#include "bridge/PythonConversion.h"
#include "bridge/RunnerChoice.h"
#include "bridge/TorchAbi.h"
#include "ir/Error.h"
#include "ir/Graph.h"
#include "runtime/HostMemoryPool.h"

#include <pybind11/stl.h>

namespace kiln::python {
namespace {

using namespace pybind11::literals;

std::string nodeKindName(Node::Kind kind) {
  switch (kind) {
  case Node::Kind::Input:
    return "input";
  case Node::Kind::Constant:
    return "constant";
  case Node::Kind::Op:
    return "op";
  case Node::Kind::Extern:
    return "extern";
  }
  return "?";
}

/// A tensor (real, fake or meta), or (dtype, sizes[, strides[, device]]).
TensorMeta metaFromPython(py::handle spec) {
  if (isTensor(spec))
    return tensorMetaOf(spec);
  if (!PyTuple_Check(spec.ptr()) && !PyList_Check(spec.ptr()))
    throw py::type_error(
        "expected a tensor or (dtype, sizes[, strides]), got " +
        py::repr(spec).cast<std::string>());
  py::sequence items = py::reinterpret_borrow<py::sequence>(spec);
  if (items.size() < 2 || items.size() > 4)
    throw py::type_error("expected (dtype, sizes[, strides[, device]])");
  DType dtype = dtypeFromTorch(items[0]);
  auto sizes = items[1].cast<Shape>();
  Device device;
  if (items.size() == 4)
    device = Device::parse(py::str(items[3]).cast<std::string>());
  if (items.size() >= 3 && !items[2].is_none())
    return TensorMeta(dtype, sizes, items[2].cast<Shape>(), 0, device);
  return TensorMeta(dtype, sizes, device);
}

py::object valueHandle(Value *value, py::handle graph) {
  return py::cast(value, py::return_value_policy::reference_internal, graph);
}

/// A graph value's Python handle; tensors become constants of the graph.
Argument argumentOf(Graph &graph, py::handle object) {
  static py::handle valueType = py::type::of<Value>();
  return argumentFromPython(
      object,
      [&](py::handle tensor) {
        return graph.addConstant(constantDataOf(tensor));
      },
      [&](py::handle item) -> Value * {
        return py::isinstance(item, valueType) ? item.cast<Value *>() : nullptr;
      });
}

std::vector<std::pair<std::string, Argument>> keywordsOf(Graph &graph,
                                                         py::dict kwargs) {
  std::vector<std::pair<std::string, Argument>> keywords;
  for (auto item : kwargs)
    keywords.emplace_back(item.first.cast<std::string>(),
                          argumentOf(graph, item.second));
  return keywords;
}

/// One result: its handle; several: a tuple of handles.
py::object resultsOf(Node *node, py::handle graph) {
  if (node->results().size() == 1)
    return valueHandle(node->result(), graph);
  py::tuple results(node->results().size());
  for (size_t i = 0; i < node->results().size(); ++i)
    results[i] = valueHandle(node->result(i), graph);
  return results;
}

} // namespace

void defineGraphBindings(py::module_ &module) {
  py::class_<Value>(module, "Value", "A tensor value of a kiln graph.")
      .def_property_readonly("name", &Value::name)
      .def_property_readonly(
          "dtype",
          [](const Value &value) { return dtypeToTorch(value.meta().dtype); })
      .def_property_readonly(
          "shape", [](const Value &value) { return value.meta().sizes; })
      .def("stride", [](const Value &value) { return value.meta().strides; })
      .def_property_readonly(
          "meta", [](const Value &value) { return value.meta().str(); })
      .def("__repr__", [](const Value &value) {
        return "<kiln value %" + value.name() + ": " + value.meta().str() + ">";
      });

  py::class_<Graph, std::shared_ptr<Graph>>(
      module, "Graph",
      "A kiln graph built from Python: inputs, constants, registered ops, "
      "extern ops and outputs.")
      .def(py::init([] { return std::make_shared<Graph>(); }))
      .def(
          "add_input",
          [](py::object self, py::object spec, std::string name) {
            Graph &graph = self.cast<Graph &>();
            return valueHandle(graph.addInput(metaFromPython(spec), name),
                               self);
          },
          "spec"_a, "name"_a = "",
          "Adds an input like `spec`: a tensor, or (dtype, sizes[, strides[, "
          "device]]).")
      .def(
          "add_constant",
          [](py::object self, py::object tensor) {
            Graph &graph = self.cast<Graph &>();
            if (!isTensor(tensor))
              throw py::type_error("add_constant takes a tensor");
            return valueHandle(argumentOf(graph, tensor).toTensor(), self);
          },
          "tensor"_a, "Bakes a copy of `tensor` into the graph.")
      .def(
          "add_op",
          [](py::object self, const std::string &name, py::args args,
             py::kwargs kwargs) {
            Graph &graph = self.cast<Graph &>();
            std::vector<Argument> positional;
            for (py::handle arg : args)
              positional.push_back(argumentOf(graph, arg));
            return resultsOf(
                graph.addOp(name, positional, keywordsOf(graph, kwargs)), self);
          },
          "name"_a,
          "Adds a registered op, e.g. add_op('aten::add.Tensor', x, y, "
          "alpha=2). Tensors among the arguments become constants. Returns "
          "the result value, or a tuple of them.")
      .def(
          "add_extern",
          [](py::object self, const std::string &schemaText, py::args args,
             py::kwargs kwargs) {
            Graph &graph = self.cast<Graph &>();
            if (!kwargs.contains("results"))
              throw py::type_error(
                  "add_extern needs results=[...]: one tensor or (dtype, "
                  "sizes[, strides]) per tensor the op returns");
            std::vector<TensorMeta> metas;
            for (py::handle spec : kwargs["results"])
              metas.push_back(metaFromPython(spec));
            PyDict_DelItemString(kwargs.ptr(), "results");
            auto schema =
                std::make_shared<const OpSchema>(parseSchema(schemaText));
            std::vector<Argument> positional;
            for (py::handle arg : args)
              positional.push_back(argumentOf(graph, arg));
            std::vector<Argument> arguments =
                schema->normalize(positional, keywordsOf(graph, kwargs));
            return resultsOf(graph.addExtern(schema, arguments, metas), self);
          },
          "schema"_a,
          "Adds an op by its schema text (as str(torch.ops.aten.x.y._schema) "
          "prints it), run by calling torch; results=[...] gives the metadata "
          "of its tensor results.")
      .def(
          "set_outputs",
          [](Graph &graph, py::iterable outputs) {
            std::vector<Argument> arguments;
            for (py::handle output : outputs)
              arguments.push_back(argumentOf(graph, output));
            graph.setOutputs(std::move(arguments));
          },
          "outputs"_a, "Graph outputs: values, None and numbers.")
      .def_property_readonly("inputs",
                             [](py::object self) {
                               py::list inputs;
                               for (Value *input :
                                    self.cast<Graph &>().inputs())
                                 inputs.append(valueHandle(input, self));
                               return inputs;
                             })
      .def(
          "nodes",
          [](const Graph &graph) {
            py::list nodes;
            for (const auto &node : graph.nodes())
              nodes.append(py::make_tuple(
                  nodeKindName(node->kind()),
                  node->schema()
                      ? py::object(py::str(node->schema()->qualifiedName()))
                      : py::object(py::none()),
                  node->origin()));
            return nodes;
          },
          "(kind, qualified name or None, origin) for every node, in order.")
      .def("verify", &Graph::verify,
           "Checks the graph; raises RuntimeError naming the first problem.")
      .def("__str__", &Graph::str);

  py::class_<GraphRunner, std::shared_ptr<GraphRunner>>(
      module, "GraphRunner", "What runs a compiled graph.")
      .def(
          "__call__",
          [](const GraphRunner &runner, py::args args) {
            return runner.run(PySequence_Fast_ITEMS(args.ptr()),
                              static_cast<size_t>(args.size()));
          },
          "Runs the graph on its input tensors.")
      .def(
          "run_boxed",
          [](const GraphRunner &runner, py::list args) {
            // The boxed convention of aot_autograd: the callee empties the
            // list, so that inputs can be freed as soon as it is done.
            std::vector<PyObject *> inputs;
            std::vector<py::object> owned;
            for (py::handle arg : args) {
              owned.push_back(py::reinterpret_borrow<py::object>(arg));
              inputs.push_back(arg.ptr());
            }
            PyList_SetSlice(args.ptr(), 0, PyList_GET_SIZE(args.ptr()),
                            nullptr);
            return runner.run(inputs.data(), inputs.size());
          },
          "args"_a, "Runs the graph on a list of inputs, which it empties.")
      .def("describe", &GraphRunner::describe,
           "What runs how: 'native: 2 kernel(s), 1 extern(s) [aten::mm]'.");

  py::class_<EagerRunner, GraphRunner, std::shared_ptr<EagerRunner>>(
      module, "EagerRunner",
      "Runs a kiln graph by calling torch's ATen operators node by node.")
      .def(
          py::init([](std::shared_ptr<Graph> graph, const std::string &output) {
            if (!graph)
              throw py::type_error("EagerRunner needs a kiln Graph, not None");
            return std::make_shared<EagerRunner>(std::move(graph),
                                                 outputFormFromName(output));
          }),
          "graph"_a, "output"_a = "tuple",
          "output: 'tuple', 'list' or 'single' (the graph's one output).")
      .def_property_readonly("output_form",
                             [](const EagerRunner &runner) {
                               return std::string(
                                   outputFormName(runner.outputForm()));
                             })
      .def_property_readonly("slot_count", &EagerRunner::slotCount);

  py::class_<NativeRunner, GraphRunner, std::shared_ptr<NativeRunner>>(
      module, "NativeRunner",
      "Runs a kiln graph compiled to native CPU kernels (externs call "
      "torch). Raises kiln.Unsupported when the graph cannot be compiled.")
      .def(py::init([](std::shared_ptr<Graph> graph, const std::string &output,
                       bool checkInputs) {
             if (!graph)
               throw py::type_error(
                   "NativeRunner needs a kiln Graph, not None");
             return std::make_shared<NativeRunner>(
                 std::move(graph), outputFormFromName(output), checkInputs);
           }),
           "graph"_a, "output"_a = "tuple", "check_inputs"_a = true,
           "check_inputs: check each call's tensors against the graph's "
           "dtypes, sizes and strides.")
      .def_property_readonly(
          "program",
          [](const NativeRunner &runner) { return runner.program().str(); },
          "The scheduled loop-IR program, as text.")
      .def_property_readonly("compile_ms", &NativeRunner::compileMilliseconds,
                             "Milliseconds from graph to machine code.");

  module.def(
      "choose_runner",
      [](std::shared_ptr<Graph> graph, const std::string &output,
         const std::string &backend, const std::string &name,
         const std::string &mode) {
        if (!graph)
          throw py::type_error("choose_runner needs a kiln Graph, not None");
        if (!graph->symbols().empty())
          return std::shared_ptr<GraphRunner>(std::make_shared<DynamicRunner>(
              std::move(graph), outputFormFromName(output), backend, "", name,
              mode, /*checkInputs=*/true));
        return std::shared_ptr<GraphRunner>(chooseGraphRunner(
            std::move(graph), outputFormFromName(output), backend, "", name,
            /*checkInputs=*/true, mode));
      },
      "graph"_a, "output"_a = "tuple", "backend"_a = "llvm",
      "name"_a = "a graph", "mode"_a = "default",
      "The runner kiln's own frontend would choose for `graph`: native code "
      "for backend 'llvm' where the graph compiles, else torch's operators "
      "(the reason goes to KILN_LOGS=breaks).");
  module.def(
      "export_graph",
      [](std::shared_ptr<Graph> graph, const std::string &name,
         const std::string &directory, const std::string &cpu,
         bool embedWeights, const std::string &compiler,
         const std::vector<std::tuple<std::string, bool, uintptr_t, int64_t>>
             &inputs,
         const std::vector<std::string> &outputNames) {
        backend::ExportOptions options;
        options.name = name;
        options.directory = directory;
        options.cpu = cpu;
        options.embedWeights = embedWeights;
        options.compiler = compiler;
        for (const auto &[inputName, isWeight, address, apiIndex] : inputs)
          options.inputs.push_back(
              {inputName, isWeight, apiIndex,
               reinterpret_cast<const uint8_t *>(address)});
        options.outputNames = outputNames;
        backend::ExportResult result;
        {
          py::gil_scoped_release release;
          result = backend::exportGraph(std::move(graph), options);
        }
        py::dict info;
        info["files"] = result.files;
        info["kernels"] = result.kernelCount;
        info["milliseconds"] = result.milliseconds;
        return info;
      },
      "graph"_a, "name"_a, "directory"_a, "cpu"_a, "embed_weights"_a,
      "compiler"_a, "inputs"_a, "output_names"_a,
      "Compiles `graph` ahead of time into `directory` (see kiln.export): "
      "`inputs` gives each graph input's (name, is_weight, data address of "
      "a weight, position among the C API's inputs).");
  module.def(
      "set_num_threads",
      [](int count) {
        if (count < 0)
          throw py::value_error("set_num_threads: the count must be at least "
                                "0 (0 returns to the default), got " +
                                std::to_string(count));
        backend::setNumThreads(count);
      },
      "count"_a,
      "Threads kiln's CPU kernels use; 0 returns to the default "
      "(KILN_NUM_THREADS, else torch's OpenMP thread count, else the "
      "machine's cores).");
  module.def("num_threads", &backend::numThreads);
  module.def("threads_use_openmp", &backend::threadsUseOpenMp,
             "Whether kernels run on the process's OpenMP thread team "
             "(torch's) rather than kiln's own workers.");
  module.def("allocates_through_torch_c_functions", &hasDirectAllocation,
             "Whether compiled programs make their output tensors through "
             "torch's exported C functions (the AOTInductor shim) rather "
             "than torch.empty_strided from Python.");
  module.def("cpu_streaming_bytes", &backend::streamingBytes,
             "Output size in bytes from which CPU kernels store past the "
             "caches: half the last-level cache unless "
             "KILN_CPU_STREAMING_BYTES says otherwise; 0 means never.");
  module.def(
      "kernel_cache_info",
      [] {
        backend::KernelCacheStats stats = backend::kernelCacheStats();
        py::dict info;
        info["compiled"] = stats.compiled;
        info["reused"] = stats.reused;
        info["live"] = stats.live;
        return info;
      },
      "The CPU kernel cache: kernels compiled, kernels that reused cached "
      "code, and cached kernels whose code is loaded.");
  module.def(
      "memory_pool_info",
      [] {
        runtime::HostMemoryPool::Stats stats =
            runtime::HostMemoryPool::get().stats();
        py::dict info;
        info["reused"] = stats.reused;
        info["mapped"] = stats.mapped;
        info["cached_bytes"] = stats.cachedBytes;
        info["limit_bytes"] = stats.limitBytes;
        return info;
      },
      "kiln's pool of large CPU blocks (outputs from 1 MiB): acquisitions "
      "it served from cached blocks and by mapping new memory, the bytes it "
      "holds for reuse, and its limit.");
  module.def(
      "set_memory_pool_limit",
      [](int64_t bytes) {
        if (bytes < 0)
          throw py::value_error("set_memory_pool_limit: the limit must be at "
                                "least 0 bytes (0 turns pooling off), got " +
                                std::to_string(bytes));
        runtime::HostMemoryPool::get().setLimit(bytes);
      },
      "bytes"_a,
      "The most bytes kiln's CPU block pool keeps for reuse; blocks over it "
      "go back to the system (0: none are kept).");
  module.def(
      "trim_memory_pool", [] { runtime::HostMemoryPool::get().trim(); },
      "Gives every block kiln's CPU pool holds for reuse back to the "
      "system.");
  module.def("clear_kernel_cache", &backend::clearKernelCache,
             "Forgets the cached CPU kernels, so that the next compile starts "
             "cold (code in use stays loaded).");
}

} // namespace kiln::python
