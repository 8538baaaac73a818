// Contraction kernels (loop::Kernel::contraction) as GEMMs: recognises the
// matrix product a kernel's loops compute, with the layout of each operand,
// and emits it through the GEMM emitter; and the one choice, per kernel step,
// between that and the loop emitter. Depends on
// backend/cpu/{CpuKernelEmitter,GemmEmitter,HostTarget}.h, ir/LoopIR.h.
#pragma once

#include "backend/cpu/CpuKernelEmitter.h"
#include "backend/cpu/GemmEmitter.h"
#include "backend/cpu/HostTarget.h"
#include "ir/LoopIR.h"

#include <optional>
#include <unordered_set>

namespace kiln::backend {

/// The GEMM a contraction kernel computes: its spec (strides in elements),
/// the element offset of each operand from its buffer's data pointer, and
/// the buffers of A, B and C, and what the kernel stores there. Nullopt
/// where the kernel is not a float32 product of strided operands (the loop
/// emitter compiles it then).
struct MatchedContraction {
  GemmSpec spec;
  int64_t aOffset = 0, bOffset = 0, cOffset = 0;
  int64_t a = -1, b = -1, c = -1; // program buffers
  /// What C's elements are where not the sum itself (a bias, an activation,
  /// a residual added: fused into the product): an expression over the sum
  /// (reduction 0), the outer variables and loads of `epilogueBuffers`.
  const loop::Expr *epilogue = nullptr;
  std::vector<int64_t> epilogueBuffers;
};
std::optional<MatchedContraction> matchContraction(const loop::Program &program,
                                                   const loop::Kernel &kernel);

/// Emits `kernel` as a GEMM when matchContraction recognises it: a
/// function `name` with the loop kernels' ABI, its buffers A, B, C and the
/// epilogue's, its own parallel range (about `targetTiles` tiles, for a pool
/// of `threads` threads; 0: not known) and work.
/// Where B's root buffer is among `fixedBuffers` (contents that never
/// change while the code lives: an exported model's weights), the GEMM
/// reads B packed ahead (EmittedKernel::packB).
std::optional<EmittedKernel>
emitContraction(llvm::Module &module, const loop::Program &program,
                const loop::Kernel &kernel, const std::string &name,
                const HostTarget &host, const MathLibrary &math,
                int64_t targetTiles, int threads,
                const std::unordered_set<int64_t> *fixedBuffers = nullptr);

/// One kernel step for the CPU, as the JIT and export both emit it: a GEMM
/// where `kernel` is a contraction emitContraction recognises, else the loop
/// emitter's code under `schedule`; either way with its parallel range,
/// work and chunk alignment filled in.
EmittedKernel
emitCpuStep(llvm::Module &module, const loop::Program &program,
            const loop::Kernel &kernel, const KernelSchedule &schedule,
            const std::string &name, const HostTarget &host,
            const MathLibrary &math, int64_t targetTiles, int threads,
            const std::unordered_set<int64_t> *fixedBuffers = nullptr);

} // namespace kiln::backend
