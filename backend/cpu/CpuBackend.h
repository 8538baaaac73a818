// The CPU backend: compiles the kernels of a loop-IR program to machine code
// (LLVM IR, the new pass manager, ORC LLJIT) and runs them on a thread pool.
// Depends on ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

#include <memory>

namespace kiln::backend {

/// Machine code for the kernels of one loop-IR program; the code is freed
/// when this object is.
class CpuProgram {
public:
  /// Compiles every Kernel step of `program` (one LLVM module, optimised
  /// with the new pass manager at O2-like level, JIT-compiled by ORC).
  /// Throws kiln::Unsupported for what the codegen cannot do.
  static std::unique_ptr<CpuProgram> compile(const loop::Program &program);
  ~CpuProgram();
  /// Runs the kernel of step `stepIndex` (must be a Kernel step) on
  /// `buffers` (the data pointer of every program buffer, indexed by buffer
  /// number), splitting its first outer range across the thread pool.
  void runKernel(size_t stepIndex, char *const *buffers) const;
  /// Milliseconds the compile took (IR build, optimisation, JIT), for
  /// benchmarks.
  double compileMilliseconds() const;

private:
  CpuProgram();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The process-wide pool: persistent worker threads; thread count from
/// KILN_NUM_THREADS, else std::thread::hardware_concurrency(); setNumThreads
/// for tests/benchmarks.
void setNumThreads(int count);
int numThreads();

} // namespace kiln::backend
