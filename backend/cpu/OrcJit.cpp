// kiln's JIT over ORC LLJIT, compiling for the host CPU with its features.
// Depends on LLVM and backend/LlvmTargets.h.
#include "backend/cpu/OrcJit.h"

#include "backend/LlvmErrors.h"
#include "backend/LlvmTargets.h"
#include "ir/Error.h"

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/TargetParser/Host.h>

namespace kiln::backend {

OrcJit::OrcJit() {
  initializeLlvmTargets();
  auto machine = unwrapLlvm(llvm::orc::JITTargetMachineBuilder::detectHost(),
                            "cannot describe the host CPU to LLVM");
  machine.setCPU(llvm::sys::getHostCPUName().str());
  machine.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  jit_ = unwrapLlvm(llvm::orc::LLJITBuilder()
                        .setJITTargetMachineBuilder(std::move(machine))
                        .create(),
                    "cannot create the LLVM JIT");
}

OrcJit::~OrcJit() = default;

void OrcJit::addModule(std::unique_ptr<llvm::Module> module,
                       std::unique_ptr<llvm::LLVMContext> context) {
  module->setDataLayout(jit_->getDataLayout());
  module->setTargetTriple(jit_->getTargetTriple().str());
  checkLlvm(jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(module),
                                                          std::move(context))),
            "cannot add a module to the JIT");
}

uint64_t OrcJit::lookup(const std::string &symbol) {
  auto address =
      unwrapLlvm(jit_->lookup(symbol), "cannot find a JIT-compiled function");
  return address.getValue();
}

std::string OrcJit::targetTriple() const {
  return jit_->getTargetTriple().str();
}

std::string OrcJit::cpuName() const {
  return llvm::sys::getHostCPUName().str();
}

} // namespace kiln::backend
