// Kernel fusion: adjacent kernels merge when every value the later one reads
// from the earlier one is produced at the same outer point; stores are then
// forwarded to their loads and dead stores removed.
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
    std::function<void(const Expr *)> markUsed = [&](const Expr *expr) {
      if (!seen.insert(expr).second)
        return;
      if (expr->kind() == ExprKind::ReductionValue)
        usedReductions.insert(expr->id());
      for (const Expr *operand : expr->operands())
        markUsed(operand);
    };
    forEachExpr(kernel, markUsed);
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

// A contraction writes its product to a temporary that a pointwise kernel
// then copies, element for element, into its result (a product with no
// epilogue that is an output, a view of one, or realised): the contraction
// writes the result itself and the copy goes. The copy runs over the
// contraction's points, or (after loop order) over every element of the
// temporary in order. True where `copy` went.
bool storeIntoCopy(const Program &program, const std::vector<int> &readers,
                   Kernel &contraction, const Kernel &copy) {
  if (!contraction.contraction || !isPointwise(copy) ||
      copy.loops[0].stores.size() != 1)
    return false;
  Store *product = nullptr;
  for (Loop &loop : contraction.loops)
    for (Store &store : loop.stores) {
      if (product)
        return false;
      product = &store;
    }
  const Store &copied = copy.loops[0].stores[0];
  const Expr *value = copied.value;
  if (!product || value->kind() != ExprKind::Load ||
      value->id() != product->buffer || value->index() != copied.index)
    return false;
  const Buffer &temporary = program.buffers[product->buffer];
  bool samePoints = copy.outerRanges == contraction.outerRanges &&
                    copied.index == product->index;
  bool everyElement =
      !program.isSymbolic() && copy.outerRanges.size() == 1 &&
      copied.index->kind() == ExprKind::Var && copied.index->id() == 0 &&
      program.hint(copy.outerRanges.numel()) == temporary.meta.numel() &&
      program.hint(contraction.outerRanges.numel()) == temporary.meta.numel();
  if (!samePoints && !everyElement)
    return false;
  const Buffer &result = program.buffers[copied.buffer];
  if (temporary.kind != BufferKind::Temporary ||
      temporary.dtype() != result.dtype() || readers[product->buffer] != 1)
    return false;
  // A GEMM must not write what it reads (a result that is a view of an
  // operand, as in a.copy_(a @ b)): the copy kept them apart.
  for (const Access &load : loadsOfKernel(contraction))
    if (program.rootOf(load.buffer) == program.rootOf(copied.buffer))
      return false;
  product->buffer = copied.buffer;
  return true;
}

} // namespace

void fuseKernels(Program &program) {
  std::vector<int> readers = readersOf(program);
  std::vector<Step> fused;
  int64_t lastCount = 0; // operationCount of fused.back()'s kernel
  for (Step &step : program.steps) {
    int64_t count =
        step.kind == Step::Kind::Kernel ? operationCount(step.kernel) : 0;
    if (step.kind == Step::Kind::Kernel && !fused.empty() &&
        fused.back().kind == Step::Kind::Kernel &&
        storeIntoCopy(program, readers, fused.back().kernel, step.kernel))
      continue;
    if (step.kind == Step::Kind::Kernel && !fused.empty() &&
        fused.back().kind == Step::Kind::Kernel && !step.kernel.contraction &&
        !fused.back().kernel.contraction &&
        lastCount + count <= kMaxKernelOperations) {
      if (auto merged = tryMerge(program, fused.back().kernel, step.kernel)) {
        fused.back().kernel = std::move(*merged);
        lastCount += count;
        continue;
      }
    }
    fused.push_back(std::move(step));
    lastCount = count;
  }
  program.steps = std::move(fused);
  for (Step &step : program.steps)
    if (step.kind == Step::Kind::Kernel)
      forwardStores(*program.exprs, step.kernel);
  while (eliminateDeadStores(program)) {
  }
}

} // namespace kiln
