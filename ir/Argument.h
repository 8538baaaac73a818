// The actual arguments of a graph node: tensors (graph values), Python
// scalars, lists, dtypes, devices and the other kinds ATen schemas name.
// Depends on ir/TensorMeta.h only.
#pragma once

#include "ir/TensorMeta.h"

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace kiln {

class Value;

enum class Layout : uint8_t { Strided, Sparse };
enum class MemoryFormat : uint8_t {
  Contiguous,
  Preserve,
  ChannelsLast,
  ChannelsLast3d
};

std::string_view memoryFormatName(MemoryFormat format);
std::string_view layoutName(Layout layout);

/// One argument of a node. Scalars keep the Python type they had (an int
/// promotes differently from a float). A tensor list may hold null entries
/// where the schema says `Tensor?[]`.
class Argument {
public:
  enum class Kind : uint8_t {
    None,
    Bool,
    Int,
    Double,
    String,
    IntList,
    DoubleList,
    BoolList,
    DType,
    Device,
    Layout,
    MemoryFormat,
    Tensor,
    TensorList,
  };

  Argument() = default; // None
  static Argument none() { return Argument(); }
  Argument(bool value) : kind_(Kind::Bool), data_(value) {}
  Argument(int64_t value) : kind_(Kind::Int), data_(value) {}
  Argument(int value) : Argument(static_cast<int64_t>(value)) {}
  Argument(double value) : kind_(Kind::Double), data_(value) {}
  Argument(std::string value) : kind_(Kind::String), data_(std::move(value)) {}
  Argument(const char *value) : Argument(std::string(value)) {}
  Argument(std::vector<int64_t> value)
      : kind_(Kind::IntList), data_(std::move(value)) {}
  Argument(std::vector<double> value)
      : kind_(Kind::DoubleList), data_(std::move(value)) {}
  Argument(std::vector<bool> value)
      : kind_(Kind::BoolList), data_(std::move(value)) {}
  Argument(kiln::DType value) : kind_(Kind::DType), data_(value) {}
  Argument(kiln::Device value) : kind_(Kind::Device), data_(value) {}
  Argument(kiln::Layout value) : kind_(Kind::Layout), data_(value) {}
  Argument(kiln::MemoryFormat value)
      : kind_(Kind::MemoryFormat), data_(value) {}
  Argument(Value *value) : kind_(Kind::Tensor), data_(value) {}
  Argument(std::vector<Value *> value)
      : kind_(Kind::TensorList), data_(std::move(value)) {}

  /// An Int or IntList whose values vary between calls: `hint` (the
  /// example call's values, what toInt/toIntList return) and an expression
  /// per element (constants for the elements that do not vary).
  static Argument symbolicInt(int64_t hint, SymSize expr);
  static Argument symbolicIntList(std::vector<int64_t> hints,
                                  std::vector<SymSize> exprs);

  Kind kind() const { return kind_; }
  /// An Int or IntList with a symbolic element.
  bool isSymbolic() const { return symbolic_ != nullptr; }
  /// The expressions of a symbolic Int (one) or IntList (one per element).
  const std::vector<SymSize> &symbolicInts() const;
  /// This argument with every symbol given its value.
  Argument specialized(const std::vector<int64_t> &symbols) const;
  bool isNone() const { return kind_ == Kind::None; }
  bool isTensor() const { return kind_ == Kind::Tensor; }
  bool isTensorList() const { return kind_ == Kind::TensorList; }
  /// Bool, Int or Double: what a schema's `Scalar` accepts.
  bool isScalar() const {
    return kind_ == Kind::Bool || kind_ == Kind::Int || kind_ == Kind::Double;
  }

  bool toBool() const;
  int64_t toInt() const;
  /// Int, Bool and Double all convert.
  double toDouble() const;
  const std::string &toString() const;
  /// An Int converts to a one-element list, as ATen's `int[1]` allows.
  std::vector<int64_t> toIntList() const;
  /// An IntList converts, element by element.
  std::vector<double> toDoubleList() const;
  const std::vector<bool> &toBoolList() const;
  kiln::DType toDType() const;
  kiln::Device toDevice() const;
  kiln::Layout toLayout() const;
  kiln::MemoryFormat toMemoryFormat() const;
  Value *toTensor() const;
  const std::vector<Value *> &toTensorList() const;

  /// The graph printer's rendering: `%x`, `[1, 2]`, `f32`, `True`.
  std::string str() const;
  bool operator==(const Argument &other) const;
  bool operator!=(const Argument &other) const { return !(*this == other); }

private:
  Kind kind_ = Kind::None;
  std::variant<std::monostate, bool, int64_t, double, std::string,
               std::vector<int64_t>, std::vector<double>, std::vector<bool>,
               kiln::DType, kiln::Device, kiln::Layout, kiln::MemoryFormat,
               Value *, std::vector<Value *>>
      data_;
  std::shared_ptr<const std::vector<SymSize>> symbolic_;
};

std::string_view argumentKindName(Argument::Kind kind);

} // namespace kiln
