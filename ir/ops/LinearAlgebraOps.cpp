// Meta functions of the linear-algebra and neural-network ops: matrix
// products (mm, bmm, matmul, linear, ...), convolution, pooling, upsampling
// and scaled dot-product attention. Where torch's result layout depends on
// the kernel it picks for a device, so does kiln's.
// Depends on ir/OpRegistry.h and ir/ops/MetaUtils.h.
#include "ir/Error.h"
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

#include <algorithm>
#include <tuple>

namespace kiln {
namespace {

using meta::fail;

std::vector<TensorMeta> one(TensorMeta meta) { return {std::move(meta)}; }

std::string dims(const TensorMeta &tensor) {
  return std::to_string(tensor.dim()) + "D";
}

void checkSameDType(const MetaArgs &args, const TensorMeta &a,
                    const TensorMeta &b) {
  if (a.dtype != b.dtype)
    fail(args, "expected both operands to have the same dtype, but got " +
                   std::string(dtypeName(a.dtype)) + " and " +
                   std::string(dtypeName(b.dtype)));
}

void checkDim(const MetaArgs &args, const TensorMeta &tensor, int64_t ndim,
              const std::string &name) {
  if (tensor.dim() != ndim)
    fail(args, name + " must be a " + std::to_string(ndim) +
                   "D tensor, got a " + dims(tensor) + " tensor of shape " +
                   shapeToString(tensor.sizes));
}

// The `self` term of addmm/baddbmm/addmv must broadcast to the product.
void checkAddend(const MetaArgs &args, const TensorMeta &addend,
                 const Shape &product) {
  if (meta::broadcastShapes(addend.sizes, product) != product)
    fail(args, "the added tensor of shape " + shapeToString(addend.sizes) +
                   " does not broadcast to the product's shape " +
                   shapeToString(product));
}

// --- Matrix products: contiguous results with the operands' dtype ---

Shape matrixProduct(const MetaArgs &args, const TensorMeta &a,
                    const TensorMeta &b) {
  checkDim(args, a, 2, "mat1");
  checkDim(args, b, 2, "mat2");
  if (a.sizes[1] != b.sizes[0])
    fail(args, "mat1 and mat2 shapes cannot be multiplied (" +
                   std::to_string(a.sizes[0]) + "x" +
                   std::to_string(a.sizes[1]) + " and " +
                   std::to_string(b.sizes[0]) + "x" +
                   std::to_string(b.sizes[1]) + ")");
  checkSameDType(args, a, b);
  return {a.sizes[0], b.sizes[1]};
}

Shape batchProduct(const MetaArgs &args, const TensorMeta &a,
                   const TensorMeta &b) {
  checkDim(args, a, 3, "batch1");
  checkDim(args, b, 3, "batch2");
  if (a.sizes[0] != b.sizes[0] || a.sizes[2] != b.sizes[1])
    fail(args, "Expected size for first two dimensions of batch2 tensor to "
               "be: [" +
                   std::to_string(a.sizes[0]) + ", " +
                   std::to_string(a.sizes[2]) + "] but got: [" +
                   std::to_string(b.sizes[0]) + ", " +
                   std::to_string(b.sizes[1]) + "].");
  checkSameDType(args, a, b);
  return {a.sizes[0], a.sizes[1], b.sizes[2]};
}

Shape vectorProduct(const MetaArgs &args, const TensorMeta &matrix,
                    const TensorMeta &vector) {
  checkDim(args, matrix, 2, "mat");
  checkDim(args, vector, 1, "vec");
  if (matrix.sizes[1] != vector.sizes[0])
    fail(args, "size mismatch, got input (" + std::to_string(matrix.sizes[0]) +
                   "), mat (" + std::to_string(matrix.sizes[0]) + "x" +
                   std::to_string(matrix.sizes[1]) + "), vec (" +
                   std::to_string(vector.sizes[0]) + ")");
  checkSameDType(args, matrix, vector);
  return {matrix.sizes[0]};
}

TensorMeta productResult(const TensorMeta &like, Shape sizes) {
  return TensorMeta(like.dtype, std::move(sizes), like.device);
}

// The product's shape for mm/addmm, bmm/baddbmm and mv/addmv.
Shape productShape(const MetaArgs &args, const TensorMeta &a,
                   const TensorMeta &b) {
  const std::string &name = args.schema().name;
  if (name == "aten::mm" || name == "aten::addmm")
    return matrixProduct(args, a, b);
  if (name == "aten::bmm" || name == "aten::baddbmm")
    return batchProduct(args, a, b);
  return vectorProduct(args, a, b);
}

// mm, bmm, mv.
std::vector<TensorMeta> product(const MetaArgs &args) {
  const TensorMeta &a = args.tensor(0);
  return one(productResult(a, productShape(args, a, args.tensor(1))));
}

// addmm, baddbmm, addmv: self + the product of the next two.
std::vector<TensorMeta> addProduct(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &a = args.tensor(1);
  Shape sizes = productShape(args, a, args.tensor(2));
  checkAddend(args, self, sizes);
  checkSameDType(args, self, a);
  return one(productResult(a, sizes));
}

// addr(self, vec1, vec2, beta, alpha): beta self + alpha outer(vec1,
// vec2), of the outer product's shape and the operands' dtype.
std::vector<TensorMeta> addr(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &first = args.tensor(1), &second = args.tensor(2);
  checkDim(args, first, 1, "vec1");
  checkDim(args, second, 1, "vec2");
  Shape sizes{first.sizes[0], second.sizes[0]};
  checkAddend(args, self, sizes);
  checkSameDType(args, first, second);
  checkSameDType(args, self, first);
  return one(productResult(first, sizes));
}

// linalg_cross(self, other, dim): the operands' broadcast shape, their
// `dim` of length 3.
std::vector<TensorMeta> cross(const MetaArgs &args) {
  const TensorMeta &a = args.tensor(0), &b = args.tensor(1);
  if (a.dim() != b.dim())
    fail(args, "linalg.cross: inputs must have the same number of "
               "dimensions.");
  int64_t dim = meta::wrapDim(args.integer(2), a.dim());
  if (a.sizes[dim] != 3 || b.sizes[dim] != 3)
    fail(args, "linalg.cross: inputs dimension " +
                   std::to_string(args.integer(2)) +
                   " must have length 3. Got " + std::to_string(a.sizes[dim]) +
                   " and " + std::to_string(b.sizes[dim]));
  checkSameDType(args, a, b);
  return one(
      TensorMeta(a.dtype, meta::broadcastShapes(a.sizes, b.sizes), a.device));
}

std::vector<TensorMeta> dot(const MetaArgs &args) {
  const TensorMeta &a = args.tensor(0);
  const TensorMeta &b = args.tensor(1);
  if (a.dim() != 1 || b.dim() != 1)
    fail(args, "1D tensors expected, but got " + dims(a) + " and " + dims(b) +
                   " tensors");
  if (a.sizes[0] != b.sizes[0])
    fail(args, "inconsistent tensor size, expected tensor [" +
                   std::to_string(a.sizes[0]) + "] and src [" +
                   std::to_string(b.sizes[0]) +
                   "] to have the same number of elements");
  checkSameDType(args, a, b);
  return one(productResult(a, {}));
}

// matmul's result shape over all of torch's cases (dot, mv, mm, batched with
// broadcasting, 1-d operands dropping their dim). Every case gives a
// contiguous result.
Shape matmulShape(const MetaArgs &args, const TensorMeta &a,
                  const TensorMeta &b) {
  if (a.dim() == 0 || b.dim() == 0)
    fail(args, "both arguments to matmul need to be at least 1D, but they "
               "are " +
                   dims(a) + " and " + dims(b));
  checkSameDType(args, a, b);
  int64_t inner = a.sizes.back();
  int64_t innerOther = b.dim() == 1 ? b.sizes[0] : b.sizes[b.dim() - 2];
  if (inner != innerOther)
    fail(args, "size mismatch: " + shapeToString(a.sizes) + " @ " +
                   shapeToString(b.sizes) + " (inner dimensions " +
                   std::to_string(inner) + " and " +
                   std::to_string(innerOther) + ")");
  Shape batchA(a.sizes.begin(), a.sizes.end() - std::min<int64_t>(a.dim(), 2));
  Shape batchB(b.sizes.begin(), b.sizes.end() - std::min<int64_t>(b.dim(), 2));
  Shape sizes = meta::broadcastShapes(batchA, batchB);
  if (a.dim() > 1)
    sizes.push_back(a.sizes[a.dim() - 2]);
  if (b.dim() > 1)
    sizes.push_back(b.sizes.back());
  return sizes;
}

std::vector<TensorMeta> matmul(const MetaArgs &args) {
  const TensorMeta &a = args.tensor(0);
  return one(productResult(a, matmulShape(args, a, args.tensor(1))));
}

// input @ weight.T (+ bias).
std::vector<TensorMeta> linear(const MetaArgs &args) {
  const TensorMeta &input = args.tensor(0);
  TensorMeta weight = args.tensor(1);
  if (weight.dim() > 2)
    fail(args,
         "weight must be 1D or 2D, got shape " + shapeToString(weight.sizes));
  std::reverse(weight.sizes.begin(), weight.sizes.end());
  std::reverse(weight.strides.begin(), weight.strides.end());
  Shape sizes = matmulShape(args, input, weight);
  if (const TensorMeta *bias = args.optionalTensor(2))
    checkAddend(args, *bias, sizes);
  return one(productResult(input, sizes));
}

// --- Convolution ---

struct ConvolutionParameters {
  Shape stride, padding, dilation, outputPadding;
  bool transposed = false;
  int64_t groups = 1;
};

// A parameter list of one value applies to every spatial dimension.
Shape perSpatialDim(const MetaArgs &args, Shape values, size_t spatial,
                    const char *name) {
  if (values.size() == 1 && spatial > 1)
    values.assign(spatial, values[0]);
  if (values.size() != spatial)
    fail(args, std::string("expected ") + name +
                   " to be a single integer value or a list of " +
                   std::to_string(spatial) +
                   " values to match the convolution dimensions, but got " +
                   name + "=" + shapeToString(values));
  return values;
}

// torch's CPU and CUDA kernels write a channels-last result where the input
// or the weight is channels-last; the meta kernel always writes a
// contiguous one.
MemoryFormat convolutionFormat(const TensorMeta &input,
                               const TensorMeta &weight, const MetaArgs &args) {
  MemoryFormat wanted = input.dim() == 4   ? MemoryFormat::ChannelsLast
                        : input.dim() == 5 ? MemoryFormat::ChannelsLast3d
                                           : MemoryFormat::Contiguous;
  bool channelsLast = wanted != MemoryFormat::Contiguous &&
                      (meta::suggestMemoryFormat(input) == wanted ||
                       meta::suggestMemoryFormat(weight) == wanted);
  if (!channelsLast || input.device.type == DeviceType::Meta)
    return MemoryFormat::Contiguous;
  // cuDNN keeps float64 contiguous.
  if (input.device.type == DeviceType::CUDA)
    return input.dtype == DType::Float64 ? MemoryFormat::Contiguous : wanted;
  // On the CPU, 3-d convolutions are channels-last only through oneDNN,
  // which takes float32 always and reduced precision only on some CPUs.
  if (wanted == MemoryFormat::ChannelsLast || input.dtype == DType::Float32)
    return wanted;
  if (input.dtype == DType::Float64)
    return MemoryFormat::Contiguous;
  throw Unsupported(args.schema().qualifiedName() +
                    ": the layout of a channels-last 3-d convolution in " +
                    std::string(dtypeName(input.dtype)) +
                    " on the CPU depends on the CPU's oneDNN support; use "
                    "float32 or a contiguous input");
}

TensorMeta convolutionResult(const MetaArgs &args, const TensorMeta &input,
                             const TensorMeta &weight, const TensorMeta *bias,
                             const ConvolutionParameters &given) {
  int64_t ndim = weight.dim();
  if (ndim < 3)
    fail(args, "weight should have at least three dimensions, got shape " +
                   shapeToString(weight.sizes));
  if (input.dim() != ndim)
    fail(args, "Expected " + std::to_string(ndim) + "D (batched) input to " +
                   "convolution for " + std::to_string(ndim) +
                   "D weight of size " + shapeToString(weight.sizes) +
                   ", but got input of size " + shapeToString(input.sizes));
  size_t spatial = static_cast<size_t>(ndim - 2);
  ConvolutionParameters p = given;
  p.stride = perSpatialDim(args, p.stride, spatial, "stride");
  p.padding = perSpatialDim(args, p.padding, spatial, "padding");
  p.dilation = perSpatialDim(args, p.dilation, spatial, "dilation");
  if (p.transposed)
    p.outputPadding =
        perSpatialDim(args, p.outputPadding, spatial, "output_padding");
  if (p.groups <= 0)
    fail(args, "non-positive groups is not supported");
  for (size_t i = 0; i < spatial; ++i) {
    if (p.stride[i] <= 0)
      fail(args, "non-positive stride is not supported");
    if (p.dilation[i] <= 0)
      fail(args, "dilation should be greater than zero");
    if (p.padding[i] < 0)
      fail(args, "negative padding is not supported");
    if (p.transposed &&
        (p.outputPadding[i] < 0 || (p.outputPadding[i] >= p.stride[i] &&
                                    p.outputPadding[i] >= p.dilation[i])))
      fail(args, "output padding must be smaller than either stride or "
                 "dilation, got output_padding=" +
                     shapeToString(p.outputPadding));
  }
  if (input.dtype != weight.dtype)
    fail(args, "Input type (" + std::string(dtypeName(input.dtype)) +
                   ") and weight type (" +
                   std::string(dtypeName(weight.dtype)) +
                   ") should be the same");

  int64_t channels = input.sizes[1];
  if (weight.sizes[0] % p.groups != 0)
    fail(args, "Given groups=" + std::to_string(p.groups) +
                   ", expected weight to be divisible by " +
                   std::to_string(p.groups) +
                   " at dimension 0, but got weight of size " +
                   shapeToString(weight.sizes) + " instead");
  int64_t expectedChannels =
      p.transposed ? weight.sizes[0] : weight.sizes[1] * p.groups;
  if (channels != expectedChannels)
    fail(args, "Given groups=" + std::to_string(p.groups) +
                   ", weight of size " + shapeToString(weight.sizes) +
                   ", expected input" + shapeToString(input.sizes) +
                   " to have " + std::to_string(expectedChannels) +
                   " channels, but got " + std::to_string(channels) +
                   " channels instead");
  int64_t outChannels =
      p.transposed ? weight.sizes[1] * p.groups : weight.sizes[0];
  if (bias && (bias->dim() != 1 || bias->sizes[0] != outChannels))
    fail(args, "Given weight of size " + shapeToString(weight.sizes) +
                   ", expected bias to be 1-dimensional with " +
                   std::to_string(outChannels) +
                   " elements, but got bias of "
                   "size " +
                   shapeToString(bias->sizes) + " instead");

  Shape sizes = {input.sizes[0], outChannels};
  for (size_t i = 0; i < spatial; ++i) {
    int64_t in = input.sizes[i + 2];
    int64_t kernel = p.dilation[i] * (weight.sizes[i + 2] - 1) + 1;
    int64_t out;
    if (p.transposed) {
      out = (in - 1) * p.stride[i] - 2 * p.padding[i] + kernel +
            p.outputPadding[i];
    } else {
      if (in + 2 * p.padding[i] < kernel)
        fail(args, "Calculated padded input size per channel: " +
                       std::to_string(in + 2 * p.padding[i]) +
                       ". Kernel size: " + std::to_string(kernel) +
                       ". Kernel size can't be greater than actual input "
                       "size");
      out = (in + 2 * p.padding[i] - kernel) / p.stride[i] + 1;
    }
    if (out <= 0)
      fail(args, "Given input size per channel " +
                     shapeToString(
                         Shape(input.sizes.begin() + 2, input.sizes.end())) +
                     ", the calculated output size is too small");
    sizes.push_back(out);
  }
  MemoryFormat format = convolutionFormat(input, weight, args);
  return TensorMeta(input.dtype, sizes, meta::stridesForFormat(sizes, format),
                    0, input.device);
}

// convolution and _convolution.
std::vector<TensorMeta> convolution(const MetaArgs &args) {
  ConvolutionParameters p;
  p.stride = args.intList(3);
  p.padding = args.intList(4);
  p.dilation = args.intList(5);
  p.transposed = args.boolean(6);
  p.outputPadding = args.intList(7);
  p.groups = args.integer(8);
  return one(convolutionResult(args, args.tensor(0), args.tensor(1),
                               args.optionalTensor(2), p));
}

// conv1d and conv2d, with numeric or string ("same", "valid") padding, and
// unbatched inputs (torch adds and removes a batch dimension of 1).
std::vector<TensorMeta> convolutionNd(const MetaArgs &args) {
  TensorMeta input = args.tensor(0);
  const TensorMeta &weight = args.tensor(1);
  const TensorMeta *bias = args.optionalTensor(2);
  bool unbatched = input.dim() == weight.dim() - 1;
  if (unbatched) {
    int64_t stride = input.dim() > 0 ? input.sizes[0] * input.strides[0] : 1;
    input.sizes.insert(input.sizes.begin(), 1);
    input.strides.insert(input.strides.begin(), stride);
  }
  ConvolutionParameters p;
  p.stride = args.intList(3);
  p.dilation = args.intList(5);
  p.groups = args.integer(6);
  if (args[4].kind() != Argument::Kind::String) {
    p.padding = args.intList(4);
  } else if (args.string(4) == "valid") {
    p.padding = {0};
  } else if (args.string(4) == "same") {
    if (input.dim() != weight.dim())
      fail(args, "Expected " + std::to_string(weight.dim()) +
                     "D input for weight of size " +
                     shapeToString(weight.sizes));
    size_t spatial =
        static_cast<size_t>(std::max<int64_t>(weight.dim() - 2, 0));
    Shape stride = perSpatialDim(args, p.stride, spatial, "stride");
    Shape dilation = perSpatialDim(args, p.dilation, spatial, "dilation");
    if (std::any_of(stride.begin(), stride.end(),
                    [](int64_t s) { return s != 1; }))
      fail(args, "padding='same' is not supported for strided convolutions");
    // Each side gets half the kernel's reach; an odd reach pads the input
    // by one more on the right first (a copy in the input's layout).
    Shape padded = input.sizes;
    for (size_t i = 0; i < spatial; ++i) {
      int64_t reach = dilation[i] * (weight.sizes[i + 2] - 1);
      p.padding.push_back(reach / 2);
      padded[i + 2] += reach % 2;
    }
    if (padded != input.sizes)
      input = TensorMeta(
          input.dtype, padded,
          meta::stridesForFormat(padded, meta::suggestMemoryFormat(input)), 0,
          input.device);
  } else {
    fail(args, "Invalid padding string: '" + args.string(4) +
                   "', expected 'valid' or 'same'");
  }
  TensorMeta result = convolutionResult(args, input, weight, bias, p);
  if (unbatched) {
    result.sizes.erase(result.sizes.begin());
    result.strides.erase(result.strides.begin());
  }
  return one(result);
}

// --- Pooling over the last two dims of a 3-d or 4-d input ---

// A `int[2]` argument given as one value or two.
std::pair<int64_t, int64_t> twoInts(const MetaArgs &args, const Shape &values,
                                    const char *name) {
  if (values.size() == 1)
    return {values[0], values[0]};
  if (values.size() != 2)
    fail(args, std::string(name) +
                   " must either be a single int, or a tuple of two ints");
  return {values[0], values[1]};
}

int64_t pooledSize(const MetaArgs &args, int64_t in, int64_t kernel,
                   int64_t pad, int64_t stride, int64_t dilation,
                   bool ceilMode) {
  if (pad > kernel / 2)
    fail(args, "pad should be at most half of effective kernel size, but "
               "got pad=" +
                   std::to_string(pad) +
                   ", kernel_size=" + std::to_string(kernel) +
                   " and dilation=" + std::to_string(dilation));
  int64_t span =
      in + 2 * pad - dilation * (kernel - 1) - 1 + (ceilMode ? stride - 1 : 0);
  // Floor division (span may be negative).
  int64_t out =
      (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  // With ceil_mode the last window must start inside the input or the
  // left padding.
  if (ceilMode && (out - 1) * stride >= in + pad)
    --out;
  return out;
}

// Pooled result sizes, in the input's suggested memory format.
TensorMeta pooledResult(const TensorMeta &input, int64_t height, int64_t width,
                        DType dtype) {
  Shape sizes = input.sizes;
  sizes[sizes.size() - 2] = height;
  sizes[sizes.size() - 1] = width;
  MemoryFormat format = meta::suggestMemoryFormat(input);
  return TensorMeta(dtype, sizes, meta::stridesForFormat(sizes, format), 0,
                    input.device);
}

void checkPoolInput(const MetaArgs &args, const TensorMeta &input) {
  bool channelsLast =
      meta::suggestMemoryFormat(input) == MemoryFormat::ChannelsLast;
  // Only the batch dim may be empty.
  bool valid = (input.dim() == 3 && !channelsLast) || input.dim() == 4;
  for (int64_t d = input.dim() - 3; valid && d < input.dim(); ++d)
    valid = input.sizes[d] != 0;
  if (!valid)
    fail(args, "Expected 3D or 4D (batch mode) tensor with optional 0 dim "
               "batch size for input, but got: " +
                   shapeToString(input.sizes));
}

// The window of a 2-d pool: kernel_size, stride (empty: the kernel) and
// padding, arguments 1 to 3 of max_pool2d and avg_pool2d alike.
struct PoolWindow {
  int64_t kernelH, kernelW, strideH, strideW, padH, padW;
};

PoolWindow poolWindow(const MetaArgs &args) {
  PoolWindow window;
  std::tie(window.kernelH, window.kernelW) =
      twoInts(args, args.intList(1), "kernel_size");
  Shape strideList = args.intList(2);
  std::tie(window.strideH, window.strideW) =
      strideList.empty() ? std::make_pair(window.kernelH, window.kernelW)
                         : twoInts(args, strideList, "stride");
  std::tie(window.padH, window.padW) =
      twoInts(args, args.intList(3), "padding");
  return window;
}

// The pooled result's height and width; throws where either is below 1.
std::pair<int64_t, int64_t> pooledExtent(const MetaArgs &args,
                                         const TensorMeta &input,
                                         const PoolWindow &window,
                                         int64_t dilationH, int64_t dilationW,
                                         bool ceilMode) {
  int64_t inH = input.sizes[input.dim() - 2], inW = input.sizes.back();
  int64_t outH = pooledSize(args, inH, window.kernelH, window.padH,
                            window.strideH, dilationH, ceilMode);
  int64_t outW = pooledSize(args, inW, window.kernelW, window.padW,
                            window.strideW, dilationW, ceilMode);
  if (outH < 1 || outW < 1)
    fail(args, "Given input size " + shapeToString(input.sizes) +
                   ", the calculated output size is too small");
  return {outH, outW};
}

// max_pool2d (values) and max_pool2d_with_indices (values, indices).
std::vector<TensorMeta> maxPool(const MetaArgs &args) {
  const TensorMeta &input = args.tensor(0);
  PoolWindow window = poolWindow(args);
  auto [dilationH, dilationW] = twoInts(args, args.intList(4), "dilation");
  bool ceilMode = args.boolean(5);
  if (window.kernelH <= 0 || window.kernelW <= 0 || window.strideH <= 0 ||
      window.strideW <= 0 || dilationH <= 0 || dilationW <= 0)
    fail(args, "kernel size, stride and dilation should be greater than zero");
  checkPoolInput(args, input);
  auto [outH, outW] =
      pooledExtent(args, input, window, dilationH, dilationW, ceilMode);
  TensorMeta values = pooledResult(input, outH, outW, input.dtype);
  if (args.schema().returns.size() == 1)
    return one(values);
  TensorMeta indices = values;
  indices.dtype = DType::Int64;
  return {values, indices};
}

std::vector<TensorMeta> avgPool(const MetaArgs &args) {
  const TensorMeta &input = args.tensor(0);
  PoolWindow window = poolWindow(args);
  bool ceilMode = args.boolean(4);
  if (std::optional<int64_t> divisor = args.optionalInteger(6);
      divisor && *divisor == 0)
    fail(args, "divisor must be not zero");
  if (window.kernelH <= 0 || window.kernelW <= 0 || window.strideH <= 0 ||
      window.strideW <= 0)
    fail(args, "kernel size and stride should be greater than zero");
  checkPoolInput(args, input);
  auto [outH, outW] = pooledExtent(args, input, window, 1, 1, ceilMode);
  return one(pooledResult(input, outH, outW, input.dtype));
}

// adaptive_avg_pool2d and _adaptive_avg_pool2d.
std::vector<TensorMeta> adaptiveAvgPool(const MetaArgs &args) {
  const TensorMeta &input = args.tensor(0);
  Shape outputSize = args.intList(1);
  if (outputSize.size() != 2)
    fail(args, "output_size must be 2");
  if (input.dim() != 3 && input.dim() != 4)
    fail(args,
         "Expected 3D or 4D tensor, but got " + shapeToString(input.sizes));
  for (int64_t d = input.dim() - 3; d < input.dim(); ++d)
    if (input.sizes[d] == 0)
      fail(args, "Expected input to have non-zero size for non-batch "
                 "dimensions, but input has sizes " +
                     shapeToString(input.sizes) + " with dimension " +
                     std::to_string(d) + " being empty");
  if (outputSize[0] < 0 || outputSize[1] < 0)
    fail(args, "output_size must be non-negative");
  return one(pooledResult(input, outputSize[0], outputSize[1], input.dtype));
}

// --- Nearest-neighbour upsampling ---

// upsample_nearest2d and upsample_bilinear2d (output sizes) and their .vec
// overloads (output sizes or scales, argument `scalesArgument`). Empty
// sizes are an error where `nonEmpty` (torch's meta for bilinear passes
// them; its kernel then raises).
TensorMeta upsampled(const MetaArgs &args, size_t scalesArgument,
                     bool nonEmpty) {
  const TensorMeta &input = args.tensor(0);
  if (input.dim() != 4 ||
      (input.numel() == 0 &&
       numelOf(Shape(input.sizes.begin() + 1, input.sizes.end())) == 0))
    fail(args, "Non-empty 4D data tensor expected but got a tensor with "
               "sizes " +
                   shapeToString(input.sizes));
  std::optional<Shape> outputSize = args.optionalIntList(1);
  std::optional<std::vector<double>> scales;
  if (args.schema().overload == "vec" && !args.isNone(scalesArgument))
    scales = args[scalesArgument].toDoubleList();
  if (outputSize.has_value() == scales.has_value())
    fail(args, "Must specify exactly one of output_size and scale_factors");
  Shape spatial;
  if (outputSize) {
    spatial = *outputSize;
  } else {
    for (size_t i = 0; i < scales->size(); ++i)
      spatial.push_back(static_cast<int64_t>(
          static_cast<double>(input.sizes[i + 2]) * (*scales)[i]));
  }
  if (spatial.size() != 2)
    fail(args, "expected 2 output sizes or scale factors, got " +
                   std::to_string(spatial.size()));
  if (nonEmpty && (input.sizes[2] <= 0 || input.sizes[3] <= 0 ||
                   spatial[0] <= 0 || spatial[1] <= 0))
    fail(args, "Input and output sizes should be greater than 0, but got "
               "input " +
                   shapeToString(input.sizes) + " and output size " +
                   shapeToString(spatial));
  return pooledResult(input, spatial[0], spatial[1], input.dtype);
}

std::vector<TensorMeta> upsampleNearest(const MetaArgs &args) {
  TensorMeta result = upsampled(args, 2, true);
  const TensorMeta &input = args.tensor(0);
  // torch's CUDA kernel takes the channels-last path only from 4 channels.
  if (input.device.type == DeviceType::CUDA && input.sizes[1] < 4)
    result.strides = contiguousStrides(result.sizes);
  return one(result);
}

std::vector<TensorMeta> upsampleBilinear(const MetaArgs &args) {
  if (!isFloatingPoint(args.tensor(0).dtype))
    fail(args, "\"upsample_bilinear2d_out_frame\" not implemented for "
               "an integer tensor");
  return one(upsampled(args, 3, false));
}

// --- Scaled dot-product attention ---

// Whether torch's CPU dispatcher runs the fused flash kernel (whose output
// takes the query's layout) rather than the math fallback (contiguous).
bool cpuFlashAttentionApplies(const TensorMeta &q, const TensorMeta &k,
                              const TensorMeta &v, const TensorMeta *mask,
                              double dropout, bool enableGqa) {
  if (dropout > 0 || q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    return false;
  if (q.sizes[0] != k.sizes[0] || q.sizes[0] != v.sizes[0])
    return false;
  int64_t heads = q.sizes[1];
  if (enableGqa) {
    if (k.sizes[1] != v.sizes[1] || k.sizes[1] == 0 || heads % k.sizes[1] != 0)
      return false;
  } else if (k.sizes[1] != heads || v.sizes[1] != heads) {
    return false;
  }
  if (mask) {
    int64_t rows = mask->sizes[mask->dim() - 2], columns = mask->sizes.back();
    if ((rows != q.sizes[2] && rows != 1) ||
        (columns != k.sizes[2] && columns != 1))
      return false;
    if (mask->dim() == 4) {
      if ((mask->sizes[0] != 1 && mask->sizes[0] != q.sizes[0]) ||
          (mask->sizes[1] != 1 && mask->sizes[1] != heads))
        return false;
    } else if (mask->dim() != 2) {
      return false;
    }
  }
  if (q.sizes[3] != k.sizes[3] || q.sizes[3] != v.sizes[3])
    return false;
  if (q.sizes[2] == 0 || k.sizes[2] == 0)
    return false;
  if (q.strides[3] != 1 || k.strides[3] != 1 || v.strides[3] != 1)
    return false;
  DType dtype = q.dtype;
  return dtype == DType::Float32 || dtype == DType::Float64 ||
         dtype == DType::BFloat16 || dtype == DType::Float16;
}

void checkAttentionInputs(const MetaArgs &args, const TensorMeta &q,
                          const TensorMeta &k, const TensorMeta &v,
                          const TensorMeta *mask, bool isCausal) {
  if (q.dtype != k.dtype || q.dtype != v.dtype)
    fail(args, "Expected query, key, and value to have the same dtype, but "
               "got query.dtype: " +
                   std::string(dtypeName(q.dtype)) +
                   " key.dtype: " + std::string(dtypeName(k.dtype)) +
                   " and value.dtype: " + std::string(dtypeName(v.dtype)));
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    fail(args, "Expected query, key, and value to all be at least 2 "
               "dimensional");
  if (mask && mask->dtype != DType::Bool && mask->dtype != q.dtype)
    fail(args, "Expected attn_mask dtype to be bool or to match query dtype");
  if (mask && isCausal)
    fail(args, "Explicit attn_mask should not be set when is_causal=True");
  if (q.sizes.back() != k.sizes.back())
    fail(args, "query and key must have the same embedding size, got " +
                   shapeToString(q.sizes) + " and " + shapeToString(k.sizes));
  if (k.sizes[k.dim() - 2] != v.sizes[v.dim() - 2])
    fail(args, "key and value must have the same sequence length, got " +
                   shapeToString(k.sizes) + " and " + shapeToString(v.sizes));
}

// The math fallback: softmax(q @ k^T) @ v, batch dims broadcast (and key
// and value heads repeated for grouped-query attention).
Shape mathAttentionShape(const MetaArgs &args, const TensorMeta &q,
                         const TensorMeta &k, const TensorMeta &v,
                         const TensorMeta *mask, bool enableGqa) {
  Shape batchQ(q.sizes.begin(), q.sizes.end() - 2);
  Shape batchK(k.sizes.begin(), k.sizes.end() - 2);
  Shape batchV(v.sizes.begin(), v.sizes.end() - 2);
  if (enableGqa && q.dim() >= 3 && k.dim() >= 3 && v.dim() >= 3) {
    int64_t heads = q.sizes[q.dim() - 3];
    for (Shape *batch : {&batchK, &batchV}) {
      int64_t &kvHeads = batch->back();
      if (kvHeads == 0 || heads % kvHeads != 0)
        fail(args, "number of heads in key and value must divide the number "
                   "of heads in query");
      kvHeads = heads;
    }
  }
  Shape sizes = meta::broadcastShapes({&batchQ, &batchK, &batchV});
  if (mask) {
    Shape weights = meta::broadcastShapes(batchQ, batchK);
    weights.push_back(q.sizes[q.dim() - 2]);
    weights.push_back(k.sizes[k.dim() - 2]);
    if (meta::broadcastShapes(mask->sizes, weights) != weights)
      fail(args, "attn_mask of shape " + shapeToString(mask->sizes) +
                     " does not broadcast to the attention weights' shape " +
                     shapeToString(weights));
  }
  sizes.push_back(q.sizes[q.dim() - 2]);
  sizes.push_back(v.sizes.back());
  return sizes;
}

std::vector<TensorMeta> scaledDotProductAttention(const MetaArgs &args) {
  const TensorMeta &q = args.tensor(0);
  const TensorMeta &k = args.tensor(1);
  const TensorMeta &v = args.tensor(2);
  const TensorMeta *mask = args.optionalTensor(3);
  double dropout = args.real(4);
  bool isCausal = args.boolean(5);
  bool enableGqa = args.boolean(7);
  checkAttentionInputs(args, q, k, v, mask, isCausal);
  if (q.device.type == DeviceType::CUDA)
    throw Unsupported(args.schema().qualifiedName() +
                      ": on CUDA the result's layout depends on which fused "
                      "kernel torch picks for the GPU at run time; kiln "
                      "knows it on CPU and meta devices only");
  if (q.device.type == DeviceType::CPU &&
      cpuFlashAttentionApplies(q, k, v, mask, dropout, enableGqa))
    return one(meta::emptyLike(q));
  return one(TensorMeta(
      q.dtype, mathAttentionShape(args, q, k, v, mask, enableGqa), q.device));
}

// (output in the query's layout, logsumexp of shape [batch, heads, L] laid
// out as [batch, L, heads], in float32 for reduced-precision inputs).
std::vector<TensorMeta> flashAttentionForCpu(const MetaArgs &args) {
  const TensorMeta &q = args.tensor(0);
  const TensorMeta &k = args.tensor(1);
  const TensorMeta &v = args.tensor(2);
  const TensorMeta *mask = args.optionalTensor(5);
  checkAttentionInputs(args, q, k, v, mask, false);
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    fail(args, "expected query, key and value to be 4D tensors of shape "
               "(batch, heads, sequence, head_dim)");
  if (v.sizes[3] != q.sizes[3])
    fail(args, "expected query, key and value to have the same head_dim");
  int64_t batch = q.sizes[0], heads = q.sizes[1], length = q.sizes[2];
  DType statsDType = q.dtype == DType::Float16 || q.dtype == DType::BFloat16
                         ? DType::Float32
                         : q.dtype;
  TensorMeta logsumexp(statsDType, {batch, heads, length},
                       {length * heads, 1, heads}, 0, q.device);
  return {meta::emptyLike(q), logsumexp};
}

} // namespace

void registerLinearAlgebraOps(OpRegistry &registry) {
  const OpRegistration table[] = {
      {"aten::mm(Tensor self, Tensor mat2) -> Tensor", product},
      {"aten::bmm(Tensor self, Tensor mat2) -> Tensor", product},
      {"aten::mv(Tensor self, Tensor vec) -> Tensor", product},
      {"aten::linalg_cross(Tensor self, Tensor other, *, int dim=-1) -> "
       "Tensor",
       cross},
      {"aten::addr(Tensor self, Tensor vec1, Tensor vec2, *, Scalar beta=1, "
       "Scalar alpha=1) -> Tensor",
       addr},
      {"aten::dot(Tensor self, Tensor tensor) -> Tensor", dot},
      {"aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
       "Scalar alpha=1) -> Tensor",
       addProduct},
      {"aten::baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar "
       "beta=1, Scalar alpha=1) -> Tensor",
       addProduct},
      {"aten::addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, "
       "Scalar alpha=1) -> Tensor",
       addProduct},
      {"aten::matmul(Tensor self, Tensor other) -> Tensor", matmul},
      {"aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> "
       "Tensor",
       linear},
      {"aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] "
       "stride, SymInt[] padding, SymInt[] dilation, bool transposed, "
       "SymInt[] output_padding, SymInt groups) -> Tensor",
       convolution},
      {"aten::_convolution(Tensor input, Tensor weight, Tensor? bias, "
       "SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool "
       "transposed, SymInt[] output_padding, SymInt groups, bool benchmark, "
       "bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor",
       convolution},
      {"aten::conv1d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[1] "
       "stride=[1], SymInt[1] padding=[0], SymInt[1] dilation=[1], SymInt "
       "groups=1) -> Tensor",
       convolutionNd},
      {"aten::conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] "
       "stride=[1, 1], SymInt[2] padding=[0, 0], SymInt[2] dilation=[1, 1], "
       "SymInt groups=1) -> Tensor",
       convolutionNd},
      {"aten::conv1d.padding(Tensor input, Tensor weight, Tensor? bias=None, "
       "SymInt[1] stride=[1], str padding=\"valid\", SymInt[1] "
       "dilation=[1], SymInt groups=1) -> Tensor",
       convolutionNd},
      {"aten::conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, "
       "SymInt[2] stride=[1, 1], str padding=\"valid\", SymInt[2] "
       "dilation=[1, 1], SymInt groups=1) -> Tensor",
       convolutionNd},
      {"aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], "
       "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor",
       maxPool},
      {"aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] "
       "stride=[], int[2] padding=0, int[2] dilation=1, bool "
       "ceil_mode=False) -> (Tensor, Tensor)",
       maxPool},
      {"aten::avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], "
       "int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, "
       "int? divisor_override=None) -> Tensor",
       avgPool},
      {"aten::adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> "
       "Tensor",
       adaptiveAvgPool},
      {"aten::_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> "
       "Tensor",
       adaptiveAvgPool},
      {"aten::upsample_nearest2d(Tensor self, SymInt[2] output_size, float? "
       "scales_h=None, float? scales_w=None) -> Tensor",
       upsampleNearest},
      {"aten::upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, "
       "float[]? scale_factors) -> Tensor",
       upsampleNearest},
      {"aten::upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool "
       "align_corners, float? scales_h=None, float? scales_w=None) -> Tensor",
       upsampleBilinear},
      {"aten::upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, "
       "bool align_corners, float[]? scale_factors) -> Tensor",
       upsampleBilinear},
      {"aten::_scaled_dot_product_flash_attention_for_cpu(Tensor query, "
       "Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, "
       "*, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, "
       "Tensor logsumexp)",
       flashAttentionForCpu},
      {"aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor "
       "value, Tensor? attn_mask=None, float dropout_p=0., bool "
       "is_causal=False, *, float? scale=None, bool enable_gqa=False) -> "
       "Tensor",
       scaledDotProductAttention},
  };
  for (const OpRegistration &registration : table)
    registry.add(registration);
}

} // namespace kiln
