// Lowerings of the ops that read a tensor at positions held in an index
// tensor (an indirect load: the load's index contains a load of the index
// buffer): embedding, index_select, gather, indexing with index tensors.
// Depends on passes/lowerings/Lowerer.h and ir/ops/MetaUtils.h.
#include "passes/lowerings/Lowerer.h"

#include "ir/ops/MetaUtils.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

namespace kiln::lowering {
namespace {

// An index into a dimension of `size` from an index tensor's element,
// clamped into [0, size): a kernel must never read outside its buffer, and
// both sides of a selection may be evaluated. torch raises an IndexError
// for an index out of range (negative ones included); the JIT reads
// natively only indices known to be in range (indicesInRange), and a
// program that runs without torch (export) checks those that are an input
// too (its run returns an error) and reads the nearest row for computed
// ones.
const Expr *clampedIndex(Lowerer &lowerer, const Expr *index, int64_t size) {
  loop::ExprContext &exprs = lowerer.exprs();
  index = lowerer.binary(BinaryOp::Max, lowerer.cast(index, DType::Int64),
                         exprs.integer(0));
  return lowerer.binary(BinaryOp::Min, index, exprs.integer(size - 1));
}

// The least and greatest values of `value` over `extents` of its variables
// 0.. where it is an affine function of them with no loads (an arange's
// positions, a shifted one), else nothing.
std::optional<std::pair<int64_t, int64_t>>
affineRange(loop::ExprContext &exprs, const Expr *value, const Shape &extents) {
  if (loop::anyNode(value, [](const Expr *node) {
        return node->kind() == loop::ExprKind::Load ||
               node->kind() == loop::ExprKind::Symbol ||
               node->kind() == loop::ExprKind::ReductionValue;
      }))
    return std::nullopt;
  std::vector<const Expr *> zeros(extents.size(), exprs.integer(0));
  const Expr *offset = exprs.substituteVars(value, zeros);
  if (!offset->isConstant())
    return std::nullopt;
  int64_t least = offset->integer(), greatest = offset->integer();
  for (size_t d = 0; d < extents.size(); ++d) {
    if (extents[d] <= 0)
      return std::nullopt;
    std::optional<int64_t> step =
        loop::affineCoefficient(value, static_cast<int64_t>(d));
    int64_t span;
    // (An overflow proves nothing.)
    if (!step || __builtin_mul_overflow(*step, extents[d] - 1, &span) ||
        __builtin_add_overflow(span < 0 ? least : greatest, span,
                               span < 0 ? &least : &greatest))
      return std::nullopt;
  }
  return std::make_pair(least, greatest);
}

// The range of the values a kernel stored in `buffer`, a temporary (only
// kernels read it, none write it in place) written by one pointwise store
// of an affine function of its kernel's outer variables (an arange that
// several readers made a buffer), else nothing.
std::optional<std::pair<int64_t, int64_t>> storedRange(Lowerer &lowerer,
                                                       int64_t buffer) {
  const loop::Program &program = lowerer.program();
  if (program.buffers[buffer].kind != loop::BufferKind::Temporary)
    return std::nullopt;
  const loop::Kernel *writer = nullptr;
  const loop::Store *store = nullptr;
  for (const loop::Step &step : program.steps) {
    if (step.kind != loop::Step::Kind::Kernel)
      continue;
    for (const loop::Loop &loop : step.kernel.loops)
      for (const loop::Store &candidate : loop.stores)
        if (candidate.buffer == buffer) {
          if (store || !loop.ranges.empty())
            return std::nullopt;
          writer = &step.kernel;
          store = &candidate;
        }
  }
  // Every element written: as many outer points as the buffer holds.
  if (!store || !writer->outerRanges.isStatic() ||
      numelOf(writer->outerRanges.constants()) !=
          program.buffers[buffer].meta.numel())
    return std::nullopt;
  return affineRange(lowerer.exprs(), store->value,
                     writer->outerRanges.constants());
}

// The least and greatest of the index values a constant holds (all of
// them, a superset of those a view of it reads), else nothing.
std::optional<std::pair<int64_t, int64_t>>
constantRange(const loop::Buffer &buffer) {
  const ConstantData *data = buffer.constant;
  if (!data ||
      (data->meta.dtype != DType::Int64 && data->meta.dtype != DType::Int32))
    return std::nullopt;
  int64_t count = data->meta.numel();
  bool wide = data->meta.dtype == DType::Int64;
  if (count == 0 ||
      data->bytes.size() < static_cast<size_t>(count) * (wide ? 8 : 4))
    return std::nullopt;
  int64_t least = INT64_MAX, greatest = INT64_MIN;
  for (int64_t i = 0; i < count; ++i) {
    int64_t value;
    if (wide) {
      std::memcpy(&value, data->bytes.data() + i * 8, 8);
    } else {
      int32_t narrow;
      std::memcpy(&narrow, data->bytes.data() + i * 4, 4);
      value = narrow;
    }
    least = std::min(least, value);
    greatest = std::max(greatest, value);
  }
  return std::make_pair(least, greatest);
}

// How the elements of an index tensor are known to be valid positions.
enum class Positions {
  Unknown,
  // Known to lie in [0, size): an affine function of their position with no
  // loads (an arange's positions), a buffer of such values (storedRange)
  // or a constant (constantRange) whose least and greatest values are in
  // range.
  InRange,
  // Elements the runtime checks before the first step that reads them
  // (Lowerer::checkIndices; it raises what torch raises): an input's or a
  // view of one (a slice of a model's position ids), a buffer a kernel or
  // torch wrote, or computed positions realized for the check; in
  // [0, size), or in [-size, size) where negative ones count from the end.
  // Or a constant whose values lie in [-size, size) there.
  Checked,
};

// How an input's positions are checked at run time where they are not
// proven: the error torch's op raises, the dim it names, whether negative
// positions count from the end, a value that passes (loop::IndexCheck).
struct CheckWording {
  loop::IndexCheck::Report report = loop::IndexCheck::Report::Table;
  int64_t dim = 0;
  bool fromEnd = false;
  std::optional<int64_t> ignored;
};

// What is known of the positions `indices` holds in a dim of `size`:
// proven (InRange), or checked at run time as `wording` says (Checked): an
// input's, a buffer's that a kernel or torch wrote, or positions computed
// in a kernel, which are then realized into a temporary for the check
// (`indices` becomes its loads). Only on the CPU (a GPU kernel's indirect
// loads of a buffer's positions are untested on the device: there, only
// positions computed in the kernel and proven); a program that runs
// without torch checks only its inputs' and clamps computed positions.
Positions knownPositions(Lowerer &lowerer, LoweredTensor &indices, int64_t size,
                         const CheckWording &wording = {}) {
  if (indices.isSymbolic() || size <= 0)
    return Positions::Unknown;
  const bool cpu = lowerer.device().type == DeviceType::CPU;
  auto check = [&](int64_t buffer, Shape strides, int64_t offset) {
    loop::IndexCheck check;
    check.buffer = buffer;
    check.size = size;
    check.fromEnd = wording.fromEnd;
    check.dim = wording.dim;
    check.elements =
        TensorMeta(indices.dtype, indices.sizes, std::move(strides), offset);
    check.report = wording.report;
    check.ignored = wording.ignored;
    lowerer.checkIndices(std::move(check));
    return Positions::Checked;
  };
  std::optional<std::pair<int64_t, int64_t>> range;
  // A realized tensor's buffer kind, and where its elements are (fixed
  // strides and offset).
  std::optional<loop::BufferKind> realizedIn;
  bool fixed = false;
  Shape strides;
  if (indices.realized()) {
    const Placement &placement = *indices.placement;
    const loop::Buffer &placed = lowerer.program().buffers[placement.buffer];
    realizedIn = placed.kind;
    fixed = placement.offset->isConstant() &&
            placement.strides.size() == indices.sizes.size() &&
            !placed.meta.isSymbolic();
    for (const SymSize &stride : placement.strides) {
      fixed = fixed && stride->isConstant();
      strides.push_back(stride->isConstant() ? stride->value() : 0);
    }
    if (cpu && fixed && placed.kind == loop::BufferKind::Input)
      return check(placement.buffer, strides, placement.offset->value());
    if (cpu)
      range = placed.kind == loop::BufferKind::Constant
                  ? constantRange(placed)
                  : storedRange(lowerer, placement.buffer);
    if (range && wording.fromEnd && range->first >= -size && range->first < 0 &&
        range->second < size)
      return Positions::Checked;
  }
  if (!range) {
    loop::ExprContext &exprs = lowerer.exprs();
    Index position;
    for (int64_t d = 0; d < indices.dim(); ++d)
      position.push_back(exprs.var(d));
    range = affineRange(exprs, indices.loader(position), indices.sizes);
  }
  if (range && range->first >= 0 && range->second < size)
    return Positions::InRange;
  if (!cpu || lowerer.standalone())
    return Positions::Unknown;
  if (realizedIn) {
    if (fixed && (*realizedIn == loop::BufferKind::Temporary ||
                  *realizedIn == loop::BufferKind::Tensor))
      return check(indices.placement->buffer, strides,
                   indices.placement->offset->value());
    if (*realizedIn == loop::BufferKind::Constant)
      return Positions::Unknown; // out of range: torch raises
  }
  // Computed positions (a gather of ids, buckets of distances): the values
  // torch would read, realized once and checked.
  TensorMeta layout(indices.dtype, indices.sizes);
  indices = lowerer.realize(indices, layout, loop::BufferKind::Temporary,
                            "positions");
  return check(indices.placement->buffer, layout.strides, 0);
}

// Whether every element of `indices` is known to lie in [0, size) when the
// program runs, proven or checked (knownPositions).
bool indicesInRange(Lowerer &lowerer, LoweredTensor &indices, int64_t size) {
  return knownPositions(lowerer, indices, size) != Positions::Unknown;
}

// A gathered tensor as a copy, not a view of its input.
LoweringResult copyOf(LoweredTensor gathered) {
  gathered.placement.reset();
  return std::vector<LoweredTensor>{gathered};
}

bool isIndexType(DType dtype) {
  return dtype == DType::Int64 || dtype == DType::Int32;
}

// Rows of a table picked by an index tensor: natively where the program
// runs without torch (export: ids that are an input are checked by the
// exported run, computed ones read the nearest row when out of range) or
// the indices are known to be in range (indicesInRange); else torch's
// call, which raises for one out of range.
LoweringResult embedding(Lowerer &lowerer, const Node &node) {
  LoweredTensor weight = lowerer.input(node, 0);
  LoweredTensor indices = lowerer.input(node, 1);
  if (weight.dim() != 2 || weight.sizes[0] == 0 || !isIndexType(indices.dtype))
    return std::nullopt;
  bool inRange =
      !weight.isSymbolic() && indicesInRange(lowerer, indices, weight.sizes[0]);
  if (!lowerer.standalone() && !inRange)
    return std::nullopt;
  Shape sizes = indices.sizes;
  sizes.push_back(weight.sizes[1]);
  int64_t rows = weight.sizes[0];
  Loader pick = indices.loader;
  return copyOf(
      lowerer.remap(weight, sizes, [&lowerer, pick, rows](const Index &index) {
        Index row(index.begin(), index.end() - 1);
        return Index{clampedIndex(lowerer, pick(row), rows), index.back()};
      }));
}

LoweringResult indexSelect(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  LoweredTensor indices = lowerer.input(node, 2);
  if (!isIndexType(indices.dtype) || indices.dim() > 1 || input.dim() == 0)
    return std::nullopt;
  int64_t dim = wrapDim(node.arguments()[1].toInt(), input.dim());
  Shape sizes = input.sizes;
  if (input.sizes[dim] == 0)
    return std::nullopt;
  bool inRange =
      !input.isSymbolic() && indicesInRange(lowerer, indices, input.sizes[dim]);
  if (!lowerer.standalone() && !inRange)
    return std::nullopt;
  sizes[dim] = indices.dim() == 0 ? 1 : indices.sizes[0];
  int64_t extent = input.sizes[dim];
  bool scalarIndex = indices.dim() == 0;
  Loader pick = indices.loader;
  return copyOf(lowerer.remap(
      input, sizes,
      [&lowerer, pick, dim, extent, scalarIndex](const Index &index) {
        Index at = index;
        Index position;
        if (!scalarIndex)
          position.push_back(index[dim]);
        at[dim] = clampedIndex(lowerer, pick(position), extent);
        return at;
      }));
}

// gather(self, dim, index, *, sparse_grad): result[i...] is self at i...
// with position index[i...] along `dim`; the result has index's sizes.
LoweringResult gather(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  LoweredTensor positions = lowerer.input(node, 2);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (input.dim() == 0 || input.isSymbolic() || positions.isSymbolic() ||
      positions.dim() != input.dim() || !isIndexType(positions.dtype) ||
      meta.sizes != positions.sizes || meta.dtype != input.dtype)
    return std::nullopt;
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), input.dim());
  for (int64_t d = 0; d < input.dim(); ++d)
    if (d != dim && positions.sizes[d] > input.sizes[d])
      return std::nullopt;
  int64_t extent = input.sizes[dim];
  if (extent == 0)
    return std::nullopt;
  // Positions not proven in [0, extent) are checked, raising torch's
  // RuntimeError.
  if (knownPositions(lowerer, positions, extent,
                     {loop::IndexCheck::Report::Gather, dim, false,
                      std::nullopt}) == Positions::Unknown &&
      !lowerer.standalone())
    return std::nullopt;
  Loader pick = positions.loader;
  LoweredTensor result = lowerer.remap(
      input, meta.sizes, [&lowerer, pick, dim, extent](const Index &index) {
        Index at = index;
        at[dim] = clampedIndex(lowerer, pick(index), extent);
        return at;
      });
  // A copy, not a view of the input.
  result.placement.reset();
  return std::vector<LoweredTensor>{result};
}

// index.Tensor(self, indices): numpy's advanced indexing with integer
// index tensors (None keeps a dim): the index tensors broadcast together,
// their shape replacing the indexed dims where those are adjacent, else
// leading the result; each result element reads self at the positions its
// index tensors hold, a negative one counting from the end. Natively where
// each index tensor's values are known to be valid (knownPositions: an
// input's are checked in [-size, size), as torch's IndexError) or the
// program runs without torch (an exported run checks an input's; computed
// ones out of range read the nearest); masks (bool, uint8) have
// data-dependent shapes and stay torch's.
LoweringResult indexWithTensors(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (input.isSymbolic() || meta.isSymbolic() || input.dim() == 0)
    return std::nullopt;
  const std::vector<Value *> &list = node.arguments().at(1).toTensorList();
  std::vector<bool> present;
  std::vector<LoweredTensor> indices;
  for (size_t d = 0; d < list.size(); ++d) {
    present.push_back(list[d] != nullptr);
    if (!list[d])
      continue;
    LoweredTensor index = lowerer.lowered(list[d]);
    if (!isIndexType(index.dtype) || index.isSymbolic() || input.sizes[d] == 0)
      return std::nullopt;
    indices.push_back(index);
  }
  if (indices.empty())
    return std::nullopt;
  const meta::IndexedDims dims = meta::indexedDims(present, input.dim());
  const std::vector<int64_t> &indexed = dims.indexed, &others = dims.others;
  const int64_t insertAt = dims.insertAt;
  bool known = true, inRange = true; // valid; proven non-negative
  for (size_t k = 0; k < indices.size(); ++k) {
    Positions positions = knownPositions(
        lowerer, indices[k], input.sizes[indexed[k]],
        {loop::IndexCheck::Report::Indexing, indexed[k], true, std::nullopt});
    known = known && positions != Positions::Unknown;
    inRange = inRange && positions == Positions::InRange;
  }
  if (!lowerer.standalone() && !known)
    return std::nullopt;
  const int64_t broadcast =
      meta.dim() - static_cast<int64_t>(others.size()); // its dims
  if (broadcast < 0)
    return std::nullopt;
  Shape inputSizes = input.sizes;
  std::vector<Loader> picks;
  std::vector<Shape> indexSizes;
  for (const LoweredTensor &index : indices) {
    picks.push_back(index.loader);
    indexSizes.push_back(index.sizes);
  }
  loop::ExprContext &exprs = lowerer.exprs();
  return copyOf(lowerer.remap(
      input, meta.sizes,
      [&lowerer, &exprs, inputSizes, indexed, others, picks, indexSizes,
       insertAt, broadcast, inRange](const Index &result) {
        Index at(inputSizes.size(), nullptr);
        for (size_t m = 0; m < others.size(); ++m) {
          int64_t position = static_cast<int64_t>(m) < insertAt
                                 ? static_cast<int64_t>(m)
                                 : static_cast<int64_t>(m) + broadcast;
          at[others[m]] = result[position];
        }
        for (size_t k = 0; k < indexed.size(); ++k) {
          // The index tensor's dims align with the broadcast shape's last.
          const Shape &sizes = indexSizes[k];
          int64_t lead =
              insertAt + broadcast - static_cast<int64_t>(sizes.size());
          Index position;
          for (size_t j = 0; j < sizes.size(); ++j)
            position.push_back(sizes[j] == 1 ? exprs.integer(0)
                                             : result[lead + j]);
          int64_t extent = inputSizes[indexed[k]];
          const Expr *index = lowerer.cast(picks[k](position), DType::Int64);
          if (!inRange)
            index = lowerer.where(
                lowerer.binary(BinaryOp::Lt, index, exprs.integer(0)),
                lowerer.binary(BinaryOp::Add, index, exprs.integer(extent)),
                index);
          at[indexed[k]] = clampedIndex(lowerer, index, extent);
        }
        return at;
      }));
}

// nll_loss_forward (self [N, C] or [C]) and nll_loss2d_forward (self
// [N, C, H, W]): each target t's term -weight[t] * self at class t (0
// where t is ignore_index), kept (reduction none of a batch), summed (2) or
// divided by the sum of the kept targets' weights (1, mean: NaN where
// every target is ignored, as torch's 0 / 0), that sum being total_weight
// (0 for reduction none of a batch, as torch's). Natively where the
// targets are known to be classes (an input's are checked before the
// kernel, raising torch's "Target 7 is out of bounds."; ignore_index
// passes) or the program runs without torch.
LoweringResult nllLoss(Lowerer &lowerer, const Node &node) {
  LoweredTensor self = lowerer.input(node, 0);
  LoweredTensor target = lowerer.input(node, 1);
  const TensorMeta &meta = lowerer.resultMeta(node, 0);
  const TensorMeta &totalMeta = lowerer.resultMeta(node, 1);
  const bool batched = self.dim() > 1;
  const int64_t classDim = batched ? 1 : 0;
  if (self.isSymbolic() || target.isSymbolic() ||
      target.dtype != DType::Int64 || self.dim() == 0 ||
      self.sizes[classDim] == 0 || meta.dtype != self.dtype)
    return std::nullopt;
  const int64_t classes = self.sizes[classDim];
  std::optional<LoweredTensor> weight;
  if (!node.arguments().at(2).isNone()) {
    weight = lowerer.input(node, 2);
    // (torch refuses a weight of another dtype.)
    if (weight->dim() != 1 || weight->sizes[0] != classes ||
        weight->dtype != self.dtype)
      return std::nullopt;
  }
  const int64_t reduction = node.arguments().at(3).toInt();
  const int64_t ignored = node.arguments().at(4).toInt();
  if (knownPositions(lowerer, target, classes,
                     {loop::IndexCheck::Report::Target, 0, false, ignored}) ==
          Positions::Unknown &&
      !lowerer.standalone())
    return std::nullopt;

  loop::ExprContext &exprs = lowerer.exprs();
  const DType math = accumulationType(meta.dtype);
  const Shape sizes = target.sizes;
  Loader pickClass = target.loader;
  auto classOf = [&lowerer, pickClass, classes](const Index &index) {
    return clampedIndex(lowerer, pickClass(index), classes);
  };
  std::vector<LoweredTensor> operands{
      target, lowerer.remap(self, sizes, [classOf, classDim](const Index &at) {
        Index index = at;
        index.insert(index.begin() + classDim, classOf(at));
        return index;
      })};
  if (weight)
    operands.push_back(
        lowerer.remap(*weight, sizes, [classOf](const Index &at) {
          return Index{classOf(at)};
        }));
  std::vector<DType> computations(operands.size(), math);
  computations[0] = DType::Int64;
  // A term and its weight, from (target, self at it[, weight at it]).
  auto term = [&lowerer, &exprs, math, ignored](bool ofWeight) {
    return [&lowerer, &exprs, math, ignored,
            ofWeight](const std::vector<const Expr *> &v) {
      const Expr *weightOf = v.size() > 2 ? v[2] : lowerer.constant(1, math);
      const Expr *value =
          ofWeight
              ? weightOf
              : lowerer.binary(BinaryOp::Mul, lowerer.unary(UnaryOp::Neg, v[1]),
                               weightOf);
      return lowerer.where(
          lowerer.binary(BinaryOp::Ne, v[0], exprs.integer(ignored)), value,
          lowerer.constant(0, math));
    };
  };
  LoweredTensor losses =
      lowerer.pointwise(sizes, computations, math, operands, term(false));
  LoweredTensor weights =
      lowerer.pointwise(sizes, computations, math, operands, term(true));
  const bool mean = reduction == 1;
  auto cast = [&lowerer](const LoweredTensor &tensor, DType dtype) {
    return lowerer.pointwise(
        tensor.sizes, dtype, dtype, {tensor},
        [](const std::vector<const Expr *> &v) { return v[0]; });
  };
  if (!batched) {
    LoweredTensor output =
        mean ? lowerer.pointwise(
                   sizes, math, meta.dtype, {losses, weights},
                   [&lowerer](const std::vector<const Expr *> &v) {
                     return lowerer.binary(BinaryOp::Div, v[0], v[1]);
                   })
             : cast(losses, meta.dtype);
    return std::vector<LoweredTensor>{output, cast(weights, totalMeta.dtype)};
  }
  if (reduction == 0)
    return std::vector<LoweredTensor>{
        cast(losses, meta.dtype), lowerer.full(0, totalMeta.dtype, Shape{})};
  if (numelOf(sizes) == 0)
    return std::vector<LoweredTensor>{
        lowerer.full(mean ? std::nan("") : 0.0, meta.dtype, Shape{}),
        lowerer.full(0, totalMeta.dtype, Shape{})};
  ReductionKernel kernel(
      lowerer, sizes,
      reductionDims(Argument(), static_cast<int64_t>(sizes.size())));
  const Expr *lossSum =
      kernel.reduce(ReduceOp::Sum, losses.loader(kernel.index()));
  const Expr *weightSum =
      kernel.reduce(ReduceOp::Sum, weights.loader(kernel.index()));
  std::vector<LoweredTensor> results{
      kernel.store(mean ? lowerer.binary(BinaryOp::Div, lossSum, weightSum)
                        : lossSum,
                   meta),
      kernel.store(weightSum, totalMeta)};
  kernel.emit("nll_loss");
  return results;
}

} // namespace

void registerIndexingLowerings(LoweringTable &table) {
  table.insert({
      {"aten::embedding", embedding},
      {"aten::index_select", indexSelect},
      {"aten::gather", gather},
      {"aten::index.Tensor", indexWithTensors},
      {"aten::nll_loss_forward", nllLoss},
      {"aten::nll_loss2d_forward", nllLoss},
  });
}

} // namespace kiln::lowering
