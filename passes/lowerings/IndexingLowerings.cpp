// Lowerings of the ops that read a tensor at positions held in an index
// tensor (an indirect load: the load's index contains a load of the index
// buffer): embedding, index_select, gather.
// Depends on passes/lowerings/Lowerer.h.
#include "passes/lowerings/Lowerer.h"

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

// Whether every element of `indices` is known to lie in [0, size) when the
// program runs: where each is an affine function of its position with no
// loads (an arange's positions) and its least and greatest values over the
// tensor are in range, or where the indices are an input or a view of one
// (a slice of a model's position ids), whose elements the runtime then
// checks before the first step that reads the input (Lowerer::checkIndices;
// it raises IndexError as torch does). Tensors on the CPU only.
bool indicesInRange(Lowerer &lowerer, const LoweredTensor &indices,
                    int64_t size) {
  if (lowerer.device().type != DeviceType::CPU || indices.isSymbolic() ||
      size <= 0)
    return false;
  if (indices.realized()) {
    const Placement &placement = *indices.placement;
    const loop::Buffer &placed = lowerer.program().buffers[placement.buffer];
    bool fixed = placement.offset->isConstant() &&
                 placement.strides.size() == indices.sizes.size();
    Shape strides;
    for (const SymSize &stride : placement.strides) {
      fixed = fixed && stride->isConstant();
      strides.push_back(stride->isConstant() ? stride->value() : 0);
    }
    if (placed.kind == loop::BufferKind::Input && !placed.meta.isSymbolic() &&
        fixed) {
      lowerer.checkIndices(
          {placement.buffer, size,
           TensorMeta(indices.dtype, indices.sizes, std::move(strides),
                      placement.offset->value())});
      return true;
    }
  }
  loop::ExprContext &exprs = lowerer.exprs();
  Index position;
  for (int64_t d = 0; d < indices.dim(); ++d)
    position.push_back(exprs.var(d));
  const Expr *index = indices.loader(position);
  if (loop::anyNode(index, [](const Expr *node) {
        return node->kind() == loop::ExprKind::Load ||
               node->kind() == loop::ExprKind::Symbol;
      }))
    return false;
  std::vector<const Expr *> zeros(position.size(), exprs.integer(0));
  const Expr *offset = exprs.substituteVars(index, zeros);
  if (!offset->isConstant())
    return false;
  int64_t least = offset->integer(), greatest = offset->integer();
  for (int64_t d = 0; d < indices.dim(); ++d) {
    std::optional<int64_t> step = loop::affineCoefficient(index, d);
    int64_t span;
    // (An overflow proves nothing.)
    if (!step || __builtin_mul_overflow(*step, indices.sizes[d] - 1, &span) ||
        __builtin_add_overflow(span < 0 ? least : greatest, span,
                               span < 0 ? &least : &greatest))
      return false;
  }
  return least >= 0 && greatest < size;
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
  if (!lowerer.standalone())
    return std::nullopt;
  LoweredTensor input = lowerer.input(node, 0);
  LoweredTensor positions = lowerer.input(node, 2);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (input.dim() == 0 || positions.dim() != input.dim() ||
      !isIndexType(positions.dtype) || meta.sizes != positions.sizes ||
      meta.dtype != input.dtype)
    return std::nullopt;
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), input.dim());
  for (int64_t d = 0; d < input.dim(); ++d)
    if (d != dim && positions.sizes[d] > input.sizes[d])
      return std::nullopt;
  int64_t extent = input.sizes[dim];
  if (extent == 0)
    return std::nullopt;
  indicesInRange(lowerer, positions, extent); // checked where an input
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

} // namespace

void registerIndexingLowerings(LoweringTable &table) {
  table.insert({
      {"aten::embedding", embedding},
      {"aten::index_select", indexSelect},
      {"aten::gather", gather},
  });
}

} // namespace kiln::lowering
