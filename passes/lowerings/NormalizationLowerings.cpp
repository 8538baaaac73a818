// Lowerings of softmax, log_softmax, layer, batch (inference) and group
// norm as decompositions into reductions and virtual pointwise tensors, in
// float32 for half inputs as eager computes them.
// Depends on passes/lowerings/Lowerer.h.
#include "passes/lowerings/Lowerer.h"

#include <limits>

namespace kiln::lowering {
namespace {

using Values = std::vector<const Expr *>;

enum class SoftmaxKind { Softmax, LogSoftmax, SafeSoftmax };

// softmax and log_softmax over one dim: max, exp(x - max), sum, combine
// (softmax multiplies by the sum's reciprocal, as eager does).
// _safe_softmax (scaled_dot_product_attention's) gives 0 where a whole row
// is -inf, where softmax gives NaN: exactly the rows whose max is -inf.
template <SoftmaxKind Kind>
LoweringResult softmax(Lowerer &lowerer, const Node &node) {
  constexpr bool Log = Kind == SoftmaxKind::LogSoftmax;
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &meta = lowerer.resultMeta(node);
  DType math = accumulationType(meta.dtype);
  std::vector<int64_t> dims;
  if (input.dim() > 0)
    dims.push_back(wrapDim(node.arguments().at(1).toInt(), input.dim()));
  TensorMeta kept =
      lowerer.contiguous(math, reducedShape(input.symSizes, dims, true));
  std::string name = Log ? "log_softmax" : "softmax";
  LoweredTensor maximum = reduceTensor(lowerer, input, dims, ReduceOp::Max,
                                       math, kept, name + "_max");
  LoweredTensor shifted =
      lowerer.pointwise(input.symSizes, math, math, {input, maximum},
                        [&lowerer](const Values &v) {
                          return lowerer.binary(BinaryOp::Sub, v[0], v[1]);
                        });
  LoweredTensor exponentials = lowerer.pointwise(
      input.symSizes, math, math, {shifted}, [&lowerer](const Values &v) {
        return lowerer.unary(UnaryOp::Exp, v[0]);
      });
  LoweredTensor sum = reduceTensor(lowerer, exponentials, dims, ReduceOp::Sum,
                                   math, kept, name + "_sum");
  std::vector<LoweredTensor> parts{Log ? shifted : exponentials, sum};
  if (Kind == SoftmaxKind::SafeSoftmax)
    parts.push_back(maximum);
  LoweredTensor combined = lowerer.pointwise(
      input.symSizes, math, meta.dtype, parts,
      [&lowerer, math](const Values &v) {
        if (Log)
          return lowerer.binary(BinaryOp::Sub, v[0],
                                lowerer.unary(UnaryOp::Log, v[1]));
        const Expr *value = lowerer.binary(
            BinaryOp::Mul, v[0], lowerer.unary(UnaryOp::Reciprocal, v[1]));
        if (Kind != SoftmaxKind::SafeSoftmax)
          return value;
        const Expr *emptyRow = lowerer.binary(
            BinaryOp::Eq, v[2],
            lowerer.constant(-std::numeric_limits<double>::infinity(), math));
        return lowerer.where(emptyRow, lowerer.constant(0.0, math), value);
      });
  return std::vector<LoweredTensor>{combined};
}

// (x - mean) * rstd * weight + bias in `result`; weight and bias are
// optional and already shaped to broadcast against x.
LoweredTensor normalize(Lowerer &lowerer, const LoweredTensor &input,
                        const LoweredTensor &mean, const LoweredTensor &rstd,
                        const std::optional<LoweredTensor> &weight,
                        const std::optional<LoweredTensor> &bias, DType math,
                        DType result) {
  std::vector<LoweredTensor> inputs{input, mean, rstd};
  if (weight)
    inputs.push_back(*weight);
  if (bias)
    inputs.push_back(*bias);
  bool hasWeight = weight.has_value(), hasBias = bias.has_value();
  return lowerer.pointwise(
      input.symSizes, math, result, inputs,
      [&lowerer, hasWeight, hasBias](const Values &v) {
        const Expr *value = lowerer.binary(
            BinaryOp::Mul, lowerer.binary(BinaryOp::Sub, v[0], v[1]), v[2]);
        if (hasWeight)
          value = lowerer.binary(BinaryOp::Mul, value, v[3]);
        if (hasBias)
          value = lowerer.binary(BinaryOp::Add, value, v[hasWeight ? 4 : 3]);
        return value;
      });
}

std::optional<LoweredTensor> optionalInput(Lowerer &lowerer, const Node &node,
                                           size_t index) {
  if (node.arguments().at(index).isNone())
    return std::nullopt;
  return lowerer.input(node, index);
}

// A norm's statistic: `value` in the math dtype, which the normalization
// reads, and `result`, as the op returns it (CPU's norms return
// float16/bfloat16 statistics but normalize with the float32 ones).
struct Statistic {
  LoweredTensor value, result;
};

// Mean and 1/sqrt(var + eps) of `input` over `dims` (biased variance), in
// one two-pass kernel, returned as `meanMeta` and `rstdMeta`.
std::pair<Statistic, Statistic>
statistics(Lowerer &lowerer, const LoweredTensor &input,
           const std::vector<int64_t> &dims, double eps, DType math,
           const TensorMeta &meanMeta, const TensorMeta &rstdMeta,
           const std::string &what) {
  ReductionKernel kernel(lowerer, input.symSizes, dims);
  const Expr *element = lowerer.cast(input.loader(kernel.index()), math);
  auto [mean, squares] =
      meanAndSquaredDeviations(lowerer, kernel, element, math);
  const Expr *variance =
      lowerer.binary(BinaryOp::Div, squares,
                     lowerer.count(kernel.symbolicReducedNumel(), math));
  const Expr *rstd = lowerer.unary(
      UnaryOp::Rsqrt,
      lowerer.binary(BinaryOp::Add, variance, lowerer.constant(eps, math)));
  auto keep = [&](const Expr *value, const TensorMeta &meta) {
    LoweredTensor result = kernel.store(value, meta);
    if (meta.dtype == math)
      return Statistic{result, result};
    return Statistic{
        kernel.store(value, lowerer.contiguous(math, symbolicSizes(meta))),
        result};
  };
  Statistic meanStatistic = keep(mean, meanMeta);
  Statistic rstdStatistic = keep(rstd, rstdMeta);
  kernel.emit(what);
  return {meanStatistic, rstdStatistic};
}

// native_layer_norm (out, mean, rstd) and layer_norm (out).
template <bool Native>
LoweringResult layerNorm(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  int64_t normalized =
      static_cast<int64_t>(node.arguments().at(1).toIntList().size());
  std::vector<int64_t> dims;
  for (int64_t d = input.dim() - normalized; d < input.dim(); ++d)
    dims.push_back(d);
  DType math = accumulationType(input.dtype);
  TensorMeta statsMeta =
      Native
          ? lowerer.resultMeta(node, 1)
          : lowerer.contiguous(math, reducedShape(input.symSizes, dims, true));
  TensorMeta rstdMeta = Native ? lowerer.resultMeta(node, 2) : statsMeta;
  auto [mean, rstd] =
      statistics(lowerer, input, dims, node.arguments().at(4).toDouble(), math,
                 statsMeta, rstdMeta, "layer_norm");
  LoweredTensor out = normalize(
      lowerer, input, mean.value, rstd.value, optionalInput(lowerer, node, 2),
      optionalInput(lowerer, node, 3), math, lowerer.resultMeta(node, 0).dtype);
  if (!Native)
    return std::vector<LoweredTensor>{out};
  return std::vector<LoweredTensor>{out, mean.result, rstd.result};
}

// A per-channel vector [C] as a tensor of `sizes` (channels at dim 1).
LoweredTensor perChannel(Lowerer &lowerer, const LoweredTensor &channels,
                         const SymShape &sizes, int64_t groupSize = 1) {
  loop::ExprContext *exprs = &lowerer.exprs();
  return lowerer.remap(channels, sizes, [exprs, groupSize](const Index &index) {
    return Index{exprs->floorDiv(index.at(1), groupSize)};
  });
}

// Input `index` of `node`, a per-channel vector or None, as a tensor of
// `sizes`.
std::optional<LoweredTensor> channelInput(Lowerer &lowerer, const Node &node,
                                          size_t index, const SymShape &sizes) {
  if (auto tensor = optionalInput(lowerer, node, index))
    return perChannel(lowerer, *tensor, sizes);
  return std::nullopt;
}

// The results of a batch norm with the running statistics, the first
// `out`: the saved statistics are empty in inference.
std::vector<LoweredTensor> inferenceResults(Lowerer &lowerer, const Node &node,
                                            LoweredTensor out) {
  std::vector<LoweredTensor> results{std::move(out)};
  for (unsigned r = 1; r < node.results().size(); ++r)
    results.push_back(lowerer.full(0, lowerer.resultMeta(node, r).dtype,
                                   symbolicSizes(lowerer.resultMeta(node, r))));
  return results;
}

// A CPU batch norm with the running statistics as torch's CPU kernel
// computes it: per channel a = weight / sqrt(var + eps) and b = bias -
// mean * a, each a small buffer of its own, then x * a + b. What reads the
// result computes two operations per element, not six and a square root:
// cheap enough for a GEMM's epilogue (a 1x1 convolution's product, its
// batch norm and ReLU written as one kernel).
LoweringResult batchNormAsScaleAndShift(Lowerer &lowerer, const Node &node,
                                        const LoweredTensor &input,
                                        const LoweredTensor &variance,
                                        double eps, DType math) {
  std::optional<LoweredTensor> weight = optionalInput(lowerer, node, 1);
  std::optional<LoweredTensor> bias = optionalInput(lowerer, node, 2);
  LoweredTensor mean = lowerer.input(node, 3);
  TensorMeta perChannelMeta = contiguousMeta(math, variance.sizes);
  std::vector<LoweredTensor> scaleInputs{variance};
  if (weight)
    scaleInputs.push_back(*weight);
  LoweredTensor scale = lowerer.realize(
      lowerer.pointwise(
          variance.sizes, math, math, scaleInputs,
          [&lowerer, eps, math](const Values &v) {
            const Expr *inverse = lowerer.unary(
                UnaryOp::Rsqrt, lowerer.binary(BinaryOp::Add, v[0],
                                               lowerer.constant(eps, math)));
            return v.size() == 2 ? lowerer.binary(BinaryOp::Mul, inverse, v[1])
                                 : inverse;
          }),
      perChannelMeta, loop::BufferKind::Temporary, "batch_norm_scale");
  std::vector<LoweredTensor> shiftInputs{mean, scale};
  if (bias)
    shiftInputs.push_back(*bias);
  LoweredTensor shift = lowerer.realize(
      lowerer.pointwise(
          variance.sizes, math, math, shiftInputs,
          [&lowerer](const Values &v) {
            const Expr *product = lowerer.binary(BinaryOp::Mul, v[0], v[1]);
            return v.size() == 3 ? lowerer.binary(BinaryOp::Sub, v[2], product)
                                 : lowerer.unary(UnaryOp::Neg, product);
          }),
      perChannelMeta, loop::BufferKind::Temporary, "batch_norm_shift");
  LoweredTensor out = lowerer.pointwise(
      input.symSizes, math, lowerer.resultMeta(node, 0).dtype,
      {input, perChannel(lowerer, scale, input.symSizes),
       perChannel(lowerer, shift, input.symSizes)},
      [&lowerer](const Values &v) {
        return lowerer.binary(BinaryOp::Add,
                              lowerer.binary(BinaryOp::Mul, v[0], v[1]), v[2]);
      });
  return inferenceResults(lowerer, node, out);
}

// Batch norm with the running statistics: _native_batch_norm_legit_no_training
// (eps is argument 6) and native_batch_norm with training=False, as
// nn.BatchNorm in eval mode calls it (eps is argument 7).
LoweringResult batchNormInference(Lowerer &lowerer, const Node &node,
                                  size_t epsIndex) {
  LoweredTensor input = lowerer.input(node, 0);
  const auto &arguments = node.arguments();
  if (input.dim() < 2 || arguments.at(3).isNone() || arguments.at(4).isNone())
    return std::nullopt;
  DType math = accumulationType(input.dtype);
  double eps = arguments.at(epsIndex).toDouble();
  LoweredTensor variance = lowerer.input(node, 4);
  if (lowerer.device().type == DeviceType::CPU && !variance.isSymbolic())
    return batchNormAsScaleAndShift(lowerer, node, input, variance, eps, math);
  LoweredTensor mean =
      perChannel(lowerer, lowerer.input(node, 3), input.symSizes);
  LoweredTensor rstd = perChannel(
      lowerer,
      lowerer.pointwise(variance.symSizes, math, math, {variance},
                        [&lowerer, eps, math](const Values &v) {
                          return lowerer.unary(
                              UnaryOp::Rsqrt,
                              lowerer.binary(BinaryOp::Add, v[0],
                                             lowerer.constant(eps, math)));
                        }),
      input.symSizes);
  return inferenceResults(
      lowerer, node,
      normalize(lowerer, input, mean, rstd,
                channelInput(lowerer, node, 1, input.symSizes),
                channelInput(lowerer, node, 2, input.symSizes), math,
                lowerer.resultMeta(node, 0).dtype));
}

// A CPU batch norm with the batch's statistics and no running statistics
// to update (native_batch_norm with training=True and none given: instance
// norm's call, F.batch_norm(x, None, None, training=True)): per channel, the
// mean and rstd (of the biased variance) over every other dim; results
// (out, mean, rstd) as eager's.
LoweringResult batchNormOfTheBatch(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const auto &arguments = node.arguments();
  // On a GPU torch's kernel runs (not measured there).
  if (lowerer.device().type != DeviceType::CPU || input.dim() < 2 ||
      !arguments.at(3).isNone() || !arguments.at(4).isNone())
    return std::nullopt;
  DType math = accumulationType(input.dtype);
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d)
    dims.push_back(d);
  auto [mean, rstd] = statistics(
      lowerer, input, dims, arguments.at(7).toDouble(), math,
      lowerer.resultMeta(node, 1), lowerer.resultMeta(node, 2), "batch_norm");
  // The CPU kernel computes (x - mean) * (rstd * weight) + bias with the
  // statistics it returns (rounded to a half input's dtype).
  LoweredTensor scale = rstd.result;
  if (std::optional<LoweredTensor> weight = optionalInput(lowerer, node, 1))
    scale =
        lowerer.pointwise(scale.symSizes, math, math, {scale, *weight},
                          [&lowerer](const Values &v) {
                            return lowerer.binary(BinaryOp::Mul, v[0], v[1]);
                          });
  LoweredTensor out = normalize(
      lowerer, input, perChannel(lowerer, mean.result, input.symSizes),
      perChannel(lowerer, scale, input.symSizes), std::nullopt,
      channelInput(lowerer, node, 2, input.symSizes), math,
      lowerer.resultMeta(node, 0).dtype);
  return std::vector<LoweredTensor>{out, mean.result, rstd.result};
}

// native_group_norm: statistics over [N, G, C/G * HxW], applied per
// channel group.
LoweringResult groupNorm(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  const auto &arguments = node.arguments();
  int64_t batch = arguments.at(3).toInt(), channels = arguments.at(4).toInt(),
          spatial = arguments.at(5).toInt(), groups = arguments.at(6).toInt();
  if (input.dim() < 2 || groups <= 0 || channels % groups != 0)
    return std::nullopt;
  int64_t groupSize = channels / groups;
  DType math = accumulationType(input.dtype);
  loop::ExprContext *exprs = &lowerer.exprs();
  Shape inputStrides = contiguousStrides(input.sizes);
  Shape inputSizes = input.sizes;
  LoweredTensor grouped = lowerer.remap(
      input, {batch, groups, groupSize * spatial}, [=](const Index &index) {
        // Channel-major within a sample: (n, g, r) is element
        // n*C*HxW + g*(C/G)*HxW + r of the contiguous order.
        const Expr *linear = exprs->add(
            exprs->add(
                exprs->mul(index[0], exprs->integer(channels * spatial)),
                exprs->mul(index[1], exprs->integer(groupSize * spatial))),
            index[2]);
        Index source;
        for (size_t d = 0; d < inputSizes.size(); ++d) {
          const Expr *position = exprs->floorDiv(linear, inputStrides[d]);
          source.push_back(d == 0 ? position
                                  : exprs->mod(position, inputSizes[d]));
        }
        return source;
      });
  auto [mean, rstd] = statistics(
      lowerer, grouped, {2}, arguments.at(7).toDouble(), math,
      lowerer.resultMeta(node, 1), lowerer.resultMeta(node, 2), "group_norm");
  auto perGroup = [&](const LoweredTensor &statistic) {
    return lowerer.remap(statistic, input.sizes, [=](const Index &index) {
      return Index{index[0], exprs->floorDiv(index[1], groupSize)};
    });
  };
  SymShape sizes = constantShape(input.sizes);
  LoweredTensor out =
      normalize(lowerer, input, perGroup(mean.value), perGroup(rstd.value),
                channelInput(lowerer, node, 1, sizes),
                channelInput(lowerer, node, 2, sizes), math,
                lowerer.resultMeta(node, 0).dtype);
  return std::vector<LoweredTensor>{out, mean.result, rstd.result};
}

} // namespace

void registerNormalizationLowerings(LoweringTable &table) {
  table.insert({
      {"aten::_softmax", softmax<SoftmaxKind::Softmax>},
      {"aten::softmax.int", softmax<SoftmaxKind::Softmax>},
      {"aten::_safe_softmax", softmax<SoftmaxKind::SafeSoftmax>},
      {"aten::_log_softmax", softmax<SoftmaxKind::LogSoftmax>},
      {"aten::log_softmax.int", softmax<SoftmaxKind::LogSoftmax>},
      {"aten::native_layer_norm", layerNorm<true>},
      {"aten::layer_norm", layerNorm<false>},
      {"aten::_native_batch_norm_legit_no_training",
       [](Lowerer &lowerer, const Node &node) {
         return batchNormInference(lowerer, node, 6);
       }},
      {"aten::native_batch_norm",
       [](Lowerer &lowerer, const Node &node) -> LoweringResult {
         if (node.arguments().at(5).toBool()) // training: batch statistics
           return batchNormOfTheBatch(lowerer, node);
         return batchNormInference(lowerer, node, 7);
       }},
      {"aten::native_group_norm", groupNorm},
  });
}

} // namespace kiln::lowering
