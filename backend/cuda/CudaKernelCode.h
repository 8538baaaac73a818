// A program's GPU kernels as the runtime runs them: one PTX module loaded
// through the CUDA driver, one launch (grid, block, shared memory, buffer
// parameters) per Kernel step, queued on the call's stream.
// Depends on backend/KernelCode.h, backend/cuda/CudaDriver.h.
#pragma once

#include "backend/KernelCode.h"
#include "backend/cuda/CudaDriver.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::backend::cuda {

/// How one kernel is launched. Its parameters are the addresses of
/// `buffers` (program buffer numbers), in order.
struct KernelLaunch {
  std::string entry;
  std::array<unsigned, 3> grid = {1, 1, 1};
  std::array<unsigned, 3> block = {1, 1, 1};
  unsigned sharedBytes = 0;
  std::vector<int64_t> buffers;
};

/// A program compiled for a GPU, before any driver call.
struct GpuCode {
  std::string ptx;
  std::string computeCapability; // "sm_90"
  /// By step: the launch of each Kernel step, nullopt for the others.
  std::vector<std::optional<KernelLaunch>> launches;
};

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
