// GPU code generation: schedule, emit, link libdevice, optimise, PTX.
// Depends on backend/nvptx/, backend/LlvmTargets.h, ir/, LLVM.
#include "backend/nvptx/GpuCodegen.h"

#include "backend/LlvmTargets.h"
#include "backend/nvptx/GpuSchedule.h"
#include "backend/nvptx/NvptxKernelEmitter.h"
#include "backend/nvptx/PtxEmitter.h"
#include "ir/Error.h"
#include "ir/Logging.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/IPO/Internalize.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

namespace kiln::backend {

namespace {

constexpr const char *kTriple = "nvptx64-nvidia-cuda";

std::unique_ptr<llvm::TargetMachine> targetMachine(const std::string &smArch) {
  initializeLlvmTargets();
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(kTriple, error);
  if (!target)
    throw Error("LLVM has no NVPTX target: " + error);
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      kTriple, smArch, "+ptx78", llvm::TargetOptions(), llvm::Reloc::PIC_,
      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    throw Error("cannot create an NVPTX target machine for " + smArch);
  return machine;
}

void linkLibdevice(llvm::Module &module) {
  std::set<std::string> needed;
  for (llvm::Function &function : module)
    if (function.isDeclaration() && function.getName().starts_with("__nv_"))
      needed.insert(function.getName().str());
  if (needed.empty())
    return;
  std::string path = findLibdevice();
  if (path.empty())
    throw Unsupported("GPU math (" + *needed.begin() +
                      ") needs CUDA's libdevice, which is not on this machine "
                      "(set KILN_LIBDEVICE to libdevice.10.bc)");
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> library =
      llvm::parseIRFile(path, diagnostic, module.getContext());
  if (!library)
    throw Error("cannot read libdevice at " + path + ": " +
                diagnostic.getMessage().str());
  library->setTargetTriple(module.getTargetTriple());
  library->setDataLayout(module.getDataLayout());
  if (llvm::Linker::linkModules(module, std::move(library),
                                llvm::Linker::Flags::LinkOnlyNeeded))
    throw Error("cannot link libdevice into the GPU module");
  for (const std::string &name : needed)
    if (llvm::Function *function = module.getFunction(name);
        !function || function->isDeclaration())
      throw Unsupported("libdevice has no " + name);
}

void optimize(llvm::Module &module, llvm::TargetMachine &machine) {
  // Only kernels stay visible: libdevice's functions inline and go.
  llvm::internalizeModule(module, [](const llvm::GlobalValue &value) {
    const auto *function = llvm::dyn_cast<llvm::Function>(&value);
    return function &&
           function->getCallingConv() == llvm::CallingConv::PTX_Kernel;
  });
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PassBuilder builder(&machine);
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3)
      .run(module, modules);
}

std::string moduleText(const llvm::Module &module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  module.print(stream, nullptr);
  return text;
}

/// A kernel function's IR with its own name (and its shared memory's,
/// which starts with it) left out: equal texts are the same kernel.
std::string kernelText(const llvm::Module &module, const std::string &entry) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  module.getFunction(entry)->print(stream);
  stream.flush();
  for (size_t at = text.find(entry); at != std::string::npos;
       at = text.find(entry, at + 1))
    text.replace(at, entry.size(), "K");
  return text;
}

/// Takes kernel `entry` (its function, shared memory and annotations) out of
/// the module again.
void eraseKernel(llvm::Module &module, const std::string &entry) {
  llvm::Function *function = module.getFunction(entry);
  if (llvm::NamedMDNode *annotations =
          module.getNamedMetadata("nvvm.annotations")) {
    std::vector<llvm::MDNode *> kept;
    for (llvm::MDNode *node : annotations->operands()) {
      auto *subject =
          llvm::dyn_cast_or_null<llvm::ValueAsMetadata>(node->getOperand(0));
      if (!subject || subject->getValue() != function)
        kept.push_back(node);
    }
    annotations->clearOperands();
    for (llvm::MDNode *node : kept)
      annotations->addOperand(node);
  }
  function->eraseFromParent();
  if (llvm::GlobalVariable *shared =
          module.getGlobalVariable(entry + "_partials", true))
    shared->eraseFromParent();
}

} // namespace

std::string findLibdevice() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char *explicitPath = std::getenv("KILN_LIBDEVICE"))
    candidates.emplace_back(explicitPath);
  auto addRoot = [&](const fs::path &root) {
    candidates.push_back(root / "nvvm" / "libdevice" / "libdevice.10.bc");
  };
  if (const char *home = std::getenv("CUDA_HOME"))
    addRoot(home);
  if (const char *home = std::getenv("CUDA_PATH"))
    addRoot(home);
  addRoot("/usr/local/cuda");
  if (const char *path = std::getenv("PATH")) {
    std::string list = path;
    size_t start = 0;
    while (start <= list.size()) {
      size_t colon = list.find(':', start);
      fs::path folder = list.substr(start, colon - start);
      std::error_code error;
      if (!folder.empty() && fs::exists(folder / "nvcc", error))
        addRoot(folder.parent_path());
      if (colon == std::string::npos)
        break;
      start = colon + 1;
    }
  }
  addRoot("/usr/lib/nvidia-cuda-toolkit");
  for (const fs::path &candidate : candidates) {
    std::error_code error;
    if (fs::is_regular_file(candidate, error))
      return candidate.string();
  }
  return "";
}

namespace {

/// The code of the kernel steps `wanted` accepts, with `bodies`.
GpuCode generate(const loop::Program &program, const std::string &smArch,
                 GroupedBodies bodies,
                 const std::function<bool(size_t step)> &wanted) {
  GpuSchedule schedule = scheduleForGpu(program);
  if (logEnabled("schedule") && bodies == GroupedBodies::Vector)
    logArtifact("schedule", schedule.str());
  std::unique_ptr<llvm::TargetMachine> machine = targetMachine(smArch);
  llvm::LLVMContext context;
  llvm::Module module("kiln_gpu", context);
  module.setTargetTriple(kTriple);
  module.setDataLayout(machine->createDataLayout());
  // libdevice's functions read this: no flushing of denormals, as eager.
  module.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t(0));

  GpuCode code;
  code.computeCapability = smArch;
  code.launches.resize(program.steps.size());
  std::map<std::string, std::string> entryByText;
  for (size_t s = 0; s < program.steps.size(); ++s) {
    const loop::Step &step = program.steps[s];
    if (step.kind != loop::Step::Kind::Kernel || !wanted(s))
      continue;
    const GpuKernelSchedule &record = *schedule.kernels[s];
    std::string name = "kiln_" + std::to_string(s) + "_" + step.kernel.name +
                       (bodies == GroupedBodies::Scalar ? "_unaligned" : "");
    for (char &c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)))
        c = '_';
    NvptxKernel kernel =
        emitNvptxKernel(module, program, step.kernel, record, name, bodies);
    // A kernel whose code equals an earlier one's but for its name (each
    // layer of a transformer) launches that one's entry: the driver then
    // compiles it once. Its own buffers stay its parameters.
    std::string text = kernelText(module, kernel.entry) + "\nblock " +
                       std::to_string(record.block);
    auto [known, fresh] = entryByText.emplace(std::move(text), kernel.entry);
    if (!fresh) {
      eraseKernel(module, kernel.entry);
      kernel.entry = known->second;
    }
    KernelLaunch launch;
    launch.entry = kernel.entry;
    launch.grid = {record.grid, 1, 1};
    launch.block = {record.block, 1, 1};
    launch.buffers = kernel.buffers;
    launch.aligned = kernel.aligned;
    code.launches[s] = launch;
  }
  std::string problems;
  llvm::raw_string_ostream problemStream(problems);
  if (llvm::verifyModule(module, &problemStream))
    throw Error("the GPU code generator made invalid LLVM IR: " + problems);
  if (logEnabled("llvm"))
    logArtifact("llvm", moduleText(module));
  linkLibdevice(module);
  optimize(module, *machine);
  if (logEnabled("llvm_opt"))
    logArtifact("llvm_opt", moduleText(module));
  code.ptx = emitPtx(module, smArch);
  if (logEnabled("ptx"))
    logArtifact("ptx", code.ptx);
  return code;
}

} // namespace

GpuCode generateGpuCode(const loop::Program &program,
                        const std::string &smArch) {
  return generate(program, smArch, GroupedBodies::Vector,
                  [](size_t) { return true; });
}

GpuCode generateScalarGpuCode(const loop::Program &program,
                              const GpuCode &vectorCode) {
  return generate(program, vectorCode.computeCapability, GroupedBodies::Scalar,
                  [&](size_t step) {
                    const std::optional<KernelLaunch> &launch =
                        vectorCode.launches.at(step);
                    return launch && !launch->aligned.empty();
                  });
}

} // namespace kiln::backend
