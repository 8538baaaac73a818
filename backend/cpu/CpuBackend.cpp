// The CPU backend's compile pipeline: emit every kernel into one module, take
// the code of kernels already compiled from the kernel cache, optimise the
// rest with the new pass manager, JIT them into the process's CpuJit under
// the program's own code handle, and run kernels on the pool.
// Depends on backend/cpu/*.h, ir/, LLVM.
#include "backend/cpu/CpuBackend.h"

#include "backend/cpu/CpuContraction.h"
#include "backend/cpu/CpuJit.h"
#include "backend/cpu/CpuKernelEmitter.h"
#include "backend/cpu/MathLibrary.h"
#include "backend/cpu/ThreadPool.h"
#include "backend/llvm/KernelKey.h"
#include "ir/Error.h"
#include "ir/Logging.h"

#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/SmallVectorMemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace kiln::backend {
namespace {} // namespace

void optimiseCpuModule(llvm::Module &module, llvm::TargetMachine &machine) {
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

namespace {

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

// One kernel's module on its way to machine code.
struct ModuleToCompile {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  std::unique_ptr<llvm::MemoryBuffer> object;
  std::string optimisedText, assembly; // when their logs are on
};

// Verifies, optimises and compiles `pending` to an object file with
// `machine` (one per thread: target machines are not thread-safe); throws
// kiln::Error where LLVM cannot.
void compileModule(ModuleToCompile &pending, llvm::TargetMachine &machine) {
  llvm::Module &module = *pending.module;
  std::string problems;
  llvm::raw_string_ostream problemStream(problems);
  if (llvm::verifyModule(module, &problemStream)) {
    throw Error("the CPU code generator made invalid LLVM IR: " + problems);
  }
  optimiseCpuModule(module, machine);
  if (logEnabled("llvm_opt"))
    pending.optimisedText = moduleText(module);
  if (logEnabled("asm"))
    pending.assembly = assemblyOf(module, machine);
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, stream, nullptr,
                                  llvm::CodeGenFileType::ObjectFile)) {
    throw Error("the host's LLVM target cannot emit object files");
  }
  passes.run(module);
  pending.object = std::make_unique<llvm::SmallVectorMemoryBuffer>(
      std::move(buffer), module.getName(), /*RequiresNullTerminator=*/false);
}

// Threads that compile a program's modules: KILN_COMPILE_THREADS, or one
// per hardware thread.
unsigned compileThreadLimit() {
  if (const char *text = std::getenv("KILN_COMPILE_THREADS")) {
    int threads = std::atoi(text);
    if (threads >= 1)
      return static_cast<unsigned>(threads);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Calls work(thread, index) for every index below `count`, on up to
// compileThreadLimit() threads (the caller's among them), indices taken in
// order as threads free up; rethrows the first failure (its own type, so
// that Unsupported stays Unsupported). Returns the threads used.
unsigned
runOnThreads(size_t count,
             const std::function<void(unsigned thread, size_t index)> &work) {
  unsigned threads =
      static_cast<unsigned>(std::min<size_t>(compileThreadLimit(), count));
  std::atomic<size_t> next{0};
  std::mutex failureMutex;
  std::exception_ptr failure;
  auto worker = [&](unsigned thread) {
    try {
      for (size_t index = next++; index < count; index = next++)
        work(thread, index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failureMutex);
      if (!failure)
        failure = std::current_exception();
      next = count; // the others stop too
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned thread = 1; thread < threads; ++thread)
    helpers.emplace_back(worker, thread);
  worker(0);
  for (std::thread &helper : helpers)
    helper.join();
  if (failure)
    std::rethrow_exception(failure);
  return threads;
}

using KernelFunction = void (*)(char *const *, int64_t, int64_t);

// Numbers the programs' modules and kernel names.
std::atomic<uint64_t> programCount{0};

struct KernelCache {
  struct Entry {
    std::weak_ptr<JitCode> code;
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

struct CompiledKernel {
  KernelFunction function = nullptr;
  // The [begin, end) the function takes, and the elements the kernel
  // touches (roughly): expressions over the size symbols where sizes vary.
  SymSize parallelRange = size::constant(1);
  SymSize work = size::constant(0);
  int64_t alignment = 1;        // chunk boundaries on the first outer range
  bool equalUnits = false;      // units of equal work (equalChunks)
  std::vector<int64_t> buffers; // the program buffer of each argument slot
};

} // namespace

// Four tiles a thread let the pool balance uneven progress, but each tile
// packs its k blocks of B again (and, where A is packed, a narrower column
// block packs A again): on one or two threads, where a tile is a large
// share of the work, one a thread packs least. On the 16-core Xeon at 2
// threads, one process (GFLOP/s, one tile a thread against two; torch's
// MKL): Linear 512x256 -> 768 316 / 301 (314), -> 256 300 / 286 (297), ->
// 1024 273 / 243 (275), 512x1024 -> 256 268 / 253 (283), the 8192-word
// head 271 / 277 (270), 1024^3 280 / 271 (301); four a thread 289, 276,
// 281, 233, 268, 289 (session 33: two against four, 512x1024 @ 1024x256
// 257-274 against 221-239). At 8 and 16 threads fewer than four a thread
// lost up to 20%.
int64_t gemmTargetTiles(int threads) {
  threads = std::max(threads, 1);
  return threads <= 2 ? threads : 4 * int64_t(threads);
}

struct CpuProgram::Impl {
  // Its own code and the cached code it shares.
  std::vector<std::shared_ptr<JitCode>> code;
  std::vector<std::optional<CompiledKernel>> kernels; // by step
  double compileMilliseconds = 0;
};

CpuProgram::CpuProgram() : impl_(std::make_unique<Impl>()) {}

CpuProgram::~CpuProgram() = default;

int64_t streamingBytes() { return hostTarget().streamingBytes; }

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
  return compile(program, scheduleForCpu(program, hostTarget()));
}

std::unique_ptr<CpuProgram> CpuProgram::compile(const loop::Program &program,
                                                const CpuSchedule &schedule) {
  PhaseTimes times("CPU code generation (" +
                   std::to_string(program.steps.size()) + " steps)");
  CpuJit &jit = CpuJit::instance();
  const MathLibrary &math = MathLibrary::instance(jit.host().vectorBits);
  std::unique_ptr<CpuProgram> result(new CpuProgram());
  uint64_t programNumber = programCount.fetch_add(1);
  // IR logs show every kernel, so they bypass the cache.
  bool cached =
      !logEnabled("llvm") && !logEnabled("llvm_opt") && !logEnabled("asm");

  // Each kernel is a module of its own, in its own context, so that kernels
  // emit, optimise and compile on several threads. Emission only reads the
  // program: its ExprContext is not safe to grow from several threads.
  std::vector<size_t> kernelSteps;
  for (size_t stepIndex = 0; stepIndex < program.steps.size(); ++stepIndex)
    if (program.steps[stepIndex].kind == loop::Step::Kind::Kernel)
      kernelSteps.push_back(stepIndex);
  std::vector<std::string> names(program.steps.size());
  std::vector<ModuleToCompile> modules(kernelSteps.size());
  std::vector<std::string> keys(kernelSteps.size());
  result->impl_->kernels.resize(program.steps.size());
  for (size_t stepIndex : kernelSteps)
    result->impl_->kernels[stepIndex] = CompiledKernel{};
  struct ReadOnlyExprs {
    loop::ExprContext &exprs;
    explicit ReadOnlyExprs(loop::ExprContext &context) : exprs(context) {
      exprs.setReadOnly(true);
    }
    ~ReadOnlyExprs() { exprs.setReadOnly(false); }
  };
  int poolThreads = ThreadPool::instance().threadCount();
  unsigned threads;
  {
    ReadOnlyExprs readOnly(*program.exprs);
    threads = runOnThreads(kernelSteps.size(), [&](unsigned, size_t index) {
      size_t stepIndex = kernelSteps[index];
      const loop::Kernel &kernel = program.steps[stepIndex].kernel;
      names[stepIndex] = "kiln_" + std::to_string(programNumber) + "_" +
                         std::to_string(stepIndex) + "_" + kernel.name;
      ModuleToCompile &pending = modules[index];
      pending.context = std::make_unique<llvm::LLVMContext>();
      pending.module =
          std::make_unique<llvm::Module>(names[stepIndex], *pending.context);
      jit.prepare(*pending.module);
      EmittedKernel emitted =
          emitCpuStep(*pending.module, program, kernel,
                      schedule.kernel(stepIndex), names[stepIndex], jit.host(),
                      math, gemmTargetTiles(poolThreads), poolThreads);
      CompiledKernel &compiled = *result->impl_->kernels[stepIndex];
      compiled.buffers = emitted.buffers;
      compiled.parallelRange = emitted.parallelRange;
      compiled.work = emitted.work;
      compiled.alignment = emitted.alignment;
      compiled.equalUnits = emitted.equalUnits;
      if (cached)
        keys[index] =
            emitted.key.empty() ? kernelKey(*emitted.function) : emitted.key;
    });
  }
  times.lap("LLVM IR emission (" + std::to_string(threads) + " threads)");

  // Kernels whose code is cached, or the same as an earlier kernel's, are
  // not compiled again.
  KernelCache &cache = kernelCache();
  std::unordered_map<std::string, size_t> firstStepOf; // key -> step
  std::vector<size_t> sameAs(program.steps.size());    // step compiling it
  std::vector<ModuleToCompile> toCompile;
  std::vector<size_t> stepOfModule;
  std::vector<std::string> keyOfModule;
  for (size_t index = 0; index < kernelSteps.size(); ++index) {
    size_t stepIndex = kernelSteps[index];
    sameAs[stepIndex] = stepIndex;
    if (cached) {
      const std::string &key = keys[index];
      auto found = firstStepOf.find(key);
      std::shared_ptr<JitCode> code;
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
        if (code) {
          result->impl_->code.push_back(std::move(code));
          result->impl_->kernels[stepIndex]->function = function;
        } else {
          sameAs[stepIndex] = found->second;
        }
        std::lock_guard<std::mutex> lock(cache.mutex);
        ++cache.stats.reused;
        continue;
      }
      firstStepOf.emplace(key, stepIndex);
    }
    toCompile.push_back(std::move(modules[index]));
    stepOfModule.push_back(stepIndex);
    keyOfModule.push_back(std::move(keys[index]));
  }
  modules.clear();
  times.lap("kernel cache lookup");

  if (!toCompile.empty()) {
    if (logEnabled("llvm")) {
      std::string text;
      for (const ModuleToCompile &pending : toCompile)
        text += moduleText(*pending.module);
      logArtifact("llvm", text);
    }
    std::vector<std::unique_ptr<llvm::TargetMachine>> machines(
        compileThreadLimit());
    threads =
        runOnThreads(toCompile.size(), [&](unsigned thread, size_t index) {
          if (!machines[thread])
            machines[thread] = jit.newTargetMachine();
          compileModule(toCompile[index], *machines[thread]);
        });
    times.lap("LLVM optimisation and machine code (" +
              std::to_string(toCompile.size()) + " modules, " +
              std::to_string(threads) + " threads)");
    if (logEnabled("llvm_opt") || logEnabled("asm")) {
      std::string optimised, assembly;
      for (const ModuleToCompile &pending : toCompile) {
        optimised += pending.optimisedText;
        assembly += pending.assembly;
      }
      if (logEnabled("llvm_opt"))
        logArtifact("llvm_opt", optimised);
      if (logEnabled("asm"))
        logArtifact("asm", assembly);
    }
    std::vector<std::unique_ptr<llvm::MemoryBuffer>> objects;
    for (ModuleToCompile &pending : toCompile)
      objects.push_back(std::move(pending.object));
    toCompile.clear();
    std::shared_ptr<JitCode> ownCode = jit.addObjects(std::move(objects));
    result->impl_->code.push_back(ownCode);
    for (size_t position = 0; position < stepOfModule.size(); ++position) {
      size_t stepIndex = stepOfModule[position];
      std::optional<CompiledKernel> &kernel = result->impl_->kernels[stepIndex];
      kernel->function =
          reinterpret_cast<KernelFunction>(jit.lookup(names[stepIndex]));
      if (!cached)
        continue;
      std::lock_guard<std::mutex> lock(cache.mutex);
      cache.entries[keyOfModule[position]] = {ownCode, kernel->function};
      ++cache.stats.compiled;
      // The symbol names of removed code stay in ORC's string pool until
      // asked to go.
      if (cache.pruneIfDue())
        jit.releaseDeadSymbols();
    }
    times.lap("linking");
  }
  for (size_t stepIndex : kernelSteps)
    if (sameAs[stepIndex] != stepIndex)
      result->impl_->kernels[stepIndex]->function =
          result->impl_->kernels[sameAs[stepIndex]]->function;
  result->impl_->compileMilliseconds = times.totalMilliseconds();
  times.log();
  return result;
}

void CpuProgram::runKernel(size_t stepIndex, char *const *programBuffers,
                           const std::vector<int64_t> *symbols) const {
  if (stepIndex >= impl_->kernels.size() || !impl_->kernels[stepIndex])
    throw Error("CpuProgram::runKernel: step " + std::to_string(stepIndex) +
                " is not a kernel");
  const CompiledKernel &kernel = *impl_->kernels[stepIndex];
  auto valueOf = [&](SymSize size) {
    if (auto constant = size->constant())
      return *constant;
    if (!symbols)
      throw Error("CpuProgram::runKernel: step " + std::to_string(stepIndex) +
                  " has sizes that vary between calls, and the call gives "
                  "no symbol values");
    return size::evaluate(size, *symbols);
  };
  llvm::SmallVector<char *, 16> arguments;
  for (int64_t buffer : kernel.buffers) {
    if (buffer != kSymbolSlot) {
      arguments.push_back(programBuffers[buffer]);
      continue;
    }
    if (!symbols)
      throw Error("CpuProgram::runKernel: step " + std::to_string(stepIndex) +
                  " reads symbol values the call does not give");
    arguments.push_back(
        reinterpret_cast<char *>(const_cast<int64_t *>(symbols->data())));
  }
  char *const *buffers = arguments.data();
  int64_t outer = valueOf(kernel.parallelRange);
  ThreadPool &pool = ThreadPool::instance();
  int threads = pool.threadCount();
  constexpr int64_t kInlineWork = 32768;
  if (threads == 1 || valueOf(kernel.work) < kInlineWork || outer < 2) {
    kernel.function(buffers, 0, outer);
    return;
  }
  // A few chunks per thread balance uneven progress; chunk boundaries on
  // whole vectors keep every chunk but the last free of scalar tails. Units
  // of equal work (a GEMM's tiles) go in chunks of equal counts.
  int64_t chunkCount = std::min<int64_t>(threads * 4, outer);
  int64_t chunkSize = (outer + chunkCount - 1) / chunkCount;
  chunkSize =
      (chunkSize + kernel.alignment - 1) / kernel.alignment * kernel.alignment;
  if (kernel.equalUnits)
    chunkSize = outer / equalChunks(outer, threads);
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
