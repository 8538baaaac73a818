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

CudaKernelCode::CudaKernelCode(GpuCode code, int ordinal,
                               ScalarCodeMaker scalarCode)
    : ordinal_(ordinal), vector_(load(std::move(code))),
      makeScalarCode_(std::move(scalarCode)) {}

CudaKernelCode::Loaded CudaKernelCode::load(GpuCode code) const {
  const Driver &d = driver();
  useDevice(ordinal_);
  Loaded loaded;
  loaded.code = std::move(code);
  char log[8192] = {0};
  int options[] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
  int result = d.moduleLoadDataEx(&loaded.module, loaded.code.ptx.c_str(), 2,
                                  options, values);
  if (result != 0) {
    try {
      check(result, "loading the program's PTX");
    } catch (const Error &error) {
      throw Error(std::string(error.what()) + (log[0] ? ":\n" : "") + log);
    }
  }
  try {
    const std::vector<std::optional<KernelLaunch>> &launches =
        loaded.code.launches;
    loaded.functions.assign(launches.size(), nullptr);
    for (size_t step = 0; step < launches.size(); ++step) {
      if (!launches[step])
        continue;
      check(d.moduleGetFunction(&loaded.functions[step], loaded.module,
                                launches[step]->entry.c_str()),
            "finding a kernel in the loaded PTX");
      if (launches[step]->sharedBytes > kStaticSharedLimit)
        check(d.funcSetAttribute(loaded.functions[step], kMaxDynamicSharedBytes,
                                 static_cast<int>(launches[step]->sharedBytes)),
              "allowing a kernel more shared memory");
    }
  } catch (const Error &) {
    unload(loaded);
    throw;
  }
  return loaded;
}

void CudaKernelCode::unload(Loaded &loaded) const {
  if (!loaded.module)
    return;
  try {
    useDevice(ordinal_);
    driver().moduleUnload(loaded.module);
  } catch (const Error &) {
    // The driver is going away with the process: nothing to free.
  }
  loaded.module = nullptr;
}

CudaKernelCode::~CudaKernelCode() {
  unload(vector_);
  if (scalarStorage_)
    unload(*scalarStorage_);
}

const CudaKernelCode::Loaded &CudaKernelCode::scalar() const {
  if (const Loaded *loaded = scalar_.load(std::memory_order_acquire))
    return *loaded;
  std::lock_guard<std::mutex> lock(scalarMutex_);
  if (!scalarStorage_) {
    scalarStorage_ =
        std::make_unique<Loaded>(load(makeScalarCode_(vector_.code)));
    scalar_.store(scalarStorage_.get(), std::memory_order_release);
  }
  return *scalarStorage_;
}

void CudaKernelCode::runKernel(size_t stepIndex, char *const *buffers,
                               const LaunchContext &context) const {
  const std::optional<KernelLaunch> &launch =
      vector_.code.launches.at(stepIndex);
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
  Function function = vector_.functions[stepIndex];
  const std::string *entry = &launch->entry;
  DevicePointer misaligned = 0;
  for (const AlignedAccess &access : launch->aligned)
    misaligned |= (addresses[access.parameter] +
                   static_cast<DevicePointer>(access.byteOffset)) &
                  (access.alignment - 1);
  if (misaligned) {
    const Loaded &scalarCode = scalar();
    function = scalarCode.functions.at(stepIndex);
    entry = &scalarCode.code.launches.at(stepIndex)->entry;
  }
  int result = driver().launchKernel(
      function, launch->grid[0], launch->grid[1], launch->grid[2],
      launch->block[0], launch->block[1], launch->block[2], launch->sharedBytes,
      static_cast<Stream>(context.stream), parameters.data(), nullptr);
  if (result != 0) // the message only where it is needed: this is per call
    check(result, ("launching GPU kernel " + *entry).c_str());
}

} // namespace kiln::backend::cuda
