// kiln's one JIT over ORC LLJIT: each module under its own resource tracker.
// Depends on backend/cpu/{CpuJit,MathLibrary}.h, backend/LlvmTargets.h, LLVM.
#include "backend/cpu/CpuJit.h"

#include "backend/LlvmErrors.h"
#include "backend/LlvmTargets.h"
#include "backend/cpu/MathLibrary.h"
#include "ir/Error.h"

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/Target/TargetMachine.h>

namespace kiln::backend {

class JitCode {
public:
  explicit JitCode(llvm::orc::ResourceTrackerSP tracker)
      : tracker_(std::move(tracker)) {}
  ~JitCode() {
    if (tracker_)
      llvm::consumeError(tracker_->remove());
  }

private:
  friend class CpuJit;
  llvm::orc::ResourceTrackerSP tracker_;
};

CpuJit &CpuJit::instance() {
  static CpuJit *shared = new CpuJit();
  return *shared;
}

CpuJit::CpuJit() {
  initializeLlvmTargets();
  host_ = hostTarget();
  auto builder = unwrapLlvm(llvm::orc::JITTargetMachineBuilder::detectHost(),
                            "cannot describe the host CPU to LLVM");
  builder.setCPU(host_.cpuName);
  builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
  // LLVM's default for JIT code on x86-64 is the large code model, whose
  // every constant costs a movabs and a register (a GELU epilogue reloaded
  // its 25 constants per row of a GEMM tile). JITLink places an object's
  // sections together and reaches other objects and the host's math
  // functions through its GOT and stubs, so the small model is safe with
  // position-independent code; constants then become memory operands.
  builder.setCodeModel(llvm::CodeModel::Small);
  builder.setRelocationModel(llvm::Reloc::PIC_);
  machineBuilder_ =
      std::make_unique<llvm::orc::JITTargetMachineBuilder>(builder);
  jit_ = unwrapLlvm(llvm::orc::LLJITBuilder()
                        .setJITTargetMachineBuilder(std::move(builder))
                        .create(),
                    "cannot create the LLVM JIT");
  const MathLibrary &math = MathLibrary::instance(host_.vectorBits);
  llvm::orc::SymbolMap symbols;
  for (const auto &[name, address] : math.symbols())
    symbols[jit_->mangleAndIntern(name)] = llvm::orc::ExecutorSymbolDef(
        llvm::orc::ExecutorAddr(address),
        llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
  checkLlvm(jit_->getMainJITDylib().define(
                llvm::orc::absoluteSymbols(std::move(symbols))),
            "cannot define the math functions in the JIT");
}

CpuJit::~CpuJit() = default;

void CpuJit::prepare(llvm::Module &module) const {
  module.setDataLayout(jit_->getDataLayout());
  module.setTargetTriple(jit_->getTargetTriple().str());
}

std::shared_ptr<JitCode>
CpuJit::addModule(std::unique_ptr<llvm::Module> module,
                  std::unique_ptr<llvm::LLVMContext> context) {
  prepare(*module);
  auto code = std::make_shared<JitCode>(
      jit_->getMainJITDylib().createResourceTracker());
  checkLlvm(jit_->addIRModule(code->tracker_,
                              llvm::orc::ThreadSafeModule(std::move(module),
                                                          std::move(context))),
            "cannot add a module to the JIT");
  return code;
}

std::shared_ptr<JitCode>
CpuJit::addObjects(std::vector<std::unique_ptr<llvm::MemoryBuffer>> objects) {
  auto code = std::make_shared<JitCode>(
      jit_->getMainJITDylib().createResourceTracker());
  for (std::unique_ptr<llvm::MemoryBuffer> &object : objects)
    checkLlvm(jit_->addObjectFile(code->tracker_, std::move(object)),
              "cannot add an object file to the JIT");
  return code;
}

std::unique_ptr<llvm::TargetMachine> CpuJit::newTargetMachine() const {
  return unwrapLlvm(machineBuilder_->createTargetMachine(),
                    "cannot create an LLVM target machine for the host");
}

uint64_t CpuJit::lookup(const std::string &symbol) {
  auto address = unwrapLlvm(jit_->lookup(jit_->getMainJITDylib(), symbol),
                            "cannot JIT-compile a kernel");
  return address.getValue();
}

void CpuJit::releaseDeadSymbols() {
  jit_->getExecutionSession().getSymbolStringPool()->clearDeadEntries();
}

std::string CpuJit::targetTriple() const {
  return jit_->getTargetTriple().str();
}

std::string CpuJit::cpuName() const { return host_.cpuName; }

} // namespace kiln::backend
