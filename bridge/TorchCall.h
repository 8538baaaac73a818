// One call of torch's own operator for a graph node, resolved ahead of time:
// the callable, fixed arguments as Python objects, tensors read from slots.
// Shared by the eager runner and the native runner's extern steps.
// Depends on ir/, bridge/PythonConversion.h and pybind11.
#pragma once

#include "bridge/PythonConversion.h"
#include "ir/Error.h"
#include "ir/Graph.h"

#include <functional>
#include <string>
#include <vector>

namespace kiln::python {

/// Where an argument comes from at run time: a slot (a value computed by
/// the call), a fixed object, or a list built from such items.
struct CallOperand {
  int32_t slot = -1;
  py::object fixed;
  std::vector<CallOperand> items;
  bool isList = false;
  /// An int (or, with symbolicList, an int list) computed from the call's
  /// size-symbol values: a size that varies between calls.
  std::vector<SymSize> symbolic;
  bool symbolicList = false;
};

class TorchCall {
public:
  /// `tensorOperand` says where each tensor value of the node's arguments
  /// comes from (null values, for `Tensor?` arguments, are None).
  TorchCall(const Node &node,
            const std::function<CallOperand(Value *)> &tensorOperand);

  /// Calls torch with its arguments read from `slots`, then stores the
  /// node's results in `resultSlots` (in result order). A torch error is
  /// raised again as the same exception type naming the node and its
  /// origin. Needs the GIL.
  /// `symbols`: the call's size-symbol values, for arguments that are
  /// sizes varying between calls.
  void run(std::vector<py::object> &slots,
           const std::vector<int32_t> &resultSlots,
           const std::vector<int64_t> *symbols = nullptr) const;

  /// The operands, positional first (for liveness bookkeeping).
  const std::vector<CallOperand> &arguments() const { return arguments_; }
  const std::string &description() const { return description_; }

private:
  [[noreturn]] void raiseWithOrigin() const;

  py::object callable_; // the OpOverload's boxed entry
  /// torch's generated Python binding where it can only mean this overload
  /// (kiln._ops.generated_binding): a faster call, tried first.
  py::object binding_;
  std::vector<CallOperand> arguments_;
  py::tuple keywordNames_; // empty when every argument is positional
  size_t positionalCount_ = 0;
  /// The call's result is unpacked (tuples and lists, nested for `Tensor[]`
  /// returns) unless the op returns one tensor.
  bool singleResult_ = true;
  std::string description_; // "aten::mm (from FX node 'mm')"
  std::string origin_;      // the node's: "model.py:12 in forward"
};

/// The Python object an operand stands for; lists are built and kept in
/// `lists` until the caller clears it.
PyObject *resolveOperand(const CallOperand &operand,
                         const std::vector<py::object> &slots,
                         std::vector<py::object> &lists,
                         const std::vector<int64_t> *symbols = nullptr);

/// The operand for a non-tensor argument, or one whose tensors `tensorOperand`
/// maps.
CallOperand
operandForArgument(const Argument &argument,
                   const std::function<CallOperand(Value *)> &tensorOperand);

/// `torch.ops.<namespace>.<op>.<overload>` for "aten::mm" or
/// "aten::add.Tensor"; throws Error where torch has no such operator.
py::object resolveTorchOperator(const std::string &qualifiedName);

/// A graph constant as a torch tensor (on its device).
py::object constantTensor(const ConstantData &data);

/// The address of torch's current CUDA stream on GPU `device` (0 for the
/// legacy default stream): what kiln's launches and recordings order with.
void *currentCudaStream(int device);

/// Appends a traceback entry for `origin` ("path:line in function", kiln's
/// frontend) to the current Python exception, so that an error points at
/// the user's line as eager's does; other origins (FX node names) add none.
void addOriginToTraceback(const std::string &origin);

/// Sets the Python exception torch raises for `error` (IndexError, or
/// RuntimeError for gather's), pointing at the user's line.
void setIndexError(const IndexOutOfRange &error);

} // namespace kiln::python
