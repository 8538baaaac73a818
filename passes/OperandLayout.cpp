// Operand layout: a temporary that only matrix products read (a GEMM takes
// any strides) is laid out in the order its one writer reads its sources,
// so that writing it is a copy in order rather than a transpose (attention's
// K^T, computed with its rotary embedding, is written as K is laid out), and
// with a line of padding per row where its rows would be a multiple of
// 4 KiB apart.
// Depends on ir/LoopIR.h, passes/Scheduler.h.
#include "passes/Scheduler.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

namespace kiln {

using namespace loop;

namespace {

// Where each buffer is stored and loaded.
struct BufferUses {
  std::vector<size_t> writers; // steps, one entry per store
  const Store *store = nullptr;
  std::vector<size_t> readers; // steps, one entry per reading kernel
};

// The dimension of `meta` each variable of `index` walks (-1: none), where
// the index is exactly sum(var * stride of its dimension), each dimension
// walked by one variable over its whole size; empty otherwise.
std::vector<int64_t> dimensionsOfVariables(const Expr *index,
                                           const TensorMeta &meta,
                                           const std::vector<int64_t> &ranges,
                                           ExprContext &exprs) {
  std::vector<const Expr *> zeros(ranges.size(), exprs.integer(0));
  const Expr *offset = exprs.substituteVars(index, zeros);
  if (!offset->isConstant() || offset->integer() != 0)
    return {};
  std::vector<int64_t> dimensionOf(ranges.size(), -1);
  std::vector<bool> walked(meta.dim(), false);
  for (size_t var = 0; var < ranges.size(); ++var) {
    std::optional<int64_t> coefficient =
        affineCoefficient(index, static_cast<int64_t>(var));
    if (!coefficient)
      return {};
    if (*coefficient == 0)
      continue;
    auto dimension =
        std::find(meta.strides.begin(), meta.strides.end(), *coefficient) -
        meta.strides.begin();
    if (dimension == meta.dim() || walked[dimension] ||
        ranges[var] != meta.sizes[dimension])
      return {};
    walked[dimension] = true;
    dimensionOf[var] = dimension;
  }
  return dimensionOf;
}

// The ranges of a kernel's variables (outer, then each loop's), or empty
// where one varies between calls.
std::vector<int64_t> variableRanges(const Kernel &kernel) {
  std::vector<int64_t> ranges;
  if (!kernel.outerRanges.isStatic())
    return {};
  for (int64_t range : kernel.outerRanges.constants())
    ranges.push_back(range);
  for (const Loop &loop : kernel.loops) {
    if (!loop.ranges.isStatic())
      return {};
    for (int64_t range : loop.ranges.constants())
      ranges.push_back(range);
  }
  return ranges;
}

// `index` with each variable's coefficient replaced by the new stride of
// the dimension it walks.
const Expr *relaidIndex(const std::vector<int64_t> &dimensionOf,
                        const Shape &strides, ExprContext &exprs) {
  const Expr *index = exprs.integer(0);
  for (size_t var = 0; var < dimensionOf.size(); ++var)
    if (dimensionOf[var] >= 0)
      index =
          exprs.add(index, exprs.mul(exprs.var(static_cast<int64_t>(var)),
                                     exprs.integer(strides[dimensionOf[var]])));
  return index;
}

// For each variable of the writer, how many of its loads of other buffers
// would not read in order were it the innermost: those that move with it by
// more than one element, or in a way that is not affine.
std::vector<int64_t> loadsOutOfOrder(const Store &store, size_t variables) {
  std::vector<int64_t> loads(variables, 0);
  for (const Expr *load : loadsOf(store.value))
    for (size_t var = 0; var < variables; ++var) {
      std::optional<int64_t> coefficient =
          affineCoefficient(load->index(), static_cast<int64_t>(var));
      if (!coefficient || (*coefficient != 0 && *coefficient != 1))
        ++loads[var];
    }
  return loads;
}

// Lays buffer `buffer` out anew where that makes its writer read in order,
// or its rows fall into fewer cache sets; whether it did.
bool relayOut(Program &program, int64_t buffer, const BufferUses &uses) {
  ExprContext &exprs = *program.exprs;
  Buffer &data = program.buffers[buffer];
  const TensorMeta &meta = data.meta;
  if (uses.writers.size() != 1 || uses.readers.empty() || meta.dim() < 2 ||
      !meta.isContiguous())
    return false;
  for (int64_t size : meta.sizes)
    if (size < 2) // strides then need not tell the dimensions apart
      return false;
  Kernel &writer = program.steps[uses.writers[0]].kernel;
  // A pointwise writer, one store per point.
  if (writer.contraction || writer.loops.size() != 1 ||
      !writer.loops[0].ranges.empty() || !writer.loops[0].reductions.empty())
    return false;
  std::vector<int64_t> writerRanges = variableRanges(writer);
  if (writerRanges.empty())
    return false;
  const Store &store = *uses.store;
  std::vector<int64_t> stored =
      dimensionsOfVariables(store.index, meta, writerRanges, exprs);
  if (stored.empty() || std::count(stored.begin(), stored.end(), -1) !=
                            static_cast<int64_t>(stored.size()) - meta.dim())
    return false;
  // The variable of a dimension with the fewest loads out of order, unless
  // the store's innermost one has as few.
  std::vector<int64_t> loads = loadsOutOfOrder(store, writerRanges.size());
  int64_t innermost =
      std::find(stored.begin(), stored.end(), meta.dim() - 1) - stored.begin();
  int64_t inOrder = innermost;
  for (size_t var = 0; var < stored.size(); ++var)
    if (stored[var] >= 0 && loads[var] < loads[inOrder])
      inOrder = static_cast<int64_t>(var);
  // The dimension the sources walk in order becomes the innermost.
  std::vector<int64_t> order(meta.dim());
  std::iota(order.begin(), order.end(), 0);
  order.erase(order.begin() + stored[inOrder]);
  order.push_back(stored[inOrder]);
  // Rows a multiple of 4 KiB apart fall into one set of L1's (64-byte
  // lines, 64 sets): the GEMM then packs A rather than reading it in place,
  // and its transposing packs conflict. A line of padding per row spreads
  // them (on the 16-core Xeon 2 threads ran 256x2048 @ 2048x512 7-8%
  // faster without A's packing).
  int64_t innerBytes = meta.sizes[order.back()] * itemSize(meta.dtype);
  bool padded = innerBytes % 4096 == 0;
  if (inOrder == innermost && !padded)
    return false;
  Shape strides(meta.dim());
  int64_t stride = 1;
  for (auto dimension = order.rbegin(); dimension != order.rend();
       ++dimension) {
    strides[*dimension] = stride;
    stride *= meta.sizes[*dimension];
    if (padded && dimension == order.rbegin())
      stride += 64 / itemSize(meta.dtype);
  }
  // Every reader walks the buffer by dimensions too: each of its loads
  // becomes one at the new strides.
  std::vector<std::unordered_map<const Expr *, const Expr *>> relaid;
  for (size_t step : uses.readers) {
    std::vector<int64_t> ranges = variableRanges(program.steps[step].kernel);
    if (ranges.empty())
      return false;
    bool walksDimensions = true;
    std::unordered_map<const Expr *, const Expr *> &loads =
        relaid.emplace_back();
    forEachExpr(program.steps[step].kernel, [&](const Expr *expr) {
      for (const Expr *load : loadsOf(expr)) {
        if (load->id() != buffer)
          continue;
        std::vector<int64_t> walked =
            dimensionsOfVariables(load->index(), meta, ranges, exprs);
        if (walked.empty())
          walksDimensions = false;
        else
          loads[load] = exprs.load(buffer, load->dtype(),
                                   relaidIndex(walked, strides, exprs));
      }
    });
    if (!walksDimensions)
      return false;
  }
  for (size_t position = 0; position < uses.readers.size(); ++position)
    rewriteExprs(program.steps[uses.readers[position]].kernel,
                 [&](const Expr *expr) {
                   return exprs.replace(expr, relaid[position]);
                 });
  for (Store &written : writer.loops[0].stores)
    if (written.buffer == buffer)
      written.index = relaidIndex(stored, strides, exprs);
  data.meta.strides = strides;
  return true;
}

} // namespace

void chooseOperandLayouts(Program &program) {
  if (program.isSymbolic())
    return;
  // Buffers a graph value names, or a view is of, keep their layout: torch
  // or an extern step may see them.
  std::unordered_set<int64_t> fixed = program.namedRoots();
  for (const Buffer &buffer : program.buffers)
    if (buffer.kind == BufferKind::View)
      fixed.insert(program.rootOf(buffer.base));

  std::map<int64_t, BufferUses> uses;
  std::unordered_set<int64_t> readByOthers;
  for (size_t step = 0; step < program.steps.size(); ++step) {
    const Step &current = program.steps[step];
    if (current.kind != Step::Kind::Kernel)
      continue;
    const Kernel &kernel = current.kernel;
    for (const Loop &loop : kernel.loops)
      for (const Store &store : loop.stores) {
        uses[store.buffer].writers.push_back(step);
        uses[store.buffer].store = &store;
      }
    std::unordered_set<int64_t> read;
    forEachExpr(kernel, [&](const Expr *expr) {
      for (const Expr *load : loadsOf(expr))
        read.insert(load->id());
    });
    for (int64_t buffer : read) {
      if (kernel.contraction)
        uses[buffer].readers.push_back(step);
      else
        readByOthers.insert(buffer);
    }
  }
  for (auto &[buffer, bufferUses] : uses)
    if (program.buffers[buffer].kind == BufferKind::Temporary &&
        !fixed.count(buffer) && !readByOthers.count(buffer))
      relayOut(program, buffer, bufferUses);
}

} // namespace kiln
