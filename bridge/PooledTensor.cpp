// DLPack glue for pooled CPU tensors: the managed tensor owns the block and
// the shape arrays; its deleter returns the block to the pool. The DLPack
// structs are declared here as the DLPack ABI (v0.8) lays them out.
// Depends on bridge/PooledTensor.h, bridge/PythonConversion.h,
// runtime/HostMemoryPool.h.
#include "bridge/PooledTensor.h"

#include "bridge/PythonConversion.h"
#include "runtime/HostMemoryPool.h"

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace kiln::python {

namespace {

// DLPack's C ABI.
struct DLDevice {
  int32_t deviceType; // kDLCPU = 1
  int32_t deviceId;
};
struct DLDataType {
  uint8_t code; // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byteOffset;
};
struct DLManagedTensor {
  DLTensor tensor;
  void *managerContext;
  void (*deleter)(DLManagedTensor *self);
};

constexpr const char *kCapsuleName = "dltensor";

std::optional<DLDataType> dlpackType(DType dtype) {
  uint8_t bits = static_cast<uint8_t>(8 * itemSize(dtype));
  switch (dtype) {
  case DType::Bool:
    return DLDataType{6, 8, 1};
  case DType::UInt8:
    return DLDataType{1, bits, 1};
  case DType::Int8:
  case DType::Int16:
  case DType::Int32:
  case DType::Int64:
    return DLDataType{0, bits, 1};
  case DType::Float16:
  case DType::Float32:
  case DType::Float64:
    return DLDataType{2, bits, 1};
  case DType::BFloat16:
    return DLDataType{4, bits, 1};
  case DType::Complex64:
  case DType::Complex128:
    return std::nullopt;
  }
  return std::nullopt;
}

// What a managed tensor owns.
struct PooledBlock {
  DLManagedTensor managed{};
  char *block = nullptr;
  int64_t capacity = 0;
  std::vector<int64_t> shape, strides;

  ~PooledBlock() {
    if (block)
      runtime::HostMemoryPool::get().release(block, capacity);
  }
};

void deletePooled(DLManagedTensor *self) {
  delete static_cast<PooledBlock *>(self->managerContext);
}

// A capsule torch never consumed frees its tensor (torch renames the ones
// it takes to "used_dltensor").
void destroyCapsule(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName))
    return;
  auto *managed = static_cast<DLManagedTensor *>(
      PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed && managed->deleter)
    managed->deleter(managed);
}

py::object fromDlpack() {
  py::object torchC = py::module_::import("torch._C");
  if (py::hasattr(torchC, "_from_dlpack"))
    return torchC.attr("_from_dlpack");
  return py::module_::import("torch.utils.dlpack").attr("from_dlpack");
}

} // namespace

py::object pooledCpuTensor(const Shape &sizes, const Shape &strides,
                           DType dtype, int64_t bytes) {
  std::optional<DLDataType> type = dlpackType(dtype);
  if (!type)
    return py::object();
  PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<py::object> adopt;
  const py::object &fromCapsule =
      adopt.call_once_and_store_result(fromDlpack).get_stored();

  auto owner = std::make_unique<PooledBlock>();
  owner->block = runtime::HostMemoryPool::get().acquire(bytes, owner->capacity);
  owner->shape.assign(sizes.begin(), sizes.end());
  owner->strides.assign(strides.begin(), strides.end());
  DLManagedTensor &managed = owner->managed;
  managed.tensor.data = owner->block;
  managed.tensor.device = {1, 0};
  managed.tensor.ndim = static_cast<int32_t>(sizes.size());
  managed.tensor.dtype = *type;
  managed.tensor.shape = owner->shape.data();
  managed.tensor.strides = owner->strides.data();
  managed.tensor.byteOffset = 0;
  managed.managerContext = owner.get();
  managed.deleter = deletePooled;
  PyObject *capsule = PyCapsule_New(&managed, kCapsuleName, destroyCapsule);
  if (!capsule)
    throw py::error_already_set();
  owner.release(); // the capsule, then the tensor, owns it
  py::object handle = py::reinterpret_steal<py::object>(capsule);
  return fromCapsule(handle);
}

} // namespace kiln::python
