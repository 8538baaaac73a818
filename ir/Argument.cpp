// The actual arguments of a graph node.
// Depends on ir/Argument.h, ir/Graph.h (for value names).
#include "ir/Argument.h"

#include "ir/Error.h"
#include "ir/Graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln {

std::string_view memoryFormatName(MemoryFormat format) {
  switch (format) {
  case MemoryFormat::Contiguous:
    return "contiguous_format";
  case MemoryFormat::Preserve:
    return "preserve_format";
  case MemoryFormat::ChannelsLast:
    return "channels_last";
  case MemoryFormat::ChannelsLast3d:
    return "channels_last_3d";
  }
  return "?";
}

std::string_view layoutName(Layout layout) {
  return layout == Layout::Strided ? "strided" : "sparse_coo";
}

std::string_view argumentKindName(Argument::Kind kind) {
  static constexpr std::string_view kNames[] = {
      "None",   "bool",          "int",    "float",   "str",
      "int[]",  "float[]",       "bool[]", "dtype",   "device",
      "layout", "memory_format", "Tensor", "Tensor[]"};
  return kNames[static_cast<int>(kind)];
}

namespace {

[[noreturn]] void wrongKind(Argument::Kind actual, std::string_view wanted) {
  throw Error("expected an argument of type " + std::string(wanted) + ", got " +
              std::string(argumentKindName(actual)));
}

std::string formatDouble(double value) {
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  if (std::isnan(value))
    return "nan";
  // The shortest text that reads back as the same double, as Python's repr.
  // (printf, not iostreams: an extension built with a static libstdc++ must
  // not depend on the locale state of the process's own libstdc++.)
  char buffer[32];
  std::string text;
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    text = buffer;
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  // Keep Python's spelling of a float: "1.0", not "1".
  if (text.find_first_of(".eE") == std::string::npos)
    text += ".0";
  return text;
}

template <typename T, typename Format>
std::string formatList(const std::vector<T> &items, Format format) {
  std::string text = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i)
      text += ", ";
    text += format(items[i]);
  }
  return text + "]";
}

} // namespace

Argument Argument::symbolicInt(int64_t hint, SymSize expr) {
  Argument result(hint);
  if (size::isSymbolic(expr))
    result.symbolic_ = std::make_shared<std::vector<SymSize>>(1, expr);
  return result;
}

Argument Argument::symbolicIntList(std::vector<int64_t> hints,
                                   std::vector<SymSize> exprs) {
  if (hints.size() != exprs.size())
    throw Error("a symbolic int list needs one expression per element");
  bool symbolic = std::any_of(exprs.begin(), exprs.end(), size::isSymbolic);
  Argument result(std::move(hints));
  if (symbolic)
    result.symbolic_ = std::make_shared<std::vector<SymSize>>(std::move(exprs));
  return result;
}

const std::vector<SymSize> &Argument::symbolicInts() const {
  if (!symbolic_)
    throw Error("argument " + str() + " is not symbolic");
  return *symbolic_;
}

Argument Argument::specialized(const std::vector<int64_t> &symbols) const {
  if (!symbolic_)
    return *this;
  if (kind_ == Kind::Int)
    return Argument(size::evaluate(symbolic_->at(0), symbols));
  std::vector<int64_t> values;
  for (SymSize expr : *symbolic_)
    values.push_back(size::evaluate(expr, symbols));
  return Argument(std::move(values));
}

bool Argument::toBool() const {
  if (kind_ != Kind::Bool)
    wrongKind(kind_, "bool");
  return std::get<bool>(data_);
}

int64_t Argument::toInt() const {
  if (kind_ == Kind::Bool)
    return std::get<bool>(data_);
  if (kind_ != Kind::Int)
    wrongKind(kind_, "int");
  return std::get<int64_t>(data_);
}

double Argument::toDouble() const {
  if (kind_ == Kind::Double)
    return std::get<double>(data_);
  if (kind_ == Kind::Int)
    return static_cast<double>(std::get<int64_t>(data_));
  if (kind_ == Kind::Bool)
    return std::get<bool>(data_);
  wrongKind(kind_, "float");
}

const std::string &Argument::toString() const {
  if (kind_ != Kind::String)
    wrongKind(kind_, "str");
  return std::get<std::string>(data_);
}

std::vector<int64_t> Argument::toIntList() const {
  if (kind_ == Kind::Int)
    return {std::get<int64_t>(data_)};
  if (kind_ != Kind::IntList)
    wrongKind(kind_, "int[]");
  return std::get<std::vector<int64_t>>(data_);
}

std::vector<double> Argument::toDoubleList() const {
  if (kind_ == Kind::IntList) {
    const auto &ints = std::get<std::vector<int64_t>>(data_);
    return std::vector<double>(ints.begin(), ints.end());
  }
  if (kind_ != Kind::DoubleList)
    wrongKind(kind_, "float[]");
  return std::get<std::vector<double>>(data_);
}

const std::vector<bool> &Argument::toBoolList() const {
  if (kind_ != Kind::BoolList)
    wrongKind(kind_, "bool[]");
  return std::get<std::vector<bool>>(data_);
}

DType Argument::toDType() const {
  if (kind_ != Kind::DType)
    wrongKind(kind_, "dtype");
  return std::get<DType>(data_);
}

Device Argument::toDevice() const {
  if (kind_ != Kind::Device)
    wrongKind(kind_, "device");
  return std::get<Device>(data_);
}

Layout Argument::toLayout() const {
  if (kind_ != Kind::Layout)
    wrongKind(kind_, "layout");
  return std::get<Layout>(data_);
}

MemoryFormat Argument::toMemoryFormat() const {
  if (kind_ != Kind::MemoryFormat)
    wrongKind(kind_, "memory_format");
  return std::get<MemoryFormat>(data_);
}

Value *Argument::toTensor() const {
  if (kind_ != Kind::Tensor)
    wrongKind(kind_, "Tensor");
  return std::get<Value *>(data_);
}

const std::vector<Value *> &Argument::toTensorList() const {
  if (kind_ != Kind::TensorList)
    wrongKind(kind_, "Tensor[]");
  return std::get<std::vector<Value *>>(data_);
}

std::string Argument::str() const {
  switch (kind_) {
  case Kind::None:
    return "None";
  case Kind::Bool:
    return std::get<bool>(data_) ? "True" : "False";
  case Kind::Int:
    if (symbolic_)
      return symbolic_->at(0)->str();
    return std::to_string(std::get<int64_t>(data_));
  case Kind::Double:
    return formatDouble(std::get<double>(data_));
  case Kind::String:
    return "'" + std::get<std::string>(data_) + "'";
  case Kind::IntList:
    if (symbolic_)
      return formatList(*symbolic_, [](SymSize v) { return v->str(); });
    return formatList(std::get<std::vector<int64_t>>(data_),
                      [](int64_t v) { return std::to_string(v); });
  case Kind::DoubleList:
    return formatList(std::get<std::vector<double>>(data_), formatDouble);
  case Kind::BoolList:
    return formatList(std::get<std::vector<bool>>(data_),
                      [](bool v) { return std::string(v ? "True" : "False"); });
  case Kind::DType:
    return std::string(dtypeShortName(std::get<DType>(data_)));
  case Kind::Device:
    return std::get<Device>(data_).str();
  case Kind::Layout:
    return std::string(layoutName(std::get<Layout>(data_)));
  case Kind::MemoryFormat:
    return std::string(memoryFormatName(std::get<MemoryFormat>(data_)));
  case Kind::Tensor:
    return "%" + std::get<Value *>(data_)->name();
  case Kind::TensorList:
    return formatList(std::get<std::vector<Value *>>(data_), [](Value *v) {
      return v ? "%" + v->name() : std::string("None");
    });
  }
  return "?";
}

bool Argument::operator==(const Argument &other) const {
  bool sameSymbolic =
      symbolic_ == other.symbolic_ ||
      (symbolic_ && other.symbolic_ && *symbolic_ == *other.symbolic_);
  return kind_ == other.kind_ && data_ == other.data_ && sameSymbolic;
}

} // namespace kiln
