// Shared pieces of meta functions: dimension wrapping, broadcasting, type
// promotion, and TensorIterator's output layout.
// Depends on ir/OpRegistry.h, ir/TensorMeta.h.
#include "ir/ops/MetaUtils.h"

#include "ir/Error.h"

#include <algorithm>
#include <numeric>

namespace kiln::meta {

int64_t wrapDim(int64_t dim, int64_t ndim, bool wrapScalar) {
  if (ndim <= 0) {
    if (!wrapScalar)
      throw Error("dimension specified as " + std::to_string(dim) +
                  " but tensor has no dimensions");
    ndim = 1;
  }
  if (dim < -ndim || dim >= ndim)
    throw Error("Dimension out of range (expected to be in range of [" +
                std::to_string(-ndim) + ", " + std::to_string(ndim - 1) +
                "], but got " + std::to_string(dim) + ")");
  return dim < 0 ? dim + ndim : dim;
}

std::vector<int64_t> wrapDims(const std::vector<int64_t> &dims, int64_t ndim) {
  std::vector<int64_t> wrapped;
  for (int64_t dim : dims) {
    int64_t w = wrapDim(dim, ndim);
    if (std::find(wrapped.begin(), wrapped.end(), w) != wrapped.end())
      throw Error("dim " + std::to_string(w) +
                  " appears multiple times in the list of dims");
    wrapped.push_back(w);
  }
  return wrapped;
}

Shape broadcastShapes(const Shape &a, const Shape &b) {
  size_t ndim = std::max(a.size(), b.size());
  Shape result(ndim);
  for (size_t i = 0; i < ndim; ++i) {
    int64_t sa = i < ndim - a.size() ? 1 : a[i - (ndim - a.size())];
    int64_t sb = i < ndim - b.size() ? 1 : b[i - (ndim - b.size())];
    if (sa != sb && sa != 1 && sb != 1)
      throw Error("The size of tensor a (" + std::to_string(sa) +
                  ") must match the size of tensor b (" + std::to_string(sb) +
                  ") at non-singleton dimension " + std::to_string(i) +
                  " (shapes " + shapeToString(a) + " and " + shapeToString(b) +
                  ")");
    result[i] = sa == 1 ? sb : sa;
  }
  return result;
}

Shape broadcastShapes(const std::vector<const Shape *> &shapes) {
  Shape result;
  for (const Shape *shape : shapes)
    result = broadcastShapes(result, *shape);
  return result;
}

namespace {

enum class Category { Undefined, Bool, Integral, Floating, Complex };

Category categoryOf(std::optional<DType> dtype) {
  if (!dtype)
    return Category::Undefined;
  if (*dtype == DType::Bool)
    return Category::Bool;
  if (isComplex(*dtype))
    return Category::Complex;
  if (isFloatingPoint(*dtype))
    return Category::Floating;
  return Category::Integral;
}

std::optional<DType> promoteOptional(std::optional<DType> a,
                                     std::optional<DType> b) {
  if (!a)
    return b;
  if (!b)
    return a;
  return promoteTypes(*a, *b);
}

// Mirrors torch's combine_categories: the higher priority result keeps its
// type unless the lower one is of a strictly higher category.
std::optional<DType> combineCategories(std::optional<DType> higher,
                                       std::optional<DType> lower) {
  Category high = categoryOf(higher), low = categoryOf(lower);
  if (high == Category::Complex)
    return higher;
  if (low == Category::Complex) {
    // torch gives complex32 here, a type kiln does not have.
    if (higher == DType::Float16)
      throw Unsupported("a float16 tensor with a complex operand of lower "
                        "priority gives complex32, which kiln does not "
                        "support");
    if (high == Category::Floating)
      return toComplexType(*higher);
    return lower;
  }
  if (high == Category::Floating)
    return higher;
  if (high == Category::Bool || low == Category::Floating)
    return promoteOptional(higher, lower);
  if (high != Category::Undefined)
    return higher;
  return lower;
}

// The dimensions from innermost to outermost in the memory order of the
// operands (TensorIterator's reorder_dimensions): start from row-major order
// and insertion-sort by the first operand whose strides decide; stride 0
// (broadcast) never decides.
std::vector<int64_t> memoryOrder(const Shape &shape,
                                 const std::vector<Shape> &operandStrides) {
  int64_t ndim = static_cast<int64_t>(shape.size());
  std::vector<int64_t> perm(ndim);
  for (int64_t i = 0; i < ndim; ++i)
    perm[i] = ndim - 1 - i;
  auto shouldSwap = [&](int64_t dim0, int64_t dim1) {
    for (const Shape &strides : operandStrides) {
      int64_t stride0 = strides[dim0], stride1 = strides[dim1];
      if (stride0 == 0 || stride1 == 0)
        continue;
      if (stride0 < stride1)
        return -1;
      if (stride0 > stride1)
        return 1;
      if (shape[dim0] > shape[dim1])
        return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < ndim; ++i) {
    int64_t dim1 = i;
    for (int64_t dim0 = i - 1; dim0 >= 0; --dim0) {
      int comparison = shouldSwap(perm[dim0], perm[dim1]);
      if (comparison > 0) {
        std::swap(perm[dim0], perm[dim1]);
        dim1 = dim0;
      } else if (comparison < 0) {
        break;
      }
    }
  }
  return perm;
}

// Dense strides that visit dimensions in `perm` order, innermost first.
Shape denseStridesInOrder(const Shape &shape,
                          const std::vector<int64_t> &perm) {
  Shape strides(shape.size());
  int64_t running = 1;
  for (int64_t dim : perm) {
    strides[dim] = running;
    running *= std::max<int64_t>(shape[dim], 1);
  }
  return strides;
}

} // namespace

DType resultType(const std::vector<PromotionOperand> &operands) {
  std::optional<DType> dimResult, zeroResult, wrappedResult;
  for (const PromotionOperand &operand : operands) {
    DType dtype = operand.dtype;
    if (operand.isScalar) {
      if (isComplex(dtype))
        dtype = DType::Complex64;
      else if (isFloatingPoint(dtype))
        dtype = kDefaultFloatDType;
      wrappedResult = promoteOptional(wrappedResult, dtype);
    } else if (operand.dim > 0) {
      dimResult = promoteOptional(dimResult, dtype);
    } else {
      zeroResult = promoteOptional(zeroResult, dtype);
    }
  }
  std::optional<DType> result = combineCategories(
      dimResult, combineCategories(zeroResult, wrappedResult));
  if (!result)
    throw Error("type promotion needs at least one operand");
  return *result;
}

DType scalarDType(const Argument &scalar) {
  switch (scalar.kind()) {
  case Argument::Kind::Bool:
    return DType::Bool;
  case Argument::Kind::Int:
    return DType::Int64;
  case Argument::Kind::Double:
    return DType::Float64;
  default:
    throw Error("expected a Python number, got " +
                std::string(argumentKindName(scalar.kind())));
  }
}

PromotionOperand operandOf(const TensorMeta &tensor) {
  return {tensor.dtype, tensor.dim(), false};
}

PromotionOperand operandOf(const Argument &scalar) {
  return {scalarDType(scalar), 0, true};
}

Device commonDevice(const std::vector<const TensorMeta *> &inputs) {
  std::optional<Device> device;
  std::optional<Device> scalarDevice;
  for (const TensorMeta *input : inputs) {
    if (!input)
      continue;
    if (input->dim() == 0 && input->device.type == DeviceType::CPU) {
      scalarDevice = input->device;
      continue;
    }
    if (device && *device != input->device)
      throw Error("Expected all tensors to be on the same device, but found "
                  "at least two devices, " +
                  device->str() + " and " + input->device.str());
    device = input->device;
  }
  if (device)
    return *device;
  return scalarDevice.value_or(Device());
}

// TensorIterator's fast set-up (compute_fast_setup_type): operands of the
// result's shape that are all contiguous, all channels-last, or all dense
// with one set of strides give the result that layout, before (and
// whatever) the stride sort would choose.
static std::optional<TensorMeta>
fastSetUp(const std::vector<const TensorMeta *> &inputs, const Shape &shape,
          DType dtype, Device device) {
  bool contiguous = true, channelsLast = true, dense = true, sameStrides = true;
  for (const TensorMeta *input : inputs) {
    if (input->sizes != shape)
      return std::nullopt;
    contiguous &= input->isContiguous();
    channelsLast &=
        shape.size() == 4 && isContiguousIn(*input, MemoryFormat::ChannelsLast);
    dense &= input->isNonOverlappingAndDense();
    sameStrides &= input->strides == inputs.front()->strides;
  }
  if (contiguous)
    return contiguousLike(dtype, shape, device);
  if (channelsLast)
    return TensorMeta(dtype, shape,
                      stridesForFormat(shape, MemoryFormat::ChannelsLast), 0,
                      device);
  if (dense && sameStrides)
    return TensorMeta(dtype, shape, inputs.front()->strides, 0, device);
  return std::nullopt;
}

TensorMeta elementwiseResult(const std::vector<const TensorMeta *> &inputs,
                             DType resultDType, bool onlyTensors) {
  if (inputs.empty())
    throw Error("an elementwise op needs at least one tensor operand");
  std::vector<const Shape *> shapes;
  for (const TensorMeta *input : inputs)
    shapes.push_back(&input->sizes);
  Shape shape = broadcastShapes(shapes);
  Device device = commonDevice(inputs);
  int64_t ndim = static_cast<int64_t>(shape.size());
  if (ndim <= 1)
    return contiguousLike(resultDType, std::move(shape), device);
  if (onlyTensors)
    if (std::optional<TensorMeta> fast =
            fastSetUp(inputs, shape, resultDType, device))
      return *fast;

  // Each operand's strides over the broadcast shape, in elements of a common
  // width (torch compares bytes; the order is the same within one operand).
  // Broadcast dimensions get stride 0, which never decides the order.
  std::vector<Shape> strides;
  for (const TensorMeta *input : inputs) {
    Shape operandStrides(ndim, 0);
    int64_t offset = ndim - input->dim();
    for (int64_t i = 0; i < input->dim(); ++i) {
      bool broadcast = input->sizes[i] == 1 && shape[offset + i] != 1;
      operandStrides[offset + i] =
          broadcast ? 0 : input->strides[i] * itemSize(input->dtype);
    }
    strides.push_back(std::move(operandStrides));
  }

  std::vector<int64_t> perm = memoryOrder(shape, strides);
  Shape resultStrides = denseStridesInOrder(shape, perm);
  // An identity permutation gives plain row-major strides (torch allocates
  // those without strides, which treats size-0 dimensions the same way).
  bool rowMajor = true;
  for (int64_t i = 0; i < ndim; ++i)
    rowMajor &= perm[i] == ndim - 1 - i;
  if (rowMajor)
    return contiguousLike(resultDType, shape, device);
  return TensorMeta(resultDType, shape, resultStrides, 0, device);
}

TensorMeta contiguousLike(DType dtype, Shape sizes, Device device) {
  return TensorMeta(dtype, std::move(sizes), device);
}

Shape preservedStrides(const TensorMeta &tensor) {
  if (tensor.isNonOverlappingAndDense())
    return tensor.strides;
  // Dense strides in the tensor's own memory order (torch's
  // infer_dense_strides).
  std::vector<int64_t> perm = memoryOrder(tensor.sizes, {tensor.strides});
  return denseStridesInOrder(tensor.sizes, perm);
}

std::string DTypeSet::str() const {
  struct Category {
    DTypeSet set;
    const char *name;
  };
  const Category categories[] = {{kBoolTypes, "bool"},
                                 {kIntegerTypes, "integer"},
                                 {kFloatingTypes, "floating"},
                                 {kComplexTypes, "complex"}};
  std::vector<std::string> parts;
  for (const Category &category : categories) {
    if ((category.set - *this).bits_ == 0) {
      parts.push_back(category.name);
      continue;
    }
    for (int i = 0; i < kNumDTypes; ++i) {
      DType dtype = static_cast<DType>(i);
      if (category.set.contains(dtype) && contains(dtype))
        parts.push_back(std::string(dtypeName(dtype)));
    }
  }
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return text + " types";
}

void checkSupported(const MetaArgs &args, DType dtype, DTypeSet supported) {
  if (!supported.contains(dtype))
    fail(args, "not implemented for " + std::string(dtypeName(dtype)) +
                   " tensors (torch implements it for " + supported.str() +
                   ")");
}

std::vector<int64_t>
reductionDims(const std::optional<std::vector<int64_t>> &dims, int64_t ndim) {
  if (dims && !dims->empty())
    return wrapDims(*dims, ndim);
  std::vector<int64_t> all(std::max<int64_t>(ndim, 0));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

IndexedDims indexedDims(const std::vector<bool> &present, int64_t rank) {
  IndexedDims dims;
  for (int64_t d = 0; d < rank; ++d)
    (d < static_cast<int64_t>(present.size()) && present[d] ? dims.indexed
                                                            : dims.others)
        .push_back(d);
  bool adjacent =
      !dims.indexed.empty() && dims.indexed.back() - dims.indexed.front() + 1 ==
                                   static_cast<int64_t>(dims.indexed.size());
  dims.insertAt = adjacent ? dims.indexed.front() : 0;
  return dims;
}

std::pair<int64_t, int64_t> sliceBounds(int64_t size,
                                        std::optional<int64_t> start,
                                        std::optional<int64_t> end) {
  int64_t first = start.value_or(0);
  int64_t last = end.value_or(size);
  if (first < 0)
    first += size;
  if (last < 0)
    last += size;
  first = std::clamp<int64_t>(first, 0, size);
  return {first, std::clamp<int64_t>(last, first, size)};
}

TensorMeta sliceOf(const TensorMeta &self, int64_t dim, int64_t start,
                   int64_t length, int64_t step) {
  Shape sizes = self.sizes, strides = self.strides;
  sizes[dim] = length;
  strides[dim] *= step;
  return viewOf(self, sizes, strides,
                self.storageOffset + start * self.strides[dim]);
}

TensorMeta selectOf(const TensorMeta &self, int64_t dim, int64_t index) {
  Shape sizes = self.sizes, strides = self.strides;
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return viewOf(self, sizes, strides,
                self.storageOffset + index * self.strides[dim]);
}

TensorMeta diagonalOf(const TensorMeta &self, int64_t offset, int64_t dim1,
                      int64_t dim2) {
  int64_t length = offset >= 0
                       ? std::min(self.sizes[dim1], self.sizes[dim2] - offset)
                       : std::min(self.sizes[dim1] + offset, self.sizes[dim2]);
  length = std::max<int64_t>(length, 0);
  int64_t storageOffset = self.storageOffset;
  if (length > 0)
    storageOffset += offset >= 0 ? offset * self.strides[dim2]
                                 : -offset * self.strides[dim1];
  Shape sizes, strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d == dim1 || d == dim2)
      continue;
    sizes.push_back(self.sizes[d]);
    strides.push_back(self.strides[d]);
  }
  sizes.push_back(length);
  strides.push_back(self.strides[dim1] + self.strides[dim2]);
  return viewOf(self, sizes, strides, storageOffset);
}

TensorMeta slicedView(const MetaArgs &args, const TensorMeta &self,
                      size_t first) {
  if (self.dim() == 0)
    fail(args, "slice() cannot be applied to a 0-dim tensor.");
  int64_t dim = wrapDim(args.integer(first), self.dim());
  int64_t step = args.integer(first + 3);
  if (step <= 0)
    fail(args, "slice step must be positive, got " + std::to_string(step));
  auto [start, end] =
      sliceBounds(self.sizes[dim], args.optionalInteger(first + 1),
                  args.optionalInteger(first + 2));
  return sliceOf(self, dim, start, (end - start + step - 1) / step, step);
}

TensorMeta selectedView(const MetaArgs &args, const TensorMeta &self,
                        int64_t dim, int64_t index) {
  if (self.dim() == 0)
    fail(args, "select() cannot be applied to a 0-dim tensor.");
  dim = wrapDim(dim, self.dim());
  int64_t size = self.sizes[dim];
  if (index < -size || index >= size)
    fail(args, "index " + std::to_string(index) +
                   " out of range for tensor of size " +
                   shapeToString(self.sizes) + " at dimension " +
                   std::to_string(dim));
  return selectOf(self, dim, index < 0 ? index + size : index);
}

TensorMeta diagonalView(const MetaArgs &args, const TensorMeta &self,
                        size_t first) {
  int64_t dim1 = wrapDim(args.integer(first + 1), self.dim(), false);
  int64_t dim2 = wrapDim(args.integer(first + 2), self.dim(), false);
  if (dim1 == dim2)
    fail(args, "diagonal dimensions cannot be identical " +
                   std::to_string(args.integer(first + 1)) + ", " +
                   std::to_string(args.integer(first + 2)));
  return diagonalOf(self, args.integer(first), dim1, dim2);
}

TensorMeta sliceScatterView(const MetaArgs &args, const TensorMeta &result) {
  return slicedView(args, result, 2);
}

TensorMeta selectScatterView(const MetaArgs &args, const TensorMeta &result) {
  return selectedView(args, result, args.integer(2), args.integer(3));
}

TensorMeta diagonalScatterView(const MetaArgs &args, const TensorMeta &result) {
  return diagonalView(args, result, 2);
}

bool overlapsItself(const Shape &sizes, const Shape &strides) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0)
      return false;
    if (sizes[d] > 1)
      dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(),
            [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t reach = 0;
  for (size_t d : dims) {
    if (strides[d] <= reach)
      return true;
    reach += (sizes[d] - 1) * strides[d];
  }
  return false;
}

Shape reducedShape(const Shape &sizes, const std::vector<int64_t> &dims,
                   bool keepdim) {
  Shape shape;
  for (size_t i = 0; i < sizes.size(); ++i) {
    bool reduced =
        std::find(dims.begin(), dims.end(), int64_t(i)) != dims.end();
    if (!reduced)
      shape.push_back(sizes[i]);
    else if (keepdim)
      shape.push_back(1);
  }
  return shape;
}

void fail(const MetaArgs &args, const std::string &message) {
  throw Error(args.schema().qualifiedName() + ": " + message);
}

} // namespace kiln::meta

// --- Layouts of views, copies and allocations (view, tensor and linear
// algebra ops) ---
namespace kiln::meta {

std::optional<Shape> viewStrides(const Shape &oldSizes, const Shape &oldStrides,
                                 const Shape &newSizes) {
  int64_t numel = numelOf(oldSizes);
  if (numel == 0 && oldSizes == newSizes)
    return oldStrides;
  int64_t newDims = static_cast<int64_t>(newSizes.size());
  if (numel == 0 || oldSizes.empty())
    return contiguousStrides(newSizes);

  // Walk the old dimensions from the innermost, grouping them into chunks
  // that are contiguous with each other; the new dimensions must tile each
  // chunk exactly, and each takes strides from the chunk it falls in.
  Shape newStrides(newDims);
  int64_t viewDim = newDims - 1;
  int64_t chunkBaseStride = oldStrides.back();
  int64_t tensorNumel = 1, viewNumel = 1;
  for (int64_t tensorDim = static_cast<int64_t>(oldSizes.size()) - 1;
       tensorDim >= 0; --tensorDim) {
    tensorNumel *= oldSizes[tensorDim];
    bool chunkEnds = tensorDim == 0 || (oldSizes[tensorDim - 1] != 1 &&
                                        oldStrides[tensorDim - 1] !=
                                            tensorNumel * chunkBaseStride);
    if (!chunkEnds)
      continue;
    while (viewDim >= 0 &&
           (viewNumel < tensorNumel || newSizes[viewDim] == 1)) {
      newStrides[viewDim] = viewNumel * chunkBaseStride;
      viewNumel *= newSizes[viewDim];
      --viewDim;
    }
    if (viewNumel != tensorNumel)
      return std::nullopt;
    if (tensorDim > 0) {
      chunkBaseStride = oldStrides[tensorDim - 1];
      tensorNumel = 1;
      viewNumel = 1;
    }
  }
  if (viewDim != -1)
    return std::nullopt;
  return newStrides;
}

namespace {

// The dimension order, innermost first, of each channels-last format.
const std::vector<int64_t> *channelsLastOrder(MemoryFormat format) {
  static const std::vector<int64_t> order2d = {1, 3, 2, 0};
  static const std::vector<int64_t> order3d = {1, 4, 3, 2, 0};
  if (format == MemoryFormat::ChannelsLast)
    return &order2d;
  if (format == MemoryFormat::ChannelsLast3d)
    return &order3d;
  return nullptr;
}

} // namespace

Shape stridesForFormat(const Shape &sizes, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous)
    return contiguousStrides(sizes);
  const std::vector<int64_t> *order = channelsLastOrder(format);
  if (!order)
    throw Error("memory format " + std::string(memoryFormatName(format)) +
                " does not name a layout here");
  if (sizes.size() != order->size())
    throw Error("required rank " + std::to_string(order->size()) +
                " tensor to use " + std::string(memoryFormatName(format)) +
                " format, got a tensor of shape " + shapeToString(sizes));
  // No clamping of size-0 dimensions: torch's channels-last strides do not.
  Shape strides(sizes.size());
  int64_t running = 1;
  for (int64_t dim : *order) {
    strides[dim] = running;
    running *= sizes[dim];
  }
  return strides;
}

bool isContiguousIn(const TensorMeta &tensor, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous || format == MemoryFormat::Preserve)
    return tensor.isContiguous();
  const std::vector<int64_t> *order = channelsLastOrder(format);
  if (!order || tensor.sizes.size() != order->size())
    return false;
  int64_t expected = 1;
  for (int64_t dim : *order) {
    if (tensor.sizes[dim] == 1)
      continue;
    if (tensor.strides[dim] != expected)
      return false;
    expected *= tensor.sizes[dim];
  }
  return true;
}

MemoryFormat suggestMemoryFormat(const TensorMeta &tensor) {
  MemoryFormat format = tensor.dim() == 4   ? MemoryFormat::ChannelsLast
                        : tensor.dim() == 5 ? MemoryFormat::ChannelsLast3d
                                            : MemoryFormat::Contiguous;
  const std::vector<int64_t> *order = channelsLastOrder(format);
  if (!order || tensor.strides[1] == 0)
    return MemoryFormat::Contiguous;
  // Strides must grow along the channels-last order; ties between the
  // channel and batch strides (N111 tensors) default to contiguous.
  int64_t minimum = 0;
  for (int64_t dim : *order) {
    if (tensor.sizes[dim] == 0 || tensor.strides[dim] < minimum)
      return MemoryFormat::Contiguous;
    if (dim == 0 && minimum == tensor.strides[1])
      return MemoryFormat::Contiguous;
    minimum = tensor.strides[dim];
    if (tensor.sizes[dim] > 1)
      minimum *= tensor.sizes[dim];
  }
  return format;
}

TensorMeta emptyLike(const TensorMeta &tensor,
                     std::optional<MemoryFormat> format, DType dtype,
                     Device device) {
  Shape strides = !format || *format == MemoryFormat::Preserve
                      ? preservedStrides(tensor)
                      : stridesForFormat(tensor.sizes, *format);
  return TensorMeta(dtype, tensor.sizes, std::move(strides), 0, device);
}

TensorMeta emptyLike(const TensorMeta &tensor,
                     std::optional<MemoryFormat> format) {
  return emptyLike(tensor, format, tensor.dtype, tensor.device);
}

TensorMeta viewOf(const TensorMeta &base, Shape sizes, Shape strides,
                  int64_t storageOffset) {
  return TensorMeta(base.dtype, std::move(sizes), std::move(strides),
                    storageOffset, base.device);
}

void checkSizesNonNegative(const MetaArgs &args, const Shape &sizes) {
  for (int64_t size : sizes)
    if (size < 0)
      fail(args, "Trying to create tensor with negative dimension " +
                     std::to_string(size) + ": " + shapeToString(sizes));
}

} // namespace kiln::meta
