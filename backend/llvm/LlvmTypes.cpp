// kiln's dtypes as LLVM IR: compute and storage types, constants, rounding
// to half and bfloat16. Depends on backend/llvm/LlvmTypes.h, ir/, LLVM.
#include "backend/llvm/LlvmTypes.h"

#include "ir/Error.h"

#include <llvm/ADT/APFloat.h>

#include <cmath>
#include <cstring>

namespace kiln::backend {

using loop::Expr;

LlvmTypes::LlvmTypes(llvm::LLVMContext &context, std::string generator)
    : context_(context), builder_(context), generator_(std::move(generator)) {}

bool isUnsignedType(DType dtype) {
  return dtype == DType::UInt8 || dtype == DType::Bool;
}

// Bytes of the type a value of `dtype` is computed in.
int computeBytes(DType dtype) {
  if (dtype == DType::Float64 || dtype == DType::Int64)
    return 8;
  return 4;
}

float roundToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value))
    bits = (bits | 0x400000u) & 0xFFFF0000u;
  else
    bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

llvm::Type *LlvmTypes::computeType(DType dtype) {
  switch (dtype) {
  case DType::Bool:
    return builder_.getInt1Ty();
  case DType::UInt8:
  case DType::Int8:
    return builder_.getInt8Ty();
  case DType::Int16:
    return builder_.getInt16Ty();
  case DType::Int32:
    return builder_.getInt32Ty();
  case DType::Int64:
    return builder_.getInt64Ty();
  case DType::Float16:
  case DType::BFloat16:
  case DType::Float32:
    return builder_.getFloatTy();
  case DType::Float64:
    return builder_.getDoubleTy();
  default:
    throw Unsupported(generator_ + " does not support " +
                      std::string(dtypeName(dtype)) + " tensors");
  }
}

llvm::Type *LlvmTypes::storageType(DType dtype) {
  switch (dtype) {
  case DType::Bool:
    return builder_.getInt8Ty();
  case DType::Float16:
    return builder_.getHalfTy();
  case DType::BFloat16:
    return builder_.getInt16Ty();
  default:
    return computeType(dtype);
  }
}

llvm::Type *LlvmTypes::withLanes(llvm::Type *type, int lanes) {
  return lanes == 1 ? type : llvm::FixedVectorType::get(type, lanes);
}

int LlvmTypes::lanesOf(llvm::Value *value) {
  if (auto *type = llvm::dyn_cast<llvm::FixedVectorType>(value->getType()))
    return static_cast<int>(type->getNumElements());
  return 1;
}

llvm::Value *LlvmTypes::splat(llvm::Value *value, int lanes) {
  if (lanes == 1 || lanesOf(value) == lanes)
    return value;
  return builder_.CreateVectorSplat(lanes, value);
}

llvm::Value *LlvmTypes::integerLike(llvm::Value *like, int64_t value) {
  return llvm::ConstantInt::get(like->getType(), static_cast<uint64_t>(value),
                                true);
}

llvm::Value *LlvmTypes::floatLike(llvm::Value *like, double value) {
  return llvm::ConstantFP::get(like->getType(), value);
}

llvm::Value *LlvmTypes::laneOffsets(int lanes) {
  std::vector<llvm::Constant *> offsets;
  for (int lane = 0; lane < lanes; ++lane)
    offsets.push_back(builder_.getInt64(lane));
  return llvm::ConstantVector::get(offsets);
}

llvm::Value *LlvmTypes::constantOf(const Expr *expr) {
  DType dtype = expr->dtype();
  llvm::Type *type = computeType(dtype);
  if (!isFloatingPoint(dtype))
    return llvm::ConstantInt::get(type, static_cast<uint64_t>(expr->integer()),
                                  true);
  double value = expr->real();
  if (dtype == DType::Float16) {
    llvm::APFloat half(value);
    bool lost;
    half.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven,
                 &lost);
    half.convert(llvm::APFloat::IEEEsingle(),
                 llvm::APFloat::rmNearestTiesToEven, &lost);
    return llvm::ConstantFP::get(context_, half);
  }
  if (dtype == DType::BFloat16)
    value = roundToBFloat16(static_cast<float>(value));
  return llvm::ConstantFP::get(type, value);
}

llvm::Value *LlvmTypes::fromStorage(DType dtype, llvm::Value *value) {
  int lanes = lanesOf(value);
  switch (dtype) {
  case DType::Bool:
    return builder_.CreateICmpNE(value, integerLike(value, 0));
  case DType::Float16:
    return builder_.CreateFPExt(value, withLanes(builder_.getFloatTy(), lanes));
  case DType::BFloat16: {
    llvm::Value *wide =
        builder_.CreateZExt(value, withLanes(builder_.getInt32Ty(), lanes));
    wide = builder_.CreateShl(wide, integerLike(wide, 16));
    return builder_.CreateBitCast(wide,
                                  withLanes(builder_.getFloatTy(), lanes));
  }
  default:
    return value;
  }
}

llvm::Value *LlvmTypes::toStorage(DType dtype, llvm::Value *value) {
  int lanes = lanesOf(value);
  switch (dtype) {
  case DType::Bool:
    return builder_.CreateZExt(value, withLanes(builder_.getInt8Ty(), lanes));
  case DType::Float16:
    return builder_.CreateFPTrunc(value,
                                  withLanes(builder_.getHalfTy(), lanes));
  case DType::BFloat16: {
    llvm::Value *bits =
        builder_.CreateBitCast(value, withLanes(builder_.getInt32Ty(), lanes));
    bits = builder_.CreateLShr(bits, integerLike(bits, 16));
    return builder_.CreateTrunc(bits, withLanes(builder_.getInt16Ty(), lanes));
  }
  default:
    return value;
  }
}

// Rounds a float32 value to the nearest value of `dtype` (half or bfloat16),
// ties to even; others are returned as they are.
llvm::Value *LlvmTypes::roundTo(DType dtype, llvm::Value *value) {
  int lanes = lanesOf(value);
  if (dtype == DType::Float16)
    return builder_.CreateFPExt(
        builder_.CreateFPTrunc(value, withLanes(builder_.getHalfTy(), lanes)),
        withLanes(builder_.getFloatTy(), lanes));
  if (dtype != DType::BFloat16)
    return value;
  llvm::Value *bits =
      builder_.CreateBitCast(value, withLanes(builder_.getInt32Ty(), lanes));
  llvm::Value *lowestKept = builder_.CreateAnd(
      builder_.CreateLShr(bits, integerLike(bits, 16)), integerLike(bits, 1));
  llvm::Value *rounded = builder_.CreateAdd(
      builder_.CreateAdd(bits, integerLike(bits, 0x7FFF)), lowestKept);
  llvm::Value *quiet = builder_.CreateOr(bits, integerLike(bits, 0x400000));
  llvm::Value *isNan = builder_.CreateFCmpUNO(value, value);
  llvm::Value *result =
      builder_.CreateAnd(builder_.CreateSelect(isNan, quiet, rounded),
                         integerLike(bits, static_cast<int64_t>(0xFFFF0000u)));
  return builder_.CreateBitCast(result, value->getType());
}

llvm::Value *LlvmTypes::callIntrinsic(llvm::Intrinsic::ID id,
                                      std::vector<llvm::Value *> args) {
  return builder_.CreateIntrinsic(id, {args[0]->getType()}, args);
}

} // namespace kiln::backend
