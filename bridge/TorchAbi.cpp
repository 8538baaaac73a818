// Torch's exported C functions for a new tensor, looked up once with dlsym
// in the torch libraries the process has loaded.
// Depends on bridge/TorchAbi.h, pybind11, dlfcn.
#include "bridge/TorchAbi.h"

#include <array>
#include <cstdint>
#include <dlfcn.h>
#include <string>

namespace kiln::python {

namespace {

// The shim's C types (torch/csrc/inductor/aoti_torch/c/shim.h): an error
// code (0: success) and an opaque handle that is a heap-allocated
// at::Tensor.
using ShimError = int32_t;
using TensorHandle = void *;

struct DirectFunctions {
  ShimError (*emptyStrided)(int64_t, const int64_t *, const int64_t *, int32_t,
                            int32_t, int32_t, TensorHandle *) = nullptr;
  ShimError (*dataPointer)(TensorHandle, void **) = nullptr;
  ShimError (*deleteTensor)(TensorHandle) = nullptr;
  // THPVariable_Wrap(const at::TensorBase &): the handle points at an
  // at::Tensor, an at::TensorBase at the same address.
  PyObject *(*wrap)(const void *) = nullptr;
  int32_t cpu = 0, cuda = 0;
  std::array<int32_t, kNumDTypes> dtypes{};
  std::array<bool, kNumDTypes> hasDtype{};
};

void *loadedLibrary(const char *name) {
  // Only a library torch already loaded: RTLD_NOLOAD never loads another.
  return dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
}

template <typename Function>
bool find(void *library, const char *symbol, Function &out) {
  out = library ? reinterpret_cast<Function>(dlsym(library, symbol)) : nullptr;
  return out != nullptr;
}

/// The functions, or null where torch lacks any of them.
const DirectFunctions *directFunctions() {
  static const DirectFunctions *functions = []() -> const DirectFunctions * {
    static DirectFunctions found;
    void *core = loadedLibrary("libtorch_cpu.so");
    void *python = loadedLibrary("libtorch_python.so");
    int32_t (*cpu)() = nullptr, (*cuda)() = nullptr;
    if (!find(core, "aoti_torch_empty_strided", found.emptyStrided) ||
        !find(core, "aoti_torch_get_data_ptr", found.dataPointer) ||
        !find(core, "aoti_torch_delete_tensor_object", found.deleteTensor) ||
        !find(core, "aoti_torch_device_type_cpu", cpu) ||
        !find(core, "aoti_torch_device_type_cuda", cuda) ||
        !find(python, "_Z16THPVariable_WrapRKN2at10TensorBaseE", found.wrap))
      return nullptr;
    found.cpu = cpu();
    found.cuda = cuda();
    // The shim names its dtypes as torch does: aoti_torch_dtype_float32.
    for (int index = 0; index < kNumDTypes; ++index) {
      std::string symbol = "aoti_torch_dtype_" +
                           std::string(dtypeName(static_cast<DType>(index)));
      int32_t (*code)() = nullptr;
      if (find(core, symbol.c_str(), code)) {
        found.dtypes[index] = code();
        found.hasDtype[index] = true;
      }
    }
    return &found;
  }();
  return functions;
}

} // namespace

bool hasDirectAllocation() { return directFunctions() != nullptr; }

pybind11::object emptyStridedDirect(const Shape &sizes, const Shape &strides,
                                    DType dtype, const Device &device,
                                    char **data) {
  const DirectFunctions *f = directFunctions();
  auto index = static_cast<size_t>(dtype);
  if (!f || !f->hasDtype[index] || sizes.size() != strides.size() ||
      (device.type != DeviceType::CPU && device.type != DeviceType::CUDA))
    return pybind11::object();
  bool cuda = device.type == DeviceType::CUDA;
  TensorHandle handle = nullptr;
  if (f->emptyStrided(static_cast<int64_t>(sizes.size()), sizes.data(),
                      strides.data(), f->dtypes[index], cuda ? f->cuda : f->cpu,
                      cuda ? std::max(device.index, 0) : 0, &handle) != 0 ||
      !handle)
    return pybind11::object();
  void *address = nullptr;
  PyObject *tensor = nullptr;
  if (f->dataPointer(handle, &address) == 0)
    tensor = f->wrap(handle);
  f->deleteTensor(handle); // the Python tensor holds its own reference
  if (!tensor) {
    PyErr_Clear();
    return pybind11::object();
  }
  *data = static_cast<char *>(address);
  return pybind11::reinterpret_steal<pybind11::object>(tensor);
}

} // namespace kiln::python
