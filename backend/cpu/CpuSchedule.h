// The CPU schedule pass: per kernel, vector strategy, lanes, unroll, parallel
// split, streamed store and carried values, as data to print and to test.
// Depends on backend/cpu/HostTarget.h, ir/LoopIR.h.
#pragma once

#include "backend/cpu/HostTarget.h"
#include "ir/LoopIR.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::backend {

enum class VectorStrategy : uint8_t {
  Scalar,
  Inner, // the last variable of each loop with contiguous loads
  Outer, // the last outer variable: several outer points at once
};

std::string_view vectorStrategyName(VectorStrategy strategy);

/// The most points of a loop whose values are carried (stack arrays of
/// that many elements at most).
constexpr int64_t kMaxCarried = 16384;

/// A value a loop computes that later loops of the same outer point compute
/// again (softmax's exp): the producer stores it to a stack array by
/// position, the consumers load it.
struct CarriedValue {
  const loop::Expr *expr = nullptr;
  size_t producer = 0;           // the loop that computes it
  std::vector<size_t> consumers; // the later loops that load it
};

/// How one kernel runs.
struct KernelSchedule {
  std::string name; // the kernel's, for logs
  VectorStrategy strategy = VectorStrategy::Scalar;
  int lanes = 1;  // elements of one vector (1: scalar)
  int unroll = 1; // vectors one step of a vector loop covers
  /// By loop: whether the Inner strategy vectorises its innermost variable.
  std::vector<bool> innerVectorLoop;
  /// The function's [begin, end) arguments range over the first
  /// `parallelDepth` outer loops flattened (row-major); 0 without any.
  size_t parallelDepth = 0;
  /// The store written with non-temporal vector stores (nullptr: none),
  /// the loop it is in, and the bytes its vector stores are aligned to.
  const loop::Store *streamedStore = nullptr;
  size_t streamedLoop = 0;
  int64_t streamAlignment = 0;
  std::string streamedName; // its buffer's name, for logs
  std::vector<CarriedValue> carried;
  /// Loads that walk the outer variable before the vectorised one (u)
  /// contiguously and the vectorised one (v) by a stride: a transpose's
  /// reads. Where there are any, u and v are taken in lanes x lanes tiles:
  /// each such load is `lanes` contiguous vectors along u, transposed in
  /// registers, and u is counted in tiles in the parallel range.
  std::vector<const loop::Expr *> transposedLoads;
  /// Whether float32 divisions by constants are products by the reciprocal
  /// with one correction (ExprEmitter::quotientByConstant): where the
  /// kernel has two or more divider operations per point (divisions,
  /// square roots, tanh, sigmoid), which share the one divider of a core.
  /// A lone one is a division: its one instruction costs less than the
  /// correction's seven (hardswish of 1M floats on 1 thread, AMD EPYC: 140
  /// us against 198).
  bool constantQuotientsAsProducts = false;
  /// Where not 0, the vectorised outer loop runs inside each point of the
  /// reduction loops (Outer strategy), `rowwiseColumns` of its points at a
  /// time: each reduction accumulates into a stack array by vectorised
  /// point, and the loops that store run over the arrays afterwards. A
  /// column sum then reads runs of whole rows one after another instead of
  /// a strip of columns down every row, a page apart (x.sum(0) of
  /// 8192x1024 float32 on 1 thread of the 2-core EPYC: 6.2 ms by strips,
  /// 3.3 by rows, a row sum's time).
  int64_t rowwiseColumns = 0;
  /// By loop: whether its contiguous vector loads prefetch the lines
  /// `prefetchBytes` further on (0: no loop does), where the loop computes
  /// more than one operation per element it loads (planPrefetch).
  std::vector<bool> prefetchLoop;
  int64_t prefetchBytes = 0;

  /// The vector widths a vector loop steps by, widest first: an unrolled
  /// one, then single vectors.
  std::vector<int> vectorWidths() const;
  /// The extent of outer loop `level` in the parallel range: its range, or
  /// its tiles where transposedLoads tiles it.
  SymSize parallelExtent(const loop::Kernel &kernel, size_t level) const;
};

/// A schedule for every Kernel step of one program.
struct CpuSchedule {
  /// By step: a record for each Kernel step, nullopt for the others.
  std::vector<std::optional<KernelSchedule>> kernels;
  /// The record of step `step`; throws kiln::Error where there is none.
  const KernelSchedule &kernel(size_t step) const;
  /// One line per kernel: "step 3 add_1: vector=inner lanes=8 unroll=4
  /// parallel=1 stream=buf2 carried=1", and " transposed=1" after it for a
  /// kernel with transposed loads, " prefetch=4096" for one that
  /// prefetches.
  std::string str() const;
};

/// Splits the kernels whose points are too few to keep `threads` threads
/// busy and whose first loop reduces many elements (a sum of a whole
/// tensor, the norms of a few rows) into partials over chunks of that loop
/// and a kernel that combines them (splitReduction), so that the threads
/// share the reduction; and so the column reductions (columnReduction)
/// whose points before the columns are fewer than the threads, so that
/// each thread reads whole rows of its own. Returns the number split.
/// Where threads < 2, none.
int64_t splitReductionsForCpu(loop::Program &program, int threads);

/// Whether the first loop of `kernel` reduces down columns: one of its
/// reductions loads elements neighbouring along the last outer variable
/// and moving with the loop's variables (x.sum(0), a [B, T, C] mean over
/// T).
bool columnReduction(const loop::Kernel &kernel);

/// Decides how every kernel of `program` runs on `host`. The program must
/// outlive the schedule (records point at its stores and expressions).
CpuSchedule scheduleForCpu(const loop::Program &program,
                           const HostTarget &host);

} // namespace kiln::backend
