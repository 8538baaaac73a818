// Split reductions: a kernel with few outer points whose first loop reduces
// many elements becomes two kernels. The first reduces chunks of the loop at
// (point, chunk) points into partial buffers; the second combines each
// point's partials with the same operations and runs the kernel's other
// loops. A GPU then has blocks for every multiprocessor where one block per
// point left most of them idle (a full sum of millions of elements).
// Depends on passes/Scheduler.h.
#include "passes/Scheduler.h"

#include <algorithm>
#include <functional>
#include <optional>

namespace kiln {

using loop::Buffer;
using loop::BufferKind;
using loop::Expr;
using loop::ExprContext;
using loop::Kernel;
using loop::Loop;
using loop::Program;
using loop::ReduceOp;
using loop::Step;

namespace {

std::optional<Shape> constantRanges(const loop::Ranges &ranges) {
  if (!ranges.isStatic())
    return std::nullopt;
  return ranges.constants();
}

// Row-major Var(first + i) * stride_i over `shape`.
const Expr *rowMajorIndex(ExprContext &exprs, const Shape &shape,
                          int64_t first) {
  const Expr *index = exprs.integer(0);
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    index =
        exprs.add(index, exprs.mul(exprs.var(first + static_cast<int64_t>(d)),
                                   exprs.integer(stride)));
    stride *= shape[d];
  }
  return index;
}

} // namespace

std::optional<ReductionExtent> firstReductionExtent(const Kernel &kernel) {
  if (kernel.loops.empty() || kernel.loops.front().reductions.empty())
    return std::nullopt;
  std::optional<Shape> outer = constantRanges(kernel.outerRanges);
  std::optional<Shape> ranges = constantRanges(kernel.loops.front().ranges);
  if (!outer || !ranges)
    return std::nullopt;
  return ReductionExtent{numelOf(*outer), numelOf(*ranges)};
}

int64_t reductionChunks(const Kernel &kernel, int64_t limit, int64_t minChunk) {
  if (kernel.contraction || kernel.loops.empty())
    return 1;
  const Loop &first = kernel.loops.front();
  if (first.reductions.empty() || first.ranges.empty())
    return 1;
  for (const loop::Reduction &reduction : first.reductions)
    if (reduction.op == ReduceOp::ArgMax || reduction.op == ReduceOp::ArgMin)
      return 1; // partials would need their positions too
  std::optional<Shape> outer = constantRanges(kernel.outerRanges);
  std::optional<Shape> ranges = constantRanges(first.ranges);
  if (!outer || !ranges || (*ranges)[0] < 2)
    return 1;
  int64_t rest = numelOf(*ranges) / (*ranges)[0];
  for (int64_t chunks = std::min(limit, (*ranges)[0]); chunks >= 2; --chunks)
    if ((*ranges)[0] % chunks == 0 && (*ranges)[0] / chunks * rest >= minChunk)
      return chunks;
  return 1;
}

void splitReduction(Program &program, size_t stepIndex, int64_t chunks) {
  ExprContext &exprs = *program.exprs;
  Kernel &kernel = program.steps[stepIndex].kernel;
  Shape outer = kernel.outerRanges.constants();
  const Loop first = kernel.loops.front();
  Shape ranges = first.ranges.constants();
  auto n = static_cast<int64_t>(outer.size());
  auto k = static_cast<int64_t>(ranges.size());
  int64_t chunk = ranges[0] / chunks;

  // Partials: the chunk Var(0) outermost (neighbouring points stay the
  // kernel's neighbouring points: a column sum's partials read neighbouring
  // columns), the outer variables from Var(1), the loop's own from
  // Var(n + 1); the first loop variable is chunk * size + position.
  std::vector<const Expr *> vars(n + k);
  for (int64_t i = 0; i < n; ++i)
    vars[i] = exprs.var(i + 1);
  vars[n] = exprs.add(exprs.mul(exprs.var(0), exprs.integer(chunk)),
                      exprs.var(n + 1));
  for (int64_t j = 1; j < k; ++j)
    vars[n + j] = exprs.var(n + 1 + j);
  Loop partial;
  partial.ranges = ranges;
  partial.ranges[0] = size::constant(chunk);
  for (const loop::Reduction &reduction : first.reductions)
    partial.reductions.push_back(
        {reduction.op, exprs.substituteVars(reduction.value, vars)});
  for (const loop::Store &store : first.stores)
    partial.stores.push_back({store.buffer,
                              exprs.substituteVars(store.index, vars),
                              exprs.substituteVars(store.value, vars)});

  // The partial buffers are [chunks, outer...]: the partials kernel writes
  // at (Var(0), Var(1)..Var(n)), the combining kernel reads at (Var(n),
  // Var(0)..Var(n-1)), Var(n) walking the chunks.
  Shape shape{chunks};
  shape.insert(shape.end(), outer.begin(), outer.end());
  int64_t points = numelOf(outer);
  const Expr *written = rowMajorIndex(exprs, shape, 0);
  const Expr *read = exprs.add(exprs.mul(exprs.var(n), exprs.integer(points)),
                               rowMajorIndex(exprs, outer, 0));
  Device device;
  for (const Loop &loop : kernel.loops)
    for (const loop::Store &store : loop.stores)
      device = program.buffers[store.buffer].meta.device;
  Loop write, combine;
  combine.ranges = {chunks};
  for (size_t r = 0; r < first.reductions.size(); ++r) {
    const loop::Reduction &reduction = first.reductions[r];
    DType dtype = reduction.dtype();
    Buffer buffer;
    buffer.name = kernel.name + "_partial" + std::to_string(r);
    buffer.kind = BufferKind::Temporary;
    buffer.meta = TensorMeta(dtype, shape, device);
    int64_t index = program.addBuffer(std::move(buffer));
    write.stores.push_back(
        {index, written, exprs.reductionValue(static_cast<int64_t>(r), dtype)});
    combine.reductions.push_back(
        {reduction.op, exprs.load(index, dtype, read)});
  }
  Kernel partials;
  partials.name = kernel.name + "_partials";
  partials.origin = kernel.origin;
  partials.outerRanges = shape;
  partials.loops = {std::move(partial), std::move(write)};
  kernel.loops.front() = std::move(combine);

  Step step;
  step.kind = Step::Kind::Kernel;
  step.kernel = std::move(partials);
  program.steps.insert(program.steps.begin() + static_cast<long>(stepIndex),
                       std::move(step));
}

int64_t
splitReductions(loop::Program &program,
                const std::function<int64_t(const loop::Kernel &)> &chunksFor) {
  int64_t splits = 0;
  for (size_t s = 0; s < program.steps.size(); ++s) {
    if (program.steps[s].kind != Step::Kind::Kernel)
      continue;
    int64_t chunks = chunksFor(program.steps[s].kernel);
    if (chunks < 2)
      continue;
    splitReduction(program, s, chunks);
    ++s; // past the combining kernel
    ++splits;
  }
  return splits;
}

} // namespace kiln
