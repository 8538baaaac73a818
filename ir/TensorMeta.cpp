// What kiln knows about a tensor without its data.
// Depends on ir/DType.h and ir/SymbolicSize.h.
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

bool SymbolicLayout::isSymbolic() const {
  auto symbolic = [](SymSize expr) { return size::isSymbolic(expr); };
  return std::any_of(sizes.begin(), sizes.end(), symbolic) ||
         std::any_of(strides.begin(), strides.end(), symbolic) ||
         symbolic(storageOffset);
}

SymSize TensorMeta::symSize(int64_t dim) const {
  return symbolic ? symbolic->sizes.at(dim) : size::constant(sizes.at(dim));
}

SymSize TensorMeta::symStride(int64_t dim) const {
  return symbolic ? symbolic->strides.at(dim) : size::constant(strides.at(dim));
}

TensorMeta TensorMeta::specialized(const std::vector<int64_t> &symbols) const {
  TensorMeta result = *this;
  result.symbolic = nullptr;
  if (!symbolic)
    return result;
  for (size_t d = 0; d < sizes.size(); ++d) {
    result.sizes[d] = size::evaluate(symbolic->sizes[d], symbols);
    result.strides[d] = size::evaluate(symbolic->strides[d], symbols);
  }
  result.storageOffset = size::evaluate(symbolic->storageOffset, symbols);
  return result;
}

bool TensorMeta::operator==(const TensorMeta &other) const {
  bool sameSymbolic =
      symbolic == other.symbolic ||
      (symbolic && other.symbolic && *symbolic == *other.symbolic) ||
      (!isSymbolic() && !other.isSymbolic());
  return dtype == other.dtype && device == other.device &&
         sizes == other.sizes && strides == other.strides &&
         storageOffset == other.storageOffset && sameSymbolic;
}

namespace {

std::string symbolicToString(const std::vector<SymSize> &exprs) {
  std::string text = "[";
  for (size_t i = 0; i < exprs.size(); ++i)
    text += (i ? ", " : "") + exprs[i]->str();
  return text + "]";
}

} // namespace

std::string TensorMeta::str() const {
  if (isSymbolic()) {
    std::string text =
        std::string(dtypeShortName(dtype)) + symbolicToString(symbolic->sizes);
    std::vector<SymSize> contiguous(sizes.size());
    SymSize running = size::constant(1);
    for (size_t i = sizes.size(); i-- > 0;) {
      contiguous[i] = running;
      running = size::mul(running, symbolic->sizes[i]);
    }
    bool offset = symbolic->storageOffset != size::constant(0);
    if (symbolic->strides != contiguous || offset) {
      text += "{strides=" + symbolicToString(symbolic->strides);
      if (offset)
        text += ", offset=" + symbolic->storageOffset->str();
      text += "}";
    }
    if (device.type != DeviceType::CPU)
      text += "@" + device.str();
    return text;
  }
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
