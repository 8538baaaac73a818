// GPU memory through the CUDA driver, on the device's primary context.
// Depends on runtime/CudaDevice.h, backend/cuda/CudaDriver.h, ir/Error.h.
#include "runtime/CudaDevice.h"

#include "backend/cuda/CudaDriver.h"
#include "ir/Error.h"

#include <map>
#include <memory>
#include <mutex>

namespace kiln::runtime {

namespace cuda = backend::cuda;

CudaDevice &CudaDevice::get(int ordinal) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<CudaDevice>> devices;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<CudaDevice> &device = devices[ordinal];
  if (!device) {
    cuda::useDevice(ordinal); // throws where there is no such GPU
    device.reset(new CudaDevice(ordinal));
  }
  return *device;
}

std::string CudaDevice::name() const {
  return "cuda:" + std::to_string(ordinal_);
}

char *CudaDevice::allocate(int64_t bytes) {
  if (bytes < 0)
    throw Error("cuda device: a negative allocation");
  cuda::useDevice(ordinal_);
  cuda::DevicePointer pointer = 0;
  // cuMemAlloc aligns to at least 256 bytes.
  cuda::check(cuda::driver().memAlloc(&pointer, bytes ? bytes : 1),
              "allocating GPU memory");
  return reinterpret_cast<char *>(pointer);
}

void CudaDevice::deallocate(char *memory) {
  if (!memory)
    return;
  cuda::useDevice(ordinal_);
  cuda::check(
      cuda::driver().memFree(reinterpret_cast<cuda::DevicePointer>(memory)),
      "freeing GPU memory");
}

Workspace CudaDevice::workspace(int64_t bytes) {
  if (bytes <= 0)
    return Workspace();
  return Workspace(this, allocate(bytes), nullptr);
}

void CudaDevice::releaseWorkspace(char *data, void *) {
  // Kernels queued on a stream may still read it.
  cuda::check(cuda::driver().ctxSynchronize(), "waiting for the GPU");
  deallocate(data);
}

} // namespace kiln::runtime
