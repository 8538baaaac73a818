// A compiled graph ready to run: its program, its machine code, the device
// its buffers live on, and what every call needs worked out once (which
// buffers a call allocates, when each view's base exists, which extern
// results kernels read). No Python. Depends on backend/Pipeline.h,
// runtime/Device.h.
#pragma once

#include "backend/Pipeline.h"
#include "runtime/Device.h"
#include "runtime/StepProfile.h"

#include <memory>
#include <vector>

namespace kiln::runtime {

class CompiledProgram {
public:
  /// Throws kiln::Error when the program is malformed (an input buffer that
  /// names no graph input, a temporary an extern or an output reads).
  CompiledProgram(std::unique_ptr<backend::CompiledGraph> compiled,
                  Device &device);

  const loop::Program &program() const { return compiled_->program; }
  const backend::KernelCode &code() const { return *compiled_->code; }
  const backend::Target &target() const { return compiled_->target; }
  Device &device() const { return device_; }
  double compileMilliseconds() const { return compiled_->compileMilliseconds; }

  size_t inputCount() const { return inputBuffers_.size(); }
  /// The buffer of graph input `index`; -1 when no step reads it.
  int64_t inputBuffer(size_t index) const { return inputBuffers_[index]; }
  /// Tensor buffers no step produces (outputs, extern operands): a call
  /// allocates them.
  const std::vector<int64_t> &allocatedBuffers() const {
    return allocatedBuffers_;
  }
  /// View buffers whose base exists after step `step` (-1: at the start).
  const std::vector<int64_t> &viewsReadyAfter(int64_t step) const {
    return viewsReadyAfter_[step + 1];
  }
  /// Results of extern step `step` that kernels read, so whose layout must
  /// be what the kernels were compiled for.
  const std::vector<int64_t> &resultsReadByKernels(size_t step) const {
    return resultsReadByKernels_[step];
  }
  /// Tensor and view buffers no step after `step` reads or writes, nor an
  /// output: a host that holds their memory (torch's tensors of extern
  /// results) lets it go then, so that later allocations of the call can
  /// reuse it, as eager frees a value at its last use.
  const std::vector<int64_t> &releasedAfter(size_t step) const {
    return releasedAfter_[step];
  }
  /// Whether a view buffer is read by an extern or is an output (the
  /// Python bridge makes a tensor of it then).
  bool viewLeavesKernels(int64_t buffer) const {
    return viewLeavesKernels_[buffer];
  }
  /// The index checks (loop::Program::indexChecks) to run before step
  /// `step`: the first that reads their input, so that the steps before it
  /// have run when one raises, as eager's ops before it have.
  const std::vector<loop::IndexCheck> &checksBefore(size_t step) const {
    return checksBefore_[step];
  }
  /// "native: 2 kernel(s), 1 extern(s) [aten::mm]".
  std::string describe() const;
  /// Where its steps' times go: set for CPU programs compiled while
  /// KILN_LOGS names `profile` (StepProfile.h), else null.
  StepProfile *profile() const { return profile_.get(); }

private:
  void planReleases();
  void planIndexChecks();

  std::unique_ptr<backend::CompiledGraph> compiled_;
  Device &device_;
  std::vector<int64_t> inputBuffers_;
  std::vector<int64_t> allocatedBuffers_;
  std::vector<std::vector<int64_t>> viewsReadyAfter_;
  std::vector<std::vector<int64_t>> resultsReadByKernels_;
  std::vector<std::vector<int64_t>> releasedAfter_;
  std::vector<std::vector<loop::IndexCheck>> checksBefore_;
  std::vector<bool> viewLeavesKernels_;
  std::shared_ptr<StepProfile> profile_;
};

} // namespace kiln::runtime
