// Meta functions of the normalization ops: softmax and log-softmax, layer,
// batch and group norm. Some results depend on the device, as torch's CPU
// and CUDA kernels differ (statistics dtypes, eval-mode statistics).
// Depends on ir/OpRegistry.h and ir/ops/MetaUtils.h.
#include "ir/Error.h"
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

namespace kiln {
namespace {

using meta::checkSupported;
using meta::contiguousLike;
using meta::DTypeSet;
using meta::fail;
using meta::kFloatingTypes;

bool onCpu(const TensorMeta &tensor) {
  return tensor.device.type == DeviceType::CPU;
}

bool isReducedFloat(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16;
}

int64_t wrappedDim(const MetaArgs &args, int64_t dim, int64_t ndim) {
  try {
    return meta::wrapDim(dim, ndim);
  } catch (const Error &error) {
    fail(args, error.what());
  }
}

// The dtype of the statistics (mean, rstd) a norm returns beside its
// output. CPU kernels keep the input's type, or use float32 parameters with
// a float16/bfloat16 input ("mixed type"); the other devices (CUDA, and
// torch's meta functions, which follow it) compute statistics of float16 and
// bfloat16 inputs in float32 where `opmathStatistics`.
DType statisticsDType(const MetaArgs &args, const TensorMeta &input,
                      const std::vector<const TensorMeta *> &parameters,
                      bool opmathStatistics) {
  checkSupported(args, input.dtype, kFloatingTypes);
  if (!onCpu(input))
    return opmathStatistics && isReducedFloat(input.dtype) ? DType::Float32
                                                           : input.dtype;
  const TensorMeta *first = nullptr;
  for (const TensorMeta *parameter : parameters)
    if (parameter && !first)
      first = parameter;
  if (!first)
    return input.dtype;
  for (const TensorMeta *parameter : parameters)
    if (parameter && parameter->dtype != first->dtype)
      fail(args, "parameters of dtypes " +
                     std::string(dtypeName(first->dtype)) + " and " +
                     std::string(dtypeName(parameter->dtype)) +
                     " (CPU): give them all one dtype");
  if (first->dtype == input.dtype)
    return input.dtype;
  if (!isReducedFloat(input.dtype))
    fail(args, "mixed dtype (CPU): the input is " +
                   std::string(dtypeName(input.dtype)) +
                   " but a parameter is " +
                   std::string(dtypeName(first->dtype)) +
                   "; give all inputs the same dtype");
  for (const TensorMeta *parameter : parameters)
    if (parameter && parameter->dtype != DType::Float32)
      fail(args, "mixed dtype (CPU): with a float16 or bfloat16 input, "
                 "parameters must all be float32, got " +
                     std::string(dtypeName(parameter->dtype)));
  return DType::Float32;
}

// A per-channel parameter must have one element per channel.
void checkChannelParameter(const MetaArgs &args, const TensorMeta *parameter,
                           const char *what, int64_t channels,
                           const TensorMeta &input) {
  if (parameter && (parameter->dim() != 1 || parameter->sizes[0] != channels))
    fail(args, std::string("expected ") + what + " to be a vector of " +
                   std::to_string(channels) +
                   " elements, one per channel of the input of shape " +
                   shapeToString(input.sizes) + ", got shape " +
                   shapeToString(parameter->sizes));
}

// --- Softmax -----------------------------------------------------------------

// _softmax and _log_softmax: a contiguous result; half_to_float gives a
// float32 result of a reduced-precision input, off the CPU only.
std::vector<TensorMeta> softmaxKernel(const MetaArgs &args,
                                      DTypeSet halfToFloatInputs) {
  const TensorMeta &self = args.tensor(0);
  wrappedDim(args, args.integer(1), self.dim());
  DType dtype = self.dtype;
  if (args.boolean(2)) {
    if (onCpu(self))
      fail(args, "half_to_float is not supported on CPU; convert the input "
                 "to float32 first");
    if (!halfToFloatInputs.contains(self.dtype))
      fail(args, "half_to_float needs a " + halfToFloatInputs.str() +
                     " input, got " + std::string(dtypeName(self.dtype)));
    dtype = DType::Float32;
  }
  checkSupported(args, self.dtype, kFloatingTypes);
  return {contiguousLike(dtype, self.sizes, self.device)};
}

// softmax.int and log_softmax.int: the input converted to `dtype` first.
std::vector<TensorMeta> softmax(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  wrappedDim(args, args.integer(1), self.dim());
  DType dtype = args.optionalDType(2).value_or(self.dtype);
  checkSupported(args, dtype, kFloatingTypes);
  return {contiguousLike(dtype, self.sizes, self.device)};
}

// --- Layer norm --------------------------------------------------------------

std::vector<TensorMeta> layerNormResults(const MetaArgs &args) {
  const TensorMeta &input = args.tensor(0);
  Shape normalized = args.intList(1);
  const TensorMeta *weight = args.optionalTensor(2);
  const TensorMeta *bias = args.optionalTensor(3);
  if (normalized.empty())
    fail(args, "normalized_shape must have at least one element");
  for (const TensorMeta *parameter : {weight, bias})
    if (parameter && parameter->sizes != normalized)
      fail(args, "expected weight and bias of shape normalized_shape " +
                     shapeToString(normalized) + ", got " +
                     shapeToString(parameter->sizes));
  int64_t axis = input.dim() - static_cast<int64_t>(normalized.size());
  if (axis < 0 || !std::equal(normalized.begin(), normalized.end(),
                              input.sizes.begin() + axis))
    fail(args, "given normalized_shape=" + shapeToString(normalized) +
                   ", expected an input of shape [*, " +
                   shapeToString(normalized).substr(1) + ", got " +
                   shapeToString(input.sizes));
  DType statistics = statisticsDType(args, input, {weight, bias}, true);
  Shape statisticsShape(input.sizes.begin(), input.sizes.begin() + axis);
  statisticsShape.resize(input.dim(), 1);
  return {contiguousLike(input.dtype, input.sizes, input.device),
          contiguousLike(statistics, statisticsShape, input.device),
          contiguousLike(statistics, statisticsShape, input.device)};
}

std::vector<TensorMeta> layerNorm(const MetaArgs &args) {
  return {layerNormResults(args)[0]};
}

// --- Batch norm --------------------------------------------------------------

struct BatchNormArguments {
  const TensorMeta *weight, *bias, *runningMean, *runningVar;
  bool training;
  // batch_norm returns empty inputs as they are, before any kernel runs.
  bool allowEmpty = false;
};

// native_batch_norm and its variants: the output, and the saved mean and
// inverse std per channel. CPU kernels give the output in the input's
// suggested memory format and save empty statistics in eval mode; torch's
// meta functions (kiln's reference off the CPU) keep the input's layout and
// always save statistics.
std::vector<TensorMeta> batchNormResults(const MetaArgs &args,
                                         const BatchNormArguments &given) {
  const TensorMeta &input = args.tensor(0);
  if (input.dim() < 2)
    fail(args, "expected an input with at least 2 dims (batch, channels, "
               "...), got shape " +
                   shapeToString(input.sizes));
  bool returnedAsIs = given.allowEmpty && input.numel() == 0;
  if (!given.training && (!given.runningMean || !given.runningVar) &&
      !returnedAsIs)
    fail(args, "eval mode needs running_mean and running_var; pass them or "
               "set training=True");
  if (onCpu(input) && given.training && input.numel() == 0 && !returnedAsIs)
    fail(args, "the CPU kernel needs a non-empty input in training mode, got "
               "shape " +
                   shapeToString(input.sizes));
  int64_t channels = input.sizes[1];
  checkChannelParameter(args, given.weight, "weight", channels, input);
  checkChannelParameter(args, given.bias, "bias", channels, input);
  checkChannelParameter(args, given.runningMean, "running_mean", channels,
                        input);
  checkChannelParameter(args, given.runningVar, "running_var", channels, input);
  DType statistics = statisticsDType(
      args, input,
      {given.weight, given.bias, given.runningMean, given.runningVar}, true);
  Shape statisticsShape{onCpu(input) && !given.training ? 0 : channels};
  Shape strides = onCpu(input)
                      ? meta::stridesForFormat(input.sizes,
                                               meta::suggestMemoryFormat(input))
                      : meta::preservedStrides(input);
  return {TensorMeta(input.dtype, input.sizes, strides, 0, input.device),
          contiguousLike(statistics, statisticsShape, input.device),
          contiguousLike(statistics, statisticsShape, input.device)};
}

std::vector<TensorMeta> nativeBatchNorm(const MetaArgs &args) {
  return batchNormResults(args, {args.optionalTensor(1), args.optionalTensor(2),
                                 args.optionalTensor(3), args.optionalTensor(4),
                                 args.boolean(5)});
}

std::vector<TensorMeta> batchNormNoTraining(const MetaArgs &args) {
  return batchNormResults(args, {args.optionalTensor(1), args.optionalTensor(2),
                                 &args.tensor(3), &args.tensor(4), false});
}

std::vector<TensorMeta> batchNormNoStats(const MetaArgs &args) {
  return batchNormResults(args, {args.optionalTensor(1), args.optionalTensor(2),
                                 nullptr, nullptr, args.boolean(3)});
}

std::vector<TensorMeta> batchNorm(const MetaArgs &args) {
  return {
      batchNormResults(args, {args.optionalTensor(1), args.optionalTensor(2),
                              args.optionalTensor(3), args.optionalTensor(4),
                              args.boolean(5), true})[0]};
}

// --- Group norm --------------------------------------------------------------

void checkGroups(const MetaArgs &args, const TensorMeta &input,
                 int64_t channels, int64_t groups) {
  if (groups <= 0)
    fail(args,
         "expected a positive number of groups, got " + std::to_string(groups));
  if (channels % groups != 0)
    fail(args, "the number of channels " + std::to_string(channels) +
                   " of the input of shape " + shapeToString(input.sizes) +
                   " must be divisible by the number of groups " +
                   std::to_string(groups));
}

// The output of a group norm: torch's kernels need an input contiguous in
// its suggested memory format, and give an output in that format.
TensorMeta groupNormOutput(const MetaArgs &args, const TensorMeta &input) {
  MemoryFormat format = meta::suggestMemoryFormat(input);
  Shape strides = meta::stridesForFormat(input.sizes, format);
  for (int64_t dim = 0; dim < input.dim(); ++dim)
    if (input.numel() > 0 && input.sizes[dim] > 1 &&
        input.strides[dim] != strides[dim])
      fail(args, "expected an input contiguous in its memory format (" +
                     std::string(memoryFormatName(format)) + "), got strides " +
                     shapeToString(input.strides) + "; call .contiguous()");
  return TensorMeta(input.dtype, input.sizes, strides, 0, input.device);
}

std::vector<TensorMeta> nativeGroupNorm(const MetaArgs &args) {
  const TensorMeta &input = args.tensor(0);
  const TensorMeta *weight = args.optionalTensor(1);
  const TensorMeta *bias = args.optionalTensor(2);
  int64_t batch = args.integer(3), channels = args.integer(4);
  int64_t spatial = args.integer(5), groups = args.integer(6);
  checkGroups(args, input, channels, groups);
  if (input.numel() != batch * channels * spatial)
    fail(args, "N * C * HxW = " + std::to_string(batch) + " * " +
                   std::to_string(channels) + " * " + std::to_string(spatial) +
                   " does not match the input's " +
                   std::to_string(input.numel()) + " elements");
  checkChannelParameter(args, weight, "weight", channels, input);
  checkChannelParameter(args, bias, "bias", channels, input);
  DType statistics = statisticsDType(args, input, {weight, bias}, false);
  TensorMeta output = groupNormOutput(args, input);
  return {output, contiguousLike(statistics, {batch, groups}, input.device),
          contiguousLike(statistics, {batch, groups}, input.device)};
}

// group_norm: makes the input contiguous in its suggested format first.
std::vector<TensorMeta> groupNorm(const MetaArgs &args) {
  const TensorMeta &input = args.tensor(0);
  if (input.dim() < 2)
    fail(args, "expected an input with at least 2 dims (batch, channels, "
               "...), got shape " +
                   shapeToString(input.sizes));
  int64_t channels = input.sizes[1];
  checkGroups(args, input, channels, args.integer(1));
  checkChannelParameter(args, args.optionalTensor(2), "weight", channels,
                        input);
  checkChannelParameter(args, args.optionalTensor(3), "bias", channels, input);
  statisticsDType(args, input, {args.optionalTensor(2), args.optionalTensor(3)},
                  false);
  Shape strides =
      meta::stridesForFormat(input.sizes, meta::suggestMemoryFormat(input));
  return {TensorMeta(input.dtype, input.sizes, strides, 0, input.device)};
}

} // namespace

void registerNormalizationOps(OpRegistry &registry) {
  const OpRegistration table[] = {
      {"_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
       [](const MetaArgs &args) {
         return softmaxKernel(args, {DType::Float16, DType::BFloat16});
       }},
      {"_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
       [](const MetaArgs &args) {
         return softmaxKernel(args, {DType::Float16});
       }},
      {"softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
       softmax},
      {"log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> "
       "Tensor",
       softmax},
      {"_safe_softmax(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
       softmax},
      {"native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? "
       "weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
       layerNormResults},
      {"layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? "
       "weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool "
       "cudnn_enable=True) -> Tensor",
       layerNorm},
      {"native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? "
       "running_mean, Tensor? running_var, bool training, float momentum, "
       "float eps) -> (Tensor, Tensor, Tensor)",
       nativeBatchNorm},
      {"_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, "
       "Tensor? bias, Tensor running_mean, Tensor running_var, float "
       "momentum, float eps) -> (Tensor, Tensor, Tensor)",
       batchNormNoTraining},
      {"_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, "
       "Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float "
       "momentum, float eps) -> (Tensor, Tensor, Tensor)",
       nativeBatchNorm},
      {"_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, "
       "Tensor? bias, bool training, float momentum, float eps) -> (Tensor, "
       "Tensor, Tensor)",
       batchNormNoStats},
      {"batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? "
       "running_mean, Tensor? running_var, bool training, float momentum, "
       "float eps, bool cudnn_enabled) -> Tensor",
       batchNorm},
      {"native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt "
       "N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, "
       "Tensor)",
       nativeGroupNorm},
      {"group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? "
       "bias=None, float eps=1.0000000000000001e-05, bool cudnn_enabled=True) "
       "-> Tensor",
       groupNorm},
  };
  for (const OpRegistration &registration : table)
    registry.add(registration);
}

} // namespace kiln
