// Lowerings of the reductions (sum, mean, amax, argmax, var, logsumexp,
// norms, ...) as reduction kernels: outer loops over the kept dims, a pass
// over the reduced dims per dependent reduction, and a storing epilogue.
// Depends on passes/lowerings/Lowerer.h.
#include "passes/lowerings/Lowerer.h"

#include "ir/ops/MetaUtils.h"

#include <cmath>
#include <limits>

namespace kiln::lowering {
namespace {

LoweredTensor self(Lowerer &lowerer, const Node &node) {
  return lowerer.input(node, 0);
}

int64_t inputDim(const Node &node) {
  return node.arguments().at(0).toTensor()->meta().dim();
}

// The reduced dims of a node whose `dim` argument is at `index` (an int,
// a list, or None), or every dim where the op has none (`index` < 0).
std::vector<int64_t> dimsOf(const Node &node, int index) {
  if (index < 0)
    return reductionDims(Argument(), inputDim(node));
  return reductionDims(node.arguments().at(index), inputDim(node));
}

// The dtype a sum-like reduction accumulates in: the result's, with half
// types accumulated in float32.
DType sumType(Lowerer &lowerer, const Node &node) {
  return accumulationType(lowerer.resultMeta(node).dtype);
}

std::string what(const Node &node) {
  std::string name = node.schema()->name;
  return name.substr(name.rfind(':') + 1);
}

// sum, prod, nansum: `DimArgument` < 0 when the op reduces everything.
template <ReduceOp Op, int DimArgument, bool SkipNan = false>
LoweringResult accumulate(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  DType dtype = sumType(lowerer, node);
  if (SkipNan && isFloatingPoint(input.dtype)) {
    DType inputType = input.dtype;
    input = lowerer.pointwise(
        input.symSizes, inputType, inputType, {input},
        [&lowerer, inputType](const std::vector<const Expr *> &v) {
          return lowerer.where(lowerer.unary(UnaryOp::IsNan, v[0]),
                               lowerer.constant(0, inputType), v[0]);
        });
  }
  return std::vector<LoweredTensor>{
      reduceTensor(lowerer, input, dimsOf(node, DimArgument), Op, dtype,
                   lowerer.resultMeta(node), what(node))};
}

template <int DimArgument>
LoweringResult mean(Lowerer &lowerer, const Node &node) {
  std::vector<int64_t> dims = dimsOf(node, DimArgument);
  LoweredTensor input = self(lowerer, node);
  DType dtype = sumType(lowerer, node);
  SymSize count = size::constant(1);
  for (int64_t dim : dims)
    count = size::mul(count, input.symSizes[dim]);
  return std::vector<LoweredTensor>{reduceTensor(
      lowerer, input, dims, ReduceOp::Sum, dtype, lowerer.resultMeta(node),
      "mean", [&lowerer, dtype, count](const Expr *sum) {
        return lowerer.binary(BinaryOp::Div, sum, lowerer.count(count, dtype));
      })};
}

int64_t reducedNumel(const Shape &sizes, const std::vector<int64_t> &dims) {
  int64_t numel = 1;
  for (int64_t dim : dims)
    numel *= sizes[dim];
  return numel;
}

// (Sizes that vary are never 0 or 1: tests of reducedNumel against 0 and 1
// hold for every call.)

// amax, amin, max, min, any, all: `DimArgument` < 0 reduces everything.
// Extremes of nothing raise in torch: those stay externs.
template <ReduceOp Op, int DimArgument>
LoweringResult extremum(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  std::vector<int64_t> dims = dimsOf(node, DimArgument);
  bool logical = Op == ReduceOp::Any || Op == ReduceOp::All;
  if (!logical && reducedNumel(input.sizes, dims) == 0)
    return std::nullopt;
  return std::vector<LoweredTensor>{reduceTensor(
      lowerer, input, dims, Op, logical ? DType::Bool : input.dtype,
      lowerer.resultMeta(node), what(node))};
}

// max.dim, min.dim: values and indices from one kernel.
template <ReduceOp Value, ReduceOp Position>
LoweringResult extremumWithIndex(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  std::vector<int64_t> dims = dimsOf(node, 1);
  if (reducedNumel(input.sizes, dims) == 0)
    return std::nullopt;
  ReductionKernel kernel(lowerer, input.symSizes, dims);
  const Expr *element = input.loader(kernel.index());
  const Expr *value = kernel.reduce(Value, element);
  const Expr *position = kernel.reduce(Position, element);
  std::vector<LoweredTensor> results{
      kernel.store(value, lowerer.resultMeta(node, 0)),
      kernel.store(position, lowerer.resultMeta(node, 1))};
  kernel.emit(what(node));
  return results;
}

// argmax, argmin: dim=None ranks positions in the flattened tensor, which
// is the row-major position over every dim.
template <ReduceOp Op>
LoweringResult position(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  std::vector<int64_t> dims = dimsOf(node, 1);
  if (reducedNumel(input.sizes, dims) == 0)
    return std::nullopt;
  return std::vector<LoweredTensor>{
      reduceTensor(lowerer, input, dims, Op, input.dtype,
                   lowerer.resultMeta(node), what(node))};
}

// var, std and their _mean forms, with the correction each overload reads.
enum class Moments { Var, Std, VarMean, StdMean };
enum class CorrectionFrom { Unbiased, UnbiasedWithDim, Correction };

template <Moments Kind, CorrectionFrom From>
LoweringResult moments(Lowerer &lowerer, const Node &node) {
  const auto &arguments = node.arguments();
  LoweredTensor input = self(lowerer, node);
  std::vector<int64_t> dims =
      dimsOf(node, From == CorrectionFrom::Unbiased ? -1 : 1);
  double correction = 1;
  if (From == CorrectionFrom::Unbiased)
    correction = arguments.at(1).toBool() ? 1 : 0;
  else if (From == CorrectionFrom::UnbiasedWithDim)
    correction = arguments.at(2).toBool() ? 1 : 0;
  else if (!arguments.at(2).isNone())
    correction = arguments.at(2).toDouble();
  // eager's CPU kernels accumulate the moments of every float dtype in
  // double (Welford or two passes), so float32 data whose squares overflow
  // float32 ([3e19, -3e19, 1]) still has a finite standard deviation.
  DType dtype = sumType(lowerer, node);
  if (isFloatingPoint(dtype))
    dtype = DType::Float64;
  ReductionKernel kernel(lowerer, input.symSizes, dims);
  const Expr *element = lowerer.cast(input.loader(kernel.index()), dtype);
  auto [mean, squares] =
      meanAndSquaredDeviations(lowerer, kernel, element, dtype);
  SymSize count = kernel.symbolicReducedNumel();
  const Expr *divisor =
      count->isConstant()
          ? lowerer.constant(
                std::max(static_cast<double>(count->value()) - correction, 0.0),
                dtype)
          : lowerer.binary(BinaryOp::Max,
                           lowerer.binary(BinaryOp::Sub,
                                          lowerer.count(count, dtype),
                                          lowerer.constant(correction, dtype)),
                           lowerer.constant(0, dtype));
  const Expr *result = lowerer.binary(BinaryOp::Div, squares, divisor);
  if (Kind == Moments::Std || Kind == Moments::StdMean)
    result = lowerer.unary(UnaryOp::Sqrt, result);
  // Half results round through float32, as c10::Half(double) does.
  if (isFloatingPoint(lowerer.resultMeta(node, 0).dtype) &&
      itemSize(lowerer.resultMeta(node, 0).dtype) == 2) {
    result = lowerer.cast(result, DType::Float32);
    mean = lowerer.cast(mean, DType::Float32);
  }
  std::vector<LoweredTensor> results{
      kernel.store(result, lowerer.resultMeta(node, 0))};
  // Eager's Welford mean starts from +0.0: a row of -0.0 has mean +0.0.
  if (Kind == Moments::VarMean || Kind == Moments::StdMean)
    results.push_back(
        kernel.store(lowerer.binary(BinaryOp::Add, mean,
                                    lowerer.constant(0.0, mean->dtype())),
                     lowerer.resultMeta(node, 1)));
  kernel.emit(what(node));
  return results;
}

// cumsum and cumprod along `dim` of n elements, as reductions (the loop IR
// has no sequential scan): with blocks of b = ceil(sqrt(n)) elements, one
// kernel reduces each block, and a second gives element i the reduction of
// the blocks before its own and of its own block's elements up to i, both
// over one reduced loop of b steps (2 sqrt(n) operations an element, not a
// sequential pass's one, but in parallel and vectorised). Accumulated as
// eager's CPU kernel accumulates (float32 in float64, half types in
// float32, integers in int64, wrapping), each result cast once; the input
// is first cast to the result's dtype. Sums in another order than eager's
// differ by rounding only, products not even there for 0, inf and NaN.
// Where torch can run it, a scan of more than kMaxScanWork such operations
// is left to it: its sequential kernel is faster there (4096 rows of 1024
// on 2 threads of the EPYC: 4.7 ms in eager, 60 here), where a small one
// (an attention mask's positions) costs less than the call.
constexpr int64_t kMaxScanWork = int64_t(1) << 18;

template <ReduceOp Op> LoweringResult scan(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  if (input.isSymbolic())
    return std::nullopt;
  const TensorMeta &meta = lowerer.resultMeta(node);
  DType accumulate = accumulationType(meta.dtype);
  if (isIntegral(meta.dtype, true))
    accumulate = DType::Int64;
  else if (meta.dtype == DType::Float32 &&
           lowerer.device().type == DeviceType::CPU)
    accumulate = DType::Float64;
  double identity = Op == ReduceOp::Sum ? 0.0 : 1.0;
  auto combine = [&](const Expr *a, const Expr *b) {
    return lowerer.binary(Op == ReduceOp::Sum ? BinaryOp::Add : BinaryOp::Mul,
                          a, b);
  };
  auto value = [&](const Expr *element) {
    return lowerer.cast(lowerer.cast(element, meta.dtype), accumulate);
  };
  auto index = [&](int64_t value) { return lowerer.exprs().integer(value); };
  const int64_t dim = wrapDim(node.arguments().at(1).toInt(), input.dim());
  const Shape &sizes = input.sizes;
  const int64_t n = sizes[dim];
  int64_t numel = 1;
  for (int64_t size : sizes)
    numel *= size;
  // Nothing to read (and no element to clamp positions to).
  if (numel == 0)
    return std::vector<LoweredTensor>{lowerer.full(0, meta.dtype, sizes)};
  const int64_t b = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n)))));
  const int64_t blocks = (n + b - 1) / b;
  if (!lowerer.standalone() && numel * 2 * b > kMaxScanWork)
    return std::nullopt;
  // The element at `position` along dim of `input`, clamped into the dim
  // (read, then masked, past its end).
  auto element = [&](const Index &outer, const Expr *position) {
    Index at = outer;
    at[dim] = lowerer.binary(BinaryOp::Min, position, index(n - 1));
    return value(input.loader(at));
  };
  // The blocks' reductions: sizes with dim as [blocks, b], reducing b.
  Shape blockSizes = sizes;
  blockSizes[dim] = blocks;
  blockSizes.insert(blockSizes.begin() + dim + 1, b);
  ReductionKernel blockKernel(lowerer, blockSizes, {dim + 1});
  const Index &blockIndex = blockKernel.index();
  const Expr *position = lowerer.binary(
      BinaryOp::Add, lowerer.binary(BinaryOp::Mul, blockIndex[dim], index(b)),
      blockIndex[dim + 1]);
  Index outer(blockIndex.begin(), blockIndex.end());
  outer.erase(outer.begin() + dim + 1);
  const Expr *blockReduction = blockKernel.reduce(
      Op, lowerer.where(lowerer.binary(BinaryOp::Lt, position, index(n)),
                        element(outer, position),
                        lowerer.constant(identity, accumulate)));
  Shape reducedSizes = sizes;
  reducedSizes[dim] = blocks;
  LoweredTensor blockResults = blockKernel.store(
      blockReduction, contiguousMeta(accumulate, reducedSizes));
  blockKernel.emit(what(node) + " blocks");

  // Element i: the blocks before i / b and its block's elements up to i.
  Shape scanSizes = sizes;
  scanSizes.push_back(b);
  ReductionKernel kernel(lowerer, scanSizes, {input.dim()});
  const Index &scanIndex = kernel.index();
  Index at(scanIndex.begin(), scanIndex.end() - 1);
  const Expr *step = scanIndex.back();
  const Expr *block = lowerer.binary(BinaryOp::Div, at[dim], index(b));
  const Expr *offset = lowerer.binary(BinaryOp::Mod, at[dim], index(b));
  Index blockAt = at;
  blockAt[dim] = lowerer.binary(BinaryOp::Min, step, index(blocks - 1));
  const Expr *before = lowerer.where(lowerer.binary(BinaryOp::Lt, step, block),
                                     blockResults.loader(blockAt),
                                     lowerer.constant(identity, accumulate));
  const Expr *own = lowerer.where(
      lowerer.binary(BinaryOp::Le, step, offset),
      element(at, lowerer.binary(BinaryOp::Add,
                                 lowerer.binary(BinaryOp::Mul, block, index(b)),
                                 step)),
      lowerer.constant(identity, accumulate));
  const Expr *result = kernel.reduce(Op, combine(before, own));
  LoweredTensor stored = kernel.store(lowerer.cast(result, meta.dtype), meta);
  kernel.emit(what(node));
  return std::vector<LoweredTensor>{stored};
}

// log(sum(exp(x - m))) + m with m the maximum (0 where it is infinite, so
// all -inf gives -inf and +inf gives +inf, as torch does).
LoweringResult logsumexp(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  std::vector<int64_t> dims = dimsOf(node, 1);
  DType dtype = sumType(lowerer, node);
  ReductionKernel kernel(lowerer, input.symSizes, dims);
  const Expr *element = lowerer.cast(input.loader(kernel.index()), dtype);
  const Expr *maximum = kernel.reduce(ReduceOp::Max, element);
  const Expr *shift = lowerer.where(lowerer.unary(UnaryOp::IsInf, maximum),
                                    lowerer.constant(0, dtype), maximum);
  kernel.newPass();
  const Expr *sum = kernel.reduce(
      ReduceOp::Sum,
      lowerer.unary(UnaryOp::Exp,
                    lowerer.binary(BinaryOp::Sub, element, shift)));
  const Expr *result =
      lowerer.binary(BinaryOp::Add, lowerer.unary(UnaryOp::Log, sum), shift);
  std::vector<LoweredTensor> results{
      kernel.store(result, lowerer.resultMeta(node))};
  kernel.emit("logsumexp");
  return results;
}

// linalg_vector_norm: ord 2, 1, 0, inf and -inf as their own reductions,
// any other as (sum |x|^ord)^(1 / ord) in the type eager accumulates in
// (its powers overflow as eager's do).
LoweringResult vectorNorm(Lowerer &lowerer, const Node &node) {
  double order = node.arguments().at(1).toDouble();
  LoweredTensor input = self(lowerer, node);
  std::vector<int64_t> dims = dimsOf(node, 2);
  DType dtype = sumType(lowerer, node);
  // The 2-norm of one element is its magnitude, as eager gives it: the
  // square would underflow (a float64 1e-200) or overflow (1e200).
  if (order == 2 && reducedNumel(input.sizes, dims) == 1)
    order = 1;
  // Squares in double: a float32 or bfloat16 1e30 (or 1e-30) squared
  // overflows (underflows) float32, where eager's norm of [1e30] is 1e30.
  bool infinite = std::isinf(order);
  bool general = !(order == 2 || order == 1 || order == 0 || infinite);
  if (order == 2 && isFloatingPoint(dtype))
    dtype = DType::Float64;
  if (std::isnan(order) || (general && !isFloatingPoint(dtype)))
    return std::nullopt;
  if ((infinite || (general && order < 0)) &&
      reducedNumel(input.sizes, dims) == 0)
    return std::nullopt;
  LoweredTensor terms = lowerer.pointwise(
      input.symSizes, dtype, dtype, {input},
      [&lowerer, order, dtype](const std::vector<const Expr *> &v) {
        if (order == 0)
          return lowerer.cast(
              lowerer.binary(BinaryOp::Ne, v[0], lowerer.constant(0, dtype)),
              dtype);
        if (order == 2)
          return lowerer.binary(BinaryOp::Mul, v[0], v[0]);
        const Expr *magnitude = lowerer.unary(UnaryOp::Abs, v[0]);
        if (order == 1 || std::isinf(order))
          return magnitude;
        return lowerer.binary(BinaryOp::Pow, magnitude,
                              lowerer.constant(order, dtype));
      });
  ReduceOp op = !infinite   ? ReduceOp::Sum
                : order > 0 ? ReduceOp::Max
                            : ReduceOp::Min;
  return std::vector<LoweredTensor>{reduceTensor(
      lowerer, terms, dims, op, dtype, lowerer.resultMeta(node), "vector_norm",
      [&lowerer, order, general, dtype, &node](const Expr *value) {
        if (order != 2 && !general)
          return value;
        const Expr *norm =
            general ? lowerer.binary(BinaryOp::Pow, value,
                                     lowerer.constant(1.0 / order, dtype))
                    : lowerer.unary(UnaryOp::Sqrt, value);
        // Half results round through float32, as c10::Half(double)
        // does.
        DType result = lowerer.resultMeta(node).dtype;
        return isFloatingPoint(result) && itemSize(result) == 2
                   ? lowerer.cast(norm, DType::Float32)
                   : norm;
      })};
}

// A loss's elementwise `terms` (of the result's dtype for reduction none,
// else of `math`) kept (reduction 0), summed (2) or averaged (1: NaN for
// none, as eager's mean of nothing) in one reduction kernel.
LoweringResult reducedLoss(Lowerer &lowerer, const Node &node,
                           const LoweredTensor &terms, int64_t reduction,
                           DType math) {
  if (reduction == 0)
    return std::vector<LoweredTensor>{terms};
  std::vector<int64_t> dims =
      reductionDims(Argument(), static_cast<int64_t>(terms.sizes.size()));
  int64_t count = numelOf(terms.sizes);
  bool mean = reduction == 1;
  return std::vector<LoweredTensor>{reduceTensor(
      lowerer, terms, dims, ReduceOp::Sum, math, lowerer.resultMeta(node),
      what(node), [&lowerer, mean, count, math](const Expr *sum) {
        return mean ? lowerer.binary(BinaryOp::Div, sum,
                                     lowerer.count(size::constant(count), math))
                    : sum;
      })};
}

// mse_loss, smooth_l1_loss and huber_loss: the elementwise loss of
// d = self - target (broadcast); soft_margin_loss: log(1 + exp(-target
// self)); in float32 for half types, kept as is
// (reduction none) or summed in one reduction kernel (divided by the count
// for mean: NaN for none, as eager's mean of nothing).
enum class Loss { Squared, SmoothL1, Huber, SoftMargin };

template <Loss Kind>
LoweringResult pointwiseLoss(Lowerer &lowerer, const Node &node) {
  LoweredTensor self = lowerer.input(node, 0), target = lowerer.input(node, 1);
  if (self.isSymbolic() || target.isSymbolic())
    return std::nullopt;
  const TensorMeta &meta = lowerer.resultMeta(node);
  int64_t reduction = node.arguments().at(2).toInt();
  double parameter = Kind == Loss::Squared || Kind == Loss::SoftMargin
                         ? 0
                         : node.arguments().at(3).toDouble();
  Shape sizes = meta::broadcastShapes(self.sizes, target.sizes);
  DType math = accumulationType(meta.dtype);
  LoweredTensor terms = lowerer.pointwise(
      sizes, math, reduction == 0 ? meta.dtype : math, {self, target},
      [&lowerer, math, parameter](const std::vector<const Expr *> &v) {
        auto c = [&](double value) { return lowerer.constant(value, math); };
        if (Kind == Loss::SoftMargin) // log(1 + exp(-target x))
          return lowerer.unary(
              UnaryOp::Log1p,
              lowerer.unary(
                  UnaryOp::Exp,
                  lowerer.unary(UnaryOp::Neg,
                                lowerer.binary(BinaryOp::Mul, v[0], v[1]))));
        const Expr *d = lowerer.binary(BinaryOp::Sub, v[0], v[1]);
        const Expr *square = lowerer.binary(BinaryOp::Mul, d, d);
        if (Kind == Loss::Squared)
          return square;
        const Expr *magnitude = lowerer.unary(UnaryOp::Abs, d);
        const Expr *small =
            lowerer.binary(BinaryOp::Lt, magnitude, c(parameter));
        if (Kind == Loss::SmoothL1) {
          if (parameter == 0) // torch's l1 loss
            return magnitude;
          return lowerer.where(
              small,
              lowerer.binary(BinaryOp::Div,
                             lowerer.binary(BinaryOp::Mul, c(0.5), square),
                             c(parameter)),
              lowerer.binary(BinaryOp::Sub, magnitude, c(0.5 * parameter)));
        }
        return lowerer.where(
            small, lowerer.binary(BinaryOp::Mul, c(0.5), square),
            lowerer.binary(
                BinaryOp::Mul, c(parameter),
                lowerer.binary(BinaryOp::Sub, magnitude, c(0.5 * parameter))));
      });
  return reducedLoss(lowerer, node, terms, reduction, math);
}

// count_nonzero: the sum of (x != 0) as int64 over the dims (all where
// None or []).
LoweringResult countNonzero(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  const TensorMeta &meta = lowerer.resultMeta(node);
  std::vector<int64_t> dims = dimsOf(node, 1);
  DType from = input.dtype;
  LoweredTensor terms = lowerer.pointwise(
      input.symSizes, from, DType::Int64, {input},
      [&lowerer, from](const std::vector<const Expr *> &v) {
        return lowerer.cast(
            lowerer.binary(BinaryOp::Ne, v[0], lowerer.constant(0, from)),
            DType::Int64);
      });
  if (dims.empty())
    return std::vector<LoweredTensor>{terms};
  return std::vector<LoweredTensor>{reduceTensor(
      lowerer, terms, dims, ReduceOp::Sum, DType::Int64, meta, what(node))};
}

// trace: the sum of the diagonal, accumulated as the result's type (float32
// for half types).
LoweringResult trace(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = self(lowerer, node);
  if (input.dim() != 2 || input.isSymbolic())
    return std::nullopt;
  const TensorMeta &meta = lowerer.resultMeta(node);
  int64_t length = std::min(input.sizes[0], input.sizes[1]);
  LoweredTensor diagonal =
      lowerer.remap(input, Shape{length}, [](const Index &index) {
        return Index{index[0], index[0]};
      });
  if (length == 0)
    return std::vector<LoweredTensor>{lowerer.full(0, meta.dtype, Shape{})};
  return std::vector<LoweredTensor>{
      reduceTensor(lowerer, diagonal, {0}, ReduceOp::Sum,
                   sumType(lowerer, node), meta, "trace")};
}

// binary_cross_entropy_with_logits: (1 - t) x - (1 + (p - 1) t)
// log_sigmoid(x), times the weight, as eager's composite computes it
// (log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))), kept or summed (and
// divided by the count for mean), in float32 for half types.
LoweringResult logitsCrossEntropy(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  std::vector<LoweredTensor> operands{lowerer.input(node, 0),
                                      lowerer.input(node, 1)};
  bool weighted = !node.arguments().at(2).isNone();
  bool positive = !node.arguments().at(3).isNone();
  if (weighted)
    operands.push_back(lowerer.input(node, 2));
  if (positive)
    operands.push_back(lowerer.input(node, 3));
  for (const LoweredTensor &operand : operands)
    if (operand.isSymbolic() || operand.dtype != meta.dtype)
      return std::nullopt;
  const Shape sizes = operands[0].sizes;
  int64_t reduction = node.arguments().at(4).toInt();
  DType math = accumulationType(meta.dtype);
  LoweredTensor terms = lowerer.pointwise(
      sizes, math, reduction == 0 ? meta.dtype : math, operands,
      [&lowerer, math, weighted, positive](const std::vector<const Expr *> &v) {
        auto c = [&](double value) { return lowerer.constant(value, math); };
        const Expr *x = v[0], *t = v[1];
        const Expr *logSigmoidX = logSigmoid(lowerer, x, math);
        if (positive)
          logSigmoidX = lowerer.binary(
              BinaryOp::Mul, logSigmoidX,
              lowerer.binary(
                  BinaryOp::Add,
                  lowerer.binary(
                      BinaryOp::Mul,
                      lowerer.binary(BinaryOp::Sub, v[weighted ? 3 : 2], c(1)),
                      t),
                  c(1)));
        const Expr *loss = lowerer.binary(
            BinaryOp::Sub,
            lowerer.binary(BinaryOp::Mul,
                           lowerer.binary(BinaryOp::Sub, c(1), t), x),
            logSigmoidX);
        return weighted ? lowerer.binary(BinaryOp::Mul, loss, v[2]) : loss;
      });
  return reducedLoss(lowerer, node, terms, reduction, math);
}

} // namespace

void registerReductionLowerings(LoweringTable &table) {
  using R = ReduceOp;
  using C = CorrectionFrom;
  table.insert({
      {"aten::mse_loss", pointwiseLoss<Loss::Squared>},
      {"aten::smooth_l1_loss", pointwiseLoss<Loss::SmoothL1>},
      {"aten::huber_loss", pointwiseLoss<Loss::Huber>},
      {"aten::soft_margin_loss", pointwiseLoss<Loss::SoftMargin>},
      {"aten::binary_cross_entropy_with_logits", logitsCrossEntropy},
      {"aten::sum", accumulate<R::Sum, -1>},
      {"aten::sum.dim_IntList", accumulate<R::Sum, 1>},
      {"aten::nansum", accumulate<R::Sum, 1, true>},
      {"aten::prod", accumulate<R::Prod, -1>},
      {"aten::prod.dim_int", accumulate<R::Prod, 1>},
      {"aten::mean", mean<-1>},
      {"aten::mean.dim", mean<1>},
      {"aten::aminmax", extremumWithIndex<R::Min, R::Max>},
      {"aten::count_nonzero", countNonzero},
      {"aten::count_nonzero.dim_IntList", countNonzero},
      {"aten::trace", trace},
      {"aten::amax", extremum<R::Max, 1>},
      {"aten::amin", extremum<R::Min, 1>},
      {"aten::max", extremum<R::Max, -1>},
      {"aten::min", extremum<R::Min, -1>},
      {"aten::max.dim", extremumWithIndex<R::Max, R::ArgMax>},
      {"aten::min.dim", extremumWithIndex<R::Min, R::ArgMin>},
      {"aten::argmax", position<R::ArgMax>},
      {"aten::argmin", position<R::ArgMin>},
      {"aten::any", extremum<R::Any, -1>},
      {"aten::any.dim", extremum<R::Any, 1>},
      {"aten::any.dims", extremum<R::Any, 1>},
      {"aten::all", extremum<R::All, -1>},
      {"aten::all.dim", extremum<R::All, 1>},
      {"aten::all.dims", extremum<R::All, 1>},
      {"aten::var", moments<Moments::Var, C::Unbiased>},
      {"aten::var.dim", moments<Moments::Var, C::UnbiasedWithDim>},
      {"aten::var.correction", moments<Moments::Var, C::Correction>},
      {"aten::std", moments<Moments::Std, C::Unbiased>},
      {"aten::std.dim", moments<Moments::Std, C::UnbiasedWithDim>},
      {"aten::std.correction", moments<Moments::Std, C::Correction>},
      {"aten::var_mean", moments<Moments::VarMean, C::Unbiased>},
      {"aten::var_mean.dim", moments<Moments::VarMean, C::UnbiasedWithDim>},
      {"aten::var_mean.correction", moments<Moments::VarMean, C::Correction>},
      {"aten::std_mean", moments<Moments::StdMean, C::Unbiased>},
      {"aten::std_mean.dim", moments<Moments::StdMean, C::UnbiasedWithDim>},
      {"aten::std_mean.correction", moments<Moments::StdMean, C::Correction>},
      {"aten::logsumexp", logsumexp},
      {"aten::cumsum", scan<R::Sum>},
      {"aten::cumprod", scan<R::Prod>},
      {"aten::linalg_vector_norm", vectorNorm},
  });
}

} // namespace kiln::lowering
