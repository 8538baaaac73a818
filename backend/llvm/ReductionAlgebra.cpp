// The reduction algebra as LLVM IR: NaN-propagating max/min, first-index
// argmax/argmin ties. Depends on backend/llvm/ReductionAlgebra.h, ir/, LLVM.
#include "backend/llvm/ReductionAlgebra.h"

#include "ir/Error.h"

#include <limits>

namespace kiln::backend {

using loop::ReduceOp;

ReductionAlgebra::ReductionAlgebra(LlvmTypes &types)
    : types_(types), builder_(types.builder()) {}

bool isFloatSum(const loop::Reduction &reduction) {
  return reduction.op == ReduceOp::Sum &&
         isFloatingPoint(reduction.value->dtype());
}

// The dtype a reduction accumulates in.
DType accumulatorDType(const loop::Reduction &reduction) {
  if (reduction.op == ReduceOp::Any || reduction.op == ReduceOp::All)
    return DType::Bool;
  return reduction.value->dtype();
}

llvm::Value *ReductionAlgebra::identity(ReduceOp op, DType dtype, int lanes) {
  llvm::Type *type = types_.withLanes(types_.computeType(dtype), lanes);
  bool isFloat = isFloatingPoint(dtype);
  auto integerLimit = [&](bool maximum) -> llvm::Constant * {
    unsigned bits = type->getScalarSizeInBits();
    llvm::APInt value = isUnsignedType(dtype)
                            ? (maximum ? llvm::APInt::getMaxValue(bits)
                                       : llvm::APInt::getMinValue(bits))
                            : (maximum ? llvm::APInt::getSignedMaxValue(bits)
                                       : llvm::APInt::getSignedMinValue(bits));
    return llvm::ConstantInt::get(type, value);
  };
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Any:
    return llvm::Constant::getNullValue(type);
  case ReduceOp::Prod:
  case ReduceOp::All:
    return isFloat ? llvm::ConstantFP::get(type, 1.0)
                   : llvm::ConstantInt::get(type, 1);
  case ReduceOp::Max:
  case ReduceOp::ArgMax:
    return isFloat ? llvm::ConstantFP::getInfinity(type, true)
                   : integerLimit(false);
  case ReduceOp::Min:
  case ReduceOp::ArgMin:
    return isFloat ? llvm::ConstantFP::getInfinity(type, false)
                   : integerLimit(true);
  }
  throw Error("loop IR: unknown reduction");
}

llvm::Value *ReductionAlgebra::ofOneElement(ReduceOp op, DType dtype,
                                            llvm::Value *value, int lanes) {
  if (op == ReduceOp::Sum && isFloatingPoint(dtype))
    return builder_.CreateFAdd(identity(op, dtype, lanes), value);
  return value;
}

llvm::Value *ReductionAlgebra::combine(ReduceOp op, DType dtype, llvm::Value *a,
                                       llvm::Value *b) {
  bool isFloat = isFloatingPoint(dtype);
  bool isBool = dtype == DType::Bool;
  switch (op) {
  case ReduceOp::Sum:
    return isFloat  ? builder_.CreateFAdd(a, b)
           : isBool ? builder_.CreateOr(a, b)
                    : builder_.CreateAdd(a, b);
  case ReduceOp::Prod:
    return isFloat  ? builder_.CreateFMul(a, b)
           : isBool ? builder_.CreateAnd(a, b)
                    : builder_.CreateMul(a, b);
  case ReduceOp::Max:
  case ReduceOp::Min: {
    bool maximum = op == ReduceOp::Max;
    if (isFloat) // NaN wins: keep `a` when it is NaN or beyond `b`.
      return builder_.CreateSelect(
          builder_.CreateOr(maximum ? builder_.CreateFCmpOGT(a, b)
                                    : builder_.CreateFCmpOLT(a, b),
                            builder_.CreateFCmpUNO(a, a)),
          a, b);
    llvm::Intrinsic::ID id =
        isUnsignedType(dtype)
            ? (maximum ? llvm::Intrinsic::umax : llvm::Intrinsic::umin)
            : (maximum ? llvm::Intrinsic::smax : llvm::Intrinsic::smin);
    return types_.callIntrinsic(id, {a, b});
  }
  case ReduceOp::Any:
    return builder_.CreateOr(a, b);
  case ReduceOp::All:
    return builder_.CreateAnd(a, b);
  default:
    throw Error("loop IR: arg reductions combine through combineArg");
  }
}

std::pair<llvm::Value *, llvm::Value *>
ReductionAlgebra::compensatedAdd(llvm::Value *total, llvm::Value *compensation,
                                 llvm::Value *addend) {
  llvm::Value *corrected = builder_.CreateFSub(addend, compensation);
  llvm::Value *sum = builder_.CreateFAdd(total, corrected);
  llvm::Value *error =
      builder_.CreateFSub(builder_.CreateFSub(sum, total), corrected);
  llvm::Value *finite = builder_.CreateFCmpOLT(
      types_.callIntrinsic(llvm::Intrinsic::fabs, {sum}),
      types_.floatLike(sum, std::numeric_limits<double>::infinity()));
  return {sum,
          builder_.CreateSelect(finite, error,
                                llvm::Constant::getNullValue(sum->getType()))};
}

std::pair<llvm::Value *, llvm::Value *>
ReductionAlgebra::combineArg(ReduceOp op, DType dtype, llvm::Value *valueA,
                             llvm::Value *indexA, llvm::Value *valueB,
                             llvm::Value *indexB) {
  // B wins when it is beyond A, or equal to A (both NaN counts as equal) at
  // an earlier position; a NaN is beyond everything but NaN.
  bool maximum = op == ReduceOp::ArgMax;
  llvm::Value *earlier = builder_.CreateICmpSLT(indexB, indexA);
  llvm::Value *takeB;
  if (isFloatingPoint(dtype)) {
    llvm::Value *nanA = builder_.CreateFCmpUNO(valueA, valueA);
    llvm::Value *nanB = builder_.CreateFCmpUNO(valueB, valueB);
    llvm::Value *beyond = maximum ? builder_.CreateFCmpOGT(valueB, valueA)
                                  : builder_.CreateFCmpOLT(valueB, valueA);
    llvm::Value *equal = builder_.CreateOr(
        builder_.CreateFCmpOEQ(valueB, valueA), builder_.CreateAnd(nanA, nanB));
    llvm::Value *notNanA = builder_.CreateNot(nanA);
    takeB = builder_.CreateOr(
        builder_.CreateOr(builder_.CreateAnd(nanB, notNanA),
                          builder_.CreateAnd(notNanA, beyond)),
        builder_.CreateAnd(equal, earlier));
  } else {
    bool isUnsigned = isUnsignedType(dtype);
    llvm::Value *beyond =
        maximum ? (isUnsigned ? builder_.CreateICmpUGT(valueB, valueA)
                              : builder_.CreateICmpSGT(valueB, valueA))
                : (isUnsigned ? builder_.CreateICmpULT(valueB, valueA)
                              : builder_.CreateICmpSLT(valueB, valueA));
    takeB = builder_.CreateOr(
        beyond,
        builder_.CreateAnd(builder_.CreateICmpEQ(valueB, valueA), earlier));
  }
  return {builder_.CreateSelect(takeB, valueB, valueA),
          builder_.CreateSelect(takeB, indexB, indexA)};
}

// Combines the upper half of a vector accumulator's lanes into the lower
// half until `lanes` remain.
std::pair<llvm::Value *, llvm::Value *>
ReductionAlgebra::narrowLanes(ReduceOp op, DType dtype, llvm::Value *value,
                              llvm::Value *position, int lanes) {
  bool isArg = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin;
  while (LlvmTypes::lanesOf(value) > lanes) {
    int half = LlvmTypes::lanesOf(value) / 2;
    std::vector<int> low, high;
    for (int lane = 0; lane < half; ++lane) {
      low.push_back(lane);
      high.push_back(half + lane);
    }
    auto part = [&](llvm::Value *whole, const std::vector<int> &mask) {
      return builder_.CreateShuffleVector(whole, mask);
    };
    if (isArg) {
      std::tie(value, position) =
          combineArg(op, dtype, part(value, low), part(position, low),
                     part(value, high), part(position, high));
    } else {
      value = combine(op, dtype, part(value, low), part(value, high));
    }
  }
  return {value, position};
}

} // namespace kiln::backend
