// The native graph runner: runs a compiled program through the runtime's
// executor, with torch tensors as its buffers. It reads tensors through
// torch's Python API (no libtorch linked), allocates outputs as torch
// tensors, runs extern steps through torch, and returns the outputs with
// eager's dtypes, shapes, strides and aliasing.
// Depends on runtime/, bridge/TorchCall.h and pybind11.
#pragma once

#include "bridge/GraphRunner.h"
#include "bridge/TorchCall.h"
#include "runtime/CompiledProgram.h"
#include "runtime/ProgramExecutor.h"

#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace kiln::python {

class NativeRunner : public GraphRunner {
public:
  /// Compiles `graph` (cleaned up in place) for the CPU; throws
  /// kiln::Unsupported when it cannot run natively. With `checkInputs`,
  /// every call checks its inputs' dtypes, sizes and strides against the
  /// graph's (kiln's frontend guards them already). A graph with size
  /// symbols compiles once for every size: each call reads the symbols'
  /// values from its inputs and lays its buffers out for them.
  NativeRunner(std::shared_ptr<Graph> graph, OutputForm outputForm,
               bool checkInputs);

  py::object run(PyObject *const *inputs, size_t count) const override;
  py::object runWithSymbols(PyObject *const *inputs, size_t count,
                            const std::vector<int64_t> &symbols) const override;
  std::string describe() const override;

  const loop::Program &program() const { return compiled_->program(); }
  double compileMilliseconds() const {
    return compiled_->compileMilliseconds();
  }

private:
  class TorchHost;
  struct Allocation {
    py::tuple sizes, strides;
    int64_t bytes = 0;   // the elements' span
    bool pooled = false; // from kiln's host memory pool (large CPU buffers)
  };

  /// A program whose sizes vary: one call's layout and allocations.
  struct CallState {
    runtime::CallLayout layout;
    std::vector<Allocation> allocations; // per buffer a call allocates
  };

  void checkInput(size_t index, PyObject *tensor,
                  const TensorMeta &expected) const;
  std::vector<Allocation>
  allocationsFor(const std::vector<TensorMeta> &metas) const;
  /// The symbols' values read from `inputs`' sizes.
  std::vector<int64_t> symbolValues(PyObject *const *inputs) const;
  /// The call state for the symbols' `values` (made once per values, the
  /// most recent kept).
  std::shared_ptr<const CallState> stateFor(std::vector<int64_t> values) const;
  py::object runCall(PyObject *const *inputs, size_t count,
                     const std::vector<int64_t> *symbols) const;

  std::unique_ptr<runtime::CompiledProgram> compiled_;
  OutputForm outputForm_;
  bool checkInputs_;
  std::vector<py::object> constants_; // per buffer (constants only)
  py::object emptyStrided_;
  std::vector<Allocation> allocations_;           // per buffer a call allocates
  std::vector<std::optional<TorchCall>> externs_; // per step
  std::vector<std::vector<int32_t>> resultSlots_; // per extern step
  std::vector<CallOperand> outputs_;
  std::vector<py::object> dtypes_; // per buffer: torch dtype
  /// Where each size symbol is read from (graph input, dim); empty for a
  /// static program. Recent call states, most recent first.
  std::vector<SymbolBinding> symbols_;
  mutable std::mutex statesMutex_;
  mutable std::list<std::shared_ptr<const CallState>> states_;
  /// GPU programs: the GPU's ordinal and torch device. Kernels queue on
  /// torch's current stream there, in order with torch's own work.
  bool onGpu_ = false;
  int gpu_ = 0;
  Device device_;
  py::object torchDevice_;
};

} // namespace kiln::python
