// GPU code for a CUDA device: generated for its compute capability, loaded
// through the driver. Depends on backend/cuda/, backend/nvptx/GpuCodegen.h.
#include "backend/cuda/CudaCompile.h"

#include "backend/cuda/CudaDriver.h"
#include "backend/cuda/CudaKernelCode.h"
#include "backend/nvptx/GpuCodegen.h"

namespace kiln::backend {

std::unique_ptr<KernelCode> compileForCuda(const loop::Program &program,
                                           int ordinal) {
  std::string smArch = cuda::computeCapability(ordinal);
  // `program` outlives the code: the compiled graph holds both.
  return std::make_unique<cuda::CudaKernelCode>(
      generateGpuCode(program, smArch), ordinal,
      [&program](const GpuCode &vectorCode) {
        return generateScalarGpuCode(program, vectorCode);
      });
}

} // namespace kiln::backend
