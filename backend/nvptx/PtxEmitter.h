// LLVM modules to PTX text for NVIDIA GPUs through LLVM's NVPTX target.
// Needs no CUDA installation. Depends on LLVM and backend/LlvmTargets.h.
#pragma once

#include <string>

namespace llvm {
class Module;
}

namespace kiln::backend {

/// Compiles `module` (triple nvptx64-nvidia-cuda is set here) for the given
/// compute capability ("sm_80", "sm_90") and returns the PTX assembly.
/// Throws kiln::Error on failure.
std::string emitPtx(llvm::Module &module, const std::string &smArch);

/// Marks `function` as a kernel entry point (the `nvvm.annotations` kernel
/// flag the NVPTX backend reads).
void markAsKernel(llvm::Module &module, const std::string &functionName);

} // namespace kiln::backend
