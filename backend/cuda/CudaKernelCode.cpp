// Loads a program's PTX through the CUDA driver and launches its kernels.
// Depends on backend/cuda/CudaKernelCode.h, ir/Error.h, LLVM (ADT).
#include "backend/cuda/CudaKernelCode.h"

#include "ir/Error.h"

#include <llvm/ADT/SmallVector.h>

namespace kiln::backend::cuda {

namespace {
// CUjit_option values (cuda.h).
constexpr int kJitErrorLogBuffer = 5;
constexpr int kJitErrorLogBufferSizeBytes = 6;
// CUfunction_attribute: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
constexpr int kMaxDynamicSharedBytes = 8;
constexpr unsigned kStaticSharedLimit = 48 * 1024;
} // namespace

CudaKernelCode::CudaKernelCode(GpuCode code, int ordinal)
    : code_(std::move(code)), ordinal_(ordinal) {
  const Driver &d = driver();
  useDevice(ordinal_);
  char log[8192] = {0};
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
  int result =
      d.moduleLoadDataEx(&module_, code_.ptx.c_str(), 2, options, values);
  if (result != 0) {
    try {
      check(result, "loading the program's PTX");
    } catch (const Error &error) {
      throw Error(std::string(error.what()) + (log[0] ? ":\n" : "") + log);
    }
  }
  functions_.assign(code_.launches.size(), nullptr);
  for (size_t step = 0; step < code_.launches.size(); ++step) {
    const std::optional<KernelLaunch> &launch = code_.launches[step];
    if (!launch)
      continue;
    check(
        d.moduleGetFunction(&functions_[step], module_, launch->entry.c_str()),
        "finding a kernel in the loaded PTX");
    if (launch->sharedBytes > kStaticSharedLimit)
      check(d.funcSetAttribute(functions_[step], kMaxDynamicSharedBytes,
                               static_cast<int>(launch->sharedBytes)),
            "allowing a kernel more shared memory");
  }
}

CudaKernelCode::~CudaKernelCode() {
  if (module_) {
    try {
      useDevice(ordinal_);
      driver().moduleUnload(module_);
    } catch (const Error &) {
      // The driver is going away with the process: nothing to free.
    }
  }
}

void CudaKernelCode::runKernel(size_t stepIndex, char *const *buffers,
                               const LaunchContext &context) const {
  const std::optional<KernelLaunch> &launch = code_.launches.at(stepIndex);
  if (!launch)
    throw Error("kiln: step " + std::to_string(stepIndex) +
                " has no GPU kernel");
  if (launch->grid[0] == 0 || launch->grid[1] == 0 || launch->grid[2] == 0)
    return; // an empty domain
  useDevice(ordinal_);
  // On the stack for the usual few parameters: this runs on every call.
  llvm::SmallVector<DevicePointer, 16> addresses(launch->buffers.size());
  llvm::SmallVector<void *, 16> parameters(launch->buffers.size());
  for (size_t i = 0; i < launch->buffers.size(); ++i) {
    addresses[i] = reinterpret_cast<DevicePointer>(buffers[launch->buffers[i]]);
    parameters[i] = &addresses[i];
  }
  int result = driver().launchKernel(
      functions_[stepIndex], launch->grid[0], launch->grid[1], launch->grid[2],
      launch->block[0], launch->block[1], launch->block[2], launch->sharedBytes,
      static_cast<Stream>(context.stream), parameters.data(), nullptr);
  if (result != 0) // the message only where it is needed: this is per call
    check(result, ("launching GPU kernel " + launch->entry).c_str());
}

} // namespace kiln::backend::cuda
