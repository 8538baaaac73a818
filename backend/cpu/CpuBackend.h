// The CPU backend: compiles the kernels of a loop-IR program to machine code
// (LLVM IR, the new pass manager, ORC LLJIT) and runs them on a thread pool.
// Depends on backend/cpu/CpuSchedule.h, ir/LoopIR.h.
#pragma once

#include "backend/cpu/CpuSchedule.h"
#include "ir/LoopIR.h"

#include <memory>
#include <vector>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace kiln::backend {

/// Machine code for the kernels of one loop-IR program; the code is freed
/// when this object is.
class CpuProgram {
public:
  /// Compiles every Kernel step of `program` whose code is not cached (one
  /// LLVM module, optimised with the new pass manager at O2-like level,
  /// JIT-compiled by ORC).
  /// Throws kiln::Unsupported for what the codegen cannot do.
  /// Kernels run as `schedule` (scheduleForCpu of this program) says.
  static std::unique_ptr<CpuProgram> compile(const loop::Program &program,
                                             const CpuSchedule &schedule);
  /// The same under the program's schedule for this host.
  static std::unique_ptr<CpuProgram> compile(const loop::Program &program);
  ~CpuProgram();
  /// Runs the kernel of step `stepIndex` (must be a Kernel step) on
  /// `buffers` (the data pointer of every program buffer, indexed by buffer
  /// number), splitting its first outer range across the thread pool.
  /// `symbols`: the call's size-symbol values, for a program whose sizes
  /// vary between calls.
  void runKernel(size_t stepIndex, char *const *buffers,
                 const std::vector<int64_t> *symbols = nullptr) const;
  /// Milliseconds the compile took (IR build, optimisation, JIT), for
  /// benchmarks.
  double compileMilliseconds() const;

private:
  CpuProgram();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Optimises a module of CPU kernels as the JIT does (the new pass manager
/// at O2, without LLVM's vectorisers: kernels are vectorised explicitly).
void optimiseCpuModule(llvm::Module &module, llvm::TargetMachine &machine);

/// The process-wide cache of compiled kernels, keyed by their LLVM IR
/// before optimisation: a program whose kernel has the same IR as a live
/// program's (the layers of a model, a recompile for new guards) shares
/// its machine code instead of compiling it again.
struct KernelCacheStats {
  int64_t compiled = 0; // kernels optimised and JIT-compiled
  int64_t reused = 0;   // kernels that took existing code
  int64_t live = 0;     // cached kernels whose code is still loaded
};
KernelCacheStats kernelCacheStats();
/// Forgets every cached kernel (code in use stays loaded until its programs
/// are freed), so that the next compile starts cold: for benchmarks.
void clearKernelCache();

/// The output size in bytes from which kernels store past the caches
/// (half the last-level cache, or KILN_CPU_STREAMING_BYTES; 0: never).
int64_t streamingBytes();

/// The tiles a GEMM on `threads` threads aims at (GemmSpec::targetTiles):
/// one a thread on one or two threads, four a thread on more.
int64_t gemmTargetTiles(int threads);

/// The threads kernels run on (backend/cpu/ThreadPool.h): torch's OpenMP
/// team where it is loaded, with OpenMP's thread count unless
/// KILN_NUM_THREADS or setNumThreads sets kiln's own; setNumThreads(0)
/// returns to the default.
void setNumThreads(int count);
int numThreads();
bool threadsUseOpenMp();

} // namespace kiln::backend
