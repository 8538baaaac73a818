// The eager graph runner: executes a kiln graph node by node by calling
// torch's own operators (torch.ops.<namespace>.<op>.<overload>) through the
// CPython API. The reference backend, and the executor of extern nodes.
// Depends on ir/, bridge/TorchCall.h and pybind11.
#pragma once

#include "bridge/GraphRunner.h"
#include "bridge/PythonConversion.h"
#include "bridge/TorchCall.h"
#include "ir/Graph.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::python {

/// Everything that can be resolved ahead of time is resolved once, at
/// construction: each node's torch callable, its non-tensor arguments as
/// Python objects, constants as torch tensors, and each value's slot in a
/// vector indexed by value number. A call only fills slots and calls torch.
class EagerRunner : public GraphRunner {
public:
  explicit EagerRunner(std::shared_ptr<const Graph> graph,
                       OutputForm outputForm = OutputForm::Tuple);

  /// Runs the graph on `count` input tensors (one per graph input) and
  /// returns its outputs in the runner's output form. A torch error is
  /// raised again as the same exception type, its message naming the node
  /// and the node's origin. Needs the GIL.
  py::object run(PyObject *const *inputs, size_t count) const override;
  std::string describe() const override;

  const Graph &graph() const { return *graph_; }
  OutputForm outputForm() const { return outputForm_; }
  /// How many values a call keeps in flight at most (for tests of the
  /// release-after-last-use bookkeeping).
  size_t slotCount() const { return slotCount_; }

private:
  struct Step {
    TorchCall call;
    /// Result slots in return order.
    std::vector<int32_t> resultSlots;
    /// Slots whose last reader is this step: released after it.
    std::vector<int32_t> releaseAfter;
  };

  std::shared_ptr<const Graph> graph_;
  OutputForm outputForm_;
  std::vector<int32_t> inputSlots_;
  std::vector<Step> steps_;
  std::vector<CallOperand> outputs_;
  size_t slotCount_ = 0;
};

/// Packs a graph's outputs (read from `slots`) in `form`.
py::object packOutputs(OutputForm form, const std::vector<CallOperand> &outputs,
                       const std::vector<py::object> &slots);

} // namespace kiln::python
