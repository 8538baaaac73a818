// Lowerings of the tensor-creating and rearranging ops: full, zeros, arange,
// fill, cat, stack, tril/triu, flip, roll, repeat, constant_pad_nd.
// Depends on passes/lowerings/Lowerer.h.
#include "passes/lowerings/Lowerer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace kiln::lowering {
namespace {

using Values = std::vector<const Expr *>;

LoweringResult one(LoweredTensor tensor) {
  return std::vector<LoweredTensor>{std::move(tensor)};
}

// full, zeros, ones, *_like, new_*, scalar_tensor, empty*: a constant
// (argument `Value`, or `Fill` where there is none). Eager's empty is
// undefined, so zeros serve.
template <int Value, int Fill>
LoweringResult constant(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (Value >= 0 && node.arguments().at(Value).isSymbolic())
    return std::nullopt;
  double value =
      Value >= 0 ? node.arguments().at(Value).toDouble() : double(Fill);
  return one(lowerer.full(value, meta.dtype, symbolicSizes(meta)));
}

LoweringResult fillTensor(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  LoweredTensor value = lowerer.input(node, 1);
  return one(lowerer.pointwise(symbolicSizes(meta), meta.dtype, meta.dtype,
                               {value}, [](const Values &v) { return v[0]; }));
}

// A tensor of `meta`'s dtype and sizes whose elements `loader` computes
// from their index (not placed anywhere: its readers inline the loader).
LoweringResult computed(const TensorMeta &meta, Loader loader) {
  LoweredTensor result;
  result.dtype = meta.dtype;
  result.sizes = meta.sizes;
  result.symSizes = symbolicSizes(meta);
  result.loader = std::move(loader);
  return one(std::move(result));
}

// arange(end), arange.start(start, end), arange.start_step(...): start +
// i * step, computed in float64 (int64 for integer results).
template <int Start, int Step>
LoweringResult arange(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  for (int argument : {Start, Step})
    if (argument >= 0 && node.arguments().at(argument).isSymbolic())
      return std::nullopt;
  double start = Start >= 0 ? node.arguments().at(Start).toDouble() : 0;
  double step = Step >= 0 ? node.arguments().at(Step).toDouble() : 1;
  DType math = isFloatingPoint(meta.dtype) ? DType::Float64 : DType::Int64;
  DType dtype = meta.dtype;
  return computed(
      meta, [&lowerer, start, step, math, dtype](const Index &index) {
        const Expr *value = lowerer.binary(
            BinaryOp::Add,
            lowerer.binary(BinaryOp::Mul, lowerer.cast(index.at(0), math),
                           lowerer.constant(step, math)),
            lowerer.constant(start, math));
        return lowerer.cast(value, dtype);
      });
}

// linspace (and logspace, base^ of it): element i is start + step i for
// the first half, end - step (steps - 1 - i) for the second, step = (end -
// start) / (steps - 1), as eager's kernel computes them (in double for
// integer results, truncated; one step is start).
template <bool Logarithmic>
LoweringResult spaced(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  const std::vector<Argument> &arguments = node.arguments();
  if (arguments.at(0).isSymbolic() || arguments.at(1).isSymbolic() ||
      !arguments.at(0).isScalar() || !arguments.at(1).isScalar() ||
      isComplex(meta.dtype))
    return std::nullopt;
  double start = arguments.at(0).toDouble(), end = arguments.at(1).toDouble();
  int64_t steps = arguments.at(2).toInt();
  double base = Logarithmic ? arguments.at(3).toDouble() : 0;
  DType math = isFloatingPoint(meta.dtype) ? accumulationType(meta.dtype)
                                           : DType::Float64;
  DType dtype = meta.dtype;
  return computed(meta, [&lowerer, start, end, steps, base, math,
                         dtype](const Index &index) {
    auto c = [&](double value) { return lowerer.constant(value, math); };
    const Expr *position = lowerer.cast(index.at(0), math);
    const Expr *value;
    if (steps == 1) {
      value = c(start);
    } else {
      // (step rounds to the computation type first, as eager's does.)
      const Expr *step = lowerer.binary(BinaryOp::Div, c(end - start),
                                        c(static_cast<double>(steps - 1)));
      const Expr *fromStart =
          lowerer.binary(BinaryOp::Add, c(start),
                         lowerer.binary(BinaryOp::Mul, step, position));
      const Expr *fromEnd = lowerer.binary(
          BinaryOp::Sub, c(end),
          lowerer.binary(BinaryOp::Mul, step,
                         lowerer.binary(BinaryOp::Sub,
                                        c(static_cast<double>(steps - 1)),
                                        position)));
      value = lowerer.where(lowerer.binary(BinaryOp::Lt, position,
                                           c(static_cast<double>(steps / 2))),
                            fromStart, fromEnd);
    }
    if (Logarithmic)
      value = lowerer.binary(BinaryOp::Pow, c(base), value);
    return lowerer.cast(value, dtype);
  });
}

// eye: 1 where row and column meet, else 0.
LoweringResult eye(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (meta.isSymbolic())
    return std::nullopt;
  DType dtype = meta.dtype;
  return computed(meta, [&lowerer, dtype](const Index &index) {
    return lowerer.cast(lowerer.binary(BinaryOp::Eq, index.at(0), index.at(1)),
                        dtype);
  });
}

// An index clamped into [0, size): selects whose other branch is taken
// may still be evaluated, and must not read out of bounds.
const Expr *clampIndex(Lowerer &lowerer, const Expr *index, SymSize size) {
  loop::ExprContext &exprs = lowerer.exprs();
  // Sizes that vary are at least 2.
  const Expr *last =
      size->isConstant()
          ? exprs.integer(std::max<int64_t>(size->value() - 1, 0))
          : lowerer.size(size::sub(size, size::constant(1)));
  return lowerer.binary(BinaryOp::Max,
                        lowerer.binary(BinaryOp::Min, index, last),
                        exprs.integer(0));
}

// cat: a where-chain over the position along `dim`.
LoweringResult cat(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), meta.dim());
  std::vector<LoweredTensor> pieces;
  std::vector<const Expr *> starts;
  SymSize start = size::constant(0);
  for (const Value *value : node.arguments().at(0).toTensorList()) {
    const TensorMeta &piece = value->meta();
    // torch skips legacy empty 1-d tensors.
    if (piece.dim() != meta.dim() || piece.sizes[dim] == 0)
      continue;
    pieces.push_back(lowerer.lowered(value));
    starts.push_back(lowerer.size(start));
    start = size::add(start, piece.symSize(dim));
  }
  if (pieces.empty())
    return one(lowerer.full(0, meta.dtype, symbolicSizes(meta)));
  DType dtype = meta.dtype;
  return computed(meta, [&lowerer, pieces, starts, dim,
                         dtype](const Index &index) {
    const Expr *value = nullptr;
    for (size_t k = pieces.size(); k-- > 0;) {
      Index inner = index;
      inner[dim] = clampIndex(
          lowerer, lowerer.binary(BinaryOp::Sub, index[dim], starts[k]),
          pieces[k].symSizes[dim]);
      const Expr *element = lowerer.cast(pieces[k].loader(inner), dtype);
      value = !value ? element
                     : lowerer.where(lowerer.binary(BinaryOp::Lt, index[dim],
                                                    starts[k + 1]),
                                     element, value);
    }
    return value;
  });
}

// stack: piece k at position k of the new dim.
LoweringResult stack(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), meta.dim());
  std::vector<LoweredTensor> pieces;
  for (const Value *value : node.arguments().at(0).toTensorList())
    pieces.push_back(lowerer.lowered(value));
  DType dtype = meta.dtype;
  return computed(meta, [&lowerer, pieces, dim, dtype](const Index &index) {
    Index inner = index;
    inner.erase(inner.begin() + dim);
    const Expr *value = nullptr;
    for (size_t k = pieces.size(); k-- > 0;) {
      const Expr *element = lowerer.cast(pieces[k].loader(inner), dtype);
      value = !value
                  ? element
                  : lowerer.where(lowerer.binary(BinaryOp::Eq, index[dim],
                                                 lowerer.exprs().integer(
                                                     static_cast<int64_t>(k))),
                                  element, value);
    }
    return value;
  });
}

// tril and triu: x where column - row is on the kept side of `diagonal`.
template <bool Lower>
LoweringResult triangle(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  if (input.dim() < 2 || node.arguments().at(1).isSymbolic())
    return std::nullopt;
  int64_t diagonal = node.arguments().at(1).toInt();
  LoweredTensor result = input;
  result.placement.reset();
  result.cheap = false;
  DType dtype = input.dtype;
  Loader inner = input.loader;
  result.loader = [&lowerer, inner, diagonal, dtype](const Index &index) {
    loop::ExprContext &exprs = lowerer.exprs();
    const Expr *offset =
        lowerer.binary(BinaryOp::Sub, index.back(), index[index.size() - 2]);
    const Expr *keep = lowerer.binary(Lower ? BinaryOp::Le : BinaryOp::Ge,
                                      offset, exprs.integer(diagonal));
    return lowerer.where(keep, inner(index), lowerer.constant(0, dtype));
  };
  return one(result);
}

// A virtual tensor of `sizes` reading `input` at `map(index)`, never
// placed (the result is a copy).
LoweredTensor copyThrough(Lowerer &lowerer, const LoweredTensor &input,
                          Shape sizes,
                          std::function<Index(const Index &)> map) {
  LoweredTensor result = lowerer.remap(input, std::move(sizes), std::move(map));
  result.placement.reset();
  return result;
}

LoweringResult flip(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  std::vector<int64_t> dims;
  for (int64_t dim : node.arguments().at(1).toIntList())
    dims.push_back(wrapDim(dim, input.dim()));
  Shape sizes = input.sizes;
  loop::ExprContext *exprs = &lowerer.exprs();
  return one(copyThrough(lowerer, input, sizes, [=](const Index &index) {
    Index source = index;
    for (int64_t dim : dims)
      source[dim] = exprs->add(exprs->mul(index[dim], exprs->integer(-1)),
                               exprs->integer(sizes[dim] - 1));
    return source;
  }));
}

// pixel_shuffle and pixel_unshuffle: out[..., c, h r + i, w r + j] is
// in[..., c r^2 + i r + j, h, w] (unshuffle the other way round): a copy
// through the index map, so the shuffle fuses with what reads it.
LoweringResult pixelShuffled(Lowerer &lowerer, const Node &node, bool shuffle) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (input.isSymbolic() || input.dim() < 3)
    return std::nullopt;
  int64_t factor = node.arguments().at(1).toInt();
  size_t c = input.dim() - 3, h = c + 1, w = c + 2;
  loop::ExprContext *exprs = &lowerer.exprs();
  return one(copyThrough(lowerer, input, meta.sizes, [=](const Index &index) {
    Index source = index;
    const Expr *r = exprs->integer(factor);
    if (shuffle) {
      source[c] =
          exprs->add(exprs->mul(index[c], exprs->integer(factor * factor)),
                     exprs->add(exprs->mul(exprs->mod(index[h], factor), r),
                                exprs->mod(index[w], factor)));
      source[h] = exprs->floorDiv(index[h], factor);
      source[w] = exprs->floorDiv(index[w], factor);
    } else {
      const Expr *offset = exprs->mod(index[c], factor * factor);
      source[c] = exprs->floorDiv(index[c], factor * factor);
      source[h] =
          exprs->add(exprs->mul(index[h], r), exprs->floorDiv(offset, factor));
      source[w] =
          exprs->add(exprs->mul(index[w], r), exprs->mod(offset, factor));
    }
    return source;
  }));
}

// channel_shuffle(self, g): out[:, k g + j] is self[:, j (C / g) + k].
LoweringResult channelShuffle(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  if (input.isSymbolic() || input.dim() < 3)
    return std::nullopt;
  int64_t groups = node.arguments().at(1).toInt();
  int64_t perGroup = input.sizes[1] / groups;
  loop::ExprContext *exprs = &lowerer.exprs();
  return one(copyThrough(
      lowerer, input, lowerer.resultMeta(node).sizes, [=](const Index &index) {
        Index source = index;
        source[1] = exprs->add(
            exprs->mul(exprs->mod(index[1], groups), exprs->integer(perGroup)),
            exprs->floorDiv(index[1], groups));
        return source;
      }));
}

LoweringResult pixelShuffle(Lowerer &lowerer, const Node &node) {
  return pixelShuffled(lowerer, node, true);
}

LoweringResult pixelUnshuffle(Lowerer &lowerer, const Node &node) {
  return pixelShuffled(lowerer, node, false);
}

LoweringResult roll(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  std::vector<int64_t> shifts = node.arguments().at(1).toIntList();
  std::vector<int64_t> dims = node.arguments().at(2).toIntList();
  if (dims.empty() || dims.size() != shifts.size())
    return std::nullopt;
  for (int64_t &dim : dims)
    dim = wrapDim(dim, input.dim());
  Shape sizes = input.sizes;
  loop::ExprContext *exprs = &lowerer.exprs();
  return one(copyThrough(lowerer, input, sizes, [=](const Index &index) {
    Index source = index;
    for (size_t k = 0; k < dims.size(); ++k) {
      int64_t size = sizes[dims[k]];
      if (size == 0)
        continue;
      int64_t shift = ((shifts[k] % size) + size) % size;
      source[dims[k]] = exprs->mod(
          exprs->add(source[dims[k]], exprs->integer(size - shift)), size);
    }
    return source;
  }));
}

LoweringResult repeat(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  Shape from = input.sizes;
  loop::ExprContext *exprs = &lowerer.exprs();
  return one(copyThrough(lowerer, input, meta.sizes, [=](const Index &index) {
    Index source;
    size_t skip = index.size() - from.size();
    for (size_t d = 0; d < from.size(); ++d)
      source.push_back(exprs->mod(index[skip + d], from[d]));
    return source;
  }));
}

// constant_pad_nd: pads (or crops, for negative pads) the last dims.
LoweringResult constantPad(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  std::vector<int64_t> pad = node.arguments().at(1).toIntList();
  double fill = node.arguments().at(2).toDouble();
  const TensorMeta &meta = lowerer.resultMeta(node);
  Shape from = input.sizes;
  std::vector<int64_t> before(from.size(), 0);
  for (size_t i = 0; 2 * i < pad.size(); ++i)
    before[from.size() - 1 - i] = pad[2 * i];
  Loader inner = input.loader;
  DType dtype = meta.dtype;
  Shape to = meta.sizes;
  return computed(meta, [&lowerer, inner, from, to, before, fill,
                         dtype](const Index &index) {
    loop::ExprContext &exprs = lowerer.exprs();
    Index source;
    const Expr *inside = nullptr;
    for (size_t d = 0; d < from.size(); ++d) {
      // Unpadded on both sides (or cropped at the end): every position of
      // the result reads the input.
      if (before[d] == 0 && to[d] <= from[d]) {
        source.push_back(index[d]);
        continue;
      }
      const Expr *position = exprs.add(index[d], exprs.integer(-before[d]));
      const Expr *valid = lowerer.binary(
          BinaryOp::LogicalAnd,
          lowerer.binary(BinaryOp::Ge, position, exprs.integer(0)),
          lowerer.binary(BinaryOp::Lt, position, exprs.integer(from[d])));
      inside =
          inside ? lowerer.binary(BinaryOp::LogicalAnd, inside, valid) : valid;
      source.push_back(clampIndex(lowerer, position, size::constant(from[d])));
    }
    const Expr *element = lowerer.cast(inner(source), dtype);
    if (!inside)
      return element;
    return lowerer.where(inside, element, lowerer.constant(fill, dtype));
  });
}

// reflection_pad and replication_pad: output position o of a padded dim
// reads input position i = o - left, reflected at the ends (-i below 0,
// 2 (n - 1) - i past n - 1) or clamped to them. The last dim (the one the
// CPU vectorises) reflects as a select between three clamped reads, which
// the CPU emitter splits the loop at: the interior reads contiguous runs,
// each edge its reversed one; the other dims select the position itself.
template <int Spatial, bool Reflect>
LoweringResult edgePad(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (input.isSymbolic())
    return std::nullopt;
  std::vector<int64_t> pad = node.arguments().at(1).toIntList();
  Shape from = input.sizes;
  int64_t rank = input.dim();
  Loader inner = input.loader;
  return computed(meta, [&lowerer, inner, pad, from, rank](const Index &index) {
    loop::ExprContext &exprs = lowerer.exprs();
    Index source = index;
    auto position = [&](int64_t i) {
      return exprs.add(index[rank - 1 - i], exprs.integer(-pad[2 * i]));
    };
    auto below = [&](const Expr *p) {
      return lowerer.binary(BinaryOp::Lt, p, exprs.integer(0));
    };
    auto above = [&](const Expr *p, int64_t last) {
      return lowerer.binary(BinaryOp::Gt, p, exprs.integer(last));
    };
    auto mirrored = [&](const Expr *p, int64_t last) {
      return std::pair{
          exprs.mul(p, exprs.integer(-1)),
          exprs.add(exprs.mul(p, exprs.integer(-1)), exprs.integer(2 * last))};
    };
    for (int64_t i = Spatial - 1; i >= 0; --i) {
      int64_t d = rank - 1 - i, last = from[d] - 1;
      const Expr *p = position(i);
      if (!Reflect) {
        source[d] = clampIndex(lowerer, p, size::constant(from[d]));
        continue;
      }
      auto [low, high] = mirrored(p, last);
      if (i > 0) {
        source[d] = lowerer.where(below(p), low,
                                  lowerer.where(above(p, last), high, p));
        continue;
      }
      auto read = [&](const Expr *at) {
        Index clamped = source;
        clamped[d] = clampIndex(lowerer, at, size::constant(from[d]));
        return inner(clamped);
      };
      return lowerer.where(below(p), read(low),
                           lowerer.where(above(p, last), read(high), read(p)));
    }
    return inner(source);
  });
}

// The scales an upsampling's arguments give for height and width, from
// argument `first` on: scales_h and scales_w, or .vec's scale_factors (a
// list); none where not given; nullopt for a list of another length.
std::optional<std::vector<std::optional<double>>>
upsampleScales(const Node &node, size_t first) {
  std::vector<std::optional<double>> scales(2);
  const std::vector<Argument> &arguments = node.arguments();
  if (node.schema()->overload != "vec") {
    for (size_t d = 0; d < 2; ++d)
      if (arguments.size() > first + d && !arguments[first + d].isNone())
        scales[d] = arguments[first + d].toDouble();
    return scales;
  }
  if (arguments.size() <= first || arguments[first].isNone())
    return scales;
  std::vector<double> factors = arguments[first].toDoubleList();
  if (factors.size() != 2)
    return std::nullopt;
  return std::vector<std::optional<double>>{factors[0], factors[1]};
}

// upsample_nearest2d(self, output_size, scales_h, scales_w) and .vec(input,
// output_size, scale_factors): output position o of a dim of `in` input
// and `out` output positions reads min(floor(o * scale), in - 1), with
// scale in float as torch's CPU kernel computes it (1 / the given scale,
// else in / out). Lowered as the exact floor(o * in / out) where that
// gives the same position at every o (a whole ratio always does); left to
// torch otherwise, or where sizes vary.
LoweringResult upsampleNearest2d(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (input.dim() != 4 || input.isSymbolic() || meta.dim() != 4)
    return std::nullopt;
  auto scales = upsampleScales(node, 2);
  if (!scales)
    return std::nullopt;
  for (int64_t d = 2; d < 4; ++d) {
    int64_t in = input.sizes[d], out = meta.sizes[d];
    std::optional<double> given = (*scales)[d - 2];
    float scale = given && *given > 0
                      ? static_cast<float>(1.0 / *given)
                      : static_cast<float>(in) / static_cast<float>(out);
    for (int64_t o = 0; o < out; ++o) {
      int64_t torchSource = out == in ? o
                            : out == 2 * in
                                ? o >> 1
                                : std::min(static_cast<int64_t>(std::floor(
                                               static_cast<float>(o) * scale)),
                                           in - 1);
      if (torchSource != o * in / out)
        return std::nullopt;
    }
  }
  Shape inSizes = input.sizes, outSizes = meta.sizes;
  loop::ExprContext *exprs = &lowerer.exprs();
  return one(copyThrough(lowerer, input, outSizes, [=](const Index &index) {
    Index source = index;
    for (int64_t d = 2; d < 4; ++d)
      if (inSizes[d] != outSizes[d])
        source[d] = exprs->floorDiv(
            exprs->mul(index[d], exprs->integer(inSizes[d])), outSizes[d]);
    return source;
  }));
}

// Stops the compiler from contracting a * b + c into one rounding: torch's
// kernel rounds the product.
template <typename Real> Real rounded(Real value) {
  volatile Real stored = value;
  return stored;
}

// One dim of a bilinear upsampling: output position o reads rows h0 and
// min(h0 + 1, in - 1) weighted 1 - lambda and lambda, where h0 + lambda is
// the source position num(o) / den, num(o) = o * slope + offset (negative:
// position 0). Exact rationals, for the kernel's integer arithmetic.
struct LinearSource {
  int64_t slope = 0, offset = 0, den = 1;

  // As torch's CPU kernel places it (area_pixel_compute_source_index in
  // `Real`, the input's math type); nullopt where that is not where the
  // exact rational is at some o (h0 differs, or lambda by more than a
  // rounding).
  template <typename Real>
  static std::optional<LinearSource>
  of(int64_t in, int64_t out, bool alignCorners, std::optional<double> given) {
    LinearSource source;
    Real scale;
    if (alignCorners) {
      scale = out > 1 ? static_cast<Real>(in - 1) / static_cast<Real>(out - 1)
                      : Real(0);
      if (out > 1)
        source = {in - 1, 0, out - 1};
    } else {
      scale = given && *given > 0
                  ? static_cast<Real>(1.0 / *given)
                  : static_cast<Real>(in) / static_cast<Real>(out);
      source = {2 * in, in - out, 2 * out};
    }
    const Real half(0.5), tolerance = 4 * std::numeric_limits<Real>::epsilon();
    for (int64_t o = 0; o < out; ++o) {
      Real position = static_cast<Real>(o);
      Real real = alignCorners
                      ? rounded(scale * position)
                      : rounded(rounded(scale * (position + half)) - half);
      if (real < 0)
        real = 0;
      int64_t row = static_cast<int64_t>(real);
      Real lambda =
          std::min(std::max(real - static_cast<Real>(row), Real(0)), Real(1));
      int64_t num = o * source.slope + source.offset;
      int64_t exactRow = num < 0 ? 0 : num / source.den;
      double exactLambda = num < 0 ? 0.0
                                   : static_cast<double>(num % source.den) /
                                         static_cast<double>(source.den);
      if (exactRow != row ||
          std::fabs(exactLambda - static_cast<double>(lambda)) > tolerance)
        return std::nullopt;
    }
    return source;
  }
};

// upsample_bilinear2d(self, output_size, align_corners, scales_h, scales_w)
// and .vec(input, output_size, align_corners, scale_factors): each output
// element mixes the four input elements around its source position, as
// torch's CPU kernel does (lh0 * (x00 * lw0 + x01 * lw1) + lh1 * (x10 *
// lw0 + x11 * lw1)), the positions exact rationals where they are torch's
// (LinearSource). Floating-point types (the half types computed in float);
// left to torch otherwise, or where sizes vary.
LoweringResult upsampleBilinear2d(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  if (input.dim() != 4 || input.isSymbolic() || meta.dim() != 4 ||
      !isFloatingPoint(input.dtype) || meta.numel() == 0)
    return std::nullopt;
  const std::vector<Argument> &arguments = node.arguments();
  bool alignCorners = arguments.at(2).toBool();
  auto scales = upsampleScales(node, 3);
  if (!scales)
    return std::nullopt;
  std::vector<LinearSource> sources;
  DType real = accumulationType(input.dtype);
  for (int64_t d = 2; d < 4; ++d) {
    auto source = real == DType::Float64
                      ? LinearSource::of<double>(input.sizes[d], meta.sizes[d],
                                                 alignCorners, (*scales)[d - 2])
                      : LinearSource::of<float>(input.sizes[d], meta.sizes[d],
                                                alignCorners, (*scales)[d - 2]);
    if (!source)
      return std::nullopt;
    sources.push_back(*source);
  }
  input = lowerer.readable(input, "upsample_input");
  DType math = accumulationType(input.dtype), dtype = meta.dtype;
  Shape inSizes = input.sizes;
  Loader inner = input.loader;
  LoweredTensor result = copyThrough(lowerer, input, meta.sizes,
                                     [](const Index &index) { return index; });
  result.cheap = false;
  result.dtype = dtype;
  result.loader = [&lowerer, inner, sources, inSizes, math,
                   dtype](const Index &index) {
    loop::ExprContext &exprs = lowerer.exprs();
    // Rows (d = 0) and columns (d = 1): first position, second, weights.
    const Expr *first[2], *second[2], *weight0[2], *weight1[2];
    for (int d = 0; d < 2; ++d) {
      const LinearSource &source = sources[d];
      int64_t in = inSizes[d + 2];
      const Expr *num =
          exprs.add(exprs.mul(index[d + 2], exprs.integer(source.slope)),
                    exprs.integer(source.offset));
      const Expr *negative =
          lowerer.binary(BinaryOp::Lt, num, exprs.integer(0));
      first[d] = lowerer.binary(BinaryOp::Max, exprs.floorDiv(num, source.den),
                                exprs.integer(0));
      second[d] =
          lowerer.binary(BinaryOp::Min, exprs.add(first[d], exprs.integer(1)),
                         exprs.integer(in - 1));
      const Expr *fraction = lowerer.binary(
          BinaryOp::Div, lowerer.cast(exprs.mod(num, source.den), math),
          lowerer.constant(static_cast<double>(source.den), math));
      weight1[d] = lowerer.where(negative, lowerer.constant(0, math), fraction);
      weight0[d] =
          lowerer.binary(BinaryOp::Sub, lowerer.constant(1, math), weight1[d]);
    }
    auto at = [&](const Expr *row, const Expr *column) {
      Index source = index;
      source[2] = row;
      source[3] = column;
      return lowerer.cast(inner(source), math);
    };
    auto alongRow = [&](const Expr *row) {
      return lowerer.binary(
          BinaryOp::Add,
          lowerer.binary(BinaryOp::Mul, at(row, first[1]), weight0[1]),
          lowerer.binary(BinaryOp::Mul, at(row, second[1]), weight1[1]));
    };
    const Expr *value = lowerer.binary(
        BinaryOp::Add,
        lowerer.binary(BinaryOp::Mul, weight0[0], alongRow(first[0])),
        lowerer.binary(BinaryOp::Mul, weight1[0], alongRow(second[0])));
    return lowerer.cast(value, dtype);
  };
  return one(result);
}

} // namespace

void registerTensorLowerings(LoweringTable &table) {
  table.insert({
      {"aten::full", constant<1, 0>},
      {"aten::zeros", constant<-1, 0>},
      {"aten::ones", constant<-1, 1>},
      {"aten::empty.memory_format", constant<-1, 0>},
      {"aten::empty_strided", constant<-1, 0>},
      {"aten::scalar_tensor", constant<0, 0>},
      {"aten::full_like", constant<1, 0>},
      {"aten::zeros_like", constant<-1, 0>},
      {"aten::ones_like", constant<-1, 1>},
      {"aten::empty_like", constant<-1, 0>},
      {"aten::new_zeros", constant<-1, 0>},
      {"aten::new_ones", constant<-1, 1>},
      {"aten::new_empty", constant<-1, 0>},
      {"aten::new_full", constant<2, 0>},
      {"aten::fill.Scalar", constant<1, 0>},
      {"aten::fill.Tensor", fillTensor},
      {"aten::zero", constant<-1, 0>},
      {"aten::linspace", spaced<false>},
      {"aten::logspace", spaced<true>},
      {"aten::eye", eye},
      {"aten::eye.m", eye},
      {"aten::arange", arange<-1, -1>},
      {"aten::arange.start", arange<0, -1>},
      {"aten::arange.start_step", arange<0, 2>},
      {"aten::cat", cat},
      {"aten::stack", stack},
      {"aten::tril", triangle<true>},
      {"aten::triu", triangle<false>},
      {"aten::flip", flip},
      {"aten::roll", roll},
      {"aten::reflection_pad1d", edgePad<1, true>},
      {"aten::reflection_pad2d", edgePad<2, true>},
      {"aten::reflection_pad3d", edgePad<3, true>},
      {"aten::replication_pad1d", edgePad<1, false>},
      {"aten::replication_pad2d", edgePad<2, false>},
      {"aten::replication_pad3d", edgePad<3, false>},
      {"aten::channel_shuffle", channelShuffle},
      {"aten::pixel_shuffle", pixelShuffle},
      {"aten::pixel_unshuffle", pixelUnshuffle},
      {"aten::repeat", repeat},
      {"aten::constant_pad_nd", constantPad},
      {"aten::upsample_nearest2d", upsampleNearest2d},
      {"aten::upsample_nearest2d.vec", upsampleNearest2d},
      {"aten::upsample_bilinear2d", upsampleBilinear2d},
      {"aten::upsample_bilinear2d.vec", upsampleBilinear2d},
  });
}

} // namespace kiln::lowering
