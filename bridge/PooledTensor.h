// CPU tensors over kiln's host memory pool (runtime/HostMemoryPool): torch
// adopts the block through DLPack, and gives it back to the pool when the
// tensor's storage dies. Depends on ir/, runtime/HostMemoryPool.h, pybind11.
#pragma once

#include "ir/DType.h"
#include "ir/TensorMeta.h"

#include <pybind11/pybind11.h>

namespace kiln::python {

/// A new CPU tensor of `sizes`, `strides` (elements) and `dtype` over a
/// pooled block of at least `bytes` bytes (its elements' span), its data
/// uninitialized. Complex dtypes are not pooled: null then, as when torch
/// cannot adopt DLPack tensors. Throws kiln::Error when out of memory.
pybind11::object pooledCpuTensor(const Shape &sizes, const Shape &strides,
                                 DType dtype, int64_t bytes);

} // namespace kiln::python
