// What kiln knows about a tensor without its data: dtype, device, sizes,
// strides and storage offset, and which of them vary between calls.
// Depends on ir/DType.h and ir/SymbolicSize.h.
#pragma once

#include "ir/DType.h"
#include "ir/SymbolicSize.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

enum class DeviceType : uint8_t { CPU, CUDA, Meta };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = -1; // -1: the current device of that type

  bool operator==(const Device &other) const {
    return type == other.type && index == other.index;
  }
  bool operator!=(const Device &other) const { return !(*this == other); }
  /// "cpu", "cuda:0", as torch prints devices.
  std::string str() const;
  /// Parses torch's device strings ("cpu", "cuda", "cuda:1", "meta").
  static Device parse(const std::string &text);
};

using Shape = std::vector<int64_t>;

/// Row-major strides for `sizes` (size-0 and size-1 dimensions get the
/// strides torch gives them).
Shape contiguousStrides(const Shape &sizes);
int64_t numelOf(const Shape &sizes);
/// "[2, 3]".
std::string shapeToString(const Shape &shape);

/// The sizes, strides and offset of a tensor whose shape varies between
/// calls, as expressions over size symbols (constants where they do not
/// vary).
struct SymbolicLayout {
  std::vector<SymSize> sizes;
  std::vector<SymSize> strides;
  SymSize storageOffset = size::constant(0);

  /// Whether any of them mentions a symbol.
  bool isSymbolic() const;
  bool operator==(const SymbolicLayout &other) const {
    return sizes == other.sizes && strides == other.strides &&
           storageOffset == other.storageOffset;
  }
};

struct TensorMeta {
  DType dtype = DType::Float32;
  Device device;
  /// For a tensor with a symbolic layout: the values of the example call
  /// (hints), which compile-time decisions may use but code may not rely on.
  Shape sizes;
  Shape strides;
  int64_t storageOffset = 0;
  /// Null where the layout is the same on every call.
  std::shared_ptr<const SymbolicLayout> symbolic;

  TensorMeta() = default;
  /// A contiguous tensor.
  TensorMeta(DType dtype, Shape sizes, Device device = Device());
  TensorMeta(DType dtype, Shape sizes, Shape strides, int64_t storageOffset = 0,
             Device device = Device());

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  int64_t numel() const { return numelOf(sizes); }
  /// `Tensor.is_contiguous()`: strides of size-1 dimensions do not matter.
  bool isContiguous() const;
  /// No two elements share memory and there are no gaps, in some order.
  bool isNonOverlappingAndDense() const;
  /// Whether some size, stride or the offset varies between calls.
  bool isSymbolic() const { return symbolic && symbolic->isSymbolic(); }
  /// Size `dim` as an expression (a constant where it does not vary).
  SymSize symSize(int64_t dim) const;
  SymSize symStride(int64_t dim) const;
  /// This layout with every symbol given its value: a static meta.
  TensorMeta specialized(const std::vector<int64_t> &symbols) const;

  bool operator==(const TensorMeta &other) const;
  bool operator!=(const TensorMeta &other) const { return !(*this == other); }
  /// "f32[2, 3]" for contiguous tensors; strides and offset otherwise;
  /// "f32[s0, 3]" for a symbolic layout.
  std::string str() const;
};

} // namespace kiln
