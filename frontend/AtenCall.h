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

/// The metadata torch computed for one call's results (from fake or meta
/// tensors), flattened in return order. A result the op leaves out (None,
/// as convolution_backward does for gradients its output mask does not ask
/// for) has no metadata, and the node gets no value for it.
struct TorchResults {
  std::vector<TensorMeta> metas; // the tensors, in order
  std::vector<bool> present;     // per flat result: not None

  TorchResults() = default;
  /// Every result present. Implicit, so that callers whose results are all
  /// tensors pass their metadata as it is.
  TorchResults(std::vector<TensorMeta> tensors)
      : metas(std::move(tensors)), present(metas.size(), true) {}

  /// Appends one flat result: its metadata, or nullopt for None.
  void add(std::optional<TensorMeta> meta);
  bool allPresent() const;
  /// "f32[3, 4], None, i64[3]".
  std::string str() const;
};

/// `torchResults`: what torch computed for the results, when known; named
/// `metadataSource` in messages ("torch", "FX"). Disagreements with kiln's
/// meta function are recorded in `notes`. A Python number where the schema
/// says Tensor (a "wrapped number": `aten.mul.Tensor(x, 2)`) makes the call
/// an extern, as kiln's schemas cannot say that. Throws kiln::Unsupported for
/// ops a kiln graph cannot hold (non-tensor results, unparseable schemas).
Node *
appendAtenCall(Graph &graph, py::handle opOverload,
               const std::vector<Argument> &positional,
               const std::vector<std::pair<std::string, Argument>> &keywords,
               const std::optional<TorchResults> &torchResults,
               const std::string &where, std::vector<std::string> &notes,
               const std::string &metadataSource = "torch");

/// The node's values, one per flat result of `torchResults` (null for those
/// left out), or all its results when torch gave no metadata.
std::vector<Value *>
flatResults(const Node &node, const std::optional<TorchResults> &torchResults);

} // namespace kiln::python
