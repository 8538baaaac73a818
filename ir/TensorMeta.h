// What kiln knows about a tensor without its data: dtype, device, sizes,
// strides and storage offset. Depends on ir/DType.h only.
#pragma once

#include "ir/DType.h"

#include <cstdint>
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

struct TensorMeta {
  DType dtype = DType::Float32;
  Device device;
  Shape sizes;
  Shape strides;
  int64_t storageOffset = 0;

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

  bool operator==(const TensorMeta &other) const;
  bool operator!=(const TensorMeta &other) const { return !(*this == other); }
  /// "f32[2, 3]" for contiguous tensors; strides and offset otherwise.
  std::string str() const;
};

} // namespace kiln
