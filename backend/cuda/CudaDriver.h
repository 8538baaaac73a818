// The CUDA driver API, opened with dlopen at first use: kiln builds and runs
// on machines without CUDA, and a missing or old driver is a clear error
// naming what is missing. Depends on ir/Error.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::backend::cuda {

// The driver's handle types, as opaque pointers (cuda.h is not needed).
using Context = struct CUctx_st *;
using Module = struct CUmod_st *;
using Function = struct CUfunc_st *;
using Stream = struct CUstream_st *;
using DevicePointer = uint64_t;

/// The driver's entry points kiln uses, resolved once.
struct Driver {
  int (*init)(unsigned flags);
  int (*driverGetVersion)(int *version);
  int (*deviceGet)(int *device, int ordinal);
  int (*deviceGetCount)(int *count);
  int (*deviceGetAttribute)(int *value, int attribute, int device);
  int (*devicePrimaryCtxRetain)(Context *context, int device);
  int (*ctxGetCurrent)(Context *context);
  int (*ctxSetCurrent)(Context context);
  int (*ctxSynchronize)();
  int (*moduleLoadDataEx)(Module *module, const void *image,
                          unsigned optionCount, int *options, void **values);
  int (*moduleUnload)(Module module);
  int (*moduleGetFunction)(Function *function, Module module, const char *name);
  int (*funcSetAttribute)(Function function, int attribute, int value);
  int (*launchKernel)(Function function, unsigned gridX, unsigned gridY,
                      unsigned gridZ, unsigned blockX, unsigned blockY,
                      unsigned blockZ, unsigned sharedBytes, Stream stream,
                      void **parameters, void **extra);
  int (*memAlloc)(DevicePointer *pointer, size_t bytes);
  int (*memFree)(DevicePointer pointer);
  int (*memcpyHtoD)(DevicePointer destination, const void *source,
                    size_t bytes);
  int (*memcpyDtoH)(void *destination, DevicePointer source, size_t bytes);
  int (*streamSynchronize)(Stream stream);
  int (*getErrorString)(int error, const char **text);
};

/// The driver, loaded on first use. Throws kiln::Error saying what is
/// missing (libcuda.so.1, a symbol of a too-old driver) or that cuInit
/// failed (no GPU, driver/kernel module mismatch).
const Driver &driver();
/// Whether the driver loads and sees at least one GPU; never throws.
bool available();

/// Throws kiln::Error("<what>: <driver's message> (CUDA error N)") unless
/// `result` is success.
void check(int result, const char *what);

/// Makes device `ordinal`'s primary context (the one torch uses) current
/// on this thread.
void useDevice(int ordinal);

/// "sm_90" for device `ordinal`.
std::string computeCapability(int ordinal);

} // namespace kiln::backend::cuda
