// Appends one call of an ATen operator overload to a kiln graph: an Op node
// where the registry knows the op and its meta function agrees with torch,
// else an Extern node with torch's schema and metadata. Shared by the FX
// importer and the symbolic evaluator. Depends on ir/, pybind11.
#pragma once

#include "ir/Graph.h"

#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

namespace kiln::python {

namespace py = pybind11;

/// `torchMetas`: the metadata torch computed for the results (from fake or
/// meta tensors), when known. Disagreements with kiln's meta function are
/// recorded in `notes`. Throws kiln::Unsupported for ops a kiln graph cannot
/// hold (non-tensor results, unparseable schemas).
Node *appendAtenCall(Graph &graph, py::handle opOverload,
                     const std::vector<Argument> &positional,
                     const std::vector<std::pair<std::string, Argument>> &keywords,
                     const std::optional<std::vector<TensorMeta>> &torchMetas,
                     const std::string &where, std::vector<std::string> &notes);

} // namespace kiln::python
