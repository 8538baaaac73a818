// The eager graph runner: executes a kiln graph node by node by calling
// torch's own operators (torch.ops.<namespace>.<op>.<overload>) through the
// CPython API. The reference backend, and the executor of extern nodes.
// Depends on ir/, runtime/PythonConversion.h and pybind11.
#pragma once

#include "ir/Graph.h"
#include "runtime/PythonConversion.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::python {

/// Everything that can be resolved ahead of time is resolved once, at
/// construction: each node's torch callable, its non-tensor arguments as
/// Python objects, constants as torch tensors, and each value's slot in a
/// vector indexed by value number. A call only fills slots and calls torch.
class EagerRunner {
public:
  explicit EagerRunner(std::shared_ptr<const Graph> graph,
                       OutputForm outputForm = OutputForm::Tuple);

  /// Runs the graph on `count` input tensors (one per graph input) and
  /// returns its outputs in the runner's output form. A torch error is
  /// raised again as the same exception type, its message naming the node
  /// and the node's origin. Needs the GIL.
  py::object run(PyObject *const *inputs, size_t count) const;

  const Graph &graph() const { return *graph_; }
  OutputForm outputForm() const { return outputForm_; }
  /// How many values a call keeps in flight at most (for tests of the
  /// release-after-last-use bookkeeping).
  size_t slotCount() const { return slotCount_; }

private:
  /// Where an argument comes from at run time: a slot (a graph input or a
  /// node's result), a fixed object, or a list built from such items.
  struct Operand {
    int32_t slot = -1;
    py::object fixed;
    std::vector<Operand> items;
    bool isList = false;
  };

  struct Step {
    py::object callable;
    /// Positional arguments, then the values of `keywordNames`.
    std::vector<Operand> arguments;
    py::tuple keywordNames; // empty when every argument is positional
    size_t positionalCount = 0;
    /// Result slots in return order; the call's result is unpacked (tuples
    /// and lists, nested for `Tensor[]` returns) unless `singleResult`.
    std::vector<int32_t> resultSlots;
    bool singleResult = true;
    /// Slots whose last reader is this step: released after it.
    std::vector<int32_t> releaseAfter;
    std::string description; // "aten::mm (from FX node 'mm')"
  };

  Operand operandFor(const Argument &argument);
  py::object constantTensor(const ConstantData &data) const;
  [[noreturn]] void raiseWithOrigin(const Step &step) const;
  void storeResults(const Step &step, PyObject *result,
                    std::vector<py::object> &slots) const;

  std::shared_ptr<const Graph> graph_;
  OutputForm outputForm_;
  std::vector<int32_t> inputSlots_;
  std::vector<Step> steps_;
  std::vector<Operand> outputs_;
  /// Slot of every value produced by an input or an op; constants are fixed
  /// operands and take no slot.
  std::unordered_map<const Value *, int32_t> slotOf_;
  std::unordered_map<const Value *, py::object> constants_;
  size_t slotCount_ = 0;
  size_t maxArguments_ = 0;
};

/// `torch.ops.<namespace>.<op>.<overload>` for "aten::mm" or
/// "aten::add.Tensor"; throws Error where torch has no such operator.
py::object resolveTorchOperator(const std::string &qualifiedName);

} // namespace kiln::python
