// Meta functions of the ops that create, copy, combine and index tensors:
// factories (full, arange, *_like, new_*), cat and stack, gather, scatter
// and advanced indexing, padding, flips, sorting. Results are fresh tensors.
// Depends on ir/OpRegistry.h and ir/ops/MetaUtils.h.
#include "ir/Error.h"
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

#include <algorithm>
#include <cmath>

namespace kiln {
namespace {

using meta::emptyLike;
using meta::fail;
using meta::wrapDim;

std::vector<TensorMeta> one(TensorMeta meta) { return {std::move(meta)}; }

// The keyword arguments every factory shares, read by name.
struct FactoryOptions {
  std::optional<DType> dtype;
  Device device;
  std::optional<MemoryFormat> memoryFormat;
};

FactoryOptions factoryOptions(const MetaArgs &args, Device defaultDevice) {
  FactoryOptions options;
  const OpSchema &schema = args.schema();
  if (int index = schema.findArgument("dtype"); index >= 0)
    options.dtype = args.optionalDType(index);
  options.device = defaultDevice;
  if (int index = schema.findArgument("device"); index >= 0)
    options.device = args.optionalDevice(index).value_or(defaultDevice);
  if (int index = schema.findArgument("memory_format"); index >= 0)
    options.memoryFormat = args.optionalMemoryFormat(index);
  return options;
}

// The dtype a factory gives a Python scalar's value: bool, int64, or the
// default floating type.
DType inferredDType(const Argument &scalar) {
  DType dtype = meta::scalarDType(scalar);
  return isFloatingPoint(dtype) ? kDefaultFloatDType : dtype;
}

// --- Factories ---

// full, zeros, ones, empty, scalar_tensor: sizes first (none for
// scalar_tensor); a fill value, where there is one, decides the dtype.
std::vector<TensorMeta> factory(const MetaArgs &args) {
  FactoryOptions options = factoryOptions(args, Device());
  const OpSchema &schema = args.schema();
  Shape sizes = schema.arguments[0].type.isList ? args.intList(0) : Shape{};
  meta::checkSizesNonNegative(args, sizes);
  DType dtype = kDefaultFloatDType;
  if (int fill = schema.findArgument("fill_value"); fill >= 0)
    dtype = inferredDType(args[fill]);
  dtype = options.dtype.value_or(dtype);
  MemoryFormat format = options.memoryFormat.value_or(MemoryFormat::Contiguous);
  if (format == MemoryFormat::Preserve)
    fail(args, "preserve memory format is unsupported for a new tensor");
  return one(TensorMeta(dtype, sizes, meta::stridesForFormat(sizes, format), 0,
                        options.device));
}

std::vector<TensorMeta> emptyStrided(const MetaArgs &args) {
  FactoryOptions options = factoryOptions(args, Device());
  Shape sizes = args.intList(0), strides = args.intList(1);
  meta::checkSizesNonNegative(args, sizes);
  if (sizes.size() != strides.size())
    fail(args, "mismatch in length of strides and shape");
  return one(TensorMeta(options.dtype.value_or(kDefaultFloatDType), sizes,
                        strides, 0, options.device));
}

// linspace(start, end, steps) and logspace(start, end, steps, base): steps
// elements, the default float type unless dtype= says otherwise.
std::vector<TensorMeta> spaced(const MetaArgs &args) {
  FactoryOptions options = factoryOptions(args, Device());
  int64_t steps = args.integer(2);
  if (steps < 0)
    fail(args, "number of steps must be non-negative");
  DType dtype = options.dtype.value_or(kDefaultFloatDType);
  if (dtype == DType::Bool)
    fail(args, "linspace is not implemented for bool tensors");
  return one(TensorMeta(dtype, {steps}, options.device));
}

// eye(n) and eye.m(n, m): an n x m identity, float32 unless dtype= says.
std::vector<TensorMeta> eye(const MetaArgs &args) {
  FactoryOptions options = factoryOptions(args, Device());
  int64_t n = args.integer(0);
  int64_t m = args.schema().overload == "m" ? args.integer(1) : n;
  if (n < 0 || m < 0)
    fail(args, "n and m must be greater or equal to 0, got " +
                   std::to_string(n) + " and " + std::to_string(m));
  return one(TensorMeta(options.dtype.value_or(kDefaultFloatDType), {n, m},
                        options.device));
}

// arange(end), arange(start, end), arange(start, end, step).
std::vector<TensorMeta> arange(const MetaArgs &args) {
  FactoryOptions options = factoryOptions(args, Device());
  const std::string &overload = args.schema().overload;
  size_t count = overload.empty() ? 1 : overload == "start" ? 2 : 3;
  Argument start = count > 1 ? args[0] : Argument(int64_t{0});
  Argument end = count > 1 ? args[1] : args[0];
  Argument step = count > 2 ? args[2] : Argument(int64_t{1});
  bool integral = true;
  for (const Argument *bound : {&start, &end, &step})
    integral &= !isFloatingPoint(meta::scalarDType(*bound)) &&
                !isComplex(meta::scalarDType(*bound));
  DType dtype =
      options.dtype.value_or(integral ? DType::Int64 : kDefaultFloatDType);
  if (dtype == DType::Bool || isComplex(dtype))
    fail(args, "arange is not implemented for " +
                   std::string(dtypeName(dtype)) + " tensors");

  double length;
  if (dtype == DType::Int64) {
    // torch counts in int64 for int64 results: bounds are truncated first.
    int64_t first = start.kind() == Argument::Kind::Double
                        ? static_cast<int64_t>(start.toDouble())
                        : start.toInt();
    int64_t last = end.kind() == Argument::Kind::Double
                       ? static_cast<int64_t>(end.toDouble())
                       : end.toInt();
    int64_t stride = step.kind() == Argument::Kind::Double
                         ? static_cast<int64_t>(step.toDouble())
                         : step.toInt();
    if (stride == 0)
      fail(args, "step must be nonzero");
    if ((stride > 0 && last < first) || (stride < 0 && last > first))
      fail(args, "upper bound and larger bound inconsistent with step sign");
    int64_t sign = stride > 0 ? 1 : -1;
    length = static_cast<double>((last - first + stride - sign) / stride);
  } else {
    double first = start.toDouble(), last = end.toDouble(),
           stride = step.toDouble();
    if (stride == 0)
      fail(args, "step must be nonzero");
    if (!std::isfinite(first) || !std::isfinite(last))
      fail(args, "unsupported range: " + std::to_string(first) + " -> " +
                     std::to_string(last));
    if ((stride > 0 && last < first) || (stride < 0 && last > first))
      fail(args, "upper bound and larger bound inconsistent with step sign");
    length = std::ceil((last - first) / stride);
  }
  return one(TensorMeta(dtype, {static_cast<int64_t>(length)}, options.device));
}

// empty_like, zeros_like, full_like, rand_like, ...: self's sizes, in the
// requested memory format (preserve by default).
std::vector<TensorMeta> factoryLike(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  FactoryOptions options = factoryOptions(args, self.device);
  return one(emptyLike(self, options.memoryFormat,
                       options.dtype.value_or(self.dtype), options.device));
}

// new_empty, new_zeros, new_full: contiguous, with self's dtype and device.
std::vector<TensorMeta> factoryNew(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  FactoryOptions options = factoryOptions(args, self.device);
  Shape sizes = args.intList(1);
  meta::checkSizesNonNegative(args, sizes);
  return one(
      TensorMeta(options.dtype.value_or(self.dtype), sizes, options.device));
}

// --- Copies ---

std::vector<TensorMeta> clone(const MetaArgs &args) {
  return one(emptyLike(args.tensor(0), args.optionalMemoryFormat(1)));
}

// The functional copy_: a copy of self that keeps self's strides and
// offset exactly (torch's clone_preserve_strides), except where self
// overlaps itself.
std::vector<TensorMeta> copy(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &source = args.tensor(1);
  if (meta::broadcastShapes(self.sizes, source.sizes) != self.sizes)
    fail(args, "the source of shape " + shapeToString(source.sizes) +
                   " does not broadcast to the destination's shape " +
                   shapeToString(self.sizes));
  for (int64_t d = 0; d < self.dim(); ++d)
    if (self.strides[d] == 0 && self.sizes[d] > 1)
      return one(emptyLike(self));
  return one(self);
}

std::vector<TensorMeta> fill(const MetaArgs &args) {
  if (args[1].isTensor() && args.tensor(1).dim() != 0)
    fail(args, "fill_ only supports 0-dimension value tensor but got tensor "
               "with " +
                   std::to_string(args.tensor(1).dim()) + " dimensions.");
  return one(emptyLike(args.tensor(0)));
}

// zero: zeros of self's layout (the functional form of zero_).
std::vector<TensorMeta> zero(const MetaArgs &args) {
  return one(emptyLike(args.tensor(0)));
}

// --- Combining tensors ---

// cat's legacy rule: 1-d empty tensors are skipped whatever the others'
// shapes.
bool skippedByCat(const TensorMeta &tensor) {
  return tensor.dim() == 1 && tensor.sizes[0] == 0;
}

TensorMeta concatenate(const MetaArgs &args,
                       const std::vector<const TensorMeta *> &tensors,
                       int64_t dim) {
  if (tensors.empty())
    fail(args, "expected a non-empty list of Tensors");
  std::vector<meta::PromotionOperand> operands;
  std::optional<MemoryFormat> format;
  bool mixedFormats = false;
  const TensorMeta *reference = nullptr;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorMeta &tensor = *tensors[i];
    if (tensor.dim() == 0)
      fail(args, "zero-dimensional tensor (at position " + std::to_string(i) +
                     ") cannot be concatenated");
    operands.push_back(meta::operandOf(tensor));
    // The output takes the inputs' common suggested format, if any.
    MemoryFormat suggested = meta::suggestMemoryFormat(tensor);
    mixedFormats |= suggested == MemoryFormat::Contiguous ||
                    (format && *format != suggested);
    format = suggested;
    if (!reference && !skippedByCat(tensor))
      reference = &tensor;
  }
  DType dtype = meta::resultType(operands);
  Device device = meta::commonDevice(tensors);
  if (!reference)
    return TensorMeta(dtype, {0}, device);

  dim = wrapDim(dim, reference->dim());
  Shape sizes = reference->sizes;
  sizes[dim] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorMeta &tensor = *tensors[i];
    if (skippedByCat(tensor))
      continue;
    if (tensor.dim() != reference->dim())
      fail(args, "Tensors must have same number of dimensions: got " +
                     std::to_string(reference->dim()) + " and " +
                     std::to_string(tensor.dim()));
    for (int64_t d = 0; d < tensor.dim(); ++d)
      if (d != dim && tensor.sizes[d] != reference->sizes[d])
        fail(args, "Sizes of tensors must match except in dimension " +
                       std::to_string(dim) + ". Expected size " +
                       std::to_string(reference->sizes[d]) + " but got size " +
                       std::to_string(tensor.sizes[d]) + " for tensor number " +
                       std::to_string(i) + " in the list.");
    sizes[dim] += tensor.sizes[dim];
  }
  MemoryFormat layout = mixedFormats ? MemoryFormat::Contiguous : *format;
  return TensorMeta(dtype, sizes, meta::stridesForFormat(sizes, layout), 0,
                    device);
}

std::vector<TensorMeta> cat(const MetaArgs &args) {
  return one(concatenate(args, args.tensorList(0), args.integer(1)));
}

// torch concatenates along `dim` and splits it with a view, except at the
// last position, where it concatenates unsqueezed inputs.
std::vector<TensorMeta> stack(const MetaArgs &args) {
  std::vector<const TensorMeta *> tensors = args.tensorList(0);
  if (tensors.empty())
    fail(args, "stack expects a non-empty TensorList");
  const TensorMeta &first = *tensors[0];
  int64_t dim = wrapDim(args.integer(1), first.dim() + 1);
  for (size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i]->sizes != first.sizes)
      fail(args, "stack expects each tensor to be equal size, but got " +
                     shapeToString(first.sizes) + " at entry 0 and " +
                     shapeToString(tensors[i]->sizes) + " at entry " +
                     std::to_string(i));
  Shape sizes = first.sizes;
  sizes.insert(sizes.begin() + dim, static_cast<int64_t>(tensors.size()));
  if (dim < first.dim()) {
    TensorMeta joined = concatenate(args, tensors, dim);
    joined.strides = *meta::viewStrides(joined.sizes, joined.strides, sizes);
    joined.sizes = sizes;
    return one(joined);
  }
  std::vector<TensorMeta> unsqueezed;
  for (const TensorMeta *tensor : tensors) {
    TensorMeta expanded = *tensor;
    expanded.sizes.push_back(1);
    expanded.strides.push_back(1);
    unsqueezed.push_back(expanded);
  }
  std::vector<const TensorMeta *> pointers;
  for (const TensorMeta &tensor : unsqueezed)
    pointers.push_back(&tensor);
  return one(concatenate(args, pointers, dim));
}

std::vector<TensorMeta> repeat(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  Shape repeats = args.intList(1);
  int64_t extra = static_cast<int64_t>(repeats.size()) - self.dim();
  if (extra < 0)
    fail(args, "Number of dimensions of repeat dims can not be smaller than "
               "number of dimensions of tensor");
  Shape sizes(repeats.size());
  for (size_t i = 0; i < repeats.size(); ++i) {
    if (repeats[i] < 0)
      fail(args, "Repeats cannot be negative, found " +
                     std::to_string(repeats[i]) + " at index " +
                     std::to_string(i));
    int64_t size = static_cast<int64_t>(i) < extra ? 1 : self.sizes[i - extra];
    sizes[i] = size * repeats[i];
  }
  return one(TensorMeta(self.dtype, sizes, self.device));
}

// constant_pad_nd: pads (or, with negative pads, trims) the last dims.
std::vector<TensorMeta> constantPad(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  Shape pad = args.intList(1);
  if (pad.size() % 2 != 0)
    fail(args, "Length of pad must be even but instead it equals " +
                   std::to_string(pad.size()));
  int64_t padded = static_cast<int64_t>(pad.size()) / 2;
  if (padded > self.dim())
    fail(args, "Length of pad should be no more than twice the number of "
               "dimensions of the input. Pad length is " +
                   std::to_string(pad.size()) + " while the input has " +
                   std::to_string(self.dim()) + " dimensions.");
  // Pads run from the last dimension backwards: (left, right) pairs.
  TensorMeta trimmed = self;
  Shape sizes = self.sizes;
  bool anyPositive = false;
  for (int64_t i = 0; i < padded; ++i) {
    int64_t d = self.dim() - 1 - i;
    int64_t before = pad[2 * i], after = pad[2 * i + 1];
    sizes[d] += before + after;
    if (sizes[d] < 0)
      fail(args, "The input size " + std::to_string(self.sizes[d]) +
                     ", plus negative padding " + std::to_string(before) +
                     " and " + std::to_string(after) +
                     " resulted in a negative output size, which is invalid. "
                     "Check dimension " +
                     std::to_string(d) + " of your input.");
    anyPositive |= before > 0 || after > 0;
    // torch trims each side in turn; neither trim may pass the other end.
    for (int64_t trim : {before, after}) {
      if (trim >= 0)
        continue;
      if (trimmed.sizes[d] + trim < 0)
        fail(args, "negative padding " + std::to_string(trim) +
                       " trims more than the " +
                       std::to_string(trimmed.sizes[d]) +
                       " elements left of dimension " + std::to_string(d));
      trimmed.sizes[d] += trim;
    }
    trimmed.storageOffset += std::max<int64_t>(-before, 0) * trimmed.strides[d];
  }
  // Without positive padding torch clones a narrowed view of self.
  if (!anyPositive)
    return one(emptyLike(trimmed));
  return one(
      TensorMeta(self.dtype, sizes,
                 meta::stridesForFormat(sizes, meta::suggestMemoryFormat(self)),
                 0, self.device));
}

// pixel_shuffle (`shuffle`) and pixel_unshuffle: (*, C r^2, H, W) to (*,
// C, H r, W r) and back.
std::vector<TensorMeta> pixelShuffled(const MetaArgs &args, bool shuffle) {
  const TensorMeta &self = args.tensor(0);
  int64_t factor = args.integer(1);
  std::string op = shuffle ? "pixel_shuffle" : "pixel_unshuffle";
  std::string factorName = shuffle ? "upscale_factor" : "downscale_factor";
  if (self.dim() < 3)
    fail(args, op +
                   " expects input to have at least 3 dimensions, but got "
                   "input with " +
                   std::to_string(self.dim()) + " dimension(s)");
  if (factor <= 0)
    fail(args, op + " expects a positive " + factorName + ", but got " +
                   std::to_string(factor));
  Shape sizes = self.sizes;
  int64_t rank = self.dim();
  int64_t &channels = sizes[rank - 3], &height = sizes[rank - 2],
          &width = sizes[rank - 1];
  if (shuffle) {
    if (channels % (factor * factor) != 0)
      fail(args, "pixel_shuffle expects its input's 'channel' dimension to "
                 "be divisible by the square of upscale_factor, but "
                 "input.size(-3)=" +
                     std::to_string(channels) + " is not divisible by " +
                     std::to_string(factor * factor));
    channels /= factor * factor;
    height *= factor;
    width *= factor;
  } else {
    if (height % factor != 0)
      fail(args, "pixel_unshuffle expects height to be divisible by "
                 "downscale_factor, but input.size(-2)=" +
                     std::to_string(height) + " is not divisible by " +
                     std::to_string(factor));
    if (width % factor != 0)
      fail(args, "pixel_unshuffle expects width to be divisible by "
                 "downscale_factor, but input.size(-1)=" +
                     std::to_string(width) + " is not divisible by " +
                     std::to_string(factor));
    channels *= factor * factor;
    height /= factor;
    width /= factor;
  }
  // torch's CPU kernels keep a channels-last input's format and return
  // early for an empty input: pixel_unshuffle a clone of it (its sizes
  // unchanged), pixel_shuffle a contiguous result. Its meta functions keep
  // the format for pixel_unshuffle only.
  bool cpu = self.device.type == DeviceType::CPU;
  if (cpu && self.numel() == 0 && !shuffle)
    return one(emptyLike(self));
  bool keepsFormat = cpu ? self.numel() > 0 : !shuffle;
  MemoryFormat format =
      keepsFormat ? meta::suggestMemoryFormat(self) : MemoryFormat::Contiguous;
  return one(TensorMeta(self.dtype, sizes,
                        meta::stridesForFormat(sizes, format), 0, self.device));
}

std::vector<TensorMeta> pixelShuffle(const MetaArgs &args) {
  return pixelShuffled(args, true);
}

std::vector<TensorMeta> pixelUnshuffle(const MetaArgs &args) {
  return pixelShuffled(args, false);
}

// channel_shuffle(self, groups): self's sizes, in the input's suggested
// format on the CPU (its kernel's), contiguous elsewhere (the meta one's).
std::vector<TensorMeta> channelShuffle(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t groups = args.integer(1);
  if (self.dim() <= 2)
    fail(args, "channel_shuffle expects input with > 2 dims, but got input "
               "with sizes " +
                   shapeToString(self.sizes));
  if (groups <= 0)
    fail(args, "Number of groups to divide channels in must be positive. "
               "Value of groups:" +
                   std::to_string(groups));
  if (self.sizes[1] % groups != 0)
    fail(args, "Number of channels must be divisible by groups. Got " +
                   std::to_string(self.sizes[1]) + " channels and " +
                   std::to_string(groups) + " groups.");
  MemoryFormat format = self.device.type == DeviceType::CPU
                            ? meta::suggestMemoryFormat(self)
                            : MemoryFormat::Contiguous;
  return one(TensorMeta(self.dtype, self.sizes,
                        meta::stridesForFormat(self.sizes, format), 0,
                        self.device));
}

// reflection_pad{1,2,3}d and replication_pad{1,2,3}d over the last
// `spatial` dims of a (batched or not) input: (left, right) pairs from the
// last dim backwards, negative ones trim. The result has the input's
// suggested format on the CPU (its kernels'), contiguous elsewhere.
std::vector<TensorMeta> edgePad(const MetaArgs &args, int64_t spatial,
                                bool reflect) {
  const TensorMeta &self = args.tensor(0);
  Shape pad = args.intList(1);
  if (static_cast<int64_t>(pad.size()) != 2 * spatial)
    fail(args, "padding size is expected to be " + std::to_string(2 * spatial));
  bool rankOk = self.dim() == spatial + 1 || self.dim() == spatial + 2;
  for (int64_t d = self.dim() - spatial - 1; rankOk && d < self.dim(); ++d)
    rankOk = d < 0 || self.sizes[d] != 0;
  if (!rankOk)
    fail(args, "Expected " + std::to_string(spatial + 1) + "D or " +
                   std::to_string(spatial + 2) +
                   "D (batch mode) tensor with possibly 0 batch size and "
                   "other non-zero dimensions for input, but got: " +
                   shapeToString(self.sizes));
  Shape sizes = self.sizes;
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t d = self.dim() - 1 - i;
    int64_t before = pad[2 * i], after = pad[2 * i + 1];
    if (reflect && (before >= self.sizes[d] || after >= self.sizes[d]))
      fail(args, "Argument #" + std::to_string(4 + 2 * i) +
                     ": Padding size should be less than the corresponding "
                     "input dimension, but got: padding (" +
                     std::to_string(before) + ", " + std::to_string(after) +
                     ") at dimension " + std::to_string(d) + " of input " +
                     shapeToString(self.sizes));
    sizes[d] += before + after;
    // torch's 1-d pads refuse an empty result, the others a negative size.
    if (sizes[d] < (spatial == 1 ? 1 : 0))
      fail(args, "input (W: " + std::to_string(self.sizes[d]) +
                     ") is too small. Calculated output W: " +
                     std::to_string(sizes[d]));
  }
  MemoryFormat format = self.device.type == DeviceType::CPU
                            ? meta::suggestMemoryFormat(self)
                            : MemoryFormat::Contiguous;
  return one(TensorMeta(self.dtype, sizes,
                        meta::stridesForFormat(sizes, format), 0, self.device));
}

template <int Spatial, bool Reflect>
std::vector<TensorMeta> edgePadded(const MetaArgs &args) {
  return edgePad(args, Spatial, Reflect);
}

// tril and triu: a contiguous result.
std::vector<TensorMeta> triangle(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (self.dim() < 2)
    fail(args, "input tensor must have at least 2 dimensions");
  return one(TensorMeta(self.dtype, self.sizes, self.device));
}

std::vector<TensorMeta> flip(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  meta::wrapDims(args.intList(1), self.dim());
  return one(emptyLike(self));
}

// torch's CPU kernel rolls one dim by concatenating two slices of it, so
// the result takes cat's layout rule (a channels-last input may stay
// channels-last); its other kernels, and the meta one, give a contiguous
// result.
TensorMeta rollOnCpu(const MetaArgs &args, const TensorMeta &self,
                     int64_t shift, int64_t dim) {
  if (self.numel() == 0)
    return emptyLike(self);
  int64_t size = self.sizes[dim];
  int64_t start = (size - shift) % size;
  if (start < 0)
    start += size;
  TensorMeta head = self, tail = self;
  head.sizes[dim] = size - start;
  head.storageOffset += start * self.strides[dim];
  tail.sizes[dim] = start;
  return concatenate(args, {&head, &tail}, dim);
}

std::vector<TensorMeta> roll(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  Shape shifts = args.intList(1), dims = args.intList(2);
  if (shifts.empty())
    fail(args, "`shifts` required");
  if (dims.empty() && shifts.size() != 1)
    fail(args, "shifts and dimensions must align. shifts: " +
                   std::to_string(shifts.size()) + ", dims:0");
  if (!dims.empty() && dims.size() != shifts.size())
    fail(args, "shifts and dimensions must align. shifts: " +
                   std::to_string(shifts.size()) +
                   ", dims:" + std::to_string(dims.size()));
  for (int64_t &dim : dims)
    dim = wrapDim(dim, self.dim());
  // Without dims torch rolls a flattened contiguous copy.
  if (self.device.type != DeviceType::CPU || dims.empty())
    return one(TensorMeta(self.dtype, self.sizes, self.device));
  TensorMeta result = self;
  for (size_t i = 0; i < dims.size(); ++i)
    result = rollOnCpu(args, result, shifts[i], dims[i]);
  return one(result);
}

// --- Sorting ---

std::vector<TensorMeta> topk(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t k = args.integer(1);
  int64_t dim = wrapDim(args.integer(2), self.dim());
  int64_t available = self.dim() > 0 ? self.sizes[dim] : 1;
  if (k < 0 || k > available)
    fail(args, "selected index k out of range");
  Shape sizes = self.sizes;
  if (!sizes.empty())
    sizes[dim] = k;
  return {TensorMeta(self.dtype, sizes, self.device),
          TensorMeta(DType::Int64, sizes, self.device)};
}

// sort and sort.stable: values and indices in self's layout.
std::vector<TensorMeta> sort(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int dimIndex = args.schema().findArgument("dim");
  wrapDim(args.integer(dimIndex), self.dim());
  TensorMeta values = emptyLike(self);
  TensorMeta indices = values;
  indices.dtype = DType::Int64;
  return {values, indices};
}

// --- Indexing ---

void checkIndexDType(const MetaArgs &args, const TensorMeta &index,
                     const char *what) {
  if (index.dtype != DType::Int64 && index.dtype != DType::Int32)
    fail(args, std::string(what) + " expects an int64 or int32 index, got " +
                   std::string(dtypeName(index.dtype)));
}

std::vector<TensorMeta> embedding(const MetaArgs &args) {
  const TensorMeta &weight = args.tensor(0);
  const TensorMeta &indices = args.tensor(1);
  if (weight.dim() != 2)
    fail(args, "'weight' must be 2-D");
  checkIndexDType(args, indices, "embedding");
  Shape sizes = indices.sizes;
  sizes.push_back(weight.sizes[1]);
  return one(TensorMeta(weight.dtype, sizes, weight.device));
}

std::vector<TensorMeta> indexSelect(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &index = args.tensor(2);
  int64_t dim = wrapDim(args.integer(1), self.dim());
  if (index.dim() > 1)
    fail(args, "index_select(): Index is supposed to be a vector");
  checkIndexDType(args, index, "index_select()");
  Shape sizes = self.sizes;
  if (!sizes.empty())
    sizes[dim] = index.numel();
  return one(TensorMeta(self.dtype, sizes, self.device));
}

// gather and scatter check that a non-empty index fits within self (and
// src) outside `dim`; a 0-d tensor counts as 1-d here.
void checkGatherScatterShapes(const MetaArgs &args, const TensorMeta &self,
                              int64_t dim, const TensorMeta &index,
                              const TensorMeta *source, bool isGather) {
  // torch checks nothing about an empty index.
  if (index.numel() == 0)
    return;
  checkIndexDType(args, index, isGather ? "gather()" : "scatter()");
  auto dims = [](const TensorMeta &t) { return std::max<int64_t>(t.dim(), 1); };
  auto size = [](const TensorMeta &t, int64_t d) {
    return t.dim() == 0 ? 1 : t.sizes[d];
  };
  if (dims(index) != dims(self))
    fail(args, "Index tensor must have the same number of dimensions as "
               "input tensor");
  for (int64_t d = 0; d < dims(self); ++d) {
    if (d != dim && size(index, d) > size(self, d))
      fail(args, "Size does not match at dimension " + std::to_string(d) +
                     " expected index " + shapeToString(index.sizes) +
                     " to be no larger than self " + shapeToString(self.sizes) +
                     " apart from dimension " + std::to_string(dim));
    if (source && size(index, d) > size(*source, d))
      fail(args, "Expected index " + shapeToString(index.sizes) +
                     " to be no larger than src " +
                     shapeToString(source->sizes));
  }
}

std::vector<TensorMeta> gather(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &index = args.tensor(2);
  int64_t dim = wrapDim(args.integer(1), self.dim());
  checkGatherScatterShapes(args, self, dim, index, nullptr, true);
  return one(TensorMeta(self.dtype, index.sizes, self.device));
}

// scatter.src and scatter.value: a contiguous copy of self.
std::vector<TensorMeta> scatter(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &index = args.tensor(2);
  int64_t dim = wrapDim(args.integer(1), self.dim());
  const TensorMeta *source = args[3].isTensor() ? &args.tensor(3) : nullptr;
  if (source && source->dtype != self.dtype)
    fail(args, "Expected self.dtype to be equal to src.dtype");
  checkGatherScatterShapes(args, self, dim, index, source, false);
  return one(TensorMeta(self.dtype, self.sizes, self.device));
}

// as_strided_scatter(self, src, size, stride, storage_offset): self, with
// the elements of the view as_strided(size, stride, storage_offset) of its
// storage replaced by src's, in self's layout (emptyLike: a dense one kept,
// as the clone torch writes into keeps it).
std::vector<TensorMeta> asStridedScatter(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0), &source = args.tensor(1);
  Shape sizes = args.intList(2), strides = args.intList(3);
  if (sizes.size() != strides.size())
    fail(args, "mismatch in length of strides and shape");
  meta::checkSizesNonNegative(args, sizes);
  if (source.sizes != sizes)
    fail(args, "expected src to have a size equal to the slice of self. src "
               "size = " +
                   shapeToString(source.sizes) +
                   ", slice size = " + shapeToString(sizes));
  return one(emptyLike(self));
}

// slice_scatter, select_scatter and diagonal_scatter: self's sizes in
// self's layout (emptyLike), src of the view's sizes, as torch checks.
void checkScatteredSource(const MetaArgs &args, const TensorMeta &source,
                          const Shape &viewSizes) {
  if (source.sizes != viewSizes)
    fail(args, "expected src to have a size equal to the slice of self. src "
               "size = " +
                   shapeToString(source.sizes) +
                   ", slice size = " + shapeToString(viewSizes));
}

std::vector<TensorMeta> sliceScatter(const MetaArgs &args) {
  TensorMeta result = emptyLike(args.tensor(0));
  checkScatteredSource(args, args.tensor(1),
                       meta::sliceScatterView(args, result).sizes);
  return one(result);
}

std::vector<TensorMeta> selectScatter(const MetaArgs &args) {
  TensorMeta result = emptyLike(args.tensor(0));
  checkScatteredSource(args, args.tensor(1),
                       meta::selectScatterView(args, result).sizes);
  return one(result);
}

std::vector<TensorMeta> diagonalScatter(const MetaArgs &args) {
  TensorMeta result = emptyLike(args.tensor(0));
  if (result.dim() < 2)
    fail(args, "diagonal dimensions requires ndim larger than 1");
  checkScatteredSource(args, args.tensor(1),
                       meta::diagonalScatterView(args, result).sizes);
  return one(result);
}

// Advanced indexing's result shape, and the operands its TensorIterator
// lays the result out by: self restrided over the result (stride 0 where
// the index tensors' dims go), then each index tensor viewed over it.
struct AdvancedIndex {
  Shape sizes;
  std::vector<TensorMeta> operands;
};

// Null where an index is a bool or byte mask and `masksAllowed` (the
// result's shape then depends on the mask's values).
std::optional<AdvancedIndex>
advancedIndex(const MetaArgs &args, const TensorMeta &self,
              const std::vector<const TensorMeta *> &indices,
              bool masksAllowed) {
  if (indices.empty())
    fail(args, "at least one index must be provided");
  if (static_cast<int64_t>(indices.size()) > self.dim())
    fail(args, "too many indices for tensor of dimension " +
                   std::to_string(self.dim()) + " (got " +
                   std::to_string(indices.size()) + ")");
  std::vector<const Shape *> shapes;
  std::vector<bool> present;
  for (size_t d = 0; d < indices.size(); ++d) {
    present.push_back(indices[d] != nullptr);
    const TensorMeta *index = indices[d];
    if (!index)
      continue;
    if (index->dtype == DType::Bool || index->dtype == DType::UInt8) {
      if (masksAllowed)
        return std::nullopt;
      throw Unsupported(args.schema().qualifiedName() +
                        ": indexing with a boolean or byte mask gives a result "
                        "whose size depends on the mask's values; kiln needs "
                        "static shapes (index with integer tensors, or run "
                        "this op eagerly)");
    }
    if (index->dtype != DType::Int64 && index->dtype != DType::Int32)
      fail(args, "tensors used as indices must be long, int, byte or bool "
                 "tensors");
    shapes.push_back(&index->sizes);
  }
  if (shapes.empty())
    fail(args, "at least one index must be a tensor");
  Shape broadcast = meta::broadcastShapes(shapes);

  // Adjacent indexed dims are replaced in place by the broadcast index
  // shape; separated ones move it to the front (numpy's rule).
  const meta::IndexedDims dims = meta::indexedDims(present, self.dim());
  const std::vector<int64_t> &indexed = dims.indexed, &others = dims.others;
  const int64_t insertAt = dims.insertAt;

  Shape sizes, strides;
  for (int64_t d : others) {
    sizes.push_back(self.sizes[d]);
    strides.push_back(self.strides[d]);
  }
  sizes.insert(sizes.begin() + insertAt, broadcast.begin(), broadcast.end());
  strides.insert(strides.begin() + insertAt, broadcast.size(), 0);
  AdvancedIndex result{sizes, {meta::viewOf(self, sizes, strides, 0)}};

  int64_t after = static_cast<int64_t>(others.size()) - insertAt;
  for (int64_t d : indexed) {
    const TensorMeta &index = *indices[d];
    int64_t lead =
        insertAt + static_cast<int64_t>(broadcast.size()) - index.dim();
    Shape indexSizes(lead, 1), indexStrides(lead, 0);
    indexSizes.insert(indexSizes.end(), index.sizes.begin(), index.sizes.end());
    indexStrides.insert(indexStrides.end(), index.strides.begin(),
                        index.strides.end());
    indexSizes.insert(indexSizes.end(), after, 1);
    indexStrides.insert(indexStrides.end(), after, 0);
    result.operands.push_back(meta::viewOf(index, indexSizes, indexStrides, 0));
  }
  return result;
}

std::vector<TensorMeta> index(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  AdvancedIndex plan = *advancedIndex(args, self, args.tensorList(1), false);
  if (self.numel() == 0 || numelOf(plan.sizes) == 0)
    return one(TensorMeta(self.dtype, plan.sizes, self.device));
  // TensorIterator lays the result out like all its operands; torch's meta
  // kernel looks at self alone.
  std::vector<const TensorMeta *> operands;
  for (const TensorMeta &operand : plan.operands)
    if (operands.empty() || self.device.type != DeviceType::Meta)
      operands.push_back(&operand);
  TensorMeta result = meta::elementwiseResult(operands, self.dtype);
  result.device = self.device;
  return one(result);
}

std::vector<TensorMeta> indexPut(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &values = args.tensor(2);
  if (values.dtype != self.dtype)
    fail(args, "Index put requires the source and destination dtypes match, "
               "got " +
                   std::string(dtypeName(self.dtype)) +
                   " for the destination and " +
                   std::string(dtypeName(values.dtype)) + " for the source.");
  std::optional<AdvancedIndex> plan =
      advancedIndex(args, self, args.tensorList(1), true);
  if (plan && meta::broadcastShapes(values.sizes, plan->sizes) != plan->sizes)
    fail(args, "shape mismatch: value tensor of shape " +
                   shapeToString(values.sizes) +
                   " cannot be broadcast to indexing result of shape " +
                   shapeToString(plan->sizes));
  return one(emptyLike(self));
}

} // namespace

void registerTensorOps(OpRegistry &registry) {
  const OpRegistration table[] = {
      {"aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? "
       "dtype=None, Layout? layout=None, Device? device=None, bool? "
       "pin_memory=None) -> Tensor",
       factory},
      {"aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
       factory},
      {"aten::ones(SymInt[] size, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
       factory},
      {"aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, "
       "Layout? layout=None, Device? device=None, bool? pin_memory=None, "
       "MemoryFormat? memory_format=None) -> Tensor",
       factory},
      {"aten::scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
       factory},
      {"aten::empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? "
       "dtype=None, Layout? layout=None, Device? device=None, bool? "
       "pin_memory=None) -> Tensor",
       emptyStrided},
      {"aten::linspace(Scalar start, Scalar end, int steps, *, ScalarType? "
       "dtype=None, Layout? layout=None, Device? device=None, bool? "
       "pin_memory=None) -> Tensor",
       spaced},
      {"aten::logspace(Scalar start, Scalar end, int steps, float base=10.0, "
       "*, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None) -> Tensor",
       spaced},
      {"aten::eye(SymInt n, *, ScalarType? dtype=None, Layout? layout=None, "
       "Device? device=None, bool? pin_memory=None) -> Tensor",
       eye},
      {"aten::eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
       eye},
      {"aten::arange(Scalar end, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
       arange},
      {"aten::arange.start(Scalar start, Scalar end, *, ScalarType? "
       "dtype=None, Layout? layout=None, Device? device=None, bool? "
       "pin_memory=None) -> Tensor",
       arange},
      {"aten::arange.start_step(Scalar start, Scalar end, Scalar step=1, *, "
       "ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None) -> Tensor",
       arange},
      {"aten::full_like(Tensor self, Scalar fill_value, *, ScalarType? "
       "dtype=None, Layout? layout=None, Device? device=None, bool? "
       "pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
       factoryLike},
      {"aten::zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None, "
       "MemoryFormat? memory_format=None) -> Tensor",
       factoryLike},
      {"aten::ones_like(Tensor self, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None, "
       "MemoryFormat? memory_format=None) -> Tensor",
       factoryLike},
      {"aten::empty_like(Tensor self, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None, "
       "MemoryFormat? memory_format=None) -> Tensor",
       factoryLike},
      {"aten::rand_like(Tensor self, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None, "
       "MemoryFormat? memory_format=None) -> Tensor",
       factoryLike},
      {"aten::randn_like(Tensor self, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None, "
       "MemoryFormat? memory_format=None) -> Tensor",
       factoryLike},
      {"aten::new_zeros(Tensor self, SymInt[] size, *, ScalarType? "
       "dtype=None, Layout? layout=None, Device? device=None, bool? "
       "pin_memory=None) -> Tensor",
       factoryNew},
      {"aten::new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, "
       "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> "
       "Tensor",
       factoryNew},
      {"aten::new_empty(Tensor self, SymInt[] size, *, ScalarType? "
       "dtype=None, Layout? layout=None, Device? device=None, bool? "
       "pin_memory=None) -> Tensor",
       factoryNew},
      {"aten::new_full(Tensor self, SymInt[] size, Scalar fill_value, *, "
       "ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
       "bool? pin_memory=None) -> Tensor",
       factoryNew},
      {"aten::clone(Tensor self, *, MemoryFormat? memory_format=None) -> "
       "Tensor",
       clone},
      {"aten::copy(Tensor self, Tensor src, bool non_blocking=False) -> "
       "Tensor",
       copy},
      {"aten::fill.Scalar(Tensor self, Scalar value) -> Tensor", fill},
      {"aten::fill.Tensor(Tensor self, Tensor value) -> Tensor", fill},
      {"aten::zero(Tensor self) -> Tensor", zero},
      {"aten::cat(Tensor[] tensors, int dim=0) -> Tensor", cat},
      {"aten::stack(Tensor[] tensors, int dim=0) -> Tensor", stack},
      {"aten::repeat(Tensor self, SymInt[] repeats) -> Tensor", repeat},
      {"aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> "
       "Tensor",
       constantPad},
      {"aten::tril(Tensor self, SymInt diagonal=0) -> Tensor", triangle},
      {"aten::triu(Tensor self, SymInt diagonal=0) -> Tensor", triangle},
      {"aten::flip(Tensor self, int[] dims) -> Tensor", flip},
      {"aten::reflection_pad1d(Tensor self, SymInt[2] padding) -> Tensor",
       edgePadded<1, true>},
      {"aten::reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor",
       edgePadded<2, true>},
      {"aten::reflection_pad3d(Tensor self, SymInt[6] padding) -> Tensor",
       edgePadded<3, true>},
      {"aten::replication_pad1d(Tensor self, SymInt[2] padding) -> Tensor",
       edgePadded<1, false>},
      {"aten::replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor",
       edgePadded<2, false>},
      {"aten::replication_pad3d(Tensor self, SymInt[6] padding) -> Tensor",
       edgePadded<3, false>},
      {"aten::channel_shuffle(Tensor self, SymInt groups) -> Tensor",
       channelShuffle},
      {"aten::pixel_shuffle(Tensor self, int upscale_factor) -> Tensor",
       pixelShuffle},
      {"aten::pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor",
       pixelUnshuffle},
      {"aten::roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor",
       roll},
      {"aten::topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool "
       "sorted=True) -> (Tensor values, Tensor indices)",
       topk},
      {"aten::sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor "
       "values, Tensor indices)",
       sort},
      {"aten::sort.stable(Tensor self, *, bool? stable, int dim=-1, bool "
       "descending=False) -> (Tensor values, Tensor indices)",
       sort},
      {"aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
       "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
       embedding},
      {"aten::index_select(Tensor self, int dim, Tensor index) -> Tensor",
       indexSelect},
      {"aten::gather(Tensor self, int dim, Tensor index, *, bool "
       "sparse_grad=False) -> Tensor",
       gather},
      {"aten::scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> "
       "Tensor",
       scatter},
      {"aten::scatter.value(Tensor self, int dim, Tensor index, Scalar value) "
       "-> Tensor",
       scatter},
      {"aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? "
       "start=None, SymInt? end=None, SymInt step=1) -> Tensor",
       sliceScatter},
      {"aten::select_scatter(Tensor self, Tensor src, int dim, SymInt index) "
       "-> Tensor",
       selectScatter},
      {"aten::diagonal_scatter(Tensor self, Tensor src, int offset=0, int "
       "dim1=0, int dim2=1) -> Tensor",
       diagonalScatter},
      {"aten::as_strided_scatter(Tensor self, Tensor src, SymInt[] size, "
       "SymInt[] stride, SymInt? storage_offset=None) -> Tensor",
       asStridedScatter},
      {"aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", index},
      {"aten::index_put(Tensor self, Tensor?[] indices, Tensor values, bool "
       "accumulate=False) -> Tensor",
       indexPut},
  };
  for (const OpRegistration &registration : table)
    registry.add(registration);
}

} // namespace kiln
