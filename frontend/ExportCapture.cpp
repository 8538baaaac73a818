// kiln._C.capture_for_export: captures one call of a function as a single
// graph for ahead-of-time export, with no graph break and no side effect,
// and says where each graph input comes from and what each output is.
// Depends on frontend/SymbolicEvaluator.h, frontend/CompiledFunction.h.
#include "frontend/CodeCache.h"
#include "frontend/CompiledFunction.h"
#include "frontend/EvalFrameHook.h"
#include "frontend/SymbolicEvaluator.h"
#include "ir/Error.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

// A name per graph output from where it sits in the returned structure:
// "output" for a lone tensor, "output0", "output1" in a tuple, a dict's keys.
void nameOutputs(const OutputTemplate &output, const std::string &path,
                 std::vector<std::string> &names) {
  switch (output.kind) {
  case OutputTemplate::Kind::Tensor:
    if (names[output.index].empty())
      names[output.index] = path;
    return;
  case OutputTemplate::Kind::Constant:
    return;
  case OutputTemplate::Kind::Dict:
    for (size_t i = 0; i < output.items.size(); ++i)
      nameOutputs(output.items[i],
                  (path == "output" ? "" : path + "_") +
                      py::str(output.keys[i]).cast<std::string>(),
                  names);
    return;
  default:
    for (size_t i = 0; i < output.items.size(); ++i)
      nameOutputs(output.items[i], path + std::to_string(i), names);
  }
}

py::tuple captureForExport(py::object function, py::object self, py::tuple args,
                           py::dict kwargs) {
  if (!PyFunction_Check(function.ptr()))
    throw Error("export: " + py::repr(function).cast<std::string>() +
                " is not a Python function");
  std::vector<PyObject *> callArgs;
  for (py::handle arg : args)
    callArgs.push_back(arg.ptr());
  py::tuple names(kwargs.size());
  size_t k = 0;
  for (auto item : kwargs) {
    names[k++] = item.first;
    callArgs.push_back(item.second.ptr());
  }
  std::vector<PyObject *> locals;
  std::vector<py::object> owned;
  if (!bindCallArguments(function.ptr(), self.is_none() ? nullptr : self.ptr(),
                         callArgs.data(), args.size(),
                         kwargs.size() ? names.ptr() : nullptr, locals, owned))
    throw Error("export: the example inputs do not bind to the parameters "
                "of " +
                py::repr(function).cast<std::string>());
  FrameInputs inputs = frameInputsOf(function.ptr(), locals.data(),
                                     static_cast<int>(locals.size()));
  Capture capture;
  {
    HookSuspension suspension;
    capture = captureFunction(function, inputs, /*allowBreaks=*/false);
  }
  if (capture.replay)
    throw Unsupported(
        "export: the function writes to objects from outside it (attribute "
        "stores), which a program without Python cannot replay");
  std::vector<py::object> graphInputs;
  std::string failure;
  if (!capture.guards.evaluate(inputs, graphInputs, &failure))
    throw Error("export: the capture's guards fail on its own call (" +
                failure + ")");
  py::list inputObjects, sources;
  for (size_t i = 0; i < graphInputs.size(); ++i) {
    inputObjects.append(graphInputs[i]);
    sources.append(capture.guards.graphInputSource(i)->str());
  }
  std::vector<std::string> outputNames(capture.graph->outputs().size());
  nameOutputs(capture.output, "output", outputNames);
  for (size_t i = 0; i < outputNames.size(); ++i)
    if (outputNames[i].empty())
      outputNames[i] = "output" + std::to_string(i);
  py::list notes;
  for (const std::string &note : capture.notes)
    notes.append(note);
  return py::make_tuple(capture.graph, inputObjects, sources,
                        py::cast(outputNames), notes);
}

} // namespace

void defineExportCapture(py::module_ &module) {
  module.def("capture_for_export", &captureForExport, py::arg("function"),
             py::arg("self"), py::arg("args"), py::arg("kwargs"),
             "Captures one call of `function` (bound to `self` unless None) "
             "as a single graph: (graph, graph input objects, their sources, "
             "output names, notes). Raises kiln.Unsupported where the call "
             "cannot be one graph.");
}

} // namespace kiln::frontend
