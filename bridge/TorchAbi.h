// Torch's exported C functions that kiln's per-call path calls directly
// where the process's torch has them: the AOTInductor shim's tensor
// constructor (libtorch_cpu) and the Python tensor wrapper
// (libtorch_python). A new tensor then costs one C call instead of
// torch.empty_strided's argument parsing from Python. Where any of them is
// missing, callers take the Python path. Depends on ir/, pybind11.
#pragma once

#include "ir/DType.h"
#include "ir/TensorMeta.h"

#include <pybind11/pybind11.h>

namespace kiln::python {

/// A new tensor of `sizes` and `strides` (elements), `dtype`, on `device`
/// (CPU, or CUDA device `device.index`), its data uninitialized, from
/// torch's allocator for that device (the caching allocator on a GPU, on
/// the current stream). `data` receives its data pointer. Null where the
/// direct path is unavailable (torch without the shim, a dtype it lacks) or
/// torch refused (out of memory): the caller then asks torch from Python,
/// which raises torch's own error.
pybind11::object emptyStridedDirect(const Shape &sizes, const Shape &strides,
                                    DType dtype, const Device &device,
                                    char **data);

/// Whether emptyStridedDirect's functions were found in this process.
bool hasDirectAllocation();

} // namespace kiln::python
