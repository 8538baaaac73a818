// LLVM modules to PTX text for NVIDIA GPUs through LLVM's NVPTX target.
// Depends on LLVM and backend/LlvmTargets.h.
#include "backend/nvptx/PtxEmitter.h"

#include "backend/LlvmTargets.h"
#include "ir/Error.h"

#include <llvm/ADT/SmallString.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>

#include <memory>

namespace kiln::backend {

namespace {
constexpr const char *kNvptxTriple = "nvptx64-nvidia-cuda";
}

void markAsKernel(llvm::Module &module, const std::string &functionName) {
  llvm::Function *function = module.getFunction(functionName);
  if (!function)
    throw Error("no function '" + functionName + "' to mark as a kernel");
  llvm::LLVMContext &context = module.getContext();
  llvm::Metadata *operands[] = {
      llvm::ValueAsMetadata::get(function),
      llvm::MDString::get(context, "kernel"),
      llvm::ConstantAsMetadata::get(
          llvm::ConstantInt::get(llvm::Type::getInt32Ty(context), 1))};
  module.getOrInsertNamedMetadata("nvvm.annotations")
      ->addOperand(llvm::MDNode::get(context, operands));
}

std::string emitPtx(llvm::Module &module, const std::string &smArch) {
  initializeLlvmTargets();
  std::string lookupError;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(kNvptxTriple, lookupError);
  if (!target)
    throw Error("LLVM has no NVPTX target: " + lookupError);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      kNvptxTriple, smArch, "+ptx78", options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    throw Error("cannot create an NVPTX target machine for " + smArch);
  module.setTargetTriple(kNvptxTriple);
  module.setDataLayout(machine->createDataLayout());

  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream stream(ptx);
  llvm::legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, stream, nullptr,
                                   llvm::CodeGenFileType::AssemblyFile))
    throw Error("the NVPTX target cannot emit assembly");
  passes.run(module);
  return std::string(ptx.str());
}

} // namespace kiln::backend
