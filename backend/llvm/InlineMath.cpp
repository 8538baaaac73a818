// Float32 exp, tanh and erf as inline LLVM IR.
// Depends on backend/llvm/InlineMath.h and LLVM.
#include "backend/llvm/InlineMath.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include <initializer_list>

namespace kiln::backend {

namespace {

llvm::Value *constant(llvm::Value *like, double value) {
  return llvm::ConstantFP::get(like->getType(), value);
}

llvm::Value *fma(llvm::IRBuilderBase &builder, llvm::Value *a, llvm::Value *b,
                 llvm::Value *c) {
  return builder.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()},
                                 {a, b, c});
}

// c0 + x*(c1 + x*(c2 + ...)) by Horner's rule, coefficients lowest first.
llvm::Value *polynomial(llvm::IRBuilderBase &builder, llvm::Value *x,
                        std::initializer_list<double> coefficients) {
  const double *last = coefficients.end() - 1;
  llvm::Value *result = constant(x, *last);
  for (const double *c = last - 1; c >= coefficients.begin(); --c)
    result = fma(builder, result, x, constant(x, *c));
  return result;
}

// 2^n for integers n in [-126, 127], as float bits (other n, as a NaN's
// conversion gives, make some float: no poison).
llvm::Value *powerOfTwo(llvm::IRBuilderBase &builder, llvm::Value *n,
                        llvm::Type *floatType) {
  llvm::Value *biased =
      builder.CreateAdd(n, llvm::ConstantInt::get(n->getType(), 127));
  llvm::Value *bits =
      builder.CreateShl(biased, llvm::ConstantInt::get(n->getType(), 23));
  return builder.CreateBitCast(bits, floatType);
}

// The reduction of both exps: x = n ln 2 + r with n = round(x / ln 2) and r
// in [-ln2/2, ln2/2], n ln 2 subtracted in two parts (Cody and Waite) so
// that r is exact to float precision; gives e^r (1 + r + r^2 T(r), T a
// degree-4 fit of (e^r - 1 - r) / r^2 weighted toward minimax relative
// error: 3.1e-9, below the 7.0e-9 of the Taylor series to r^7, with one
// term fewer) and n as a float.
llvm::Value *reducedExp(llvm::IRBuilderBase &builder, llvm::Value *x,
                        llvm::Value *&rounded) {
  rounded = builder.CreateIntrinsic(
      llvm::Intrinsic::rint, {x->getType()},
      {builder.CreateFMul(x, constant(x, 1.4426950408889634))});
  constexpr double kLn2High = 0.693145751953125; // 16 significant bits
  constexpr double kLn2Low = 1.4286068203094172321e-6;
  llvm::Value *r = fma(builder, rounded, constant(x, -kLn2High), x);
  r = fma(builder, rounded, constant(x, -kLn2Low), r);
  // e^r = 1 + r + r^2 T(r), T near 1/2 + r/6 + r^2/24 ...; 1 is added
  // last: r + r^2 T(r) has at most 0.42 in magnitude, so its rounding error
  // stays a fraction of the result's ulp.
  llvm::Value *tail =
      polynomial(builder, r,
                 {0.49999993447195246, 0.1666652062557981, 0.04166838816465031,
                  0.00836871744977618, 0.00138145930055312});
  llvm::Value *square = builder.CreateFMul(r, r);
  return builder.CreateFAdd(constant(x, 1.0), fma(builder, square, tail, r));
}

} // namespace

// exp(x) = 2^n * e^r (reducedExp). 2^n is applied as two factors so that
// results down to the smallest subnormal round once. A NaN x gives a NaN
// e^r, whatever n its conversion gives (frozen: LLVM's conversion of NaN is
// poison).
llvm::Value *emitInlineExpF32(llvm::IRBuilderBase &builder, llvm::Value *x) {
  llvm::Type *floatType = x->getType();
  llvm::Type *intType = floatType->getWithNewType(builder.getInt32Ty());
  // Beyond these bounds the result is inf or 0 anyway; clamping keeps n in
  // the range the two factors cover. NaN compares false and stays.
  llvm::Value *clamped = builder.CreateSelect(
      builder.CreateFCmpOGT(x, constant(x, 89.0)), constant(x, 89.0), x);
  // exp(x) rounds to 0 below about -103.97 (-inf included: a causal mask).
  llvm::Value *underflows = builder.CreateFCmpOLT(x, constant(x, -104.0));
  clamped = builder.CreateSelect(underflows, constant(x, -104.0), clamped);
  llvm::Value *rounded;
  llvm::Value *reduced = reducedExp(builder, clamped, rounded);
  // Where the result is 0 the mantissa is too, so that the scaling below
  // multiplies 0 instead of making a subnormal number on its way to 0:
  // x86 takes a microcode assist for each subnormal result (a softmax
  // over a causal mask ran 4x slower).
  llvm::Value *mantissa =
      builder.CreateSelect(underflows, constant(x, 0.0), reduced);
  llvm::Value *n = builder.CreateFreeze(builder.CreateFPToSI(rounded, intType));
  llvm::Value *half = builder.CreateAShr(n, llvm::ConstantInt::get(intType, 1));
  llvm::Value *rest = builder.CreateSub(n, half);
  return builder.CreateFMul(
      builder.CreateFMul(mantissa, powerOfTwo(builder, half, floatType)),
      powerOfTwo(builder, rest, floatType));
}

// exp(x) = 2^(n - 1) * e^r * 2 (reducedExp) for x >= -86: n >= -124, so
// 2^(n - 1) is a normal float; x clamped to 89 above (+inf included) keeps
// n - 1 at most 127, and the last doubling overflows to inf where exp
// does. A NaN x gives a NaN e^r, whatever n its conversion gives (frozen:
// LLVM's conversion of NaN is poison).
llvm::Value *emitInlineNormalExpF32(llvm::IRBuilderBase &builder,
                                    llvm::Value *x) {
  llvm::Type *floatType = x->getType();
  llvm::Type *intType = floatType->getWithNewType(builder.getInt32Ty());
  llvm::Value *clamped = builder.CreateSelect(
      builder.CreateFCmpOGT(x, constant(x, 89.0)), constant(x, 89.0), x);
  llvm::Value *rounded;
  llvm::Value *mantissa = reducedExp(builder, clamped, rounded);
  llvm::Value *n = builder.CreateFreeze(builder.CreateFPToSI(rounded, intType));
  llvm::Value *scale = powerOfTwo(
      builder, builder.CreateSub(n, llvm::ConstantInt::get(intType, 1)),
      floatType);
  return builder.CreateFMul(builder.CreateFMul(mantissa, scale),
                            constant(x, 2.0));
}

namespace {

// tanh(x) = sign(x) (1 - 2 / d), d = e^{2|x|} + 1 (`denominator` of |x|),
// where the subtraction loses little (|x| >= 0.55, the fraction is at most
// 0.6); below, x + x^3 S(x^2) with S a degree-4 fit (weighted least squares
// toward minimax) of the relative error over [0, 0.55]: 1.0e-9 relative,
// where the odd Taylor series needs terms to x^19 for 1e-8.
template <typename Denominator>
llvm::Value *tanhOf(llvm::IRBuilderBase &builder, llvm::Value *x,
                    Denominator denominator) {
  llvm::Value *magnitude =
      builder.CreateIntrinsic(llvm::Intrinsic::fabs, {x->getType()}, {x});
  llvm::Value *large = builder.CreateFSub(
      constant(x, 1.0),
      builder.CreateFDiv(constant(x, 2.0), denominator(magnitude)));
  // x + x^3 S(x^2), S near the series' -1/3 + 2/15 x^2 - 17/315 x^4 ...
  llvm::Value *square = builder.CreateFMul(x, x);
  llvm::Value *series = polynomial(builder, square,
                                   {-0.3333331756049927, 0.13332586159974646,
                                    -0.05385231168580435, 0.02107168487415774,
                                    -0.00627424606309191});
  llvm::Value *small = fma(builder, builder.CreateFMul(x, square), series, x);
  llvm::Value *useSeries = builder.CreateFCmpOLT(magnitude, constant(x, 0.55));
  // NaN compares false above and flows through `large`. tanh is odd: the
  // sign is x's, also for -0.0 (the series' -0 * (negative) + -0 is +0).
  return builder.CreateIntrinsic(
      llvm::Intrinsic::copysign, {x->getType()},
      {builder.CreateSelect(useSeries, small, large), x});
}

} // namespace

// d = e^{2|x|} + 1 = (1 + p) 2^n + 1 in one fma from reducedExp's parts, |x|
// clamped to 9.1 first: tanh rounds to 1 from 9.02 on, so n stays at most
// 27 and 2^n a normal float (no clamp inside the exp, no two-step scaling).
// The same d, rounded once, as exp's e^{2|x|} plus 1 gave.
llvm::Value *emitInlineTanhF32(llvm::IRBuilderBase &builder, llvm::Value *x) {
  return tanhOf(builder, x, [&](llvm::Value *magnitude) {
    llvm::Type *floatType = x->getType();
    llvm::Type *intType = floatType->getWithNewType(builder.getInt32Ty());
    // NaN compares false and stays.
    llvm::Value *clamped =
        builder.CreateSelect(builder.CreateFCmpOGT(magnitude, constant(x, 9.1)),
                             constant(x, 9.1), magnitude);
    llvm::Value *rounded;
    llvm::Value *mantissa =
        reducedExp(builder, builder.CreateFAdd(clamped, clamped), rounded);
    llvm::Value *n =
        builder.CreateFreeze(builder.CreateFPToSI(rounded, intType));
    return fma(builder, mantissa, powerOfTwo(builder, n, floatType),
               constant(x, 1.0));
  });
}

llvm::Value *emitInlineTanhF32(llvm::IRBuilderBase &builder, llvm::Value *x,
                               ExpF32 exp) {
  return tanhOf(builder, x, [&](llvm::Value *magnitude) {
    return builder.CreateFAdd(
        exp(builder, builder.CreateFAdd(magnitude, magnitude)),
        constant(x, 1.0));
  });
}

// erf(x) = x + x Q(x^2) for |x| < 1, Q a least-squares fit of erf(x)/x - 1
// in x^2 (relative error 1.4e-9), whose final fma rounds once. Above,
// erf(x) = sign(x) (1 - e^{-x^2 + L(|x|)}) with L(x) = ln erfc(x) + x^2, a
// fit in x - 2.5 over [1, 4] (absolute error 1.3e-8, so erfc's relative
// error): erfc is at most 0.16 there, so its error reaches the result
// scaled down; beyond 4, erf rounds to 1.
llvm::Value *emitInlineErfF32(llvm::IRBuilderBase &builder, llvm::Value *x,
                              ExpF32 exp) {
  llvm::Value *magnitude =
      builder.CreateIntrinsic(llvm::Intrinsic::fabs, {x->getType()}, {x});
  llvm::Value *correction = polynomial(
      builder, builder.CreateFMul(x, x),
      {0.12837916651005227, -0.37612628843325058, 0.11283612428243961,
       -0.026854808537186109, 0.0051900535777675699, -0.00080243541280931863,
       7.8982102051941561e-05});
  llvm::Value *small = fma(builder, x, correction, x);

  llvm::Value *clamped = builder.CreateIntrinsic(
      llvm::Intrinsic::minnum, {x->getType()}, {magnitude, constant(x, 4.0)});
  llvm::Value *logTail = polynomial(
      builder, builder.CreateFSub(clamped, constant(x, 2.5)),
      {-1.5568152770519277, -0.35268068107285561, 0.056106359727480237,
       -0.010858517012641768, 0.0021651603097354311, -0.00042014456752748985,
       7.7394425536975175e-05, -1.3309390388136886e-05,
       1.6140616191373525e-06});
  llvm::Value *complement =
      exp(builder, fma(builder, builder.CreateFNeg(clamped), clamped, logTail));
  llvm::Value *large = builder.CreateIntrinsic(
      llvm::Intrinsic::copysign, {x->getType()},
      {builder.CreateFSub(constant(x, 1.0), complement), x});
  llvm::Value *result = builder.CreateSelect(
      builder.CreateFCmpOLT(magnitude, constant(x, 1.0)), small, large);
  return builder.CreateSelect(builder.CreateFCmpUNO(x, x), x, result);
}

} // namespace kiln::backend
