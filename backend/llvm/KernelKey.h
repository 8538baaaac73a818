// A kernel's cache key for any LLVM target: its function's LLVM IR before
// optimisation, as text. Depends on LLVM.
#pragma once

#include <string>

namespace llvm {
class Function;
} // namespace llvm

namespace kiln::backend {

/// The function's IR under one name ("kiln_kernel"), with its attributes
/// and metadata spelled out rather than numbered module-wide: equal keys
/// mean the same code for one target machine.
std::string kernelKey(llvm::Function &function);

} // namespace kiln::backend
