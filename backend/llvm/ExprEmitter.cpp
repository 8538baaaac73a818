// Emits loop-IR expressions as LLVM IR for any LLVM target.
// Depends on backend/llvm/ExprEmitter.h, backend/llvm/MathFunctionName.h,
// ir/, LLVM.
#include "backend/llvm/ExprEmitter.h"

#include "backend/llvm/MathFunctionName.h"
#include "ir/Error.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <cmath>

namespace kiln::backend {

using loop::BinaryOp;
using loop::Expr;
using loop::ExprKind;
using loop::UnaryOp;

ExprEmitter::ExprEmitter(llvm::Module &module, const loop::Program &program,
                         std::string generator)
    : LlvmTypes(module.getContext(), std::move(generator)), module_(module),
      program_(program) {}

ExprEmitter::~ExprEmitter() = default;

llvm::Value *ExprEmitter::sizeValue(int64_t size) {
  return builder_.getInt64(size);
}

llvm::Value *ExprEmitter::sizeValue(SymSize size) {
  const std::vector<SymSize> &operands = size->operands();
  switch (size->kind()) {
  case SizeKind::Constant:
    return sizeValue(size->value());
  case SizeKind::Symbol:
    return symbolValue(size->value());
  case SizeKind::Add:
  case SizeKind::Mul: {
    llvm::Value *value = sizeValue(operands[0]);
    for (size_t i = 1; i < operands.size(); ++i)
      value = size->kind() == SizeKind::Add
                  ? builder_.CreateAdd(value, sizeValue(operands[i]))
                  : builder_.CreateMul(value, sizeValue(operands[i]));
    return value;
  }
  case SizeKind::FloorDiv:
  case SizeKind::Mod:
  case SizeKind::Max: {
    BinaryOp op = size->kind() == SizeKind::FloorDiv ? BinaryOp::FloorDiv
                  : size->kind() == SizeKind::Mod    ? BinaryOp::Mod
                                                     : BinaryOp::Max;
    return emitBinary(op, sizeValue(operands[0]), sizeValue(operands[1]),
                      DType::Int64);
  }
  }
  throw Error("loop IR: unknown size expression " + size->str());
}

llvm::Value *ExprEmitter::symbolValue(int64_t number) {
  throw Unsupported(generator() +
                    " does not compile sizes that vary "
                    "between calls (symbol s" +
                    std::to_string(number) + ")");
}

void ExprEmitter::countedLoop(llvm::Value *start, llvm::Value *end,
                              int64_t step, LoopBody body) {
  emitCountedLoop(builder_, start, end, step, [&](llvm::Value *index) {
    scopes_.emplace_back();
    body(index);
    scopes_.pop_back();
  });
}

llvm::Value *ExprEmitter::reuse(const Expr *, bool) { return nullptr; }

void ExprEmitter::computed(const Expr *, llvm::Value *) {}

namespace {

// Whether `value` is a constant of at least `bound`, also through a cast
// (torch.clamp's bound is a float64 scalar cast to the tensor's type).
bool constantAtLeast(const Expr *value, double bound) {
  if (value->kind() == ExprKind::Cast)
    value = value->operand(0);
  return value->isConstant() && value->real() >= bound;
}

// Whether `value` is at least `bound` or NaN: a maximum with a constant of
// at least `bound` (torch.clamp), a select-shaped clamp (GELU's exponent),
// or such a constant.
bool clampedFromBelow(const Expr *value, double bound) {
  if (value->kind() == ExprKind::Binary && value->binaryOp() == BinaryOp::Max)
    return constantAtLeast(value->operand(0), bound) ||
           constantAtLeast(value->operand(1), bound);
  // v < k ? k' : v, both constants at least `bound`: a select-shaped clamp
  // (a compare and a blend on x86) that keeps NaN.
  if (value->kind() == ExprKind::Where) {
    const Expr *condition = value->operand(0);
    return condition->kind() == ExprKind::Binary &&
           condition->binaryOp() == BinaryOp::Lt &&
           condition->operand(0) == value->operand(2) &&
           constantAtLeast(condition->operand(1), bound) &&
           constantAtLeast(value->operand(1), bound);
  }
  return constantAtLeast(value, bound);
}

} // namespace

llvm::Value *ExprEmitter::emitMathFunction(UnaryOp op, llvm::Value *x) {
  bool isFloat = x->getType()->getScalarType()->isFloatTy();
  if (isFloat && op == UnaryOp::Exp)
    return expF32()(builder_, x);
  if (isFloat && op == UnaryOp::Tanh)
    return emitTanhF32(x);
  if (isFloat && op == UnaryOp::Erf)
    return emitInlineErfF32(builder_, x, expF32());
  return callMath(mathFunctionName(op), {x});
}

llvm::Value *ExprEmitter::emitTanhF32(llvm::Value *x) {
  return emitInlineTanhF32(builder_, x);
}

llvm::Value *ExprEmitter::emitLoad(const Expr *expr, bool vector) {
  DType dtype = program_.buffers.at(expr->id()).dtype();
  llvm::Value *loaded = loadElements(expr, dtype, vector);
  return emitCast(fromStorage(dtype, loaded), dtype, expr->dtype());
}

llvm::Value *ExprEmitter::loadElements(const Expr *expr, DType dtype,
                                       bool vector) {
  if (vector)
    throw Error(generator_ + " has no vector loads");
  llvm::Type *storage = storageType(dtype);
  llvm::Value *base = bufferPointer(expr->id());
  llvm::Value *address =
      builder_.CreateGEP(storage, base, emit(expr->index(), false));
  return builder_.CreateAlignedLoad(storage, address,
                                    llvm::Align(itemSize(dtype)));
}

bool ExprEmitter::varying(const Expr *expr) {
  if (currentLanes_ == 1)
    return false;
  auto found = varyingMemo_.find(expr);
  if (found != varyingMemo_.end())
    return found->second;
  bool result = false;
  switch (expr->kind()) {
  case ExprKind::Constant:
    break;
  case ExprKind::Var:
    result = expr->id() == vectorVar_;
    break;
  case ExprKind::ReductionValue: {
    llvm::Value *value = reductionValues_.at(expr->id());
    result = value && lanesOf(value) > 1;
    break;
  }
  default:
    for (const Expr *operand : expr->operands())
      result = result || varying(operand);
  }
  varyingMemo_[expr] = result;
  return result;
}

bool ExprEmitter::indexReadsVectorReduction(const Expr *expr) {
  return loop::anyNode(expr, [&](const Expr *node) {
    return node->kind() == ExprKind::ReductionValue && varying(node);
  });
}

llvm::Value *ExprEmitter::emit(const Expr *expr, bool vector) {
  vector = vector && currentLanes_ > 1;
  if (vector && !varying(expr))
    return splat(emit(expr, false), currentLanes_);
  for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
    auto &cache = vector ? scope->vector : scope->scalar;
    auto found = cache.find(expr);
    if (found != cache.end())
      return found->second;
  }
  llvm::Value *value = reuse(expr, vector);
  if (!value) {
    value = emitNode(expr, vector);
    computed(expr, value);
  }
  (vector ? scopes_.back().vector : scopes_.back().scalar)[expr] = value;
  return value;
}

std::optional<bool> ExprEmitter::knownCondition(const Expr *condition) {
  if (condition->kind() != ExprKind::Binary)
    return std::nullopt;
  BinaryOp op = condition->binaryOp();
  if (op != BinaryOp::LogicalAnd && op != BinaryOp::LogicalOr)
    return knownComparison(condition);
  std::optional<bool> a = knownCondition(condition->operand(0));
  std::optional<bool> b = knownCondition(condition->operand(1));
  bool absorbing = op == BinaryOp::LogicalOr; // true absorbs an or
  if ((a && *a == absorbing) || (b && *b == absorbing))
    return absorbing;
  if (a && b)
    return !absorbing;
  return std::nullopt;
}

llvm::Value *ExprEmitter::emitNode(const Expr *expr, bool vector) {
  switch (expr->kind()) {
  case ExprKind::Constant:
    // Index arithmetic is int64: strides and offsets are sizes too.
    if (expr->dtype() == DType::Int64)
      return sizeValue(expr->integer());
    return constantOf(expr);
  case ExprKind::Symbol:
    return symbolValue(expr->id());
  case ExprKind::Var: {
    llvm::Value *value = vars_.at(expr->id());
    if (!value)
      throw Error("loop IR: a kernel reads a variable outside its loop");
    if (vector)
      return builder_.CreateAdd(splat(value, currentLanes_),
                                laneOffsets(currentLanes_));
    return value;
  }
  case ExprKind::ReductionValue: {
    llvm::Value *value = reductionValues_.at(expr->id());
    if (!value)
      throw Error("loop IR: a kernel reads a reduction before it is final");
    if (!vector && lanesOf(value) > 1)
      return builder_.CreateExtractElement(value, uint64_t(0));
    return value;
  }
  case ExprKind::Load:
    return emitLoad(expr, vector);
  case ExprKind::Unary: {
    DType dtype = expr->operand(0)->dtype();
    llvm::Value *operand = emit(expr->operand(0), vector);
    llvm::Value *result = expr->unaryOp() == UnaryOp::Exp &&
                                  dtype == DType::Float32 &&
                                  clampedFromBelow(expr->operand(0), -86.0)
                              ? normalExpF32()(builder_, operand)
                              : emitUnary(expr->unaryOp(), operand, dtype);
    return roundTo(expr->dtype(), result);
  }
  case ExprKind::Binary: {
    if (std::optional<bool> known = knownComparison(expr)) {
      llvm::Value *truth = builder_.getInt1(*known);
      return vector ? splat(truth, currentLanes_) : truth;
    }
    DType dtype = expr->operand(0)->dtype();
    llvm::Value *a = emit(expr->operand(0), vector);
    llvm::Value *b = emit(expr->operand(1), vector);
    return roundTo(expr->dtype(), emitBinary(expr->binaryOp(), a, b, dtype));
  }
  case ExprKind::Where:
    // A condition the target knows emits only the branch it takes.
    if (std::optional<bool> known = knownCondition(expr->operand(0)))
      return emit(expr->operand(*known ? 1 : 2), vector);
    return builder_.CreateSelect(emit(expr->operand(0), vector),
                                 emit(expr->operand(1), vector),
                                 emit(expr->operand(2), vector));
  case ExprKind::Cast:
    return emitCast(emit(expr->operand(0), vector), expr->operand(0)->dtype(),
                    expr->dtype());
  case ExprKind::MulAdd: {
    // llvm.fmuladd: one fma where the target has one, mul and add where not.
    llvm::Value *a = emit(expr->operand(0), vector);
    llvm::Value *b = emit(expr->operand(1), vector);
    llvm::Value *c = emit(expr->operand(2), vector);
    return roundTo(expr->dtype(),
                   builder_.CreateIntrinsic(llvm::Intrinsic::fmuladd,
                                            {a->getType()}, {a, b, c}));
  }
  }
  throw Error("loop IR: unknown expression kind");
}

llvm::Value *ExprEmitter::emitUnary(UnaryOp op, llvm::Value *x, DType dtype) {
  auto unsupported = [&]() -> llvm::Value * {
    throw Unsupported(generator_ + " cannot compute " +
                      std::string(loop::unaryOpName(op)) + " of " +
                      std::string(dtypeName(dtype)));
  };
  if (isFloatingPoint(dtype)) {
    if (mathFunctionName(op))
      return emitMathFunction(op, x);
    switch (op) {
    case UnaryOp::Neg:
      return builder_.CreateFNeg(x);
    case UnaryOp::Abs:
      return callIntrinsic(llvm::Intrinsic::fabs, {x});
    case UnaryOp::Sqrt:
      return callIntrinsic(llvm::Intrinsic::sqrt, {x});
    case UnaryOp::Rsqrt:
      return builder_.CreateFDiv(floatLike(x, 1.0),
                                 callIntrinsic(llvm::Intrinsic::sqrt, {x}));
    case UnaryOp::Reciprocal:
      return builder_.CreateFDiv(floatLike(x, 1.0), x);
    case UnaryOp::Sigmoid: {
      llvm::Value *exponential =
          emitUnary(UnaryOp::Exp, builder_.CreateFNeg(x), dtype);
      return builder_.CreateFDiv(
          floatLike(x, 1.0),
          builder_.CreateFAdd(floatLike(x, 1.0), exponential));
    }
    case UnaryOp::Floor:
      return callIntrinsic(llvm::Intrinsic::floor, {x});
    case UnaryOp::Ceil:
      return callIntrinsic(llvm::Intrinsic::ceil, {x});
    case UnaryOp::Trunc:
      return callIntrinsic(llvm::Intrinsic::trunc, {x});
    case UnaryOp::Round:
      return callIntrinsic(llvm::Intrinsic::roundeven, {x});
    case UnaryOp::Sign: // torch.sign(nan) is 0
      return builder_.CreateSelect(
          builder_.CreateFCmpOGT(x, floatLike(x, 0.0)), floatLike(x, 1.0),
          builder_.CreateSelect(builder_.CreateFCmpOLT(x, floatLike(x, 0.0)),
                                floatLike(x, -1.0), floatLike(x, 0.0)));
    case UnaryOp::LogicalNot:
      return builder_.CreateFCmpOEQ(x, floatLike(x, 0.0));
    case UnaryOp::IsNan:
      return builder_.CreateFCmpUNO(x, x);
    case UnaryOp::IsInf:
      return builder_.CreateFCmpOEQ(callIntrinsic(llvm::Intrinsic::fabs, {x}),
                                    floatLike(x, INFINITY));
    default:
      return unsupported();
    }
  }
  llvm::Value *falseValue =
      llvm::ConstantInt::getFalse(withLanes(builder_.getInt1Ty(), lanesOf(x)));
  if (dtype == DType::Bool) {
    switch (op) {
    case UnaryOp::LogicalNot:
    case UnaryOp::BitwiseNot:
      return builder_.CreateNot(x);
    case UnaryOp::Abs:
    case UnaryOp::Floor:
    case UnaryOp::Ceil:
    case UnaryOp::Round:
    case UnaryOp::Trunc:
    case UnaryOp::Sign:
      return x;
    case UnaryOp::IsNan:
    case UnaryOp::IsInf:
      return falseValue;
    default:
      return unsupported();
    }
  }
  bool isUnsigned = isUnsignedType(dtype);
  switch (op) {
  case UnaryOp::Neg:
    return builder_.CreateNeg(x);
  case UnaryOp::Abs:
    return isUnsigned
               ? x
               : builder_.CreateIntrinsic(llvm::Intrinsic::abs, {x->getType()},
                                          {x, builder_.getFalse()});
  case UnaryOp::Sign: {
    llvm::Value *positive = builder_.CreateZExt(
        isUnsigned ? builder_.CreateICmpNE(x, integerLike(x, 0))
                   : builder_.CreateICmpSGT(x, integerLike(x, 0)),
        x->getType());
    if (isUnsigned)
      return positive;
    llvm::Value *negative = builder_.CreateZExt(
        builder_.CreateICmpSLT(x, integerLike(x, 0)), x->getType());
    return builder_.CreateSub(positive, negative);
  }
  case UnaryOp::Floor:
  case UnaryOp::Ceil:
  case UnaryOp::Round:
  case UnaryOp::Trunc:
    return x;
  case UnaryOp::LogicalNot:
    return builder_.CreateICmpEQ(x, integerLike(x, 0));
  case UnaryOp::BitwiseNot:
    return builder_.CreateNot(x);
  case UnaryOp::IsNan:
  case UnaryOp::IsInf:
    return falseValue;
  default:
    return unsupported();
  }
}

llvm::Value *ExprEmitter::emitIntegerDivision(BinaryOp op, llvm::Value *a,
                                              llvm::Value *b, bool isUnsigned) {
  // Division by zero must neither trap nor be undefined: divide by 1
  // instead. INT_MIN / -1 overflows: -1 is handled as negation.
  llvm::Value *zero = builder_.CreateICmpEQ(b, integerLike(b, 0));
  if (isUnsigned) {
    llvm::Value *divisor = builder_.CreateSelect(zero, integerLike(b, 1), b);
    bool quotient = op == BinaryOp::Div || op == BinaryOp::FloorDiv;
    return quotient ? builder_.CreateUDiv(a, divisor)
                    : builder_.CreateURem(a, divisor);
  }
  llvm::Value *minusOne = builder_.CreateICmpEQ(b, integerLike(b, -1));
  llvm::Value *divisor = builder_.CreateSelect(
      builder_.CreateOr(zero, minusOne), integerLike(b, 1), b);
  llvm::Value *quotient = builder_.CreateSDiv(a, divisor);
  llvm::Value *remainder = builder_.CreateSRem(a, divisor);
  llvm::Value *negated = builder_.CreateNeg(a);
  // Python rounds toward negative infinity: adjust when the remainder and
  // the divisor have opposite signs.
  llvm::Value *adjust = builder_.CreateAnd(
      builder_.CreateICmpNE(remainder, integerLike(remainder, 0)),
      builder_.CreateICmpSLT(builder_.CreateXor(remainder, b),
                             integerLike(b, 0)));
  switch (op) {
  case BinaryOp::Div:
    return builder_.CreateSelect(minusOne, negated, quotient);
  case BinaryOp::FloorDiv:
    return builder_.CreateSelect(
        minusOne, negated,
        builder_.CreateSub(quotient,
                           builder_.CreateZExt(adjust, a->getType())));
  case BinaryOp::Mod:
    return builder_.CreateAdd(
        remainder, builder_.CreateSelect(adjust, b, integerLike(b, 0)));
  default: // Fmod
    return remainder;
  }
}

// Whether a float fmod remainder is nonzero with the sign opposite to the
// divisor's: where Python's floor division and modulo step one further
// down than C's truncating ones.
llvm::Value *ExprEmitter::remainderAgainstDivisor(llvm::Value *remainder,
                                                  llvm::Value *divisor) {
  return builder_.CreateAnd(
      builder_.CreateFCmpUNE(remainder, floatLike(remainder, 0.0)),
      builder_.CreateXor(
          builder_.CreateFCmpOLT(divisor, floatLike(divisor, 0.0)),
          builder_.CreateFCmpOLT(remainder, floatLike(remainder, 0.0))));
}

// fmod(a, b) = a - n b, n = trunc(a / b), exactly. x86 has no remainder
// instruction: LLVM's frem of a vector is a call of the C library's fmodf
// per lane (0.25 us a vector of 16 on the 2-core EPYC: 10x eager's time).
// For float32 a and b, with a / b taken in float64 below 2^24 in
// magnitude, n is the true quotient's integer part (a / b lies at least
// 2^-25 from any integer it is not, relatively more than float64's
// rounding), n b is exact (48 bits) and so is a - n b (the remainder, a
// float32 value). For float64, below 2^52, a / b can round up onto the
// next integer: a - n b, exact in one fma (n b - a is then less than |b|
// and on a's grid), has the wrong sign there and one |b| (with a's sign)
// more is the remainder, exactly. The remainder has a's sign, zeros too.
// Lanes beyond (larger quotients, infinite or zero b, infinite or NaN a)
// take frem, in a branch only a vector with such a lane enters.
llvm::Value *ExprEmitter::emitFloatFmod(llvm::Value *a, llvm::Value *b) {
  llvm::Type *type = a->getType();
  bool single = type->getScalarType()->isFloatTy();
  if (!exactRemaindersInFloat64() ||
      !(single || type->getScalarType()->isDoubleTy()))
    return builder_.CreateFRem(a, b);
  llvm::Value *quotient, *rest;
  if (single) {
    llvm::Type *wide = type->getWithNewType(builder_.getDoubleTy());
    llvm::Value *wideA = builder_.CreateFPExt(a, wide);
    llvm::Value *wideB = builder_.CreateFPExt(b, wide);
    quotient = builder_.CreateFDiv(wideA, wideB);
    llvm::Value *whole = callIntrinsic(llvm::Intrinsic::trunc, {quotient});
    rest = builder_.CreateFPTrunc(
        builder_.CreateFSub(wideA, builder_.CreateFMul(whole, wideB)), type);
  } else {
    quotient = builder_.CreateFDiv(a, b);
    llvm::Value *whole = callIntrinsic(llvm::Intrinsic::trunc, {quotient});
    rest =
        callIntrinsic(llvm::Intrinsic::fma, {builder_.CreateFNeg(whole), b, a});
    llvm::Value *overshot = builder_.CreateAnd(
        builder_.CreateFCmpUNE(rest, floatLike(rest, 0.0)),
        builder_.CreateXor(builder_.CreateFCmpOLT(rest, floatLike(rest, 0.0)),
                           builder_.CreateFCmpOLT(a, floatLike(a, 0.0))));
    llvm::Value *step =
        callIntrinsic(llvm::Intrinsic::copysign,
                      {callIntrinsic(llvm::Intrinsic::fabs, {b}), a});
    rest =
        builder_.CreateSelect(overshot, builder_.CreateFAdd(rest, step), rest);
  }
  llvm::Value *fast = callIntrinsic(llvm::Intrinsic::copysign, {rest, a});
  // Ordered compares: false for NaN.
  llvm::Value *exact = builder_.CreateAnd(
      builder_.CreateFCmpOLT(callIntrinsic(llvm::Intrinsic::fabs, {quotient}),
                             floatLike(quotient, single ? 0x1p24 : 0x1p52)),
      builder_.CreateFCmpOLT(callIntrinsic(llvm::Intrinsic::fabs, {b}),
                             floatLike(b, HUGE_VAL)));
  llvm::Value *allExact =
      type->isVectorTy() ? builder_.CreateAndReduce(exact) : exact;
  llvm::Function *function = builder_.GetInsertBlock()->getParent();
  llvm::BasicBlock *before = builder_.GetInsertBlock();
  auto *slow =
      llvm::BasicBlock::Create(module_.getContext(), "fmod_lanes", function);
  auto *done =
      llvm::BasicBlock::Create(module_.getContext(), "fmod_done", function);
  builder_.CreateCondBr(allExact, done, slow);
  builder_.SetInsertPoint(slow);
  llvm::Value *mixed =
      builder_.CreateSelect(exact, fast, builder_.CreateFRem(a, b));
  builder_.CreateBr(done);
  builder_.SetInsertPoint(done);
  llvm::PHINode *result = builder_.CreatePHI(type, 2, "fmod");
  result->addIncoming(fast, before);
  result->addIncoming(mixed, slow);
  return result;
}

// Python's floor division of floats as torch computes it: the quotient of
// a - fmod(a, b), which is exact where floor(a / b) is not (1 // 0.1 is 9:
// a / b rounds up to 10), moved down where the remainder's sign differs
// from the divisor's, then rounded to the nearest integer; a zero quotient
// keeps the sign of a / b, and division by zero gives a / b.
llvm::Value *ExprEmitter::emitFloatFloorDivision(llvm::Value *a,
                                                 llvm::Value *b) {
  llvm::Value *remainder = emitFloatFmod(a, b);
  llvm::Value *quotient =
      builder_.CreateFDiv(builder_.CreateFSub(a, remainder), b);
  quotient = builder_.CreateSelect(
      remainderAgainstDivisor(remainder, b),
      builder_.CreateFSub(quotient, floatLike(quotient, 1.0)), quotient);
  llvm::Value *floored = callIntrinsic(llvm::Intrinsic::floor, {quotient});
  floored = builder_.CreateSelect(
      builder_.CreateFCmpOGT(builder_.CreateFSub(quotient, floored),
                             floatLike(quotient, 0.5)),
      builder_.CreateFAdd(floored, floatLike(floored, 1.0)), floored);
  llvm::Value *ratio = builder_.CreateFDiv(a, b);
  llvm::Value *signedZero =
      callIntrinsic(llvm::Intrinsic::copysign, {floatLike(ratio, 0.0), ratio});
  llvm::Value *result = builder_.CreateSelect(
      builder_.CreateFCmpUNE(quotient, floatLike(quotient, 0.0)), floored,
      signedZero);
  return builder_.CreateSelect(builder_.CreateFCmpOEQ(b, floatLike(b, 0.0)),
                               ratio, result);
}

llvm::Value *ExprEmitter::emitIntegerPower(llvm::Value *base,
                                           llvm::Value *exponent,
                                           bool isUnsigned) {
  // Square-and-multiply over every bit of the exponent: exact, wrapping.
  unsigned bits = base->getType()->getScalarSizeInBits();
  llvm::Value *result = integerLike(base, 1);
  llvm::Value *square = base;
  for (unsigned bit = 0; bit < bits; ++bit) {
    llvm::Value *set = builder_.CreateICmpNE(
        builder_.CreateAnd(exponent, integerLike(exponent, int64_t(1) << bit)),
        integerLike(exponent, 0));
    result =
        builder_.CreateSelect(set, builder_.CreateMul(result, square), result);
    square = builder_.CreateMul(square, square);
  }
  if (isUnsigned)
    return result;
  // Negative exponents: only 1 and -1 have integer powers; others give 0.
  llvm::Value *odd = builder_.CreateICmpNE(
      builder_.CreateAnd(exponent, integerLike(exponent, 1)),
      integerLike(exponent, 0));
  llvm::Value *negativePower = builder_.CreateSelect(
      builder_.CreateICmpEQ(base, integerLike(base, 1)), integerLike(base, 1),
      builder_.CreateSelect(builder_.CreateICmpEQ(base, integerLike(base, -1)),
                            builder_.CreateSelect(odd, integerLike(base, -1),
                                                  integerLike(base, 1)),
                            integerLike(base, 0)));
  return builder_.CreateSelect(
      builder_.CreateICmpSLT(exponent, integerLike(exponent, 0)), negativePower,
      result);
}

// LLVM 19's InstCombine reads select(x > 0, x, 0) over x = select(y < 0,
// 0, y) as two maxima and folds them into the inner one, whose NaN rule
// differs: where(relu(y) > 0, relu(y), 0) of NaN gave NaN, eager 0 (fuzz
// seed 738107). A value that is itself a select, compared, goes through an
// arithmetic fence (no code) so that the outer select is no min/max idiom.
llvm::Value *ExprEmitter::fenced(llvm::Value *value) {
  if (!llvm::isa<llvm::SelectInst>(value) && !llvm::isa<llvm::CallInst>(value))
    return value;
  return builder_.CreateArithmeticFence(value, value->getType());
}

// a / b as q = a * y, y the float nearest 1 / b, corrected once: the
// remainder r = a - q b is exact by an fma, and q + r y rounds to a / b
// (Markstein's theorem: y within half an ulp of 1 / b, q within one of
// a / b). Checked against the division for every float32 a and the
// divisors 3, 6, 7, 255, 0.1, 0.3, 1.7, 1e-5, 1e20, 1e-20, sqrt(768): equal
// wherever |a| > 2^-100 and the quotient is normal; below, where the
// remainder underflows, at most one ulp off. A zero remainder (a exact
// multiple, -0.0 included) or a NaN one (a infinite or NaN, or q
// overflowing) keeps q. A vector division runs at a fraction of the rate
// of the three multiplies this takes (16-lane vdivps: one per 5 to 10
// cycles). Powers of two are left to LLVM (an exact product), as are
// divisors whose reciprocal is not a normal float.
llvm::Value *ExprEmitter::quotientByConstant(llvm::Value *a, llvm::Value *b) {
  if (!dividesByConstantsAsProducts() || !a->getType()->isFPOrFPVectorTy() ||
      !a->getType()->getScalarType()->isFloatTy())
    return nullptr;
  auto *divisor = llvm::dyn_cast<llvm::Constant>(b);
  if (divisor && divisor->getType()->isVectorTy())
    divisor = divisor->getSplatValue();
  auto *constant = llvm::dyn_cast_or_null<llvm::ConstantFP>(divisor);
  if (!constant)
    return nullptr;
  float value = constant->getValueAPF().convertToFloat();
  int exponent = 0;
  double mantissa = std::frexp(static_cast<double>(value), &exponent);
  if (!std::isfinite(value) || value == 0.0f || std::fabs(mantissa) == 0.5 ||
      std::abs(exponent) > 120)
    return nullptr;
  // The float nearest 1 / b: of the neighbours of (float)(1.0 / b) (which
  // may round twice), the one whose residual 1 - b y (exact in double:
  // a product of two floats) is least.
  float reciprocal = static_cast<float>(1.0 / static_cast<double>(value));
  auto residual = [value](float y) {
    return std::fabs(1.0 - static_cast<double>(value) * y);
  };
  for (float candidate : {std::nextafter(reciprocal, 0.0f),
                          std::nextafter(reciprocal, 2.0f * reciprocal)})
    if (residual(candidate) < residual(reciprocal))
      reciprocal = candidate;
  llvm::Value *y = floatLike(a, reciprocal);
  llvm::Value *q = builder_.CreateFMul(a, y);
  llvm::Value *remainder =
      callIntrinsic(llvm::Intrinsic::fma, {builder_.CreateFNeg(q), b, a});
  llvm::Value *corrected =
      callIntrinsic(llvm::Intrinsic::fma, {remainder, y, q});
  llvm::Value *useCorrected =
      builder_.CreateAnd(builder_.CreateFCmpONE(remainder, floatLike(a, 0.0)),
                         builder_.CreateFCmpORD(corrected, corrected));
  return builder_.CreateSelect(useCorrected, corrected, q);
}

llvm::Value *ExprEmitter::emitBinary(BinaryOp op, llvm::Value *a,
                                     llvm::Value *b, DType dtype) {
  auto unsupported = [&]() -> llvm::Value * {
    throw Unsupported(generator_ + " cannot compute " +
                      std::string(loop::binaryOpName(op)) + " of " +
                      std::string(dtypeName(dtype)));
  };
  if (isFloatingPoint(dtype)) {
    auto isTrue = [&](llvm::Value *value) {
      return builder_.CreateFCmpUNE(value, floatLike(value, 0.0));
    };
    switch (op) {
    case BinaryOp::Add:
      return builder_.CreateFAdd(a, b);
    case BinaryOp::Sub:
      return builder_.CreateFSub(a, b);
    case BinaryOp::Mul:
      return builder_.CreateFMul(a, b);
    case BinaryOp::Div:
      if (llvm::Value *quotient = quotientByConstant(a, b))
        return quotient;
      return builder_.CreateFDiv(a, b);
    case BinaryOp::FloorDiv:
      return emitFloatFloorDivision(a, b);
    case BinaryOp::Mod: {
      // torch.remainder: fmod, moved into the divisor's sign.
      llvm::Value *remainder = emitFloatFmod(a, b);
      return builder_.CreateSelect(remainderAgainstDivisor(remainder, b),
                                   builder_.CreateFAdd(remainder, b),
                                   remainder);
    }
    case BinaryOp::Fmod:
      return emitFloatFmod(a, b);
    case BinaryOp::Pow:
      return callMath("pow", {a, b});
    case BinaryOp::Atan2:
      return callMath("atan2", {a, b});
    case BinaryOp::Copysign:
      return callIntrinsic(llvm::Intrinsic::copysign, {a, b});
    case BinaryOp::Max:
    case BinaryOp::Min: {
      llvm::Intrinsic::ID id = op == BinaryOp::Max ? llvm::Intrinsic::maximum
                                                   : llvm::Intrinsic::minimum;
      // NaN from either operand, explicitly: LLVM 19's x86 lowering of
      // llvm.maximum drops a NaN that comes from a half-to-float conversion
      // (torch.maximum of float16 NaN and 0 gave 0 on AVX2).
      llvm::Value *extremum = callIntrinsic(id, {a, b});
      llvm::Value *either = builder_.CreateFCmpUNO(a, b);
      return builder_.CreateSelect(either, builder_.CreateFAdd(a, b), extremum);
    }
    case BinaryOp::Eq:
      return builder_.CreateFCmpOEQ(a, b);
    case BinaryOp::Ne:
      return builder_.CreateFCmpUNE(a, b);
    case BinaryOp::Lt:
      return builder_.CreateFCmpOLT(fenced(a), fenced(b));
    case BinaryOp::Le:
      return builder_.CreateFCmpOLE(fenced(a), fenced(b));
    case BinaryOp::Gt:
      return builder_.CreateFCmpOGT(fenced(a), fenced(b));
    case BinaryOp::Ge:
      return builder_.CreateFCmpOGE(fenced(a), fenced(b));
    case BinaryOp::LogicalAnd:
      return builder_.CreateAnd(isTrue(a), isTrue(b));
    case BinaryOp::LogicalOr:
      return builder_.CreateOr(isTrue(a), isTrue(b));
    case BinaryOp::LogicalXor:
      return builder_.CreateXor(isTrue(a), isTrue(b));
    default:
      return unsupported();
    }
  }
  bool isBool = dtype == DType::Bool;
  bool isUnsigned = isUnsignedType(dtype);
  auto isTrue = [&](llvm::Value *value) {
    return isBool ? value : builder_.CreateICmpNE(value, integerLike(value, 0));
  };
  unsigned bits = a->getType()->getScalarSizeInBits();
  switch (op) {
  case BinaryOp::Add:
    return isBool ? builder_.CreateOr(a, b) : builder_.CreateAdd(a, b);
  case BinaryOp::Sub:
    return isBool ? builder_.CreateXor(a, b) : builder_.CreateSub(a, b);
  case BinaryOp::Mul:
    return isBool ? builder_.CreateAnd(a, b) : builder_.CreateMul(a, b);
  case BinaryOp::Div:
  case BinaryOp::FloorDiv:
  case BinaryOp::Mod:
  case BinaryOp::Fmod:
    if (isBool)
      return unsupported();
    return emitIntegerDivision(op, a, b, isUnsigned);
  case BinaryOp::Pow:
    if (isBool)
      return unsupported();
    return emitIntegerPower(a, b, isUnsigned);
  case BinaryOp::Max:
    return callIntrinsic(
        isUnsigned ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, {a, b});
  case BinaryOp::Min:
    return callIntrinsic(
        isUnsigned ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, {a, b});
  case BinaryOp::Eq:
    return builder_.CreateICmpEQ(a, b);
  case BinaryOp::Ne:
    return builder_.CreateICmpNE(a, b);
  case BinaryOp::Lt:
    return isUnsigned ? builder_.CreateICmpULT(a, b)
                      : builder_.CreateICmpSLT(a, b);
  case BinaryOp::Le:
    return isUnsigned ? builder_.CreateICmpULE(a, b)
                      : builder_.CreateICmpSLE(a, b);
  case BinaryOp::Gt:
    return isUnsigned ? builder_.CreateICmpUGT(a, b)
                      : builder_.CreateICmpSGT(a, b);
  case BinaryOp::Ge:
    return isUnsigned ? builder_.CreateICmpUGE(a, b)
                      : builder_.CreateICmpSGE(a, b);
  case BinaryOp::LogicalAnd:
    return builder_.CreateAnd(isTrue(a), isTrue(b));
  case BinaryOp::LogicalOr:
    return builder_.CreateOr(isTrue(a), isTrue(b));
  case BinaryOp::LogicalXor:
    return builder_.CreateXor(isTrue(a), isTrue(b));
  case BinaryOp::BitwiseAnd:
    return builder_.CreateAnd(a, b);
  case BinaryOp::BitwiseOr:
    return builder_.CreateOr(a, b);
  case BinaryOp::BitwiseXor:
    return builder_.CreateXor(a, b);
  case BinaryOp::ShiftLeft: {
    if (isBool)
      return unsupported();
    // Amounts past the width (or negative) shift everything out: no poison
    // escapes, because select does not propagate its unchosen operand.
    llvm::Value *tooFar = builder_.CreateICmpUGE(b, integerLike(b, bits));
    return builder_.CreateSelect(tooFar, integerLike(a, 0),
                                 builder_.CreateShl(a, b));
  }
  case BinaryOp::ShiftRight: {
    if (isBool)
      return unsupported();
    llvm::Value *tooFar = builder_.CreateICmpUGE(b, integerLike(b, bits));
    if (isUnsigned)
      return builder_.CreateSelect(tooFar, integerLike(a, 0),
                                   builder_.CreateLShr(a, b));
    llvm::Value *amount =
        builder_.CreateSelect(tooFar, integerLike(b, bits - 1), b);
    return builder_.CreateAShr(a, amount);
  }
  default:
    return unsupported();
  }
}

llvm::Value *ExprEmitter::emitCast(llvm::Value *value, DType from, DType to) {
  if (from == to)
    return value;
  int lanes = lanesOf(value);
  llvm::Type *target = withLanes(computeType(to), lanes);
  computeType(from); // rejects complex sources
  if (to == DType::Bool)
    return isFloatingPoint(from)
               ? builder_.CreateFCmpUNE(value, floatLike(value, 0.0))
               : builder_.CreateICmpNE(value, integerLike(value, 0));
  if (from == DType::Bool)
    return isFloatingPoint(to) ? builder_.CreateUIToFP(value, target)
                               : builder_.CreateZExt(value, target);
  if (isFloatingPoint(from) && isFloatingPoint(to)) {
    // Half types are computed in float: a double rounds to float first, as
    // c10::Half(double) and c10::BFloat16(double) do.
    if (value->getType() != target)
      value = to == DType::Float64 ? builder_.CreateFPExt(value, target)
                                   : builder_.CreateFPTrunc(value, target);
    return roundTo(to, value);
  }
  if (isFloatingPoint(from)) {
    // As eager's static_cast on x86 (cvttss2si / cvttsd2si): 64-bit
    // results convert at 64 bits, every other integer at 32 bits and keeps
    // the low bits (300.0 -> uint8 44, -1.0 -> 255); NaN and values out of
    // the converted width's range give its minimum (the "integer
    // indefinite"), where LLVM's fptosi would be poison.
    unsigned width = to == DType::Int64 ? 64 : 32;
    llvm::Type *wide = withLanes(builder_.getIntNTy(width), lanes);
    double limit = std::ldexp(1.0, static_cast<int>(width) - 1);
    llvm::Value *inRange = builder_.CreateAnd(
        builder_.CreateFCmpOGE(value, floatLike(value, -limit)),
        builder_.CreateFCmpOLT(value, floatLike(value, limit)));
    // fptosi, frozen (its poison lanes are the ones the select replaces):
    // LLVM 19 turns a vector fptosi.sat into a scalar conversion and two
    // compares per lane on x86, 8x eager's time.
    llvm::Value *converted =
        builder_.CreateFreeze(builder_.CreateFPToSI(value, wide));
    llvm::Value *indefinite =
        llvm::ConstantInt::get(wide, llvm::APInt::getSignedMinValue(width));
    llvm::Value *result = builder_.CreateSelect(inRange, converted, indefinite);
    return builder_.CreateIntCast(result, target, /*isSigned=*/true);
  }
  if (isFloatingPoint(to)) {
    llvm::Value *converted = isUnsignedType(from)
                                 ? builder_.CreateUIToFP(value, target)
                                 : builder_.CreateSIToFP(value, target);
    return roundTo(to, converted);
  }
  return builder_.CreateIntCast(value, target, !isUnsignedType(from));
}

void ExprEmitter::enterVector(int64_t var, int lanes) {
  vectorVar_ = var;
  currentLanes_ = lanes;
  varyingMemo_.clear();
}

void ExprEmitter::leaveVector() {
  vectorVar_ = -1;
  currentLanes_ = 1;
  varyingMemo_.clear();
}

} // namespace kiln::backend
