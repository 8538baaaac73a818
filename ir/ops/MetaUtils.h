// Shared pieces of meta functions: dimension wrapping, broadcasting, type
// promotion with PyTorch's categories, and TensorIterator's output layout.
// Depends on ir/OpRegistry.h, ir/TensorMeta.h.
#pragma once

#include "ir/OpRegistry.h"
#include "ir/TensorMeta.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::meta {

/// Wraps a possibly negative dimension into [0, ndim); a 0-d tensor accepts
/// dims 0 and -1 (as torch's `wrap_scalar` does). Throws on out of range.
int64_t wrapDim(int64_t dim, int64_t ndim, bool wrapScalar = true);
/// Wraps a list of dims; throws on repeats.
std::vector<int64_t> wrapDims(const std::vector<int64_t> &dims, int64_t ndim);

/// Numpy-style broadcasting; throws naming both shapes when they do not.
Shape broadcastShapes(const Shape &a, const Shape &b);
Shape broadcastShapes(const std::vector<const Shape *> &shapes);

/// One operand of a type-promoting op: a tensor, or a Python scalar (which
/// participates in promotion only by its category).
struct PromotionOperand {
  DType dtype;
  int64_t dim;   // ignored for scalars
  bool isScalar; // a Python number, not a tensor
};

/// `torch.result_type` over tensors and Python scalars: dimensioned tensors
/// win over 0-d tensors, which win over scalars, unless a lower priority
/// operand is of a higher category (bool < integer < floating < complex).
DType resultType(const std::vector<PromotionOperand> &operands);
/// The dtype a Python scalar argument has: Bool, Int64 or Float64.
DType scalarDType(const Argument &scalar);
PromotionOperand operandOf(const TensorMeta &tensor);
PromotionOperand operandOf(const Argument &scalar);

/// The result of an elementwise op over `inputs` (TensorIterator's rules):
/// the broadcast shape, laid out in the memory order of the inputs, so a
/// transposed input gives a transposed result. Empty `inputs` is an error.
/// `onlyTensors`: `inputs` are all the op's operands (no Python number
/// among them), so TensorIterator's fast set-up applies where they share
/// the result's shape: contiguous (size-1 dimensions ignored), channels
/// last, or one set of dense strides is kept as it is.
TensorMeta elementwiseResult(const std::vector<const TensorMeta *> &inputs,
                             DType resultDType, bool onlyTensors = false);

/// The device of the result of an op over these tensors: 0-d CPU tensors may
/// mix with tensors of another device; other mixes are an error.
Device commonDevice(const std::vector<const TensorMeta *> &inputs);

/// A contiguous tensor of the given shape.
TensorMeta contiguousLike(DType dtype, Shape sizes, Device device);

/// The layout `empty_like(t)` (memory_format=preserve) gives: t's strides if
/// t is non-overlapping and dense, else strides in t's memory order.
Shape preservedStrides(const TensorMeta &tensor);

/// A set of dtypes: those a family of kernels implements.
class DTypeSet {
public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType dtype : dtypes)
      bits_ |= bitOf(dtype);
  }
  constexpr bool contains(DType dtype) const { return bits_ & bitOf(dtype); }
  constexpr DTypeSet operator|(DTypeSet other) const {
    return fromBits(bits_ | other.bits_);
  }
  constexpr DTypeSet operator-(DTypeSet other) const {
    return fromBits(bits_ & ~other.bits_);
  }
  /// "bool, integer and floating types", for error messages.
  std::string str() const;

private:
  static constexpr uint32_t bitOf(DType dtype) {
    return uint32_t{1} << static_cast<int>(dtype);
  }
  static constexpr DTypeSet fromBits(uint32_t bits) {
    DTypeSet set;
    set.bits_ = bits;
    return set;
  }
  uint32_t bits_ = 0;
};

inline constexpr DTypeSet kBoolTypes{DType::Bool};
inline constexpr DTypeSet kIntegerTypes{DType::UInt8, DType::Int8, DType::Int16,
                                        DType::Int32, DType::Int64};
inline constexpr DTypeSet kFloatingTypes{DType::Float16, DType::BFloat16,
                                         DType::Float32, DType::Float64};
inline constexpr DTypeSet kComplexTypes{DType::Complex64, DType::Complex128};
inline constexpr DTypeSet kAllTypes =
    kBoolTypes | kIntegerTypes | kFloatingTypes | kComplexTypes;
/// Everything but complex: what comparisons and most real math accept.
inline constexpr DTypeSet kRealTypes =
    kBoolTypes | kIntegerTypes | kFloatingTypes;

/// Throws "<op>: not implemented for <dtype> tensors" where torch's kernels
/// for the op have no version for `dtype` (torch's meta device may accept
/// such calls; its CPU and CUDA kernels refuse them).
void checkSupported(const MetaArgs &args, DType dtype, DTypeSet supported);

/// slice's [start, end) of a dim of `size`: None as 0 and size, negative
/// bounds counted from the end, both clamped into [0, size], end not
/// before start.
std::pair<int64_t, int64_t> sliceBounds(int64_t size,
                                        std::optional<int64_t> start,
                                        std::optional<int64_t> end);

/// The views slice, select and diagonal take of `self` (dims wrapped,
/// positions in range): sizes, strides and storage offset in self's
/// storage.
TensorMeta sliceOf(const TensorMeta &self, int64_t dim, int64_t start,
                   int64_t length, int64_t step = 1);
TensorMeta selectOf(const TensorMeta &self, int64_t dim, int64_t index);
TensorMeta diagonalOf(const TensorMeta &self, int64_t offset, int64_t dim1,
                      int64_t dim2);
/// The same from an op's arguments, with torch's checks: slice's dim,
/// start, end and step at `first` on; select's dim and index; diagonal's
/// offset, dim1 and dim2.
TensorMeta slicedView(const MetaArgs &args, const TensorMeta &self,
                      size_t first);
TensorMeta selectedView(const MetaArgs &args, const TensorMeta &self,
                        int64_t dim, int64_t index);
TensorMeta diagonalView(const MetaArgs &args, const TensorMeta &self,
                        size_t first);
/// The view of `result` that slice_scatter, select_scatter and
/// diagonal_scatter (self, src, then the view's arguments) write src into.
TensorMeta sliceScatterView(const MetaArgs &args, const TensorMeta &result);
TensorMeta selectScatterView(const MetaArgs &args, const TensorMeta &result);
TensorMeta diagonalScatterView(const MetaArgs &args, const TensorMeta &result);
/// Whether some element of the view (`sizes`, `strides`) is another's too
/// (an expand): each stride, smallest first, must exceed the farthest the
/// smaller ones reach. torch refuses writes to such a view.
bool overlapsItself(const Shape &sizes, const Shape &strides);

/// The dims a reduction reduces: `dims` wrapped, or every dim where it is
/// None or empty (torch's reading of `dim=None` and `dim=[]`).
std::vector<int64_t>
reductionDims(const std::optional<std::vector<int64_t>> &dims, int64_t ndim);
/// The shape after reducing `dims` of `sizes`: removed, or kept as size 1
/// with `keepdim`.
Shape reducedShape(const Shape &sizes, const std::vector<int64_t> &dims,
                   bool keepdim);

/// Where advanced indexing (aten::index.Tensor) puts its dims: self's dims
/// that have an index tensor (`present`, one flag per given index), the
/// others in order, and the result dim the broadcast index shape starts at:
/// the first indexed dim where they are adjacent, else 0 (numpy's rule).
struct IndexedDims {
  std::vector<int64_t> indexed, others;
  int64_t insertAt = 0;
};
IndexedDims indexedDims(const std::vector<bool> &present, int64_t rank);

/// Throws Error with "<op>: <message>" from inside a meta function.
[[noreturn]] void fail(const MetaArgs &args, const std::string &message);

} // namespace kiln::meta

// --- Layouts of views, copies and allocations (view, tensor and linear
// algebra ops) ---
namespace kiln::meta {

/// The strides `view` gives a tensor of `oldSizes`/`oldStrides` reshaped to
/// `newSizes` without copying (torch's computeStride), or nullopt where some
/// new dimension would span two non-contiguous chunks of the old layout.
std::optional<Shape> viewStrides(const Shape &oldSizes, const Shape &oldStrides,
                                 const Shape &newSizes);

/// Strides of a dense tensor in `format`: row-major, channels_last (4-d)
/// or channels_last_3d (5-d). Preserve is not a layout here; throws for it
/// and for a channels-last format of the wrong rank.
Shape stridesForFormat(const Shape &sizes, MemoryFormat format);

/// Whether `tensor` is contiguous in `format` (`Tensor.is_contiguous`).
bool isContiguousIn(const TensorMeta &tensor, MemoryFormat format);

/// `Tensor.suggest_memory_format()`: channels_last(_3d) for 4-d (5-d)
/// tensors whose strides order the channels innermost, else contiguous.
MemoryFormat suggestMemoryFormat(const TensorMeta &tensor);

/// The tensor `empty_like(tensor, memory_format=format)` allocates, with
/// the given dtype and device: Preserve (or none) keeps a dense tensor's
/// strides and gives others dense strides in their memory order.
TensorMeta emptyLike(const TensorMeta &tensor,
                     std::optional<MemoryFormat> format, DType dtype,
                     Device device);
TensorMeta emptyLike(const TensorMeta &tensor,
                     std::optional<MemoryFormat> format = std::nullopt);

/// A tensor with the same dtype, device and storage as `base` (a view).
TensorMeta viewOf(const TensorMeta &base, Shape sizes, Shape strides,
                  int64_t storageOffset);

/// Checks that every size is non-negative ("Trying to create tensor with
/// negative dimension").
void checkSizesNonNegative(const MetaArgs &args, const Shape &sizes);

} // namespace kiln::meta
