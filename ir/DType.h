// Tensor element types and PyTorch's type-promotion lattice.
// Depends on nothing in kiln.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

/// The element types kiln knows. Names follow torch (`torch.float32` is
/// Float32, printed "f32").
enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Complex64,
  Complex128,
};

inline constexpr int kNumDTypes = 12;

/// "float32", as in `torch.float32`.
std::string_view dtypeName(DType dtype);
/// "f32": the short form the graph printer uses.
std::string_view dtypeShortName(DType dtype);
/// Accepts "float32" and "torch.float32" (and torch's aliases "float", "long",
/// "half", ...).
std::optional<DType> dtypeFromName(std::string_view name);

int64_t itemSize(DType dtype);
bool isFloatingPoint(DType dtype);
bool isComplex(DType dtype);
/// Integer types; bool counts only when `includeBool`.
bool isIntegral(DType dtype, bool includeBool);

/// `torch.promote_types(a, b)`.
DType promoteTypes(DType a, DType b);
/// The real type of a complex one (Complex64 -> Float32); others unchanged.
DType toRealType(DType dtype);
/// The complex type with this real type (Float32 -> Complex64).
DType toComplexType(DType dtype);

/// `torch.get_default_dtype()`: kiln follows torch's default of float32.
inline constexpr DType kDefaultFloatDType = DType::Float32;

} // namespace kiln
