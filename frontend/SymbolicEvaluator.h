// The symbolic evaluator: runs a Python function's bytecode over variable
// trackers instead of values. Tensor work becomes graph nodes, plain Python
// on constants is evaluated, user functions and nn.Module.forward are
// inlined, and every assumption becomes a guard. Anything it cannot capture
// raises kiln::Unsupported naming the construct and source line.
// Depends on frontend/, ir/, bridge/PythonConversion.h, pybind11.
#pragma once

#include "frontend/GuardTree.h"
#include "frontend/Variable.h"
#include "ir/Graph.h"

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::frontend {

/// How to build a captured function's return value from its graph's
/// outputs: the Python structure with tensors replaced by output indices.
struct OutputTemplate {
  enum class Kind : uint8_t { Tensor, Constant, Tuple, List, Dict, Struct };
  Kind kind = Kind::Constant;
  int index = 0;       // Tensor: graph output index
  py::object constant; // Constant: the object; Struct: the type to call
  std::vector<OutputTemplate> items;
  std::vector<py::object> keys; // Dict

  /// `outputs` holds the graph's results, one per graph output.
  py::object build(PyObject *const *outputs) const;
};

struct Capture {
  std::shared_ptr<Graph> graph;
  GuardTree guards;
  OutputTemplate output;
  /// Human-readable notes (ops kept as externs and why), for the logs.
  std::vector<std::string> notes;
};

/// Captures one call of `function` with the given frame inputs (arguments
/// already bound to the code's locals). Throws kiln::Unsupported.
Capture captureFunction(py::handle function, const FrameInputs &inputs);

} // namespace kiln::frontend
