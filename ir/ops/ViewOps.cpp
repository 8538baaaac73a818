// Meta functions of the view ops (view, reshape, permute, slice, split, ...):
// results alias their input, so each computes strides and storage offset the
// way torch does; reshape-like ops fall back to a contiguous copy.
// Depends on ir/OpRegistry.h and ir/ops/MetaUtils.h.
#include "ir/Error.h"
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

#include <algorithm>
#include <limits>

namespace kiln {
namespace {

using meta::fail;
using meta::sliceOf;
using meta::viewOf;
using meta::wrapDim;

std::vector<TensorMeta> one(TensorMeta meta) { return {std::move(meta)}; }

// Replaces a single -1 in `shape` by the size that makes it hold `numel`
// elements (torch's infer_size).
Shape inferSize(const MetaArgs &args, Shape shape, int64_t numel) {
  int64_t known = 1;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred)
        fail(args, "only one dimension can be inferred");
      inferred = i;
    } else if (shape[i] < 0) {
      fail(args, "invalid shape dimension " + std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  if (inferred) {
    if (known == 0)
      fail(args, "cannot reshape tensor of " + std::to_string(numel) +
                     " elements into shape " + shapeToString(shape) +
                     " because the unspecified dimension size -1 can be any "
                     "value and is ambiguous");
    if (numel % known == 0)
      shape[*inferred] = numel / known;
  }
  if (numelOf(shape) != numel)
    fail(args, "shape '" + shapeToString(shape) +
                   "' is invalid for input of size " + std::to_string(numel));
  return shape;
}

// self viewed with `sizes` (which may hold one -1); throws where no view
// exists.
TensorMeta viewAs(const MetaArgs &args, const TensorMeta &self,
                  const Shape &requested) {
  Shape sizes = inferSize(args, requested, self.numel());
  std::optional<Shape> strides =
      meta::viewStrides(self.sizes, self.strides, sizes);
  if (!strides)
    fail(args, "view size is not compatible with input tensor's size and "
               "stride (at least one dimension spans across two contiguous "
               "subspaces). Use .reshape(...) instead. (viewing sizes " +
                   shapeToString(self.sizes) + " with strides " +
                   shapeToString(self.strides) + " as " + shapeToString(sizes) +
                   ")");
  return viewOf(self, sizes, *strides, self.storageOffset);
}

// A view where one exists, else a contiguous copy (torch's reshape).
TensorMeta reshapeAs(const MetaArgs &args, const TensorMeta &self,
                     const Shape &requested) {
  Shape sizes = inferSize(args, requested, self.numel());
  if (std::optional<Shape> strides =
          meta::viewStrides(self.sizes, self.strides, sizes))
    return viewOf(self, sizes, *strides, self.storageOffset);
  return TensorMeta(self.dtype, sizes, self.device);
}

TensorMeta permuteOf(const MetaArgs &args, const TensorMeta &self,
                     const std::vector<int64_t> &dims) {
  if (static_cast<int64_t>(dims.size()) != self.dim())
    fail(args, "number of dims don't match in permute: the tensor has " +
                   std::to_string(self.dim()) + " dimensions but " +
                   std::to_string(dims.size()) + " were given");
  std::vector<int64_t> wrapped = meta::wrapDims(dims, self.dim());
  Shape sizes, strides;
  for (int64_t dim : wrapped) {
    sizes.push_back(self.sizes[dim]);
    strides.push_back(self.strides[dim]);
  }
  return viewOf(self, sizes, strides, self.storageOffset);
}

// Pieces of `lengths` along `dim`, one after another.
std::vector<TensorMeta> piecesOf(const TensorMeta &self, int64_t dim,
                                 const std::vector<int64_t> &lengths) {
  std::vector<TensorMeta> pieces;
  int64_t start = 0;
  for (int64_t length : lengths) {
    pieces.push_back(sliceOf(self, dim, start, length));
    start += length;
  }
  return pieces;
}

int64_t splittableDim(const MetaArgs &args, const TensorMeta &self,
                      int64_t dim) {
  if (self.dim() == 0)
    fail(args, "expects at least a 1-dimensional tensor");
  return wrapDim(dim, self.dim());
}

std::vector<TensorMeta> splitBySize(const MetaArgs &args,
                                    const TensorMeta &self, int64_t splitSize,
                                    int64_t dim) {
  dim = splittableDim(args, self, dim);
  int64_t size = self.sizes[dim];
  if (splitSize < 0)
    fail(args, "split expects split_size be non-negative, but got split_size=" +
                   std::to_string(splitSize));
  if (splitSize == 0 && size != 0)
    fail(args, "split_size can only be 0 if dimension size is 0, but got "
               "dimension size of " +
                   std::to_string(size));
  int64_t count =
      splitSize == 0 ? 1
                     : std::max<int64_t>((size + splitSize - 1) / splitSize, 1);
  std::vector<int64_t> lengths(count, splitSize);
  lengths.back() = splitSize - (splitSize * count - size);
  return piecesOf(self, dim, lengths);
}

// --- The meta functions, one per family ---

std::vector<TensorMeta> view(const MetaArgs &args) {
  return one(viewAs(args, args.tensor(0), args.intList(1)));
}

std::vector<TensorMeta> reshape(const MetaArgs &args) {
  return one(reshapeAs(args, args.tensor(0), args.intList(1)));
}

// as_strided and _reshape_alias: the caller's sizes and strides.
std::vector<TensorMeta> asStrided(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  Shape sizes = args.intList(1), strides = args.intList(2);
  if (sizes.size() != strides.size())
    fail(args, "mismatch in length of strides and shape");
  for (int64_t stride : strides)
    if (stride < 0)
      fail(args, "Negative strides are not supported at the moment, got "
                 "strides: " +
                     shapeToString(strides));
  meta::checkSizesNonNegative(args, sizes);
  std::optional<int64_t> offset =
      args.size() > 3 ? args.optionalInteger(3) : std::nullopt;
  if (offset && *offset < 0)
    fail(args, "Tensor: invalid storage offset " + std::to_string(*offset));
  return one(viewOf(self, sizes, strides, offset.value_or(self.storageOffset)));
}

std::vector<TensorMeta> permute(const MetaArgs &args) {
  return one(permuteOf(args, args.tensor(0), args.intList(1)));
}

std::vector<TensorMeta> transpose(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t dim0 = wrapDim(args.integer(1), self.dim());
  int64_t dim1 = wrapDim(args.integer(2), self.dim());
  TensorMeta result = self;
  if (self.dim() > 0) {
    std::swap(result.sizes[dim0], result.sizes[dim1]);
    std::swap(result.strides[dim0], result.strides[dim1]);
  }
  return one(result);
}

std::vector<TensorMeta> matrixTranspose(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (self.dim() > 2)
    fail(args, "t() expects a tensor with <= 2 dimensions, but self is " +
                   std::to_string(self.dim()) + "D");
  TensorMeta result = self;
  std::reverse(result.sizes.begin(), result.sizes.end());
  std::reverse(result.strides.begin(), result.strides.end());
  return one(result);
}

TensorMeta expandTo(const MetaArgs &args, const TensorMeta &self,
                    const Shape &target) {
  int64_t ndim = static_cast<int64_t>(target.size());
  if (ndim < self.dim())
    fail(args, "the number of sizes provided (" + std::to_string(ndim) +
                   ") must be greater or equal to the number of dimensions "
                   "in the tensor (" +
                   std::to_string(self.dim()) + ")");
  Shape sizes(ndim), strides(ndim);
  for (int64_t i = ndim - 1; i >= 0; --i) {
    int64_t dim = i - (ndim - self.dim());
    int64_t size = dim >= 0 ? self.sizes[dim] : 1;
    // New leading dimensions are broadcast (stride 0).
    int64_t stride = dim >= 0 ? self.strides[dim] : 0;
    int64_t wanted = target[i];
    if (wanted == -1) {
      if (dim < 0)
        fail(args, "The expanded size of the tensor (-1) isn't allowed in a "
                   "leading, non-existing dimension " +
                       std::to_string(i));
      wanted = size;
    }
    if (wanted < 0)
      fail(args, "invalid expanded size " + std::to_string(wanted));
    if (size != wanted) {
      if (size != 1)
        fail(args,
             "The expanded size of the tensor (" + std::to_string(wanted) +
                 ") must match the existing size (" + std::to_string(size) +
                 ") at non-singleton dimension " + std::to_string(i) +
                 ".  Target sizes: " + shapeToString(target) +
                 ".  Tensor sizes: " + shapeToString(self.sizes));
      stride = 0;
    }
    sizes[i] = wanted;
    strides[i] = stride;
  }
  return viewOf(self, sizes, strides, self.storageOffset);
}

std::vector<TensorMeta> expand(const MetaArgs &args) {
  return one(expandTo(args, args.tensor(0), args.intList(1)));
}

std::vector<TensorMeta> expandAs(const MetaArgs &args) {
  return one(expandTo(args, args.tensor(0), args.tensor(1).sizes));
}

// squeeze (all size-1 dims), squeeze.dim and squeeze.dims.
std::vector<TensorMeta> squeeze(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  std::vector<int64_t> dims;
  if (args.size() == 1) {
    for (int64_t d = 0; d < self.dim(); ++d)
      dims.push_back(d);
  } else {
    dims = meta::wrapDims(args.intList(1), self.dim());
  }
  Shape sizes, strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    bool drop = self.sizes[d] == 1 &&
                std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!drop) {
      sizes.push_back(self.sizes[d]);
      strides.push_back(self.strides[d]);
    }
  }
  return one(viewOf(self, sizes, strides, self.storageOffset));
}

std::vector<TensorMeta> unsqueeze(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t dim = wrapDim(args.integer(1), self.dim() + 1);
  Shape sizes = self.sizes, strides = self.strides;
  int64_t stride = dim >= self.dim() ? 1 : sizes[dim] * strides[dim];
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return one(viewOf(self, sizes, strides, self.storageOffset));
}

std::vector<TensorMeta> slice(const MetaArgs &args) {
  return one(meta::slicedView(args, args.tensor(0), 1));
}

std::vector<TensorMeta> select(const MetaArgs &args) {
  return one(meta::selectedView(args, args.tensor(0), args.integer(1),
                                args.integer(2)));
}

std::vector<TensorMeta> unbind(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t dim = splittableDim(args, self, args.integer(1));
  std::vector<TensorMeta> results;
  for (int64_t i = 0; i < self.sizes[dim]; ++i)
    results.push_back(meta::selectOf(self, dim, i));
  return results;
}

std::vector<TensorMeta> split(const MetaArgs &args) {
  return splitBySize(args, args.tensor(0), args.integer(1), args.integer(2));
}

std::vector<TensorMeta> splitWithSizes(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t dim = splittableDim(args, self, args.integer(2));
  std::vector<int64_t> lengths = args.intList(1);
  int64_t total = 0;
  for (int64_t length : lengths) {
    if (length < 0)
      fail(args, "split_with_sizes expects split_sizes have only non-negative "
                 "entries, but got split_sizes=" +
                     shapeToString(lengths));
    total += length;
  }
  if (total != self.sizes[dim])
    fail(args, "split_with_sizes expects split_sizes to sum exactly to " +
                   std::to_string(self.sizes[dim]) +
                   " (input tensor's size at dimension " + std::to_string(dim) +
                   "), but got split_sizes=" + shapeToString(lengths));
  return piecesOf(self, dim, lengths);
}

std::vector<TensorMeta> chunk(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t chunks = args.integer(1);
  if (chunks <= 0)
    fail(args, "chunk expects `chunks` to be greater than 0, got: " +
                   std::to_string(chunks));
  int64_t dim = splittableDim(args, self, args.integer(2));
  int64_t size = self.sizes[dim];
  int64_t splitSize = (size + chunks - 1) / chunks;
  // An empty dimension still gives `chunks` (empty) pieces.
  if (splitSize == 0 && size == 0)
    return piecesOf(self, dim, std::vector<int64_t>(chunks, 0));
  return splitBySize(args, self, splitSize, dim);
}

std::vector<TensorMeta> narrow(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (self.dim() == 0)
    fail(args, "narrow() cannot be applied to a 0-dim tensor.");
  int64_t dim = wrapDim(args.integer(1), self.dim());
  int64_t start = args.integer(2), length = args.integer(3);
  int64_t size = self.sizes[dim];
  if (length < 0)
    fail(args, "narrow(): length must be non-negative.");
  if (start < -size || start > size)
    fail(args, "start out of range (expected to be in range of [" +
                   std::to_string(-size) + ", " + std::to_string(size) +
                   "], but got " + std::to_string(start) + ")");
  if (start < 0)
    start += size;
  if (start > size - length)
    fail(args, "start (" + std::to_string(start) + ") + length (" +
                   std::to_string(length) + ") exceeds dimension size (" +
                   std::to_string(size) + ").");
  return one(sliceOf(self, dim, start, length));
}

std::vector<TensorMeta> contiguous(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  std::optional<MemoryFormat> format = args.optionalMemoryFormat(1);
  if (format == MemoryFormat::Preserve)
    fail(args, "preserve memory format is unsupported by the contiguous "
               "operator");
  MemoryFormat wanted = format.value_or(MemoryFormat::Contiguous);
  if (meta::isContiguousIn(self, wanted))
    return one(self);
  return one(meta::emptyLike(self, wanted));
}

std::vector<TensorMeta> flatten(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (self.dim() == 0)
    return one(reshapeAs(args, self, {1}));
  int64_t start = wrapDim(args.integer(1), self.dim());
  int64_t end = wrapDim(args.integer(2), self.dim());
  if (start > end)
    fail(args, "flatten() has invalid args: start_dim cannot come after "
               "end_dim");
  if (start == end)
    return one(self);
  Shape sizes(self.sizes.begin(), self.sizes.begin() + start);
  sizes.push_back(
      numelOf(Shape(self.sizes.begin() + start, self.sizes.begin() + end + 1)));
  sizes.insert(sizes.end(), self.sizes.begin() + end + 1, self.sizes.end());
  return one(reshapeAs(args, self, sizes));
}

std::vector<TensorMeta> unflatten(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t dim = wrapDim(args.integer(1), self.dim());
  Shape pieces = args.intList(2);
  if (pieces.empty())
    fail(args, "unflatten: sizes must be non-empty");
  int64_t size = self.dim() == 0 ? 1 : self.sizes[dim];
  Shape inferred = inferSize(args, pieces, size);
  Shape sizes = self.sizes;
  if (self.dim() == 0)
    sizes = inferred;
  else {
    sizes.erase(sizes.begin() + dim);
    sizes.insert(sizes.begin() + dim, inferred.begin(), inferred.end());
  }
  return one(viewAs(args, self, sizes));
}

std::vector<TensorMeta> movedim(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  int64_t source = wrapDim(args.integer(1), self.dim());
  int64_t destination = wrapDim(args.integer(2), self.dim());
  std::vector<int64_t> order;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (d != source)
      order.push_back(d);
  if (self.dim() > 0)
    order.insert(order.begin() + destination, source);
  return one(permuteOf(args, self, order));
}

std::vector<TensorMeta> alias(const MetaArgs &args) {
  return one(args.tensor(0));
}

std::vector<TensorMeta> diagonal(const MetaArgs &args) {
  return one(meta::diagonalView(args, args.tensor(0), 1));
}

// A complex tensor as pairs of reals: one more dimension of size 2.
std::vector<TensorMeta> viewAsReal(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (!isComplex(self.dtype))
    fail(args, "view_as_real is only supported for complex tensors, got " +
                   std::string(dtypeName(self.dtype)));
  Shape sizes = self.sizes, strides = self.strides;
  for (int64_t &stride : strides)
    stride *= 2;
  sizes.push_back(2);
  strides.push_back(1);
  return one(TensorMeta(toRealType(self.dtype), sizes, strides,
                        self.storageOffset * 2, self.device));
}

// lift_fresh_copy: unlike clone, always a contiguous copy.
std::vector<TensorMeta> freshCopy(const MetaArgs &args) {
  return one(meta::emptyLike(args.tensor(0), MemoryFormat::Contiguous));
}

} // namespace

void registerViewOps(OpRegistry &registry) {
  const OpRegistration table[] = {
      {"aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)", view},
      {"aten::_unsafe_view(Tensor self, SymInt[] size) -> Tensor", view},
      {"aten::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)", reshape},
      {"aten::_reshape_alias(Tensor(a) self, SymInt[] size, SymInt[] stride) "
       "-> Tensor(a)",
       asStrided},
      {"aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, "
       "SymInt? storage_offset=None) -> Tensor(a)",
       asStrided},
      {"aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)", permute},
      {"aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
       transpose},
      {"aten::t(Tensor(a) self) -> Tensor(a)", matrixTranspose},
      {"aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) "
       "-> Tensor(a)",
       expand},
      {"aten::expand_as(Tensor(a) self, Tensor other) -> Tensor(a)", expandAs},
      {"aten::squeeze(Tensor(a) self) -> Tensor(a)", squeeze},
      {"aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)", squeeze},
      {"aten::squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)", squeeze},
      {"aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)", unsqueeze},
      {"aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, "
       "SymInt? end=None, SymInt step=1) -> Tensor(a)",
       slice},
      {"aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
       select},
      {"aten::unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]",
       unbind},
      {"aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) "
       "-> Tensor(a)[]",
       split},
      {"aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int "
       "dim=0) -> Tensor(a)[]",
       splitWithSizes},
      {"aten::chunk(Tensor(a -> *) self, int chunks, int dim=0) -> "
       "Tensor(a)[]",
       chunk},
      {"aten::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> "
       "Tensor(a)",
       narrow},
      {"aten::contiguous(Tensor(a) self, *, MemoryFormat memory_format=0) -> "
       "Tensor(a)",
       contiguous},
      {"aten::flatten.using_ints(Tensor(a) self, int start_dim=0, int "
       "end_dim=-1) -> Tensor(a)",
       flatten},
      {"aten::unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> "
       "Tensor(a)",
       unflatten},
      {"aten::movedim.int(Tensor(a) self, int source, int destination) -> "
       "Tensor(a)",
       movedim},
      {"aten::alias(Tensor(a) self) -> Tensor(a)", alias},
      {"aten::detach(Tensor(a) self) -> Tensor(a)", alias},
      {"aten::diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) "
       "-> Tensor(a)",
       diagonal},
      {"aten::view_as_real(Tensor(a) self) -> Tensor(a)", viewAsReal},
      {"aten::lift_fresh_copy(Tensor self) -> Tensor", freshCopy},
  };
  for (const OpRegistration &registration : table)
    registry.add(registration);
}

} // namespace kiln
