// The extension module kiln._C: the Python face of the core (op registry,
// graphs, meta inference) and of the runtime. Depends on ir/, bridge/,
// frontend/ and pybind11.
#include "bridge/PythonConversion.h"
#include "bridge/TorchCall.h"
#include "frontend/CompiledFunction.h"
#include "frontend/EvalFrameHook.h"
#include "frontend/FxImporter.h"
#include "ir/Error.h"
#include "ir/Graph.h"
#include "ir/Logging.h"
#include "ir/OpRegistry.h"

#include <pybind11/stl.h>

namespace py = pybind11;
using namespace kiln;
using namespace kiln::python;

namespace kiln::python {
void defineGraphBindings(py::module_ &module);
}

namespace {

py::tuple metaToPython(const TensorMeta &meta) {
  return py::make_tuple(dtypeToTorch(meta.dtype), py::cast(meta.sizes),
                        py::cast(meta.strides), meta.storageOffset,
                        meta.device.str());
}

// Runs kiln's meta function for `name` on Python arguments (tensors of any
// device, real or meta) and returns (dtype, sizes, strides, offset, device)
// per result. Meta tensors stand for tensors on `metaDevice` where one is
// given: some results depend on the device (CPU's norms keep
// float16/bfloat16 statistics), and a trace on meta tensors would
// otherwise get CUDA's. Used by the trace and to test meta functions.
py::list inferMeta(const std::optional<Device> &metaDevice,
                   const std::string &name, py::args args, py::kwargs kwargs) {
  const OpInfo *op = OpRegistry::global().find(name);
  if (!op)
    throw py::key_error("kiln has no op '" + name + "'");
  Graph graph;
  auto tensorValue = [&](py::handle tensor) {
    TensorMeta meta = tensorMetaOf(tensor);
    if (metaDevice && meta.device.type == DeviceType::Meta)
      meta.device = *metaDevice;
    return graph.addInput(meta);
  };
  std::vector<Argument> positional;
  for (py::handle arg : args)
    positional.push_back(argumentFromPython(arg, tensorValue));
  std::vector<std::pair<std::string, Argument>> keywords;
  for (auto item : kwargs)
    keywords.emplace_back(item.first.cast<std::string>(),
                          argumentFromPython(item.second, tensorValue));
  std::vector<Argument> normalized =
      op->schema->normalize(positional, keywords);
  py::list results;
  for (const TensorMeta &meta : inferMeta(*op, normalized))
    results.append(metaToPython(meta));
  return results;
}

} // namespace

PYBIND11_MODULE(_C, module) {
  module.doc() = "kiln's native core";

  static py::exception<Unsupported> unsupported(module, "Unsupported",
                                                PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer)
        std::rethrow_exception(pointer);
    } catch (const Unsupported &error) {
      py::set_error(unsupported, error.what());
    } catch (const IndexOutOfRange &error) {
      python::setIndexError(error);
    } catch (const Error &error) {
      py::set_error(PyExc_RuntimeError, error.what());
    }
  });

  module.def(
      "op_names",
      [] {
        std::vector<std::string> names;
        for (const OpInfo *op : OpRegistry::global().all())
          names.push_back(op->schema->qualifiedName());
        std::sort(names.begin(), names.end());
        return names;
      },
      "The qualified names of every op in kiln's registry.");
  module.def(
      "op_schema",
      [](const std::string &name) -> py::object {
        const OpInfo *op = OpRegistry::global().find(name);
        if (!op)
          throw py::key_error("kiln has no op named '" + name +
                              "' (op_names() lists them, has_op() asks)");
        return py::str(op->schema->str());
      },
      "The schema text of a registered op.");
  module.def(
      "has_op",
      [](const std::string &name) {
        return OpRegistry::global().find(name) != nullptr;
      },
      "Whether kiln's registry has an op of this qualified name.");
  module.def(
      "parse_schema",
      [](const std::string &text) { return parseSchema(text).str(); },
      "Parses a schema and prints it back (for tests).");
  module.def(
      "infer_meta",
      [](const std::string &name, py::args args, py::kwargs kwargs) {
        return inferMeta(std::nullopt, name, args, kwargs);
      },
      "Runs kiln's meta function of an op on Python arguments.");
  module.def(
      "infer_meta_on",
      [](py::handle device, const std::string &name, py::args args,
         py::kwargs kwargs) {
        return inferMeta(deviceFromTorch(device), name, args, kwargs);
      },
      "infer_meta with meta tensors standing for tensors on `device`.");
  defineGraphBindings(module);
  defineFxImporterBindings(module);
  frontend::defineCompiledFunction(module);
  frontend::defineExportCapture(module);
  module.def(
      "code_cache_info",
      [](py::handle code) {
        PyObject *info = frontend::codeCacheInfo(code.ptr());
        if (!info)
          throw py::error_already_set();
        return py::reinterpret_steal<py::object>(info);
      },
      "The frame hook's cache on a code object (entries, hits, graphs), or "
      "None.");
  module.def(
      "hook_skips_file",
      [](const std::string &filename) {
        return frontend::isSkippedFile(filename.c_str());
      },
      "Whether the frame hook leaves functions defined in `filename` to "
      "CPython (the standard library, torch, kiln).");
  module.def("reload_logging", &reloadLogSettings,
             "Re-reads KILN_LOGS and KILN_DUMP_DIR from the environment.");
  module.def("start_log_capture", &startLogCapture, py::arg("artifacts"),
             "Records the named log artifacts (graph, guards, breaks, ...) "
             "until stop_log_capture, whatever KILN_LOGS says.");
  module.def("stop_log_capture", &stopLogCapture,
             "The (name, text) of each artifact logged since "
             "start_log_capture, in order.");
}
