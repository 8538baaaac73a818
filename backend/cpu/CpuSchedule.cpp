// The CPU schedule pass: vector strategy by instruction estimates, parallel
// split, streaming stores and carried values, per kernel.
// Depends on backend/cpu/CpuSchedule.h, backend/llvm/LlvmTypes.h,
// backend/llvm/MathFunctionName.h, backend/llvm/ReductionAlgebra.h, ir/.
#include "backend/cpu/CpuSchedule.h"

#include "backend/llvm/LlvmTypes.h"
#include "backend/llvm/MathFunctionName.h"
#include "backend/llvm/ReductionAlgebra.h"
#include "ir/Error.h"
#include "passes/Scheduler.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace kiln::backend {
namespace {

using loop::BinaryOp;
using loop::Expr;
using loop::ExprKind;
using loop::UnaryOp;

// The arithmetic nodes of a value, outside the index expressions of its loads.
int64_t countOperations(const Expr *value) {
  std::unordered_set<const Expr *> seen;
  int64_t count = 0;
  std::function<void(const Expr *)> visit = [&](const Expr *node) {
    if (!seen.insert(node).second || node->kind() == ExprKind::Load)
      return;
    if (node->kind() != ExprKind::Constant && node->kind() != ExprKind::Var &&
        node->kind() != ExprKind::ReductionValue)
      ++count;
    for (const Expr *operand : node->operands())
      visit(operand);
  };
  visit(value);
  return count;
}

// Instructions a value's arithmetic takes per point, roughly: a call of the
// math library (inline polynomials) counts kMathCallCost.
constexpr int64_t kMathCallCost = 16;
int64_t bodyCost(const Expr *value, std::unordered_set<const Expr *> &seen) {
  int64_t cost = 0;
  std::function<void(const Expr *)> visit = [&](const Expr *node) {
    if (!seen.insert(node).second || node->operands().empty())
      return;
    bool call = node->kind() == ExprKind::Unary &&
                mathFunctionName(node->unaryOp()) != nullptr;
    cost += call ? kMathCallCost : 1;
    for (const Expr *operand : node->operands())
      visit(operand);
  };
  visit(value);
  return cost;
}

// Past this many instructions per point a loop body has independent work
// enough to fill the pipelines: unrolling it gains nothing and multiplies
// the machine code the JIT makes (instruction selection and register
// allocation of long bodies cost more than linear time).
constexpr int64_t kUnrolledBodyLimit = 256;

// Picks how to vectorise by estimating the instructions each choice issues
// per outer point. Loops whose innermost variable has no contiguous access
// stay scalar under the inner strategy.
void chooseStrategy(KernelSchedule &schedule, const loop::Program &program,
                    const loop::Kernel &kernel, const HostTarget &host) {
  int64_t outerCount = static_cast<int64_t>(kernel.outerRanges.size());
  // One walk over every access: what each loop does per point, counted
  // before the vector width (which depends on the widest type) is known.
  struct LoopCounts {
    double trip = 1, accesses = 0, operations = 0;
    double outerGathers = 0, innerGathers = 0;
    // Loads whose lanes are 2 to 4 elements apart: one span shuffled (AVX
    // and up), about one instruction a vector more than a contiguous load.
    double outerStrided = 0, innerStrided = 0;
  };
  std::vector<LoopCounts> counts(kernel.loops.size());
  // Each loop's innermost range where known: whole vectors cover only part
  // of it (none of a pool's 2 taps), the rest is scalar points.
  std::vector<std::optional<int64_t>> innermost(kernel.loops.size());
  int maxBytes = 4;
  int64_t lastOuter = outerCount - 1;
  bool outerContiguous = false;
  schedule.innerVectorLoop.assign(kernel.loops.size(), false);
  for (size_t loopIndex = 0; loopIndex < kernel.loops.size(); ++loopIndex) {
    const loop::Loop &loop = kernel.loops[loopIndex];
    LoopCounts &count = counts[loopIndex];
    int64_t lastVar = outerCount + static_cast<int64_t>(loop.ranges.size()) - 1;
    for (int64_t range : program.hints(loop.ranges))
      count.trip *= static_cast<double>(std::max<int64_t>(range, 1));
    if (!loop.ranges.empty())
      innermost[loopIndex] = loop.ranges.back()->constant();
    int64_t contiguous = 0, other = 0;
    // A gather when the index walks `var` neither contiguously nor not at
    // all; true when it walks it contiguously.
    auto classify = [&host](const Expr *index, int64_t var, double &gathers,
                            double &strided) {
      std::optional<int64_t> coefficient = loop::affineCoefficient(index, var);
      if (coefficient && *coefficient >= 2 && *coefficient <= 4 &&
          host.vectorBits >= 256)
        strided += 1;
      else if (!coefficient || (*coefficient != 0 && *coefficient != 1))
        gathers += 1;
      return coefficient && *coefficient == 1;
    };
    auto visitIndex = [&](const Expr *index, DType dtype, bool widens = true) {
      if (widens)
        maxBytes = std::max(maxBytes, computeBytes(dtype));
      count.accesses += 1;
      if (lastOuter >= 0 &&
          classify(index, lastOuter, count.outerGathers, count.outerStrided))
        outerContiguous = true;
      if (!loop.ranges.empty()) {
        double gathers = 0, strided = 0;
        if (classify(index, lastVar, gathers, strided))
          ++contiguous;
        else if (gathers > 0 || strided > 0)
          ++other;
        count.innerGathers += gathers;
        count.innerStrided += strided;
      }
    };
    // A load inside another load's index (an embedding's row number) is
    // address arithmetic, not data of the vectors: its type does not
    // narrow the lanes (int64 ids would halve a float kernel's).
    auto visitValue = [&](const Expr *value) {
      count.operations += static_cast<double>(countOperations(value));
      std::unordered_set<const Expr *> data;
      loop::anyNode(
          value,
          [&](const Expr *node) {
            if (node->kind() == ExprKind::Load)
              data.insert(node);
            return false;
          },
          [](const Expr *node) { return node->kind() != ExprKind::Load; });
      for (const Expr *load : loop::loadsOf(value))
        visitIndex(load->index(), load->dtype(), data.count(load) > 0);
    };
    for (const loop::Reduction &reduction : loop.reductions)
      visitValue(reduction.value);
    for (const loop::Store &store : loop.stores) {
      visitValue(store.value);
      visitIndex(store.index, program.buffers.at(store.buffer).dtype());
    }
    schedule.innerVectorLoop[loopIndex] =
        !loop.ranges.empty() && contiguous > 0 && contiguous >= other;
  }

  // Instructions per outer point: an access costs one per vector, or one
  // per lane when it is a gather or scatter; an operation one per vector.
  int lanes = std::max(2, host.vectorBits / (8 * maxBytes));
  double outerCost = 0, innerCost = 0, scalarCost = 0;
  for (size_t loopIndex = 0; loopIndex < counts.size(); ++loopIndex) {
    const LoopCounts &count = counts[loopIndex];
    double scalar = count.trip * (count.accesses + count.operations);
    auto vectorCost = [&](double gathers, double strided) {
      return count.trip *
             (count.accesses + gathers * (lanes - 1) + strided +
              count.operations) /
             lanes;
    };
    scalarCost += scalar;
    outerCost += vectorCost(count.outerGathers, count.outerStrided);
    double share = 1;
    if (const std::optional<int64_t> &range = innermost[loopIndex];
        range && *range > 0)
      share = static_cast<double>(*range - *range % lanes) /
              static_cast<double>(*range);
    innerCost +=
        schedule.innerVectorLoop[loopIndex]
            ? share * vectorCost(count.innerGathers, count.innerStrided) +
                  (1 - share) * scalar
            : scalar;
  }
  bool outerWorks = outerCount > 0 && outerContiguous;
  bool innerWorks = std::find(schedule.innerVectorLoop.begin(),
                              schedule.innerVectorLoop.end(),
                              true) != schedule.innerVectorLoop.end();
  schedule.strategy = VectorStrategy::Scalar;
  double best = scalarCost;
  if (innerWorks && innerCost < best) {
    schedule.strategy = VectorStrategy::Inner;
    best = innerCost;
  }
  if (outerWorks && outerCost < best)
    schedule.strategy = VectorStrategy::Outer;
  schedule.lanes = schedule.strategy == VectorStrategy::Scalar ? 1 : lanes;
  std::unordered_set<const Expr *> seen;
  int64_t cost = 0;
  forEachExpr(kernel,
              [&](const Expr *value) { cost += bodyCost(value, seen); });
  schedule.unroll =
      schedule.strategy == VectorStrategy::Scalar || cost > kUnrolledBodyLimit
          ? 1
          : host.unroll;
}

// A kernel whose vectorised output is at least host.streamingBytes writes
// it with non-temporal stores: they skip reading each line before
// overwriting it and leave the caches to the inputs, where the output is
// too large to stay in them for its reader anyway. One store per kernel
// (its alignment prologue fits one address): a flat kernel's, or that of
// the loop of a row kernel that only stores (aligned row by row).
void planStreaming(KernelSchedule &schedule, const loop::Program &program,
                   const loop::Kernel &kernel, const HostTarget &host) {
  int64_t outerCount = static_cast<int64_t>(kernel.outerRanges.size());
  if (host.streamingBytes <= 0)
    return;
  int64_t outerPoints = numelOf(program.hints(kernel.outerRanges));
  for (size_t loopIndex = 0; loopIndex < kernel.loops.size(); ++loopIndex) {
    const loop::Loop &loop = kernel.loops[loopIndex];
    int64_t var;
    if (schedule.strategy == VectorStrategy::Outer &&
        kernel.outerRanges.size() == 1 && kernel.loops.size() == 1 &&
        loop.ranges.empty())
      var = 0;
    else if (schedule.strategy == VectorStrategy::Inner &&
             schedule.innerVectorLoop[loopIndex] && !loop.ranges.empty() &&
             loop.reductions.empty())
      var = outerCount + static_cast<int64_t>(loop.ranges.size()) - 1;
    else
      continue;
    int64_t points = outerPoints * numelOf(program.hints(loop.ranges));
    for (const loop::Store &store : loop.stores) {
      std::optional<int64_t> coefficient =
          loop::affineCoefficient(store.index, var);
      int64_t size = itemSize(program.buffers.at(store.buffer).dtype());
      if (!coefficient || *coefficient != 1 ||
          points * size < host.streamingBytes)
        continue;
      schedule.streamedStore = &store;
      schedule.streamedLoop = loopIndex;
      schedule.streamAlignment = size * schedule.lanes;
      return;
    }
  }
}

// A transpose (NCHW to NHWC, x.t().contiguous()) writes along the last
// outer variable v and reads along the one before, u: each vector of its
// reads is a gather of lanes from as many rows (a 16-lane gather, 16 loads,
// per vector). Such a kernel instead reads a lanes x lanes tile of each
// such input as one contiguous vector per v and transposes the tile in
// registers (lanes log2(lanes) shuffles), then computes its u points one
// after another. Pointwise kernels of one loop only, over constant ranges of
// at least a tile, whose body is small (it is emitted once per row of the
// tile) and whose stores all walk v contiguously.
void planTranspose(KernelSchedule &schedule, const loop::Kernel &kernel) {
  constexpr int64_t kMaxTransposedLoads = 2;
  constexpr int64_t kMaxTransposedBodyCost = 64;
  size_t outer = kernel.outerRanges.size();
  if (schedule.strategy != VectorStrategy::Outer || outer < 2 ||
      kernel.loops.size() != 1 || !schedule.carried.empty() ||
      schedule.streamedStore)
    return;
  const loop::Loop &loop = kernel.loops[0];
  int64_t u = static_cast<int64_t>(outer) - 2, v = u + 1;
  std::optional<int64_t> uRange = kernel.outerRanges[u]->constant();
  std::optional<int64_t> vRange = kernel.outerRanges[v]->constant();
  if (!loop.ranges.empty() || !loop.reductions.empty() || !uRange || !vRange ||
      *uRange < schedule.lanes || *vRange < schedule.lanes)
    return;
  std::unordered_set<const Expr *> seen;
  int64_t cost = 0;
  std::vector<const Expr *> loads;
  for (const loop::Store &store : loop.stores) {
    if (loop::affineCoefficient(store.index, v) != 1)
      return;
    cost += bodyCost(store.value, seen);
    for (const Expr *load : loop::loadsOf(store.value)) {
      std::optional<int64_t> alongV = loop::affineCoefficient(load->index(), v);
      if (loop::affineCoefficient(load->index(), u) == 1 && alongV &&
          *alongV != 0 && *alongV != 1 &&
          std::find(loads.begin(), loads.end(), load) == loads.end())
        loads.push_back(load);
    }
  }
  if (loads.empty() ||
      static_cast<int64_t>(loads.size()) > kMaxTransposedLoads ||
      cost > kMaxTransposedBodyCost)
    return;
  schedule.transposedLoads = std::move(loads);
}

// CpuSchedule.h's constantQuotientsAsProducts: divider operations per point
// (an inline float32 tanh divides once, an rsqrt takes a square root and a
// division), each expression counted once.
void planQuotients(KernelSchedule &schedule, const loop::Kernel &kernel) {
  std::unordered_set<const Expr *> seen;
  int64_t dividerOperations = 0;
  std::function<void(const Expr *)> visit = [&](const Expr *node) {
    if (!seen.insert(node).second)
      return;
    if (isFloatingPoint(node->dtype())) {
      if (node->kind() == ExprKind::Binary && node->binaryOp() == BinaryOp::Div)
        dividerOperations += 1;
      if (node->kind() == ExprKind::Unary)
        switch (node->unaryOp()) {
        case UnaryOp::Sqrt:
        case UnaryOp::Reciprocal:
        case UnaryOp::Sigmoid:
        case UnaryOp::Tanh:
          dividerOperations += 1;
          break;
        case UnaryOp::Rsqrt:
          dividerOperations += 2;
          break;
        default:
          break;
        }
    }
    for (const Expr *operand : node->operands())
      visit(operand);
  };
  loop::forEachExpr(kernel, visit);
  schedule.constantQuotientsAsProducts = dividerOperations >= 2;
}

// CpuSchedule.h's rowwiseColumns: Outer kernels whose loops with ranges all
// reduce (no stores, no arg reductions) and at least one over
// kMinRowwisePoints points or more, whose other loops store without
// reducing, and which read no buffer they write (the stores of every
// vectorised point then precede the later loops' loads). Tiles of columns
// as even as whole vectors of every width allow (multiples of
// kRowwiseStep), each small enough that the arrays every row touches (a
// value, or a float sum's block) stay within kMaxHotBytes, in the
// first-level cache, and all of them (a float sum's total and compensation
// too, touched once a block) within kMaxRowwiseBytes.
void planRowwise(KernelSchedule &schedule, const loop::Program &program,
                 const loop::Kernel &kernel) {
  constexpr int64_t kMinRowwisePoints = 64;
  constexpr int64_t kMaxHotBytes = 32 << 10;
  constexpr int64_t kMaxRowwiseBytes = 192 << 10;
  constexpr int64_t kRowwiseStep = 64;
  if (schedule.strategy != VectorStrategy::Outer || kernel.contraction ||
      kernel.outerRanges.empty() || !schedule.transposedLoads.empty() ||
      schedule.streamedStore || !schedule.carried.empty())
    return;
  int64_t hotBytes = 0, bytes = 0; // a column's
  bool longReduction = false;
  std::unordered_set<int64_t> stored;
  for (const loop::Loop &loop : kernel.loops) {
    for (const loop::Store &store : loop.stores)
      stored.insert(store.buffer);
    if (loop.ranges.empty()) {
      if (!loop.reductions.empty())
        return;
      continue;
    }
    if (loop.reductions.empty() || !loop.stores.empty())
      return;
    for (const loop::Reduction &reduction : loop.reductions) {
      if (reduction.op == loop::ReduceOp::ArgMax ||
          reduction.op == loop::ReduceOp::ArgMin)
        return;
      int64_t size = itemSize(accumulatorDType(reduction));
      hotBytes += size;
      bytes += size * (isFloatSum(reduction) ? 3 : 1);
    }
    longReduction = longReduction ||
                    numelOf(program.hints(loop.ranges)) >= kMinRowwisePoints;
  }
  if (!longReduction || bytes == 0)
    return;
  int64_t most = std::min(kMaxHotBytes / hotBytes, kMaxRowwiseBytes / bytes);
  most -= most % kRowwiseStep;
  int64_t points = program.hint(kernel.outerRanges.back());
  if (most == 0 || points == 0)
    return;
  bool readsStored = false;
  loop::forEachExpr(kernel, [&](const Expr *value) {
    for (const Expr *load : loop::loadsOf(value))
      readsStored = readsStored || stored.count(load->id()) > 0;
  });
  if (readsStored)
    return;
  int64_t tiles = (points + most - 1) / most;
  int64_t columns = (points + tiles - 1) / tiles;
  columns += (kRowwiseStep - columns % kRowwiseStep) % kRowwiseStep;
  schedule.rowwiseColumns = std::min({columns, most, points});
}

// CpuSchedule.h's prefetchLoop: a vector loop prefetches where it does
// more than one operation per element it loads (a reduction's accumulation
// counts one, a max or min two: NaN's check), so that the next page's
// lines arrive while it computes; a loop that only reads and sums is the
// stream the hardware prefetchers follow, and prefetches there only add
// instructions and requests. Measured with every loop prefetching, 4 KiB
// ahead against none, in one process each: on 2 threads of the 2-core EPYC
// softmax 4096x1024 1.41x faster, layer_norm 1.41x, the row statistics 1.77x,
// the pointwise chain of 4M floats 1.35x, softmax and layer_norm of 32768x1024
// (past the L3) 1.39x and 1.45x, a row amax 1.22-1.31x; but the row sum of
// 32768x1024 0.84-0.91x, column sums 0.89-0.95x. On 16 threads of the Xeon the
// pointwise chain 2.69x, the tanh/sqrt chain 1.52x, the row statistics 1.52x,
// softmax 1.06x, layer_norm 1.05x, sums 1.01-1.05x; on 1 thread softmax 1.39x,
// layer_norm 1.65x.
void planPrefetch(KernelSchedule &schedule, const loop::Kernel &kernel,
                  const HostTarget &host) {
  schedule.prefetchLoop.assign(kernel.loops.size(), false);
  if (host.prefetchBytes <= 0 || schedule.strategy == VectorStrategy::Scalar ||
      kernel.contraction)
    return;
  bool any = false;
  for (size_t loopIndex = 0; loopIndex < kernel.loops.size(); ++loopIndex) {
    const loop::Loop &loop = kernel.loops[loopIndex];
    std::unordered_set<const Expr *> loads;
    int64_t operations = 0;
    // Whether a node varies (reads a load, a variable or a reduction's
    // value); each varying operation counts once: cast<f32>(2) is folded.
    std::unordered_map<const Expr *, bool> varies;
    std::function<bool(const Expr *)> count = [&](const Expr *node) {
      auto found = varies.find(node);
      if (found != varies.end())
        return found->second;
      bool varying = false;
      if (node->kind() == ExprKind::Load) {
        loads.insert(node);
        varying = true;
      } else if (node->kind() == ExprKind::Var ||
                 node->kind() == ExprKind::ReductionValue) {
        varying = true;
      } else {
        for (const Expr *operand : node->operands())
          varying = count(operand) || varying;
        operations += varying ? 1 : 0;
      }
      varies[node] = varying;
      return varying;
    };
    for (const loop::Reduction &reduction : loop.reductions) {
      count(reduction.value);
      bool ordered = reduction.op == loop::ReduceOp::Max ||
                     reduction.op == loop::ReduceOp::Min ||
                     reduction.op == loop::ReduceOp::ArgMax ||
                     reduction.op == loop::ReduceOp::ArgMin;
      operations += ordered ? 2 : 1;
    }
    for (const loop::Store &store : loop.stores)
      count(store.value);
    bool prefetch =
        !loads.empty() && operations > static_cast<int64_t>(loads.size());
    schedule.prefetchLoop[loopIndex] = prefetch;
    any = any || prefetch;
  }
  if (any)
    schedule.prefetchBytes = host.prefetchBytes;
}

// How many leading outer loops the [begin, end) arguments range over, as
// one flat loop: enough that the thread pool has chunks to share out even
// where the first loop is short (attention's batch of 2). The vectorised
// outer loop stays a loop of its own.
void planParallel(KernelSchedule &schedule, const loop::Program &program,
                  const loop::Kernel &kernel) {
  constexpr int64_t kParallelPoints = 256;
  Shape ranges = program.hints(kernel.outerRanges);
  size_t limit = ranges.size();
  if (schedule.strategy == VectorStrategy::Outer && limit > 0)
    --limit;
  // A transposing kernel ranges over u's tiles too (every loop but v).
  if (!schedule.transposedLoads.empty()) {
    schedule.parallelDepth = limit;
    return;
  }
  schedule.parallelDepth = std::min<size_t>(ranges.size(), 1);
  int64_t points = ranges.empty() ? 1 : ranges[0];
  while (schedule.parallelDepth < limit && points < kParallelPoints)
    points *= ranges[schedule.parallelDepth++];
}

// Carrying pays for values with a math-library call, in kernels that
// handle one outer point at a time, between loops over the same ranges of
// at most kMaxCarried points, when no loop from the producer to the consumer
// stores to a buffer the value reads.

void planCarried(KernelSchedule &schedule, const loop::Program &program,
                 const loop::Kernel &kernel) {
  int64_t outerCount = static_cast<int64_t>(kernel.outerRanges.size());
  struct Carried {
    size_t producer;
    std::vector<size_t> consumers;
  };
  std::unordered_map<const Expr *, Carried> carriedOf;
  if (schedule.strategy == VectorStrategy::Outer)
    return;
  // Whether a value calls the math library outside its loads' indices.
  std::unordered_map<const Expr *, bool> expensiveMemo;
  std::function<bool(const Expr *)> expensive = [&](const Expr *node) {
    auto found = expensiveMemo.find(node);
    if (found != expensiveMemo.end())
      return found->second;
    bool result = false;
    if (node->kind() == ExprKind::Unary &&
        mathFunctionName(node->unaryOp()) != nullptr)
      result = true;
    else if (node->kind() != ExprKind::Load)
      for (const Expr *operand : node->operands())
        result = result || expensive(operand);
    expensiveMemo[node] = result;
    return result;
  };
  auto nodesOf = [](const loop::Loop &loop) {
    std::unordered_set<const Expr *> nodes;
    std::function<void(const Expr *)> visit = [&](const Expr *node) {
      if (!nodes.insert(node).second)
        return;
      for (const Expr *operand : node->operands())
        visit(operand);
    };
    for (const loop::Reduction &reduction : loop.reductions)
      visit(reduction.value);
    for (const loop::Store &store : loop.stores)
      visit(store.value);
    return nodes;
  };
  auto storesTo = [&](size_t from, size_t to, const Expr *value) {
    std::unordered_set<int64_t> written;
    for (size_t index = from; index <= to; ++index)
      for (const loop::Store &store : kernel.loops[index].stores)
        written.insert(store.buffer);
    for (const Expr *load : loop::loadsOf(value))
      if (written.count(load->id()))
        return true;
    return false;
  };
  for (size_t producer = 0; producer < kernel.loops.size(); ++producer) {
    const loop::Loop &loop = kernel.loops[producer];
    // Carried values live in stack arrays of the loop's points. Where the
    // ranges vary, the arrays hold kMaxCarried points and the kernel checks
    // each call's points against that (emitCpuKernel).
    if (loop.ranges.empty())
      continue;
    int64_t points = program.hint(loop.ranges.numel());
    if (points > kMaxCarried || points < 1)
      continue;
    int64_t lastVar = outerCount + static_cast<int64_t>(loop.ranges.size()) - 1;
    // The largest expensive subexpressions of the producer's reductions.
    std::vector<const Expr *> candidates;
    std::unordered_set<const Expr *> seen;
    std::unordered_map<const Expr *, bool> variesMemo;
    std::function<bool(const Expr *)> varies = [&](const Expr *node) {
      if (auto found = variesMemo.find(node); found != variesMemo.end())
        return found->second;
      bool result = node->kind() == ExprKind::Var && node->id() == lastVar;
      for (const Expr *operand : node->operands())
        result = result || varies(operand);
      variesMemo[node] = result;
      return result;
    };
    std::function<void(const Expr *)> collect = [&](const Expr *node) {
      if (!seen.insert(node).second || node->kind() == ExprKind::Load ||
          !varies(node) || !expensive(node))
        return;
      // Stack arrays hold floats only (a Bool's i1 has no byte layout).
      if (isFloatingPoint(node->dtype()))
        candidates.push_back(node);
      for (const Expr *operand : node->operands())
        collect(operand);
    };
    for (const loop::Reduction &reduction : loop.reductions)
      collect(reduction.value);
    if (candidates.empty())
      continue;
    for (size_t consumer = producer + 1; consumer < kernel.loops.size();
         ++consumer) {
      if (kernel.loops[consumer].ranges != loop.ranges)
        continue;
      std::unordered_set<const Expr *> used = nodesOf(kernel.loops[consumer]);
      for (const Expr *candidate : candidates) {
        if (!used.count(candidate) || storesTo(producer, consumer, candidate))
          continue;
        auto [entry, inserted] = carriedOf.try_emplace(candidate);
        if (inserted)
          entry->second.producer = producer;
        if (entry->second.producer == producer)
          entry->second.consumers.push_back(consumer);
      }
    }
  }
  // Keep only the outermost carried expressions of each consumer: an inner
  // one is needed only where its outer one is not carried.
  std::vector<const Expr *> redundant;
  for (auto &[expr, carried] : carriedOf) {
    std::unordered_set<const Expr *> visited;
    std::function<void(const Expr *)> mark = [&](const Expr *node) {
      if (!visited.insert(node).second)
        return;
      auto found = carriedOf.find(node);
      if (node != expr && found != carriedOf.end() &&
          found->second.consumers == carried.consumers &&
          found->second.producer == carried.producer)
        redundant.push_back(node);
      for (const Expr *child : node->operands())
        mark(child);
    };
    mark(expr);
  }
  for (const Expr *expr : redundant)
    carriedOf.erase(expr);
  // In the map's order: the emitter makes the stack arrays in this order.
  for (auto &[expr, carried] : carriedOf)
    schedule.carried.push_back({expr, carried.producer, carried.consumers});
}

} // namespace

std::string_view vectorStrategyName(VectorStrategy strategy) {
  switch (strategy) {
  case VectorStrategy::Scalar:
    return "scalar";
  case VectorStrategy::Inner:
    return "inner";
  case VectorStrategy::Outer:
    return "outer";
  }
  return "?";
}

const KernelSchedule &CpuSchedule::kernel(size_t step) const {
  if (step >= kernels.size() || !kernels[step])
    throw Error("the CPU schedule has no kernel for step " +
                std::to_string(step));
  return *kernels[step];
}

std::string CpuSchedule::str() const {
  std::ostringstream text;
  for (size_t step = 0; step < kernels.size(); ++step) {
    if (!kernels[step])
      continue;
    const KernelSchedule &kernel = *kernels[step];
    text << "step " << step << " " << kernel.name
         << ": vector=" << vectorStrategyName(kernel.strategy)
         << " lanes=" << kernel.lanes << " unroll=" << kernel.unroll
         << " parallel=" << kernel.parallelDepth
         << " stream=" << (kernel.streamedStore ? kernel.streamedName : "none")
         << " carried=" << kernel.carried.size();
    if (!kernel.transposedLoads.empty())
      text << " transposed=" << kernel.transposedLoads.size();
    if (kernel.rowwiseColumns > 0)
      text << " rowwise=" << kernel.rowwiseColumns;
    if (kernel.prefetchBytes > 0)
      text << " prefetch=" << kernel.prefetchBytes;
    text << "\n";
  }
  return text.str();
}

int64_t splitReductionsForCpu(loop::Program &program, int threads) {
  if (threads < 2)
    return 0;
  // A chunk of at least 16K elements (its partial and the chunk's start
  // cost next to nothing); kernels of fewer points than threads reducing
  // 64K elements or more; about four chunks a thread, so that uneven
  // progress evens out.
  constexpr int64_t kMinChunk = 1 << 14, kMinWork = 1 << 16;
  return splitReductions(program, [threads](const loop::Kernel &kernel) {
    std::optional<ReductionExtent> extent = firstReductionExtent(kernel);
    if (!extent)
      return int64_t(1);
    int64_t points = extent->points;
    if (points == 0 || points * extent->work < kMinWork)
      return int64_t(1);
    if (points < threads) {
      int64_t wanted = 4 * int64_t(threads);
      return reductionChunks(kernel, (wanted + points - 1) / points, kMinChunk);
    }
    // A column reduction: a chunk of rows a thread (more would add partials
    // to combine and split the rows' runs no further), where the points
    // before the columns are fewer than the threads.
    std::optional<int64_t> columns = kernel.outerRanges.back()->constant();
    if (!columns || *columns == 0 || !columnReduction(kernel))
      return int64_t(1);
    int64_t leading = points / *columns;
    if (leading >= threads)
      return int64_t(1);
    return reductionChunks(kernel, (threads + leading - 1) / leading,
                           (kMinChunk + *columns - 1) / *columns);
  });
}

bool columnReduction(const loop::Kernel &kernel) {
  if (kernel.outerRanges.empty() || kernel.loops.empty())
    return false;
  const loop::Loop &first = kernel.loops.front();
  int64_t column = static_cast<int64_t>(kernel.outerRanges.size()) - 1;
  int64_t firstLoopVar = column + 1;
  int64_t lastLoopVar =
      firstLoopVar + static_cast<int64_t>(first.ranges.size()) - 1;
  for (const loop::Reduction &reduction : first.reductions)
    for (const Expr *load : loop::loadsOf(reduction.value)) {
      if (loop::affineCoefficient(load->index(), column) != 1)
        continue;
      for (int64_t var = firstLoopVar; var <= lastLoopVar; ++var) {
        std::optional<int64_t> along =
            loop::affineCoefficient(load->index(), var);
        if (along && *along != 0)
          return true;
      }
    }
  return false;
}

CpuSchedule scheduleForCpu(const loop::Program &program,
                           const HostTarget &host) {
  CpuSchedule schedule;
  schedule.kernels.resize(program.steps.size());
  for (size_t step = 0; step < program.steps.size(); ++step) {
    if (program.steps[step].kind != loop::Step::Kind::Kernel)
      continue;
    const loop::Kernel &kernel = program.steps[step].kernel;
    KernelSchedule record;
    record.name = kernel.name;
    chooseStrategy(record, program, kernel, host);
    planCarried(record, program, kernel);
    planStreaming(record, program, kernel, host);
    planTranspose(record, kernel);
    planQuotients(record, kernel);
    planRowwise(record, program, kernel);
    planParallel(record, program, kernel);
    planPrefetch(record, kernel, host);
    if (record.streamedStore) {
      const loop::Buffer &buffer =
          program.buffers.at(record.streamedStore->buffer);
      record.streamedName =
          buffer.name.empty()
              ? "buf" + std::to_string(record.streamedStore->buffer)
              : buffer.name;
    }
    schedule.kernels[step] = std::move(record);
  }
  return schedule;
}

SymSize KernelSchedule::parallelExtent(const loop::Kernel &kernel,
                                       size_t level) const {
  SymSize range = kernel.outerRanges[level];
  if (transposedLoads.empty() || level + 2 != kernel.outerRanges.size())
    return range;
  return size::floorDiv(size::add(range, size::constant(lanes - 1)),
                        size::constant(lanes));
}

std::vector<int> KernelSchedule::vectorWidths() const {
  if (unroll > 1)
    return {lanes * unroll, lanes};
  return {lanes};
}
} // namespace kiln::backend
