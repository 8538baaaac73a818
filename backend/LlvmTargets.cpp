// One-time initialisation of the LLVM targets kiln generates code for.
// Depends on LLVM only.
#include "backend/LlvmTargets.h"

#include <llvm/Support/TargetSelect.h>

#include <mutex>

namespace kiln::backend {

void initializeLlvmTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

} // namespace kiln::backend
