// A scheduled loop-IR program to GPU code without a GPU: the GPU schedule,
// one NVPTX kernel per kernel step, libdevice linked in for math, LLVM's
// optimisation pipeline for the NVPTX target, PTX. CI checks it on machines
// without CUDA. Depends on backend/nvptx/GpuCode.h, ir/LoopIR.h.
#pragma once

#include "backend/nvptx/GpuCode.h"
#include "ir/LoopIR.h"

#include <string>

namespace kiln::backend {

/// PTX for compute capability `smArch` ("sm_80", "sm_90") and each kernel's
/// launch. Throws kiln::Unsupported for what the GPU code generator cannot
/// emit, or for math that needs libdevice where none is found. A kernel
/// whose threads take 4 consecutive positions as one 128-bit access has
/// only that vector body where the host can check the alignment at launch
/// (KernelLaunch::aligned): the driver then compiles half the code.
GpuCode generateGpuCode(const loop::Program &program,
                        const std::string &smArch);

/// The scalar bodies of `vectorCode`'s launches that check alignment, for
/// launches that find an access misaligned (a view whose offset is not a
/// multiple of 4 elements); steps without such a launch have none here.
GpuCode generateScalarGpuCode(const loop::Program &program,
                              const GpuCode &vectorCode);

/// libdevice's bitcode file: $KILN_LIBDEVICE, else under $CUDA_HOME,
/// /usr/local/cuda or next to nvcc on PATH; empty when there is none.
std::string findLibdevice();

} // namespace kiln::backend
