// The native graph runner: runs a graph compiled by kiln's CPU backend. It
// reads tensors through torch's Python API (no libtorch linked), allocates
// outputs as torch tensors, runs kernels and extern calls, and returns the
// outputs with eager's dtypes, shapes, strides and aliasing.
// Depends on backend/CompileGraph.h, runtime/TorchCall.h and pybind11.
#pragma once

#include "backend/CompileGraph.h"
#include "runtime/GraphRunner.h"
#include "runtime/TorchCall.h"

#include <memory>
#include <optional>
#include <vector>

namespace kiln::python {

class NativeRunner : public GraphRunner {
public:
  /// Compiles `graph`; throws kiln::Unsupported when it cannot run natively.
  /// With `checkInputs`, every call checks its inputs' dtypes, sizes and
  /// strides against the graph's (kiln's frontend guards them already).
  NativeRunner(std::shared_ptr<const Graph> graph, OutputForm outputForm,
               bool checkInputs);

  py::object run(PyObject *const *inputs, size_t count) const override;
  std::string describe() const override;

  const loop::Program &program() const { return compiled_->program; }
  double compileMilliseconds() const { return compiled_->compileMilliseconds; }

private:
  struct Allocation {
    int64_t buffer;
    py::tuple sizes, strides;
  };
  struct ExternStep {
    std::optional<TorchCall> call;
    std::vector<int32_t> resultSlots;
    /// Results kernels read: checked against their expected layout.
    std::vector<int64_t> checkedResults;
  };

  void checkInput(size_t index, PyObject *tensor) const;
  void readyViews(int64_t afterStep, std::vector<py::object> &slots,
                  std::vector<char *> &pointers) const;
  void conformLayout(int64_t buffer, std::vector<py::object> &slots,
                     std::vector<char *> &pointers) const;

  std::unique_ptr<backend::CompiledGraph> compiled_;
  OutputForm outputForm_;
  bool checkInputs_;
  size_t graphInputCount_ = 0;
  std::vector<int64_t> inputBuffers_; // per graph input; -1 when unread
  std::vector<py::object> constants_; // per buffer (constants only)
  std::vector<char *> constantPointers_;
  py::object emptyStrided_;
  std::vector<Allocation> allocations_;
  std::vector<ExternStep> externs_; // per step
  /// View buffers by the step after which their base exists (-1: at the
  /// start), and whether torch must see them (extern operands, outputs).
  std::vector<std::vector<int64_t>> viewsReadyAfter_;
  std::vector<bool> viewNeedsTensor_;
  std::vector<CallOperand> outputs_;
  std::vector<py::object> dtypes_; // per buffer: torch dtype
};

} // namespace kiln::python
