// A program's GPU kernels as the runtime runs them: one PTX module loaded
// through the CUDA driver, one launch (grid, block, shared memory, buffer
// parameters) per Kernel step, queued on the call's stream. A kernel whose
// vector body needs aligned buffers runs its scalar body, from a second
// module compiled at the first launch that needs it, where they are not.
// Depends on backend/KernelCode.h, backend/cuda/CudaDriver.h,
// backend/nvptx/GpuCode.h.
#pragma once

#include "backend/KernelCode.h"
#include "backend/cuda/CudaDriver.h"
#include "backend/nvptx/GpuCode.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace kiln::backend::cuda {

using backend::GpuCode;
using backend::KernelLaunch;

class CudaKernelCode : public KernelCode {
public:
  /// Makes the scalar code of a program's vector code (on the calling
  /// thread, at the first misaligned launch).
  using ScalarCodeMaker = std::function<GpuCode(const GpuCode &vectorCode)>;

  /// Loads `code` on device `ordinal` (its primary context, torch's).
  /// Throws kiln::Error with the driver's JIT log when the PTX does not
  /// load.
  CudaKernelCode(GpuCode code, int ordinal, ScalarCodeMaker scalarCode);
  ~CudaKernelCode() override;
  CudaKernelCode(const CudaKernelCode &) = delete;
  CudaKernelCode &operator=(const CudaKernelCode &) = delete;

  void runKernel(size_t stepIndex, char *const *buffers,
                 const LaunchContext &context) const override;
  const GpuCode &code() const { return vector_.code; }

private:
  /// A GpuCode loaded as one module, with its kernel functions by step.
  struct Loaded {
    GpuCode code;
    Module module = nullptr;
    std::vector<Function> functions;
  };
  Loaded load(GpuCode code) const;
  void unload(Loaded &loaded) const;
  /// The scalar code, made and loaded at its first use.
  const Loaded &scalar() const;

  int ordinal_;
  Loaded vector_;
  ScalarCodeMaker makeScalarCode_;
  mutable std::mutex scalarMutex_;
  mutable std::unique_ptr<Loaded> scalarStorage_;
  mutable std::atomic<const Loaded *> scalar_{nullptr};
};

} // namespace kiln::backend::cuda
