// A program's GPU kernels as the runtime runs them: one PTX module loaded
// through the CUDA driver, one launch (grid, block, shared memory, buffer
// parameters) per Kernel step, queued on the call's stream.
// Depends on backend/KernelCode.h, backend/cuda/CudaDriver.h,
// backend/nvptx/GpuCode.h.
#pragma once

#include "backend/KernelCode.h"
#include "backend/cuda/CudaDriver.h"
#include "backend/nvptx/GpuCode.h"

#include <vector>

namespace kiln::backend::cuda {

using backend::GpuCode;
using backend::KernelLaunch;

class CudaKernelCode : public KernelCode {
public:
  /// Loads `code` on device `ordinal` (its primary context, torch's).
  /// Throws kiln::Error with the driver's JIT log when the PTX does not
  /// load.
  CudaKernelCode(GpuCode code, int ordinal);
  ~CudaKernelCode() override;
  CudaKernelCode(const CudaKernelCode &) = delete;
  CudaKernelCode &operator=(const CudaKernelCode &) = delete;

  void runKernel(size_t stepIndex, char *const *buffers,
                 const LaunchContext &context) const override;
  const GpuCode &code() const { return code_; }

private:
  GpuCode code_;
  int ordinal_;
  Module module_ = nullptr;
  std::vector<Function> functions_; // by step
};

} // namespace kiln::backend::cuda
