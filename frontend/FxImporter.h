// The FX importer: turns a torch.fx.GraphModule of ATen operators (what
// aot_autograd's compilers and make_fx receive) into a kiln graph, walking
// the FX nodes from C++. Depends on ir/, bridge/PythonConversion.h and
// pybind11.
#pragma once

#include "bridge/PythonConversion.h"
#include "ir/Graph.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::python {

struct FxImport {
  std::shared_ptr<Graph> graph;
  /// How the GraphModule returns its outputs (a tuple, a list, one value).
  OutputForm outputForm = OutputForm::Tuple;
  /// Decisions a reader may want to see in the logs: registered ops kept as
  /// extern nodes because kiln's meta function disagreed with FX's metadata.
  std::vector<std::string> notes;
  /// The positions of the placeholders that are graph inputs (tensors);
  /// the others are sizes (SymInts) that the tensors' sizes give, which the
  /// caller leaves out of a call.
  std::vector<int64_t> tensorInputs;
};

/// Imports `graphModule`. Placeholders take their metadata from
/// `node.meta["val"]`, else from `exampleInputs` (a sequence, or None).
/// Symbolic sizes (torch.compile(dynamic=True)) become size symbols bound
/// to the input dims that give them; SymInt placeholders and nodes that
/// compute sizes become symbolic arguments of the ops that read them.
/// ATen operators go through appendAtenCall (frontend/AtenCall.h) with FX's
/// result metadata: Op nodes where the registry knows them and agrees with
/// FX, else Extern nodes with torch's schema; `operator.getitem` selects a
/// result; `get_attr` tensors become constants. Throws kiln::Unsupported,
/// naming the FX node, for what a kiln graph cannot hold: non-tensor
/// results (sizes included), targets that are not ATen operators, call_module
/// and call_method.
FxImport importFxGraph(py::handle graphModule, py::handle exampleInputs);

/// `kiln._C.import_fx` and the `FxImport` result type.
void defineFxImporterBindings(py::module_ &module);

} // namespace kiln::python
