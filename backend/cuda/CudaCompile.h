// A scheduled loop-IR program to GPU code ready to run: the GPU schedule,
// NVPTX code generation, PTX loaded through the CUDA driver.
// Depends on backend/KernelCode.h, ir/LoopIR.h.
#pragma once

#include "backend/KernelCode.h"
#include "ir/LoopIR.h"

#include <memory>

namespace kiln::backend {

/// Compiles `program` for CUDA device `ordinal` (its compute capability).
/// `program` must outlive the code: kernels that a misaligned call needs
/// in their scalar form are generated from it then.
/// Throws kiln::Unsupported for what the GPU code generator cannot do.
std::unique_ptr<KernelCode> compileForCuda(const loop::Program &program,
                                           int ordinal);

} // namespace kiln::backend
