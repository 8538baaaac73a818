// Kernel fusion: adjacent kernels merge when every value the later one reads
// from the earlier one is produced at the same outer point, and a cheap
// pointwise kernel after a matrix product (a bias, a ReLU, a residual add)
// becomes the value the product stores (its GEMM's epilogue); stores are
// then forwarded to their loads, independent reductions over the same
// points gathered in one loop, and dead stores removed.
// Depends on ir/LoopIR.h, passes/Scheduler.h.
#include "passes/Scheduler.h"

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace kiln {

using namespace loop;

namespace {

bool isPointwise(const Kernel &kernel) {
  return kernel.loops.size() == 1 && kernel.loops[0].ranges.empty() &&
         kernel.loops[0].reductions.empty();
}

// The number of points of `ranges` in the example call (for choices of
// speed only).
int64_t product(const Program &program, const Ranges &ranges) {
  return program.hint(ranges.numel());
}

bool startsWith(const Ranges &ranges, const Ranges &prefix) {
  return prefix.size() <= ranges.size() &&
         std::equal(prefix.begin(), prefix.end(), ranges.begin());
}

// A pointwise kernel over `outer ++ rest` as a kernel over `outer` whose one
// loop walks `rest`. Variable numbers stay: a loop's variables follow the
// outer ones.
Kernel asInnerLoop(const Kernel &pointwise, const Ranges &outer) {
  Kernel result = pointwise;
  result.outerRanges = outer;
  result.loops[0].ranges.assign(pointwise.outerRanges.begin() + outer.size(),
                                pointwise.outerRanges.end());
  return result;
}

// Splitting a kernel's parallel domain into an inner loop costs its
// parallelism; worth it only when enough outer points remain.
bool keepsParallelism(const Program &program, const Ranges &outer,
                      int64_t totalWork) {
  return product(program, outer) >= 64 || totalWork <= 32768;
}

struct Access {
  int64_t buffer;
  const Expr *index;
  size_t loop;
};

void collectLoads(const Expr *expr, size_t loop, std::vector<Access> &out) {
  for (const Expr *load : loadsOf(expr))
    out.push_back({load->id(), load->index(), loop});
}

std::vector<Access> loadsOfKernel(const Kernel &kernel) {
  std::vector<Access> loads;
  for (size_t l = 0; l < kernel.loops.size(); ++l)
    forEachExpr(kernel.loops[l],
                [&](const Expr *expr) { collectLoads(expr, l, loads); });
  return loads;
}

std::vector<Access> storesOfKernel(const Kernel &kernel) {
  std::vector<Access> stores;
  for (size_t l = 0; l < kernel.loops.size(); ++l)
    for (const Store &store : kernel.loops[l].stores)
      stores.push_back({store.buffer, store.index, l});
  return stores;
}

// Whether `second` may run inside `first`'s loop nest (same outer ranges):
// everything `second` reads of `first`'s stores is written at the same outer
// point and the same inner point (or by a loop with no inner points), and
// neither writes what the other reads or writes otherwise.
bool canMerge(const Kernel &first, const Kernel &second) {
  std::vector<Access> firstStores = storesOfKernel(first);
  std::vector<Access> secondStores = storesOfKernel(second);
  std::set<int64_t> firstWritten, secondWritten;
  for (const Access &store : firstStores)
    firstWritten.insert(store.buffer);
  for (const Access &store : secondStores)
    secondWritten.insert(store.buffer);
  for (int64_t buffer : secondWritten)
    if (firstWritten.count(buffer))
      return false;
  for (const Access &load : loadsOfKernel(first))
    if (secondWritten.count(load.buffer))
      return false;
  for (const Access &load : loadsOfKernel(second)) {
    if (!firstWritten.count(load.buffer))
      continue;
    bool matched = false;
    for (const Access &store : firstStores) {
      if (store.buffer != load.buffer || store.index != load.index)
        continue;
      const Loop &storeLoop = first.loops[store.loop];
      if (storeLoop.ranges.empty() ||
          storeLoop.ranges == second.loops[load.loop].ranges)
        matched = true;
    }
    if (!matched)
      return false;
  }
  return true;
}

Kernel concatenate(ExprContext &exprs, const Kernel &first,
                   const Kernel &second) {
  Kernel merged = first;
  int64_t shift = first.reductionCount();
  std::unordered_map<const Expr *, const Expr *> renumber;
  int64_t index = 0;
  for (const Loop &loop : second.loops)
    for (const Reduction &reduction : loop.reductions) {
      renumber[exprs.reductionValue(index, reduction.dtype())] =
          exprs.reductionValue(index + shift, reduction.dtype());
      ++index;
    }
  auto rewrite = [&](const Expr *expr) {
    return renumber.empty() ? expr : exprs.replace(expr, renumber);
  };
  for (size_t l = 0; l < second.loops.size(); ++l) {
    Loop loop = second.loops[l];
    rewriteExprs(loop, rewrite);
    // Two loops over the same points without reductions in the first
    // become one, so values stored there forward to the second's readers.
    Loop &last = merged.loops.back();
    if (l == 0 && last.ranges == loop.ranges && last.reductions.empty()) {
      last.reductions = std::move(loop.reductions);
      last.stores.insert(last.stores.end(), loop.stores.begin(),
                         loop.stores.end());
      continue;
    }
    merged.loops.push_back(std::move(loop));
  }
  merged.origin = first.origin + " + " + second.origin;
  return merged;
}

// Tries to put `second` into `first`'s loop nest, aligning their domains.
std::optional<Kernel> tryMerge(const Program &program, const Kernel &first,
                               const Kernel &second) {
  Kernel a = first, b = second;
  if (a.outerRanges != b.outerRanges) {
    if (isPointwise(b) && startsWith(b.outerRanges, a.outerRanges) &&
        keepsParallelism(program, a.outerRanges,
                         product(program, b.outerRanges)))
      b = asInnerLoop(b, a.outerRanges);
    else if (isPointwise(a) && startsWith(a.outerRanges, b.outerRanges) &&
             keepsParallelism(program, b.outerRanges,
                              product(program, a.outerRanges)))
      a = asInnerLoop(a, b.outerRanges);
    else
      return std::nullopt;
  }
  if (!canMerge(a, b))
    return std::nullopt;
  return concatenate(*program.exprs, a, b);
}

int64_t nodeCount(const Expr *expr, int64_t limit) {
  int64_t count = 1;
  for (const Expr *operand : expr->operands()) {
    count += nodeCount(operand, limit - count);
    if (count > limit)
      break;
  }
  return count;
}

bool cheapToRecompute(const Expr *expr) { return nodeCount(expr, 8) <= 6; }

// Replaces loads of values this kernel stored at the same point by the
// stored values. Within a loop every such load is replaced (the code
// generator may read before it writes at one point); across loops only
// values with no inner points, or cheap ones over the same points.
void forwardStores(ExprContext &exprs, Kernel &kernel) {
  struct Available {
    const Expr *value;
    size_t loop;
  };
  std::map<std::pair<int64_t, const Expr *>, Available> available;
  auto forward = [&](const Expr *expr, size_t loop) {
    std::unordered_map<const Expr *, const Expr *> replacements;
    for (const Expr *load : loadsOf(expr)) {
      auto found = available.find({load->id(), load->index()});
      if (found == available.end())
        continue;
      const Available &stored = found->second;
      bool sameLoop = stored.loop == loop;
      bool everywhere = kernel.loops[stored.loop].ranges.empty();
      bool samePoints =
          kernel.loops[stored.loop].ranges == kernel.loops[loop].ranges &&
          cheapToRecompute(stored.value);
      if (sameLoop || everywhere || samePoints)
        replacements[load] = stored.value;
    }
    return replacements.empty() ? expr : exprs.replace(expr, replacements);
  };
  for (size_t l = 0; l < kernel.loops.size(); ++l) {
    Loop &loop = kernel.loops[l];
    // A loop's reductions read what its stores wrote at the same point
    // (after a merge); its stores never read its reductions.
    for (Store &store : loop.stores) {
      store.value = forward(store.value, l);
      store.index = forward(store.index, l);
      // A store changes what forwarded values that read its buffer mean.
      for (auto it = available.begin(); it != available.end();) {
        bool reads = false;
        for (const Expr *load : loadsOf(it->second.value))
          reads |= load->id() == store.buffer;
        it = reads ? available.erase(it) : std::next(it);
      }
      available[{store.buffer, store.index}] = {store.value, l};
    }
    for (Reduction &reduction : loop.reductions)
      reduction.value = forward(reduction.value, l);
  }
}

/// The most reductions mergeSiblingReductions gathers in one loop: each
/// keeps a vector register per unrolled step, so more would spill.
constexpr size_t kMaxReductionsPerLoop = 4;

// Adds the ReductionValue numbers `expr` reads to `read`, skipping the
// nodes in `seen` (those of expressions added before).
void addReductionsRead(const Expr *expr, std::unordered_set<const Expr *> &seen,
                       std::unordered_set<int64_t> &read) {
  if (!seen.insert(expr).second)
    return;
  if (expr->kind() == ExprKind::ReductionValue)
    read.insert(expr->id());
  for (const Expr *operand : expr->operands())
    addReductionsRead(operand, seen, read);
}

// Reductions over the same points that do not depend on each other read
// their input in one pass: a loop of reductions only (no stores) whose
// values read neither a reduction nor a buffer of the loops from an earlier
// loop over the same ranges up to it joins that loop (mean, amax and sum of
// the same rows: one read of each row, not three), and a reduction the same
// as one there (same operation of the same value) is that one. Reductions
// are numbered by position, so every ReductionValue is renumbered.
void mergeSiblingReductions(ExprContext &exprs, Kernel &kernel) {
  if (kernel.contraction)
    return;
  // By loop, the original number of each reduction; by original number,
  // the number it is read as (itself, or the same reduction it merged into).
  std::vector<std::vector<int64_t>> numbers(kernel.loops.size());
  std::vector<int64_t> sameAs;
  for (size_t l = 0; l < kernel.loops.size(); ++l)
    for (size_t r = 0; r < kernel.loops[l].reductions.size(); ++r) {
      numbers[l].push_back(static_cast<int64_t>(sameAs.size()));
      sameAs.push_back(static_cast<int64_t>(sameAs.size()));
    }
  bool moved = false;
  for (size_t later = 1; later < kernel.loops.size(); ++later) {
    Loop &loop = kernel.loops[later];
    if (loop.reductions.empty() || !loop.stores.empty() || loop.ranges.empty())
      continue;
    std::unordered_set<int64_t> readReductions;
    std::unordered_set<const Expr *> seen;
    std::set<int64_t> readBuffers;
    for (const Reduction &reduction : loop.reductions) {
      addReductionsRead(reduction.value, seen, readReductions);
      for (const Expr *load : loadsOf(reduction.value))
        readBuffers.insert(load->id());
    }
    // The earliest loop over the same ranges from which on nothing the
    // reductions read is computed or stored.
    std::optional<size_t> target;
    for (size_t l = later; l-- > 0;) {
      bool writesRead = false;
      for (const Store &store : kernel.loops[l].stores)
        writesRead |= readBuffers.count(store.buffer) > 0;
      for (int64_t number : numbers[l])
        writesRead |= readReductions.count(number) > 0;
      if (writesRead)
        break;
      const Loop &candidate = kernel.loops[l];
      if (candidate.ranges == loop.ranges && !candidate.reductions.empty())
        target = l;
    }
    if (!target)
      continue;
    Loop &into = kernel.loops[*target];
    // The reduction of `into` the same as `reduction`, if any.
    auto sameIn = [&](const Reduction &reduction) -> std::optional<size_t> {
      for (size_t e = 0; e < into.reductions.size(); ++e)
        if (into.reductions[e].op == reduction.op &&
            into.reductions[e].value == reduction.value)
          return e;
      return std::nullopt;
    };
    size_t fresh = 0;
    for (const Reduction &reduction : loop.reductions)
      fresh += sameIn(reduction) ? 0 : 1;
    if (into.reductions.size() + fresh > kMaxReductionsPerLoop)
      continue;
    for (size_t r = 0; r < loop.reductions.size(); ++r) {
      int64_t number = numbers[later][r];
      if (std::optional<size_t> existing = sameIn(loop.reductions[r])) {
        sameAs[number] = numbers[*target][*existing];
        continue;
      }
      into.reductions.push_back(loop.reductions[r]);
      numbers[*target].push_back(number);
    }
    loop.reductions.clear();
    numbers[later].clear();
    moved = true;
  }
  if (!moved)
    return;
  // Number the reductions by their new positions and rewrite every read.
  std::vector<int64_t> position(sameAs.size(), -1);
  std::vector<DType> dtypeOf(sameAs.size());
  int64_t next = 0;
  for (size_t l = 0; l < kernel.loops.size(); ++l)
    for (size_t r = 0; r < numbers[l].size(); ++r) {
      position[numbers[l][r]] = next++;
      dtypeOf[numbers[l][r]] = kernel.loops[l].reductions[r].dtype();
    }
  std::unordered_map<const Expr *, const Expr *> renumber;
  for (int64_t number = 0; number < static_cast<int64_t>(sameAs.size());
       ++number) {
    int64_t kept = sameAs[number];
    if (position[kept] != number)
      renumber[exprs.reductionValue(number, dtypeOf[kept])] =
          exprs.reductionValue(position[kept], dtypeOf[kept]);
  }
  for (Loop &loop : kernel.loops)
    rewriteExprs(loop, [&](const Expr *expr) {
      return renumber.empty() ? expr : exprs.replace(expr, renumber);
    });
}

// Removes stores to temporaries nobody reads, then reductions nobody reads,
// loops with nothing left and kernels with no loops. Returns whether
// anything changed.
bool eliminateDeadStores(Program &program) {
  std::vector<bool> read(program.buffers.size(), false);
  for (const Step &step : program.steps)
    if (step.kind == Step::Kind::Kernel)
      forEachExpr(step.kernel, [&](const Expr *expr) {
        for (const Expr *load : loadsOf(expr))
          read[load->id()] = true;
      });
  for (const Buffer &buffer : program.buffers)
    if (buffer.kind == BufferKind::View)
      read[buffer.base] = true;
  bool changed = false;
  for (Step &step : program.steps) {
    if (step.kind != Step::Kind::Kernel)
      continue;
    Kernel &kernel = step.kernel;
    for (Loop &loop : kernel.loops) {
      size_t before = loop.stores.size();
      loop.stores.erase(
          std::remove_if(loop.stores.begin(), loop.stores.end(),
                         [&](const Store &store) {
                           const Buffer &buffer = program.buffers[store.buffer];
                           return buffer.kind == BufferKind::Temporary &&
                                  !read[store.buffer];
                         }),
          loop.stores.end());
      changed |= loop.stores.size() != before;
    }
    // Reductions no later expression reads.
    std::unordered_set<int64_t> usedReductions;
    std::unordered_set<const Expr *> seen;
    forEachExpr(kernel, [&](const Expr *expr) {
      addReductionsRead(expr, seen, usedReductions);
    });
    std::unordered_map<const Expr *, const Expr *> renumber;
    int64_t oldIndex = 0, newIndex = 0;
    for (Loop &loop : kernel.loops) {
      std::vector<Reduction> kept;
      for (const Reduction &reduction : loop.reductions) {
        if (usedReductions.count(oldIndex)) {
          if (oldIndex != newIndex)
            renumber[program.exprs->reductionValue(oldIndex,
                                                   reduction.dtype())] =
                program.exprs->reductionValue(newIndex, reduction.dtype());
          kept.push_back(reduction);
          ++newIndex;
        } else {
          changed = true;
        }
        ++oldIndex;
      }
      loop.reductions = std::move(kept);
    }
    if (!renumber.empty())
      rewriteExprs(kernel, [&](const Expr *expr) {
        return program.exprs->replace(expr, renumber);
      });
    size_t loopsBefore = kernel.loops.size();
    kernel.loops.erase(std::remove_if(kernel.loops.begin(), kernel.loops.end(),
                                      [](const Loop &loop) {
                                        return loop.stores.empty() &&
                                               loop.reductions.empty();
                                      }),
                       kernel.loops.end());
    changed |= kernel.loops.size() != loopsBefore;
  }
  size_t stepsBefore = program.steps.size();
  program.steps.erase(std::remove_if(program.steps.begin(), program.steps.end(),
                                     [](const Step &step) {
                                       return step.kind == Step::Kind::Kernel &&
                                              step.kernel.loops.empty();
                                     }),
                      program.steps.end());
  return changed || program.steps.size() != stepsBefore;
}

int64_t operationCount(const Kernel &kernel) {
  std::unordered_set<const Expr *> seen;
  int64_t count = 0;
  forEachExpr(kernel,
              [&](const Expr *expr) { count += operationCount(expr, seen); });
  return count;
}

// How many kernels of `program` read each buffer; outputs count as one
// more reader.
std::vector<int> readersOf(const Program &program) {
  std::vector<int> readers(program.buffers.size(), 0);
  for (const ProgramOutput &output : program.outputs)
    if (output.buffer >= 0)
      ++readers[output.buffer];
  for (const Step &step : program.steps) {
    if (step.kind != Step::Kind::Kernel)
      continue;
    std::set<int64_t> read;
    for (const Access &load : loadsOfKernel(step.kernel))
      read.insert(load.buffer);
    for (int64_t buffer : read)
      ++readers[buffer];
  }
  return readers;
}

// Operations of the largest pointwise kernel a GEMM computes as it writes:
// from its accumulators (cheap arithmetic), or over its stored micro-tile
// (GELU's erfc is about 60; a larger one stays a kernel of its own, its
// code not copied into a GEMM's full and edge tiles).
constexpr int64_t kMaxEpilogueOperations = 32;
constexpr int64_t kMaxCostlyEpilogueOperations = 128;

bool readsMemoryOrSizes(const Expr *index) {
  return anyNode(index, [](const Expr *node) {
    return node->kind() == ExprKind::Load || node->kind() == ExprKind::Symbol;
  });
}

// Whether `index` is affine in the outer variables of a kernel over
// `outer` ranges, with no loads or sizes in it (as a GEMM addresses C).
bool isAffineOverOuter(const Expr *index, size_t outer) {
  if (readsMemoryOrSizes(index))
    return false;
  for (size_t var = 0; var < outer; ++var)
    if (!affineCoefficient(index, static_cast<int64_t>(var)))
      return false;
  return true;
}

// A contraction over [batch, row, column digits...] with several column
// digits (a convolution's output positions) is a GEMM whose columns are
// those digits read as one flat index (CpuContraction.h): an epilogue may
// read them only so (loop::loadsReadDigitsFlat), and C's index
// (storedIndex) so too.
bool readsColumnsFlat(const Expr *value, const Expr *storedIndex,
                      const Ranges &outer) {
  if (outer.size() < 4)
    return true;
  if (!outer.isStatic())
    return false;
  Shape extents = outer.constants();
  std::vector<int64_t> digits(extents.begin() + 2, extents.end());
  return readsDigitsFlat(storedIndex, 2, digits) &&
         loadsReadDigitsFlat(value, 2, digits);
}

// The variables of a kernel over `ranges` as expressions over those of a
// kernel over `target` with the same points in the same order, where each
// range is the product of consecutive target ranges (ranges of 1 aside):
// variable i is the row-major offset within the target ranges it covers.
std::optional<std::vector<const Expr *>>
pointsOf(const Program &program, const Ranges &ranges, const Ranges &target) {
  if (program.isSymbolic() || !ranges.isStatic() || !target.isStatic())
    return std::nullopt;
  ExprContext &exprs = *program.exprs;
  Shape sizes = ranges.constants(), targetSizes = target.constants();
  std::vector<const Expr *> points;
  size_t next = 0;
  for (int64_t size : sizes) {
    const Expr *point = exprs.integer(0);
    int64_t covered = 1;
    for (; covered < size && next < targetSizes.size(); ++next) {
      if (targetSizes[next] == 1)
        continue;
      point = exprs.add(exprs.mul(point, exprs.integer(targetSizes[next])),
                        exprs.var(static_cast<int64_t>(next)));
      covered *= targetSizes[next];
    }
    if (covered != size)
      return std::nullopt;
    points.push_back(point);
  }
  for (; next < targetSizes.size(); ++next)
    if (targetSizes[next] != 1)
      return std::nullopt;
  return points;
}

// Whether two indices, affine over a kernel's outer variables, are the same
// offset at every point of `ranges` (a variable over 1 point is 0).
bool sameOffsets(ExprContext &exprs, const Expr *a, const Expr *b,
                 const Ranges &ranges) {
  if (a == b)
    return true;
  if (readsMemoryOrSizes(a) || readsMemoryOrSizes(b) || !ranges.isStatic())
    return false;
  Shape sizes = ranges.constants();
  for (size_t var = 0; var < sizes.size(); ++var) {
    auto x = affineCoefficient(a, static_cast<int64_t>(var));
    auto y = affineCoefficient(b, static_cast<int64_t>(var));
    if (!x || !y || (*x != *y && sizes[var] > 1))
      return false;
  }
  std::vector<const Expr *> zeros(sizes.size(), exprs.integer(0));
  const Expr *offsetA = exprs.substituteVars(a, zeros);
  const Expr *offsetB = exprs.substituteVars(b, zeros);
  return offsetA->isConstant() && offsetB->isConstant() &&
         offsetA->integer() == offsetB->integer();
}

// A contraction writes its product to a temporary that the next kernel, a
// pointwise one, reads only at the point the product was written (a bias,
// a ReLU, a residual add, a copy into an output or a view of one):
// the contraction stores that kernel's value, computed from the sum as the
// GEMM writes it (its epilogue), and the kernel goes. A plain copy may
// also run (after loop order) over every element of the temporary in
// order. True where `next` went.
bool fuseEpilogue(Program &program, const std::vector<int> &readers,
                  Kernel &contraction, const Kernel &next) {
  if (!contraction.contraction || !isPointwise(next) ||
      next.loops[0].stores.size() != 1)
    return false;
  Store *product = nullptr;
  for (Loop &loop : contraction.loops)
    for (Store &store : loop.stores) {
      if (product)
        return false;
      product = &store;
    }
  if (!product)
    return false;
  const Store &stored = next.loops[0].stores[0];
  const Buffer &temporary = program.buffers[product->buffer];
  const Buffer &result = program.buffers[stored.buffer];
  if (temporary.kind != BufferKind::Temporary ||
      readers[product->buffer] != 1 || stored.value->dtype() != result.dtype())
    return false;
  const Expr *value = stored.value;
  const Expr *storedIndex = stored.index;
  bool copy = value->kind() == ExprKind::Load &&
              value->id() == product->buffer && value->index() == stored.index;
  bool samePoints = next.outerRanges == contraction.outerRanges;
  if (!copy && !samePoints) {
    // Loop order merges a pointwise kernel's dims (and drops those of size
    // 1): its points as the contraction's, each of its variables the
    // row-major combination of the contraction's it covers.
    std::optional<std::vector<const Expr *>> points =
        pointsOf(program, next.outerRanges, contraction.outerRanges);
    if (!points)
      return false;
    value = program.exprs->substituteVars(value, *points);
    storedIndex = program.exprs->substituteVars(storedIndex, *points);
    samePoints = true;
  }
  if (copy && !samePoints) {
    // A copy of every element, both kernels over the elements in order.
    bool everyElement =
        !program.isSymbolic() && next.outerRanges.size() == 1 &&
        stored.index->kind() == ExprKind::Var && stored.index->id() == 0 &&
        program.hint(next.outerRanges.numel()) == temporary.meta.numel() &&
        program.hint(contraction.outerRanges.numel()) == temporary.meta.numel();
    if (!everyElement || temporary.dtype() != result.dtype())
      return false;
  } else if (!copy) {
    // The GEMM computes the value as it writes C, a float32 element at an
    // affine index, from loads at points of C: cheap arithmetic (a bias, a
    // ReLU, a residual add) from its accumulators, a costly one (GELU's
    // erfc, a SiLU's exp) over the micro-tile once it is stored
    // (GemmSpec::costlyEpilogue), either way without a pass over C of its
    // own.
    if (!samePoints || result.dtype() != DType::Float32 ||
        !isAffineOverOuter(storedIndex, contraction.outerRanges.size()) ||
        !readsColumnsFlat(value, storedIndex, contraction.outerRanges) ||
        operationCount(next) > (isCheapArithmetic(value)
                                    ? kMaxEpilogueOperations
                                    : kMaxCostlyEpilogueOperations))
      return false;
    for (const Expr *load : loadsOf(storedIndex))
      if (load->id() == product->buffer)
        return false;
  }
  std::unordered_map<const Expr *, const Expr *> sums;
  if (samePoints)
    for (const Expr *load : loadsOf(value))
      if (load->id() == product->buffer) {
        if (!sameOffsets(*program.exprs, load->index(), product->index,
                         contraction.outerRanges))
          return false;
        sums[load] = product->value;
      }
  // A kernel that does not read the product is no epilogue of it (the
  // product's one reader comes later); nor is any where a view of the
  // product is read besides.
  if (!copy && sums.empty())
    return false;
  for (size_t buffer = 0; buffer < program.buffers.size(); ++buffer)
    if (program.buffers[buffer].kind == BufferKind::View &&
        program.rootOf(static_cast<int64_t>(buffer)) == product->buffer)
      return false;
  // A GEMM must not write what it reads (a result that is a view of an
  // operand, as in a.copy_(a @ b)); nor what its epilogue reads, since C
  // holds partial sums before the last k block.
  int64_t written = program.rootOf(stored.buffer);
  for (const Access &load : loadsOfKernel(contraction))
    if (program.rootOf(load.buffer) == written)
      return false;
  for (const Expr *load : loadsOf(value))
    if (load->id() != product->buffer && program.rootOf(load->id()) == written)
      return false;
  if (!copy) {
    product->value = program.exprs->replace(value, sums);
    product->index = storedIndex;
    contraction.origin += " + " + next.origin;
  }
  product->buffer = stored.buffer;
  return true;
}

// Whether `later` may run before `earlier`: neither writes (a view of) a
// buffer the other reads or writes.
bool independent(const Program &program, const Kernel &earlier,
                 const Kernel &later) {
  auto roots = [&program](const std::vector<Access> &accesses) {
    std::set<int64_t> buffers;
    for (const Access &access : accesses)
      buffers.insert(program.rootOf(access.buffer));
    return buffers;
  };
  std::set<int64_t> earlierWritten = roots(storesOfKernel(earlier));
  std::set<int64_t> laterWritten = roots(storesOfKernel(later));
  std::set<int64_t> earlierTouched = roots(loadsOfKernel(earlier));
  earlierTouched.insert(earlierWritten.begin(), earlierWritten.end());
  for (int64_t buffer : roots(loadsOfKernel(later)))
    if (earlierWritten.count(buffer))
      return false;
  for (int64_t buffer : laterWritten)
    if (earlierTouched.count(buffer))
      return false;
  return true;
}

// Whether `second` reads a buffer that `first` writes and the runtime
// checks (Program::indexChecks: positions computed in a kernel): the check
// runs before the first step that reads it, so that step must not be the
// one that writes it.
bool readsCheckedWrite(const Program &program, const Kernel &first,
                       const Kernel &second) {
  if (program.indexChecks.empty())
    return false;
  std::set<int64_t> written;
  for (const Access &access : storesOfKernel(first))
    written.insert(program.rootOf(access.buffer));
  for (const loop::IndexCheck &check : program.indexChecks)
    if (written.count(program.rootOf(check.buffer)))
      for (const Access &access : loadsOfKernel(second))
        if (program.rootOf(access.buffer) == program.rootOf(check.buffer))
          return true;
  return false;
}

} // namespace

void fuseKernels(Program &program, bool shareReductionPasses) {
  std::vector<int> readers = readersOf(program);
  std::vector<Step> fused;
  int64_t lastCount = 0; // operationCount of fused.back()'s kernel
  for (Step &step : program.steps) {
    int64_t count =
        step.kind == Step::Kind::Kernel ? operationCount(step.kernel) : 0;
    bool checkedBetween =
        step.kind == Step::Kind::Kernel && !fused.empty() &&
        fused.back().kind == Step::Kind::Kernel &&
        readsCheckedWrite(program, fused.back().kernel, step.kernel);
    if (step.kind == Step::Kind::Kernel && !fused.empty() && !checkedBetween &&
        fused.back().kind == Step::Kind::Kernel &&
        fuseEpilogue(program, readers, fused.back().kernel, step.kernel))
      continue;
    if (step.kind == Step::Kind::Kernel && !fused.empty() && !checkedBetween &&
        fused.back().kind == Step::Kind::Kernel && !step.kernel.contraction &&
        !fused.back().kernel.contraction &&
        lastCount + count <= kMaxKernelOperations) {
      if (auto merged = tryMerge(program, fused.back().kernel, step.kernel)) {
        fused.back().kernel = std::move(*merged);
        lastCount += count;
        continue;
      }
    }
    // A kernel that does not touch what a contraction before it reads or
    // writes runs before it (a batch norm's per-channel scale and shift,
    // computed after a 1x1 convolution's product), so that the pointwise
    // kernel after them may still be the contraction's epilogue.
    if (step.kind == Step::Kind::Kernel && !step.kernel.contraction &&
        !fused.empty() && fused.back().kind == Step::Kind::Kernel &&
        fused.back().kernel.contraction &&
        independent(program, fused.back().kernel, step.kernel)) {
      fused.insert(fused.end() - 1, std::move(step));
      continue;
    }
    fused.push_back(std::move(step));
    lastCount = count;
  }
  program.steps = std::move(fused);
  for (Step &step : program.steps)
    if (step.kind == Step::Kind::Kernel) {
      forwardStores(*program.exprs, step.kernel);
      if (shareReductionPasses)
        mergeSiblingReductions(*program.exprs, step.kernel);
    }
  while (eliminateDeadStores(program)) {
  }
}

} // namespace kiln
