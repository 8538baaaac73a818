// Tensor element types and PyTorch's type-promotion lattice.
// Depends on nothing in kiln.
#include "ir/DType.h"

#include "ir/Error.h"

#include <string>

namespace kiln {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::string_view shortName;
  int64_t itemSize;
};

constexpr DTypeInfo kDTypeInfo[kNumDTypes] = {
    {"bool", "b8", 1},     {"uint8", "u8", 1},      {"int8", "i8", 1},
    {"int16", "i16", 2},   {"int32", "i32", 4},     {"int64", "i64", 8},
    {"float16", "f16", 2}, {"bfloat16", "bf16", 2}, {"float32", "f32", 4},
    {"float64", "f64", 8}, {"complex64", "c64", 8}, {"complex128", "c128", 16},
};

const DTypeInfo &info(DType dtype) {
  return kDTypeInfo[static_cast<int>(dtype)];
}

} // namespace

std::string_view dtypeName(DType dtype) { return info(dtype).name; }
std::string_view dtypeShortName(DType dtype) { return info(dtype).shortName; }
int64_t itemSize(DType dtype) { return info(dtype).itemSize; }

std::optional<DType> dtypeFromName(std::string_view name) {
  if (name.substr(0, 6) == "torch.")
    name.remove_prefix(6);
  for (int i = 0; i < kNumDTypes; ++i)
    if (kDTypeInfo[i].name == name || kDTypeInfo[i].shortName == name)
      return static_cast<DType>(i);
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias kAliases[] = {
      {"float", DType::Float32},    {"double", DType::Float64},
      {"half", DType::Float16},     {"long", DType::Int64},
      {"int", DType::Int32},        {"short", DType::Int16},
      {"cfloat", DType::Complex64}, {"cdouble", DType::Complex128},
  };
  for (const Alias &alias : kAliases)
    if (alias.name == name)
      return alias.dtype;
  return std::nullopt;
}

bool isFloatingPoint(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 ||
         dtype == DType::Float32 || dtype == DType::Float64;
}

bool isComplex(DType dtype) {
  return dtype == DType::Complex64 || dtype == DType::Complex128;
}

bool isIntegral(DType dtype, bool includeBool) {
  switch (dtype) {
  case DType::Bool:
    return includeBool;
  case DType::UInt8:
  case DType::Int8:
  case DType::Int16:
  case DType::Int32:
  case DType::Int64:
    return true;
  default:
    return false;
  }
}

DType toRealType(DType dtype) {
  if (dtype == DType::Complex64)
    return DType::Float32;
  if (dtype == DType::Complex128)
    return DType::Float64;
  return dtype;
}

DType toComplexType(DType dtype) {
  switch (dtype) {
  case DType::Float64:
  case DType::Complex128:
    return DType::Complex128;
  case DType::Float16:
  case DType::BFloat16:
  case DType::Float32:
  case DType::Complex64:
    return DType::Complex64;
  default:
    throw Error("no complex type corresponds to " +
                std::string(dtypeName(dtype)));
  }
}

DType promoteTypes(DType a, DType b) {
  if (a == b)
    return a;
  if (isComplex(a) || isComplex(b)) {
    DType real = promoteTypes(toRealType(a), toRealType(b));
    return isFloatingPoint(real) ? toComplexType(real) : DType::Complex64;
  }
  bool aFloat = isFloatingPoint(a), bFloat = isFloatingPoint(b);
  if (aFloat && bFloat) {
    // Half and bfloat16 have no common 16-bit type: torch widens to float32.
    if ((a == DType::Float16 && b == DType::BFloat16) ||
        (a == DType::BFloat16 && b == DType::Float16))
      return DType::Float32;
    return itemSize(a) >= itemSize(b) ? a : b;
  }
  if (aFloat)
    return a;
  if (bFloat)
    return b;
  if (a == DType::Bool)
    return b;
  if (b == DType::Bool)
    return a;
  // uint8 with a signed type: the signed type must hold 0..255.
  if (a == DType::UInt8 || b == DType::UInt8) {
    DType other = a == DType::UInt8 ? b : a;
    return other == DType::Int8 ? DType::Int16 : other;
  }
  return itemSize(a) >= itemSize(b) ? a : b;
}

} // namespace kiln
