// The CPU backend's compile pipeline: emit every kernel into one module, take
// the code of kernels already compiled from the kernel cache, optimise the
// rest with the new pass manager, JIT them into the process-wide LLJIT
// under the program's own resource tracker, and run kernels on the pool.
// Depends on backend/cpu/*.h, backend/LlvmTargets.h, ir/, LLVM.
#include "backend/cpu/CpuBackend.h"

#include "backend/LlvmErrors.h"
#include "backend/LlvmTargets.h"
#include "backend/cpu/KernelEmitter.h"
#include "backend/cpu/MathLibrary.h"
#include "backend/cpu/ThreadPool.h"
#include "ir/Error.h"
#include "ir/Logging.h"

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <unordered_map>

namespace kiln::backend {
namespace {

// The size of the largest cache Linux describes for cpu0 (its L3 on x86),
// or 0 where it describes none.
int64_t lastLevelCacheBytes() {
  int64_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" +
                       std::to_string(index) + "/size");
    int64_t size = 0;
    std::string unit;
    if (!(file >> size))
      continue;
    file >> unit;
    if (unit == "K")
      size <<= 10;
    else if (unit == "M")
      size <<= 20;
    largest = std::max(largest, size);
  }
  return largest;
}

HostTarget detectHostTarget() {
  HostTarget host;
  host.cpuName = llvm::sys::getHostCPUName().str();
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> sorted;
  for (const auto &feature : features)
    sorted.push_back((feature.getValue() ? "+" : "-") + feature.getKey().str());
  std::sort(sorted.begin(), sorted.end());
  for (const std::string &feature : sorted)
    host.features += (host.features.empty() ? "" : ",") + feature;
  auto has = [&](const char *name) {
    auto found = features.find(name);
    return found != features.end() && found->getValue();
  };
  host.vectorBits = has("avx512f") ? 512 : has("avx2") ? 256 : 128;
  // KILN_CPU_VECTOR_BITS=128|256 narrows the vectors (to compare widths, or
  // to avoid AVX-512's clock penalty); it never widens them.
  if (const char *text = std::getenv("KILN_CPU_VECTOR_BITS")) {
    int bits = std::atoi(text);
    if (bits == 128 || bits == 256 || bits == 512)
      host.vectorBits = std::min(host.vectorBits, bits);
  }
  // Vectors per step of a vector loop: four (independent accumulators of a
  // reduction, loads in flight), unless KILN_CPU_UNROLL=1..8 says otherwise.
  // On the 16-core Xeon (AVX-512) four 512-bit vectors against two: a
  // single-threaded column sum 8192x1024 took 1180 against 2519 us (eager
  // 1690), softmax and layer_norm at 16 threads 8-12% less.
  host.unroll = 4;
  if (const char *text = std::getenv("KILN_CPU_UNROLL")) {
    int unroll = std::atoi(text);
    if (unroll >= 1 && unroll <= 8)
      host.unroll = unroll;
  }
  // Kernels writing at least half the last-level cache stream their output
  // past the caches: on the 2-core EPYC (32 MiB L3) 16 MiB outputs ran 10%
  // faster streamed, smaller ones faster cached; on the 16-core Xeon (300 MiB
  // L3 as its VM reports it) 16 MiB ones ran 10-30% faster cached.
  // KILN_CPU_STREAMING_BYTES sets the size, 0 turns it off.
  if (llvm::Triple(llvm::sys::getProcessTriple()).isX86()) {
    int64_t cache = lastLevelCacheBytes();
    host.streamingBytes = cache > 0 ? cache / 2 : int64_t(16) << 20;
    if (const char *text = std::getenv("KILN_CPU_STREAMING_BYTES"))
      host.streamingBytes = std::max<int64_t>(0, std::atoll(text));
  }
  return host;
}

/// One LLJIT for the process (creating one is slow); every program's code
/// lives under its own resource tracker in the main JITDylib.
struct SharedJit {
  HostTarget host;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> machine; // optimisation, asm logs
  std::mutex machineMutex;
  std::atomic<uint64_t> programCount{0};

  SharedJit() {
    initializeLlvmTargets();
    host = detectHostTarget();
    auto builder = unwrapLlvm(llvm::orc::JITTargetMachineBuilder::detectHost(),
                              "cannot describe the host CPU to LLVM");
    builder.setCPU(host.cpuName);
    builder.setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
    machine = unwrapLlvm(builder.createTargetMachine(),
                         "cannot create an LLVM target machine for the host");
    jit = unwrapLlvm(llvm::orc::LLJITBuilder()
                         .setJITTargetMachineBuilder(std::move(builder))
                         .create(),
                     "cannot create the LLVM JIT");
    const MathLibrary &math = MathLibrary::instance(host.vectorBits);
    llvm::orc::SymbolMap symbols;
    for (const auto &[name, address] : math.symbols())
      symbols[jit->mangleAndIntern(name)] = llvm::orc::ExecutorSymbolDef(
          llvm::orc::ExecutorAddr(address),
          llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    checkLlvm(jit->getMainJITDylib().define(
                  llvm::orc::absoluteSymbols(std::move(symbols))),
              "cannot define the math functions in the JIT");
  }
};

SharedJit &sharedJit() {
  // Never destroyed: programs may outlive static destruction order.
  static SharedJit *shared = new SharedJit();
  return *shared;
}

void optimise(llvm::Module &module, llvm::TargetMachine &machine) {
  // Kernels are vectorised explicitly; LLVM's vectorisers and unrolling
  // would mostly add compile time. KILN_CPU_OPT=1 picks the cheaper O1
  // pipeline.
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = false;
  tuning.SLPVectorization = false;
  tuning.LoopUnrolling = false;
  const char *level = std::getenv("KILN_CPU_OPT");
  bool cheap = level && std::string(level) == "1";
  llvm::LoopAnalysisManager loopAnalyses;
  llvm::FunctionAnalysisManager functionAnalyses;
  llvm::CGSCCAnalysisManager cgsccAnalyses;
  llvm::ModuleAnalysisManager moduleAnalyses;
  llvm::PassBuilder builder(&machine, tuning);
  builder.registerModuleAnalyses(moduleAnalyses);
  builder.registerCGSCCAnalyses(cgsccAnalyses);
  builder.registerFunctionAnalyses(functionAnalyses);
  builder.registerLoopAnalyses(loopAnalyses);
  builder.crossRegisterProxies(loopAnalyses, functionAnalyses, cgsccAnalyses,
                               moduleAnalyses);
  llvm::ModulePassManager passes = builder.buildPerModuleDefaultPipeline(
      cheap ? llvm::OptimizationLevel::O1 : llvm::OptimizationLevel::O2);
  passes.run(module, moduleAnalyses);
}

std::string moduleText(const llvm::Module &module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  module.print(stream, nullptr);
  return text;
}

std::string assemblyOf(const llvm::Module &module,
                       llvm::TargetMachine &machine) {
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(module);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream stream(text);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, stream, nullptr,
                                  llvm::CodeGenFileType::AssemblyFile))
    return "; the target cannot emit assembly";
  passes.run(*copy);
  return std::string(text);
}

using KernelFunction = void (*)(char *const *, int64_t, int64_t);

/// Machine code in the JIT: removed when the last program using it goes.
struct LoadedCode {
  llvm::orc::ResourceTrackerSP tracker;
  ~LoadedCode() {
    if (tracker)
      llvm::consumeError(tracker->remove());
  }
};

struct KernelCache {
  struct Entry {
    std::weak_ptr<LoadedCode> code;
    KernelFunction function = nullptr;
  };
  std::mutex mutex;
  std::unordered_map<std::string, Entry> entries;
  KernelCacheStats stats;
  /// Entries of freed code are dropped when the map reaches this size (and
  /// it doubles over what stays): their keys, the kernels' IR text, would
  /// otherwise grow with every function a process compiles and drops.
  size_t pruneAt = 64;

  /// Drops the entries whose code is gone; says whether it ran. Needs `mutex`.
  bool pruneIfDue() {
    if (entries.size() < pruneAt)
      return false;
    for (auto entry = entries.begin(); entry != entries.end();)
      entry = entry->second.code.expired() ? entries.erase(entry)
                                           : std::next(entry);
    pruneAt = std::max<size_t>(64, 2 * entries.size());
    return true;
  }
};

KernelCache &kernelCache() {
  static KernelCache *cache = new KernelCache(); // outlives every program
  return *cache;
}

/// The key of a kernel: its function's LLVM IR before optimisation, under
/// one name. The IR is all its code depends on (the host is the process's).
std::string kernelKey(llvm::Function &function) {
  std::string name = function.getName().str();
  function.setName("kiln_kernel");
  std::string text;
  llvm::raw_string_ostream stream(text);
  function.print(stream);
  function.setName(name);
  // The define line names its attributes by a module-wide group number:
  // spell them out instead.
  size_t lineEnd = text.find('\n', text.find("define "));
  size_t group = text.rfind(" #", lineEnd);
  if (lineEnd != std::string::npos && group != std::string::npos &&
      group > text.find("define "))
    text.replace(group, text.find(" {", group) - group,
                 " " + function.getAttributes().getAsString(
                           llvm::AttributeList::FunctionIndex));
  // Metadata prints as slot numbers: add what each attachment holds.
  llvm::SmallVector<std::pair<unsigned, llvm::MDNode *>, 4> attached;
  for (llvm::Instruction &instruction : llvm::instructions(function)) {
    instruction.getAllMetadata(attached);
    for (const auto &[kind, node] : attached) {
      stream << kind << ' ';
      node->print(stream, function.getParent());
      stream << '\n';
    }
  }
  return text;
}

struct CompiledKernel {
  KernelFunction function = nullptr;
  int64_t parallelRange = 1;    // the [begin, end) the function takes
  int64_t work = 0;             // elements the kernel touches, roughly
  int64_t alignment = 1;        // chunk boundaries on the first outer range
  std::vector<int64_t> buffers; // the program buffer of each argument slot
};

} // namespace

struct CpuProgram::Impl {
  // Its own code and the cached code it shares.
  std::vector<std::shared_ptr<LoadedCode>> code;
  std::vector<std::optional<CompiledKernel>> kernels; // by step
  double compileMilliseconds = 0;
};

CpuProgram::CpuProgram() : impl_(std::make_unique<Impl>()) {}

CpuProgram::~CpuProgram() = default;

int64_t streamingBytes() { return sharedJit().host.streamingBytes; }

KernelCacheStats kernelCacheStats() {
  KernelCache &cache = kernelCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  KernelCacheStats stats = cache.stats;
  stats.live = 0;
  for (const auto &[key, entry] : cache.entries)
    stats.live += entry.code.expired() ? 0 : 1;
  return stats;
}

void clearKernelCache() {
  KernelCache &cache = kernelCache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.clear();
}

double CpuProgram::compileMilliseconds() const {
  return impl_->compileMilliseconds;
}

std::unique_ptr<CpuProgram> CpuProgram::compile(const loop::Program &program) {
  auto start = std::chrono::steady_clock::now();
  SharedJit &shared = sharedJit();
  const MathLibrary &math = MathLibrary::instance(shared.host.vectorBits);
  std::unique_ptr<CpuProgram> result(new CpuProgram());
  uint64_t programNumber = shared.programCount.fetch_add(1);

  auto context = std::make_unique<llvm::LLVMContext>();
  auto module = std::make_unique<llvm::Module>(
      "kiln_program_" + std::to_string(programNumber), *context);
  module->setDataLayout(shared.jit->getDataLayout());
  module->setTargetTriple(shared.jit->getTargetTriple().str());

  // IR logs show every kernel, so they bypass the cache.
  bool cached =
      !logEnabled("llvm") && !logEnabled("llvm_opt") && !logEnabled("asm");
  KernelCache &cache = kernelCache();
  std::unordered_map<std::string, size_t> firstStepOf; // key -> step
  std::vector<std::string> keys(program.steps.size());
  std::vector<size_t> sameAs(program.steps.size()); // step compiling its code
  std::vector<std::string> names(program.steps.size());
  result->impl_->kernels.resize(program.steps.size());
  for (size_t stepIndex = 0; stepIndex < program.steps.size(); ++stepIndex) {
    const loop::Step &step = program.steps[stepIndex];
    if (step.kind != loop::Step::Kind::Kernel)
      continue;
    const loop::Kernel &kernel = step.kernel;
    names[stepIndex] = "kiln_" + std::to_string(programNumber) + "_" +
                       std::to_string(stepIndex) + "_" + kernel.name;
    EmittedKernel emitted = emitKernel(*module, program, kernel,
                                       names[stepIndex], shared.host, math);
    CompiledKernel compiled;
    for (size_t level = 0; level < emitted.parallelDepth; ++level)
      compiled.parallelRange *= kernel.outerRanges[level];
    compiled.buffers = emitted.buffers;
    int64_t outerPoints = 1;
    for (int64_t range : kernel.outerRanges)
      outerPoints *= std::max<int64_t>(range, 0);
    int64_t inner = 0;
    for (const loop::Loop &loop : kernel.loops) {
      int64_t points = 1;
      for (int64_t range : loop.ranges)
        points *= std::max<int64_t>(range, 0);
      inner += points;
    }
    compiled.work = outerPoints * std::max<int64_t>(inner, 1);
    if (emitted.strategy == VectorStrategy::Outer &&
        kernel.outerRanges.size() == 1)
      compiled.alignment = emitted.lanes * emitted.unroll;
    sameAs[stepIndex] = stepIndex;
    if (cached) {
      std::string key = kernelKey(*emitted.function);
      auto found = firstStepOf.find(key);
      std::shared_ptr<LoadedCode> code;
      KernelFunction function = nullptr;
      if (found == firstStepOf.end()) {
        std::lock_guard<std::mutex> lock(cache.mutex);
        auto entry = cache.entries.find(key);
        if (entry != cache.entries.end()) {
          code = entry->second.code.lock();
          function = entry->second.function;
        }
      }
      if (found != firstStepOf.end() || code) {
        emitted.function->eraseFromParent();
        if (code) {
          result->impl_->code.push_back(std::move(code));
          compiled.function = function;
        } else {
          sameAs[stepIndex] = found->second;
        }
        std::lock_guard<std::mutex> lock(cache.mutex);
        ++cache.stats.reused;
      } else {
        firstStepOf.emplace(key, stepIndex);
        keys[stepIndex] = std::move(key);
      }
    }
    result->impl_->kernels[stepIndex] = compiled;
  }
  if (!firstStepOf.empty() || !cached) {
    auto ownCode = std::make_shared<LoadedCode>();
    if (logEnabled("llvm"))
      logArtifact("llvm", moduleText(*module));
    std::string problems;
    llvm::raw_string_ostream problemStream(problems);
    if (llvm::verifyModule(*module, &problemStream))
      throw Error("the CPU code generator made invalid LLVM IR: " + problems);
    {
      std::lock_guard<std::mutex> lock(shared.machineMutex);
      optimise(*module, *shared.machine);
      if (logEnabled("llvm_opt"))
        logArtifact("llvm_opt", moduleText(*module));
      if (logEnabled("asm"))
        logArtifact("asm", assemblyOf(*module, *shared.machine));
    }

    llvm::orc::JITDylib &dylib = shared.jit->getMainJITDylib();
    ownCode->tracker = dylib.createResourceTracker();
    checkLlvm(shared.jit->addIRModule(
                  ownCode->tracker, llvm::orc::ThreadSafeModule(
                                        std::move(module), std::move(context))),
              "cannot add the program's module to the JIT");
    result->impl_->code.push_back(ownCode);
    for (size_t stepIndex = 0; stepIndex < program.steps.size(); ++stepIndex) {
      std::optional<CompiledKernel> &kernel = result->impl_->kernels[stepIndex];
      if (!kernel || kernel->function || sameAs[stepIndex] != stepIndex)
        continue;
      auto address = unwrapLlvm(shared.jit->lookup(dylib, names[stepIndex]),
                                "cannot JIT-compile a kernel");
      kernel->function = address.toPtr<KernelFunction>();
      if (!cached)
        continue;
      std::lock_guard<std::mutex> lock(cache.mutex);
      cache.entries[keys[stepIndex]] = {ownCode, kernel->function};
      ++cache.stats.compiled;
      // The symbol names of removed code stay in ORC's string pool until
      // asked to go.
      if (cache.pruneIfDue())
        shared.jit->getExecutionSession()
            .getSymbolStringPool()
            ->clearDeadEntries();
    }
  }
  for (size_t stepIndex = 0; stepIndex < program.steps.size(); ++stepIndex)
    if (result->impl_->kernels[stepIndex] && sameAs[stepIndex] != stepIndex)
      result->impl_->kernels[stepIndex]->function =
          result->impl_->kernels[sameAs[stepIndex]]->function;
  result->impl_->compileMilliseconds =
      std::chrono::duration<double, std::milli>(
          std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

void CpuProgram::runKernel(size_t stepIndex,
                           char *const *programBuffers) const {
  if (stepIndex >= impl_->kernels.size() || !impl_->kernels[stepIndex])
    throw Error("CpuProgram::runKernel: step " + std::to_string(stepIndex) +
                " is not a kernel");
  const CompiledKernel &kernel = *impl_->kernels[stepIndex];
  llvm::SmallVector<char *, 16> arguments;
  for (int64_t buffer : kernel.buffers)
    arguments.push_back(programBuffers[buffer]);
  char *const *buffers = arguments.data();
  int64_t outer = kernel.parallelRange;
  ThreadPool &pool = ThreadPool::instance();
  int threads = pool.threadCount();
  constexpr int64_t kInlineWork = 32768;
  if (threads == 1 || kernel.work < kInlineWork || outer < 2) {
    kernel.function(buffers, 0, outer);
    return;
  }
  // A few chunks per thread balance uneven progress; chunk boundaries on
  // whole vectors keep every chunk but the last free of scalar tails.
  int64_t chunkCount = std::min<int64_t>(threads * 4, outer);
  int64_t chunkSize = (outer + chunkCount - 1) / chunkCount;
  chunkSize =
      (chunkSize + kernel.alignment - 1) / kernel.alignment * kernel.alignment;
  chunkCount = (outer + chunkSize - 1) / chunkSize;
  pool.run(chunkCount, [&](int64_t chunk) {
    int64_t begin = chunk * chunkSize;
    kernel.function(buffers, begin, std::min(outer, begin + chunkSize));
  });
}

void setNumThreads(int count) { ThreadPool::instance().setThreadCount(count); }

int numThreads() { return ThreadPool::instance().threadCount(); }

bool threadsUseOpenMp() { return ThreadPool::instance().usesOpenMp(); }

} // namespace kiln::backend
