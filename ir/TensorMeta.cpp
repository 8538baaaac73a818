// What kiln knows about a tensor without its data.
// Depends on ir/DType.h only.
#include "ir/TensorMeta.h"

#include "ir/Error.h"

#include <algorithm>
#include <numeric>

namespace kiln {

std::string Device::str() const {
  std::string name = type == DeviceType::CPU    ? "cpu"
                     : type == DeviceType::CUDA ? "cuda"
                                                : "meta";
  if (index >= 0)
    name += ":" + std::to_string(index);
  return name;
}

Device Device::parse(const std::string &text) {
  std::string typeName = text;
  int index = -1;
  if (size_t colon = text.find(':'); colon != std::string::npos) {
    typeName = text.substr(0, colon);
    try {
      index = std::stoi(text.substr(colon + 1));
    } catch (const std::exception &) {
      throw Error("invalid device string '" + text + "'");
    }
  }
  if (typeName == "cpu")
    return {DeviceType::CPU, index};
  if (typeName == "cuda")
    return {DeviceType::CUDA, index};
  if (typeName == "meta")
    return {DeviceType::Meta, index};
  throw Error("unsupported device '" + text +
              "': kiln supports cpu, cuda and meta tensors");
}

Shape contiguousStrides(const Shape &sizes) {
  Shape strides(sizes.size());
  int64_t running = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = running;
    running *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t numelOf(const Shape &sizes) {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1},
                         std::multiplies<int64_t>());
}

std::string shapeToString(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

TensorMeta::TensorMeta(DType dtype, Shape sizes, Device device)
    : dtype(dtype), device(device), sizes(std::move(sizes)) {
  strides = contiguousStrides(this->sizes);
}

TensorMeta::TensorMeta(DType dtype, Shape sizes, Shape strides,
                       int64_t storageOffset, Device device)
    : dtype(dtype), device(device), sizes(std::move(sizes)),
      strides(std::move(strides)), storageOffset(storageOffset) {
  if (this->sizes.size() != this->strides.size())
    throw Error("tensor sizes " + shapeToString(this->sizes) + " and strides " +
                shapeToString(this->strides) + " differ in length");
}

bool TensorMeta::isContiguous() const {
  if (numel() == 0)
    return true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1)
      continue;
    if (strides[i] != expected)
      return false;
    expected *= sizes[i];
  }
  return true;
}

bool TensorMeta::isNonOverlappingAndDense() const {
  if (isContiguous())
    return true;
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (sizes[a] < 2)
      return false;
    if (sizes[b] < 2)
      return true;
    return strides[a] < strides[b];
  });
  int64_t expected = 1;
  for (size_t i : order) {
    if (sizes[i] == 1)
      continue;
    if (strides[i] != expected)
      return false;
    expected *= sizes[i];
  }
  return true;
}

bool TensorMeta::operator==(const TensorMeta &other) const {
  return dtype == other.dtype && device == other.device &&
         sizes == other.sizes && strides == other.strides &&
         storageOffset == other.storageOffset;
}

std::string TensorMeta::str() const {
  std::string text = std::string(dtypeShortName(dtype)) + shapeToString(sizes);
  if (strides != contiguousStrides(sizes) || storageOffset != 0) {
    text += "{strides=" + shapeToString(strides);
    if (storageOffset != 0)
      text += ", offset=" + std::to_string(storageOffset);
    text += "}";
  }
  if (device.type != DeviceType::CPU)
    text += "@" + device.str();
  return text;
}

} // namespace kiln
