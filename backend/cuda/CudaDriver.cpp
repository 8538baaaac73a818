// Loads the CUDA driver with dlopen and resolves the entry points kiln uses.
// Depends on backend/cuda/CudaDriver.h, ir/Error.h, libdl.
#include "backend/cuda/CudaDriver.h"

#include "ir/Error.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>

namespace kiln::backend::cuda {

namespace {

constexpr int kAttributeComputeCapabilityMajor = 75;
constexpr int kAttributeComputeCapabilityMinor = 76;

struct Loaded {
  Driver driver{};
  std::string error; // empty when loaded
};

template <typename Function>
void resolve(void *library, const char *name, Function &slot,
             std::string &error) {
  if (!error.empty())
    return;
  slot = reinterpret_cast<Function>(dlsym(library, name));
  if (!slot)
    error = std::string("the CUDA driver has no ") + name +
            " (the driver is too old: kiln needs CUDA 11 or newer)";
}

Loaded load() {
  Loaded loaded;
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!library) {
    const char *reason = dlerror();
    loaded.error = std::string("the NVIDIA CUDA driver (libcuda.so.1) cannot "
                               "be loaded: ") +
                   (reason ? reason : "not found") +
                   "; install the NVIDIA driver, or run on the CPU";
    return loaded;
  }
  Driver &d = loaded.driver;
  std::string &error = loaded.error;
  resolve(library, "cuInit", d.init, error);
  resolve(library, "cuDriverGetVersion", d.driverGetVersion, error);
  resolve(library, "cuDeviceGet", d.deviceGet, error);
  resolve(library, "cuDeviceGetCount", d.deviceGetCount, error);
  resolve(library, "cuDeviceGetAttribute", d.deviceGetAttribute, error);
  resolve(library, "cuDevicePrimaryCtxRetain", d.devicePrimaryCtxRetain, error);
  resolve(library, "cuCtxGetCurrent", d.ctxGetCurrent, error);
  resolve(library, "cuCtxSetCurrent", d.ctxSetCurrent, error);
  resolve(library, "cuCtxSynchronize", d.ctxSynchronize, error);
  resolve(library, "cuModuleLoadDataEx", d.moduleLoadDataEx, error);
  resolve(library, "cuModuleUnload", d.moduleUnload, error);
  resolve(library, "cuModuleGetFunction", d.moduleGetFunction, error);
  resolve(library, "cuFuncSetAttribute", d.funcSetAttribute, error);
  resolve(library, "cuLaunchKernel", d.launchKernel, error);
  resolve(library, "cuMemAlloc_v2", d.memAlloc, error);
  resolve(library, "cuMemFree_v2", d.memFree, error);
  resolve(library, "cuMemcpyHtoD_v2", d.memcpyHtoD, error);
  resolve(library, "cuMemcpyDtoH_v2", d.memcpyDtoH, error);
  resolve(library, "cuStreamSynchronize", d.streamSynchronize, error);
  resolve(library, "cuGetErrorString", d.getErrorString, error);
  if (!error.empty())
    return loaded;
  int result = d.init(0);
  if (result != 0) {
    const char *text = nullptr;
    d.getErrorString(result, &text);
    error = std::string("the CUDA driver does not start (cuInit: ") +
            (text ? text : "unknown error") + ", CUDA error " +
            std::to_string(result) + "): no usable GPU on this machine?";
  }
  return loaded;
}

const Loaded &loaded() {
  static const Loaded instance = load();
  return instance;
}

} // namespace

const Driver &driver() {
  const Loaded &state = loaded();
  if (!state.error.empty())
    throw Error("kiln: " + state.error);
  return state.driver;
}

bool available() {
  const Loaded &state = loaded();
  if (!state.error.empty())
    return false;
  int count = 0;
  return state.driver.deviceGetCount(&count) == 0 && count > 0;
}

void check(int result, const char *what) {
  if (result == 0)
    return;
  const char *text = nullptr;
  if (loaded().error.empty())
    loaded().driver.getErrorString(result, &text);
  throw Error(std::string("kiln: ") + what + ": " +
              (text ? text : "unknown error") + " (CUDA error " +
              std::to_string(result) + ")");
}

void useDevice(int ordinal) {
  const Driver &d = driver();
  // Retained once per device for the process, as torch does; read without
  // the lock once retained (this runs before every launch).
  static std::mutex mutex;
  static std::atomic<Context> contexts[64] = {};
  if (ordinal < 0 || ordinal >= 64)
    throw Error("kiln: CUDA device " + std::to_string(ordinal) +
                " is out of range");
  Context context = contexts[ordinal].load(std::memory_order_acquire);
  if (!context) {
    std::lock_guard<std::mutex> lock(mutex);
    context = contexts[ordinal].load(std::memory_order_relaxed);
    if (!context) {
      int device = 0;
      check(d.deviceGet(&device, ordinal), "cuDeviceGet");
      check(d.devicePrimaryCtxRetain(&context, device),
            "cuDevicePrimaryCtxRetain");
      contexts[ordinal].store(context, std::memory_order_release);
    }
  }
  Context current = nullptr;
  check(d.ctxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != context)
    check(d.ctxSetCurrent(context), "cuCtxSetCurrent");
}

std::string computeCapability(int ordinal) {
  const Driver &d = driver();
  int device = 0, major = 0, minor = 0;
  check(d.deviceGet(&device, ordinal), "cuDeviceGet");
  check(d.deviceGetAttribute(&major, kAttributeComputeCapabilityMajor, device),
        "cuDeviceGetAttribute");
  check(d.deviceGetAttribute(&minor, kAttributeComputeCapabilityMinor, device),
        "cuDeviceGetAttribute");
  return "sm_" + std::to_string(major * 10 + minor);
}

} // namespace kiln::backend::cuda
