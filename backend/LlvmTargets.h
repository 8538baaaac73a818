// One-time initialisation of the LLVM targets kiln generates code for: the
// host (for ORC JIT) and NVPTX. Depends on LLVM only.
#pragma once

namespace kiln::backend {

/// Initialises the native target and NVPTX; safe to call from any thread,
/// any number of times.
void initializeLlvmTargets();

} // namespace kiln::backend
