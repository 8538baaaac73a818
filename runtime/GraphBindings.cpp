// Python bindings of the graph IR: build graphs from Python (tests, the FX
// importer's callers) and print or verify them. Depends on ir/, pybind11.
#include "ir/Graph.h"
#include "runtime/PythonConversion.h"

#include <pybind11/stl.h>

namespace kiln::python {

void defineGraphBindings(py::module_ &module) {
  (void)module;
}

} // namespace kiln::python
