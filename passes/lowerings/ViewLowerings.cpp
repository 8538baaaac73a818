// Lowerings of the view ops: of a realized tensor, a new placement in the
// same buffer (the view's own strides and offset); of a virtual one, an
// index rewrite of its loader.
// Depends on passes/lowerings/Lowerer.h, ir/OpRegistry.h and
// ir/ops/MetaUtils.h.
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"
#include "passes/lowerings/Lowerer.h"

#include <algorithm>
#include <numeric>
#include <optional>

namespace kiln::lowering {
namespace {

using IndexMap = std::function<Index(const Index &)>;

const TensorMeta &sourceMeta(const Node &node) {
  return node.arguments().at(0).toTensor()->meta();
}

// Result `result` of `node` as a view of argument 0: placed where the
// source is realized (the graph's metadata gives the view's strides and
// storage offset), else `map` applied to the source's loader.
LoweredTensor viewResult(Lowerer &lowerer, const Node &node, unsigned result,
                         const IndexMap &map) {
  LoweredTensor source = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node, result);
  if (source.realized()) {
    Placement placement = *source.placement;
    placement.strides = symbolicStrides(meta);
    placement.offset = size::add(
        placement.offset,
        size::sub(symbolicOffset(meta), symbolicOffset(sourceMeta(node))));
    return lowerer.placed(placement, meta.dtype, symbolicSizes(meta));
  }
  return lowerer.remap(source, symbolicSizes(meta), map);
}

LoweringResult one(LoweredTensor tensor) {
  return std::vector<LoweredTensor>{std::move(tensor)};
}

// The row-major linear position of `index` in `sizes`.
const Expr *linearize(loop::ExprContext &exprs, const Index &index,
                      const SymShape &sizes) {
  const Expr *linear = exprs.integer(0);
  SymShape strides = rowMajorStrides(sizes);
  for (size_t d = 0; d < index.size(); ++d)
    if (sizes[d]->constant() != 1)
      linear = exprs.add(linear, exprs.mul(index[d], exprs.size(strides[d])));
  return linear;
}

Index delinearize(loop::ExprContext &exprs, const Expr *linear,
                  const SymShape &sizes) {
  Index index;
  SymShape strides = rowMajorStrides(sizes);
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d]->constant() == 1) {
      index.push_back(exprs.integer(0));
      continue;
    }
    const Expr *position =
        exprs.binary(loop::BinaryOp::FloorDiv, linear, exprs.size(strides[d]));
    index.push_back(d == 0 ? position
                           : exprs.binary(loop::BinaryOp::Mod, position,
                                          exprs.size(sizes[d])));
  }
  return index;
}

// Dims [fromBegin, fromEnd) of a reshape's source hold the elements of
// dims [toBegin, toEnd) of its result: their products are equal.
struct ReshapeGroup {
  size_t fromBegin, fromEnd, toBegin, toEnd;
};

// A reshape as groups of dims with equal products (size-1 dims of either
// side in none: they are read at 0), so that each group's index maps on
// its own: a dim of size s0 kept as it is stays v, where the position
// through the whole tensor would be (v*s0 + w) // s0 mod s0, which no
// index simplification sees through. nullopt where the products of the
// two sides do not line up as expressions.
std::optional<std::vector<ReshapeGroup>> reshapeGroups(const Lowerer &lowerer,
                                                       const SymShape &from,
                                                       const SymShape &to) {
  std::vector<ReshapeGroup> groups;
  auto isOne = [](SymSize size) { return size->constant() == 1; };
  size_t i = 0, j = 0;
  while (true) {
    while (i < from.size() && isOne(from[i]))
      ++i;
    while (j < to.size() && isOne(to[j]))
      ++j;
    if (i == from.size() || j == to.size())
      break;
    ReshapeGroup group{i, i + 1, j, j + 1};
    SymSize fromProduct = from[i], toProduct = to[j];
    // Grow the side whose product is smaller in the example call.
    while (fromProduct != toProduct) {
      int64_t a = lowerer.hint(fromProduct), b = lowerer.hint(toProduct);
      if (a < b && group.fromEnd < from.size())
        fromProduct = size::mul(fromProduct, from[group.fromEnd++]);
      else if (b < a && group.toEnd < to.size())
        toProduct = size::mul(toProduct, to[group.toEnd++]);
      else
        return std::nullopt;
    }
    groups.push_back(group);
    i = group.fromEnd;
    j = group.toEnd;
  }
  for (; i < from.size(); ++i)
    if (!isOne(from[i]))
      return std::nullopt;
  for (; j < to.size(); ++j)
    if (!isOne(to[j]))
      return std::nullopt;
  return groups;
}

// Whether `node` always returns a view of its source (never a copy).
bool isView(const Node &node) {
  const std::string &name = node.schema()->qualifiedName();
  return name == "aten::view" || name == "aten::_unsafe_view";
}

// view, reshape, flatten, unflatten, _unsafe_view: the same elements in
// row-major order. A realized source whose layout allows it is viewed in
// place (torch's computeStride); otherwise the index goes through the
// linear position.
LoweringResult reshape(Lowerer &lowerer, const Node &node) {
  LoweredTensor source = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (source.realized()) {
    const Placement &at = *source.placement;
    bool fixed = !source.isSymbolic() && !meta.isSymbolic() &&
                 loop::Ranges(at.strides).isStatic();
    if (fixed) {
      if (auto strides = meta::viewStrides(
              source.sizes, loop::Ranges(at.strides).constants(), meta.sizes)) {
        Placement placement = at;
        placement.strides = constantShape(*strides);
        return one(lowerer.placed(placement, meta.dtype, meta.sizes));
      }
    } else if (isView(node) &&
               at.strides == symbolicStrides(sourceMeta(node))) {
      // Where sizes vary, a view op's result (its strides in the graph, a
      // view of the source as the graph lays it out) is kept as a view
      // where the source sits as the graph says it does. A reshape that
      // copied has other strides: it goes through the linear position.
      return one(viewResult(lowerer, node, 0,
                            [](const Index &index) { return index; }));
    }
  }
  loop::ExprContext *exprs = &lowerer.exprs();
  SymShape from = source.symSizes, to = symbolicSizes(meta);
  if (source.isSymbolic() || meta.isSymbolic())
    if (auto groups = reshapeGroups(lowerer, from, to))
      return one(lowerer.remap(
          source, to, [exprs, from, to, groups = *groups](const Index &index) {
            Index result(from.size(), exprs->integer(0));
            for (const ReshapeGroup &group : groups) {
              Index inner(index.begin() + group.toBegin,
                          index.begin() + group.toEnd);
              SymShape toSizes(to.begin() + group.toBegin,
                               to.begin() + group.toEnd);
              SymShape fromSizes(from.begin() + group.fromBegin,
                                 from.begin() + group.fromEnd);
              Index mapped =
                  inner.size() == 1 && fromSizes.size() == 1
                      ? inner
                      : delinearize(*exprs, linearize(*exprs, inner, toSizes),
                                    fromSizes);
              std::copy(mapped.begin(), mapped.end(),
                        result.begin() + group.fromBegin);
            }
            return result;
          }));
  return one(lowerer.remap(source, to, [exprs, from, to](const Index &index) {
    return delinearize(*exprs, linearize(*exprs, index, to), from);
  }));
}

LoweringResult identity(Lowerer &lowerer, const Node &node) {
  return one(
      viewResult(lowerer, node, 0, [](const Index &index) { return index; }));
}

// Output dim k reads source dim order[k].
LoweringResult permuted(Lowerer &lowerer, const Node &node,
                        std::vector<int64_t> order) {
  return one(viewResult(lowerer, node, 0, [order](const Index &index) {
    Index source(index.size());
    for (size_t k = 0; k < order.size(); ++k)
      source[order[k]] = index[k];
    return source;
  }));
}

LoweringResult permute(Lowerer &lowerer, const Node &node) {
  int64_t ndim = sourceMeta(node).dim();
  std::vector<int64_t> order;
  for (int64_t dim : node.arguments().at(1).toIntList())
    order.push_back(wrapDim(dim, ndim));
  return permuted(lowerer, node, order);
}

LoweringResult transpose(Lowerer &lowerer, const Node &node) {
  int64_t ndim = sourceMeta(node).dim();
  std::vector<int64_t> order(ndim);
  std::iota(order.begin(), order.end(), 0);
  if (ndim > 0)
    std::swap(order[wrapDim(node.arguments().at(1).toInt(), ndim)],
              order[wrapDim(node.arguments().at(2).toInt(), ndim)]);
  return permuted(lowerer, node, order);
}

LoweringResult matrixTranspose(Lowerer &lowerer, const Node &node) {
  int64_t ndim = sourceMeta(node).dim();
  std::vector<int64_t> order(ndim);
  std::iota(order.begin(), order.end(), 0);
  if (ndim == 2)
    std::swap(order[0], order[1]);
  return permuted(lowerer, node, order);
}

LoweringResult movedim(Lowerer &lowerer, const Node &node) {
  int64_t ndim = sourceMeta(node).dim();
  int64_t from = wrapDim(node.arguments().at(1).toInt(), ndim);
  int64_t to = wrapDim(node.arguments().at(2).toInt(), ndim);
  std::vector<int64_t> order;
  for (int64_t d = 0; d < ndim; ++d)
    if (d != from)
      order.push_back(d);
  order.insert(order.begin() + to, from);
  return permuted(lowerer, node, order);
}

// expand, expand_as: source dims align with the trailing output dims and
// size-1 source dims read index 0.
LoweringResult expand(Lowerer &lowerer, const Node &node) {
  Shape from = sourceMeta(node).sizes;
  const Expr *zero = lowerer.exprs().integer(0);
  return one(viewResult(lowerer, node, 0, [from, zero](const Index &index) {
    Index source;
    size_t skip = index.size() - from.size();
    for (size_t d = 0; d < from.size(); ++d)
      source.push_back(from[d] == 1 ? zero : index[skip + d]);
    return source;
  }));
}

// Dims that exist in the source but not in the view (squeeze), read at
// index 0; `removed` flags them.
LoweredTensor dropDims(Lowerer &lowerer, const Node &node,
                       std::vector<bool> removed) {
  const Expr *zero = lowerer.exprs().integer(0);
  return viewResult(lowerer, node, 0, [removed, zero](const Index &index) {
    Index source;
    size_t next = 0;
    for (bool gone : removed)
      source.push_back(gone ? zero : index[next++]);
    return source;
  });
}

LoweringResult squeeze(Lowerer &lowerer, const Node &node) {
  const TensorMeta &from = sourceMeta(node);
  std::vector<int64_t> dims;
  if (node.arguments().size() > 1)
    for (int64_t dim : node.arguments().at(1).toIntList())
      dims.push_back(wrapDim(dim, from.dim()));
  std::vector<bool> removed(from.dim(), false);
  for (int64_t d = 0; d < from.dim(); ++d)
    removed[d] = from.sizes[d] == 1 &&
                 (node.arguments().size() == 1 ||
                  std::find(dims.begin(), dims.end(), d) != dims.end());
  return one(dropDims(lowerer, node, removed));
}

LoweringResult unsqueeze(Lowerer &lowerer, const Node &node) {
  int64_t ndim = sourceMeta(node).dim() + 1;
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), ndim);
  return one(viewResult(lowerer, node, 0, [dim](const Index &index) {
    Index source = index;
    source.erase(source.begin() + dim);
    return source;
  }));
}

// A view that reads dim `dim` at start + step * i.
LoweredTensor strided(Lowerer &lowerer, const Node &node, unsigned result,
                      int64_t dim, SymSize start, int64_t step) {
  loop::ExprContext *exprs = &lowerer.exprs();
  const Expr *first = lowerer.size(start);
  return viewResult(
      lowerer, node, result, [exprs, dim, first, step](const Index &index) {
        Index source = index;
        source[dim] =
            exprs->add(exprs->mul(index[dim], exprs->integer(step)), first);
        return source;
      });
}

int64_t clampedStart(const Argument &argument, int64_t size,
                     int64_t otherwise) {
  if (argument.isNone())
    return otherwise;
  int64_t value = argument.toInt();
  if (value < 0)
    value += size;
  return std::clamp<int64_t>(value, 0, size);
}

// A position along a dim whose size varies between calls is known only
// where it is a number from the front that no size can clamp (0 or 1:
// symbols stand for sizes of at least 2); elsewhere torch runs the view.
bool positionKnown(const Argument &argument, const TensorMeta &from,
                   int64_t dim) {
  if (argument.isNone())
    return true;
  if (argument.isSymbolic())
    return false;
  if (from.symSize(dim)->isConstant())
    return true;
  int64_t value = argument.toInt();
  return value >= 0 && value <= 1;
}

LoweringResult slice(Lowerer &lowerer, const Node &node) {
  const TensorMeta &from = sourceMeta(node);
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), from.dim());
  if (!positionKnown(node.arguments().at(2), from, dim))
    return std::nullopt;
  int64_t start = clampedStart(node.arguments().at(2), from.sizes[dim], 0);
  return one(strided(lowerer, node, 0, dim, size::constant(start),
                     node.arguments().at(4).toInt()));
}

LoweringResult narrow(Lowerer &lowerer, const Node &node) {
  const TensorMeta &from = sourceMeta(node);
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), from.dim());
  if (!positionKnown(node.arguments().at(2), from, dim))
    return std::nullopt;
  int64_t start = node.arguments().at(2).toInt();
  if (start < 0)
    start += from.sizes[dim];
  return one(strided(lowerer, node, 0, dim, size::constant(start), 1));
}

// Each result is a stretch of dim `dim`, in order.
LoweringResult pieces(Lowerer &lowerer, const Node &node, int64_t dim) {
  std::vector<LoweredTensor> results;
  SymSize start = size::constant(0);
  for (unsigned r = 0; r < node.results().size(); ++r) {
    results.push_back(strided(lowerer, node, r, dim, start, 1));
    start = size::add(start, lowerer.resultMeta(node, r).symSize(dim));
  }
  return results;
}

LoweringResult split(Lowerer &lowerer, const Node &node) {
  return pieces(
      lowerer, node,
      wrapDim(node.arguments().at(2).toInt(), sourceMeta(node).dim()));
}

LoweredTensor selectAt(Lowerer &lowerer, const Node &node, unsigned result,
                       int64_t dim, int64_t position) {
  loop::ExprContext *exprs = &lowerer.exprs();
  return viewResult(
      lowerer, node, result, [exprs, dim, position](const Index &index) {
        Index source = index;
        source.insert(source.begin() + dim, exprs->integer(position));
        return source;
      });
}

LoweringResult select(Lowerer &lowerer, const Node &node) {
  const TensorMeta &from = sourceMeta(node);
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), from.dim());
  if (!positionKnown(node.arguments().at(2), from, dim))
    return std::nullopt;
  int64_t position = node.arguments().at(2).toInt();
  if (position < 0)
    position += from.sizes[dim];
  return one(selectAt(lowerer, node, 0, dim, position));
}

LoweringResult unbind(Lowerer &lowerer, const Node &node) {
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), sourceMeta(node).dim());
  std::vector<LoweredTensor> results;
  for (unsigned r = 0; r < node.results().size(); ++r)
    results.push_back(selectAt(lowerer, node, r, dim, r));
  return results;
}

LoweringResult diagonal(Lowerer &lowerer, const Node &node) {
  int64_t ndim = sourceMeta(node).dim();
  int64_t offset = node.arguments().at(1).toInt();
  int64_t first = wrapDim(node.arguments().at(2).toInt(), ndim);
  int64_t second = wrapDim(node.arguments().at(3).toInt(), ndim);
  loop::ExprContext *exprs = &lowerer.exprs();
  return one(viewResult(lowerer, node, 0, [=](const Index &index) {
    Index source(ndim);
    size_t next = 0;
    for (int64_t d = 0; d < ndim; ++d)
      if (d != first && d != second)
        source[d] = index[next++];
    const Expr *position = index.back();
    source[first] =
        exprs->add(position, exprs->integer(std::max<int64_t>(-offset, 0)));
    source[second] =
        exprs->add(position, exprs->integer(std::max<int64_t>(offset, 0)));
    return source;
  }));
}

// as_strided and _reshape_alias: the caller's strides, so only of a
// realized tensor (a virtual one is realized first).
LoweringResult asStrided(Lowerer &lowerer, const Node &node) {
  LoweredTensor source = lowerer.input(node, 0);
  const TensorMeta &from = sourceMeta(node);
  if (!source.realized())
    source = lowerer.realize(source, from, loop::BufferKind::Temporary,
                             "as_strided_source");
  const TensorMeta &meta = lowerer.resultMeta(node);
  Placement placement = *source.placement;
  placement.strides = symbolicStrides(meta);
  placement.offset = size::add(
      placement.offset, size::sub(symbolicOffset(meta), symbolicOffset(from)));
  return one(lowerer.placed(placement, meta.dtype, symbolicSizes(meta)));
}

// A view of a dense tensor (`sizes`, `strides`) that steps along its dims
// (a slice, a select, a transpose of them): where the view (`viewSizes`,
// `viewStrides`, `offset` into the tensor's storage) starts, and for each
// dim of the view longer than 1, the tensor's dim it steps along (each a
// different one) and the step; nothing where the view is not one.
struct AlignedView {
  Shape start;                      // per dim of the tensor
  std::vector<int64_t> along, step; // per dim of the view (-1: size 1)
};
std::optional<AlignedView> alignedView(const Shape &sizes, const Shape &strides,
                                       const Shape &viewSizes,
                                       const Shape &viewStrides,
                                       int64_t offset) {
  std::vector<size_t> order;
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1)
      order.push_back(d);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  // A storage position as coordinates (dense strides: unique).
  auto coordinates = [&](int64_t position) -> std::optional<Shape> {
    Shape at(sizes.size(), 0);
    for (size_t d : order) {
      at[d] = position / strides[d];
      position %= strides[d];
      if (at[d] >= sizes[d])
        return std::nullopt;
    }
    if (position != 0)
      return std::nullopt;
    return at;
  };
  std::optional<Shape> start = coordinates(offset);
  if (offset < 0 || !start)
    return std::nullopt;
  AlignedView view{*start, {}, {}};
  std::vector<bool> taken(sizes.size(), false);
  for (size_t m = 0; m < viewSizes.size(); ++m) {
    view.along.push_back(-1);
    view.step.push_back(0);
    if (viewSizes[m] <= 1)
      continue;
    std::optional<Shape> next = coordinates(offset + viewStrides[m]);
    if (!next)
      return std::nullopt;
    int64_t dim = -1;
    for (size_t d = 0; d < sizes.size(); ++d)
      if ((*next)[d] != view.start[d]) {
        if (dim >= 0 || (*next)[d] < view.start[d])
          return std::nullopt;
        dim = static_cast<int64_t>(d);
      }
    if (dim < 0 || taken[dim])
      return std::nullopt;
    int64_t step = (*next)[dim] - view.start[dim];
    if (viewStrides[m] != step * strides[dim] ||
        view.start[dim] + step * (viewSizes[m] - 1) >= sizes[dim])
      return std::nullopt;
    taken[dim] = true;
    view.along.back() = dim;
    view.step.back() = step;
  }
  return view;
}

// The node's result: `self` with the elements of the view (`sizes`,
// `strides`, and `offset` elements from the result's first, in the
// result's own layout) replaced by `source`'s. The result's element i sits
// at position q = sum_d i_d * strides_d; it is src's element j where q =
// offset + sum_m j_m * stride_m for j in src's range, else self's. The view
// must not overlap itself (meta::overlapsItself), so that j is q -
// offset's digits, taken from the largest stride down, q inside where the
// last remainder is 0 (dims of size 1 add nothing); where the view steps
// along the result's dims (alignedView) a range test per dim does instead.
// A graph's writes through views become such scatters
// (passes/Functionalization.cpp).
LoweringResult scatterIntoView(Lowerer &lowerer, const Node &node,
                               const Shape &sizes, const Shape &strides,
                               int64_t offset) {
  LoweredTensor self = lowerer.input(node, 0);
  LoweredTensor source = lowerer.input(node, 1);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (meta.isSymbolic() || source.isSymbolic() || source.dtype != meta.dtype ||
      source.sizes != sizes)
    return std::nullopt;
  std::vector<int64_t> digits;
  for (size_t m = 0; m < sizes.size(); ++m) {
    if (sizes[m] == 0)
      return one(lowerer.remap(self, meta.sizes,
                               [](const Index &index) { return index; }));
    if (sizes[m] > 1)
      digits.push_back(static_cast<int64_t>(m));
  }
  if (meta::overlapsItself(sizes, strides))
    return std::nullopt;
  std::sort(digits.begin(), digits.end(),
            [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  loop::ExprContext &exprs = lowerer.exprs();
  const Shape resultStrides = meta.strides;
  const DType dtype = meta.dtype;
  Loader fromSelf = self.loader, fromSource = source.loader;
  LoweredTensor result;
  result.dtype = dtype;
  result.sizes = meta.sizes;
  result.symSizes = constantShape(meta.sizes);
  // A view stepping along the result's dims: a range (and stride) test
  // per dim, no division of positions.
  if (std::optional<AlignedView> aligned =
          alignedView(meta.sizes, resultStrides, sizes, strides, offset)) {
    result.loader = [&lowerer, &exprs, fromSelf, fromSource, sizes,
                     extents = meta.sizes, view = *aligned,
                     dtype](const Index &index) {
      // Tests a position could fail, and'ed.
      const Expr *inside = nullptr;
      auto require = [&](BinaryOp op, const Expr *a, int64_t b) {
        const Expr *test = lowerer.binary(op, a, exprs.integer(b));
        inside =
            inside ? lowerer.binary(BinaryOp::LogicalAnd, inside, test) : test;
      };
      std::vector<bool> stepped(index.size(), false);
      Index at(sizes.size(), exprs.integer(0));
      for (size_t m = 0; m < sizes.size(); ++m) {
        if (view.along[m] < 0)
          continue;
        int64_t d = view.along[m], step = view.step[m];
        stepped[d] = true;
        // The distance from the start runs over [least, most].
        int64_t least = -view.start[d], most = extents[d] - 1 - view.start[d];
        int64_t last = step * (sizes[m] - 1);
        const Expr *distance =
            exprs.add(index[d], exprs.integer(-view.start[d]));
        if (least < 0)
          require(BinaryOp::Ge, distance, 0);
        if (most > last)
          require(BinaryOp::Le, distance, last);
        if (step > 1)
          require(BinaryOp::Eq,
                  lowerer.binary(BinaryOp::Mod, distance, exprs.integer(step)),
                  0);
        const Expr *digit = step > 1 ? lowerer.binary(BinaryOp::Div, distance,
                                                      exprs.integer(step))
                                     : distance;
        if (least < 0)
          digit = lowerer.binary(BinaryOp::Max, digit, exprs.integer(0));
        if (most > last)
          digit =
              lowerer.binary(BinaryOp::Min, digit, exprs.integer(sizes[m] - 1));
        at[m] = digit;
      }
      for (size_t d = 0; d < index.size(); ++d)
        if (!stepped[d] && extents[d] > 1)
          require(BinaryOp::Eq, index[d], view.start[d]);
      if (!inside)
        return lowerer.cast(fromSource(at), dtype);
      return lowerer.where(inside, lowerer.cast(fromSource(at), dtype),
                           fromSelf(index));
    };
    return one(result);
  }
  result.loader = [&lowerer, &exprs, fromSelf, fromSource, sizes, strides,
                   offset, digits, resultStrides,
                   dtype](const Index &index) -> const Expr * {
    const Expr *position = exprs.integer(-offset);
    for (size_t d = 0; d < index.size(); ++d)
      position = exprs.add(
          position, exprs.mul(index[d], exprs.integer(resultStrides[d])));
    const Expr *inside =
        lowerer.binary(BinaryOp::Ge, position, exprs.integer(0));
    const Expr *rest =
        lowerer.binary(BinaryOp::Max, position, exprs.integer(0));
    Index at(sizes.size(), exprs.integer(0));
    for (int64_t m : digits) {
      const Expr *digit =
          lowerer.binary(BinaryOp::Div, rest, exprs.integer(strides[m]));
      rest = lowerer.binary(BinaryOp::Mod, rest, exprs.integer(strides[m]));
      inside = lowerer.binary(
          BinaryOp::LogicalAnd, inside,
          lowerer.binary(BinaryOp::Lt, digit, exprs.integer(sizes[m])));
      at[m] = lowerer.binary(BinaryOp::Min, digit, exprs.integer(sizes[m] - 1));
    }
    inside =
        lowerer.binary(BinaryOp::LogicalAnd, inside,
                       lowerer.binary(BinaryOp::Eq, rest, exprs.integer(0)));
    return lowerer.where(inside, lowerer.cast(fromSource(at), dtype),
                         fromSelf(index));
  };
  return one(result);
}

LoweringResult asStridedScatter(Lowerer &lowerer, const Node &node) {
  // (Its offset counts from the storage's start: a result of offset 0.)
  if (lowerer.resultMeta(node).storageOffset != 0)
    return std::nullopt;
  const Argument &offset = node.arguments().at(4);
  return scatterIntoView(lowerer, node, node.arguments().at(2).toIntList(),
                         node.arguments().at(3).toIntList(),
                         offset.isNone() ? sourceMeta(node).storageOffset
                                         : offset.toInt());
}

// slice_scatter(self, src, dim, start, end, step), select_scatter(self,
// src, dim, index), diagonal_scatter(self, src, offset, dim1, dim2): self
// with that view of it (of the result's own layout, as the ops' metas take
// it: meta::sliceScatterView, selectScatterView, diagonalScatterView)
// replaced by src: the functional forms of writes through views, as
// aot_autograd's graphs have them.
template <TensorMeta (*View)(const MetaArgs &, const TensorMeta &)>
LoweringResult scatterIntoViewOf(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (meta.isSymbolic())
    return std::nullopt;
  // The node's meta passed the same checks: the view exists.
  TensorMeta view = View(MetaArgs(*node.schema(), node.arguments()), meta);
  return scatterIntoView(lowerer, node, view.sizes, view.strides,
                         view.storageOffset - meta.storageOffset);
}

// contiguous: the tensor itself where it already is contiguous, else a
// copy (the result's metadata is contiguous).
LoweringResult contiguous(Lowerer &lowerer, const Node &node) {
  LoweredTensor source = lowerer.input(node, 0);
  if (source.realized() && sourceMeta(node).isContiguous())
    return identity(lowerer, node);
  LoweredTensor copy = lowerer.remap(source, source.symSizes,
                                     [](const Index &index) { return index; });
  copy.placement.reset();
  return one(copy);
}

} // namespace

void registerViewLowerings(LoweringTable &table) {
  table.insert({
      {"aten::view", reshape},
      {"aten::_unsafe_view", reshape},
      {"aten::reshape", reshape},
      {"aten::flatten.using_ints", reshape},
      {"aten::unflatten.int", reshape},
      {"aten::_reshape_alias", asStrided},
      {"aten::as_strided", asStrided},
      {"aten::as_strided_scatter", asStridedScatter},
      {"aten::slice_scatter", scatterIntoViewOf<meta::sliceScatterView>},
      {"aten::select_scatter", scatterIntoViewOf<meta::selectScatterView>},
      {"aten::diagonal_scatter", scatterIntoViewOf<meta::diagonalScatterView>},
      {"aten::permute", permute},
      {"aten::transpose.int", transpose},
      {"aten::t", matrixTranspose},
      {"aten::movedim.int", movedim},
      {"aten::expand", expand},
      {"aten::expand_as", expand},
      {"aten::squeeze", squeeze},
      {"aten::squeeze.dim", squeeze},
      {"aten::squeeze.dims", squeeze},
      {"aten::unsqueeze", unsqueeze},
      {"aten::slice.Tensor", slice},
      {"aten::narrow", narrow},
      {"aten::select.int", select},
      {"aten::unbind.int", unbind},
      {"aten::split.Tensor", split},
      {"aten::split_with_sizes", split},
      {"aten::chunk", split},
      {"aten::diagonal", diagonal},
      {"aten::alias", identity},
      {"aten::detach", identity},
      {"aten::contiguous", contiguous},
  });
}

} // namespace kiln::lowering
