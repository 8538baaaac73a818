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

// e^r - 1 = r + r^2 T(r) for r in [-ln2/2, ln2/2], T a degree-4 fit of
// (e^r - 1 - r) / r^2 weighted toward minimax relative error: 3.1e-9 for e^r,
// below the 7.0e-9 of the Taylor series to r^7, with one term fewer.
// Coefficients lowest first.
constexpr double kExpTail[] = {0.49999993447195246, 0.1666652062557981,
                               0.04166838816465031, 0.00836871744977618,
                               0.00138145930055312};

// ln 2 in two parts (Cody and Waite): n ln2High is exact for the n of any
// float exp, so x - n ln 2 is exact to float precision.
constexpr double kLn2High = 0.693145751953125; // 16 significant bits
constexpr double kLn2Low = 1.4286068203094172321e-6;
constexpr double kLog2E = 1.4426950408889634;

// x * scale rounded to the nearest integer n, without a rounding
// instruction or a conversion: x * scale + 1.5 * 2^23 + bias, rounded once in
// an fma, is an integer (floats from 2^23 to 2^24 are), and its low mantissa
// bits hold n + bias as an integer, so that its bits shifted left by 23 are
// the float 2^{n + bias - 127} (the 1.5 * 2^23's bits shift out) for n +
// bias in [1, 254]. `n` is the sum less the constant again, exact. A NaN x
// gives NaN sums and some integer bits (no poison).
struct RoundedExponent {
  llvm::Value *shifted; // x * scale + 1.5 * 2^23 + bias, rounded
  llvm::Value *n;       // n as a float
};

RoundedExponent roundExponent(llvm::IRBuilderBase &builder, llvm::Value *x,
                              double scale, int bias) {
  const double shift = 12582912.0 + bias; // 1.5 * 2^23 + bias
  llvm::Value *shifted =
      fma(builder, x, constant(x, scale), constant(x, shift));
  return {shifted, builder.CreateFSub(shifted, constant(x, shift))};
}

// The float whose exponent field is the low 9 bits of `bits` (an integer
// vector like them): 2^{bits - 127} for bits in [1, 254].
llvm::Value *powerOfTwo(llvm::IRBuilderBase &builder, llvm::Value *bits,
                        llvm::Type *floatType) {
  return builder.CreateBitCast(
      builder.CreateShl(bits, llvm::ConstantInt::get(bits->getType(), 23)),
      floatType);
}

llvm::Value *intBits(llvm::IRBuilderBase &builder, llvm::Value *x) {
  return builder.CreateBitCast(
      x, x->getType()->getWithNewType(builder.getInt32Ty()));
}

// The reduction of both exps: x = n ln 2 + r with r in [-ln2/2, ln2/2] for
// n = round(x / ln 2) (roundExponent); gives e^r = 1 + r + r^2 T(r).
llvm::Value *reducedExp(llvm::IRBuilderBase &builder, llvm::Value *x,
                        llvm::Value *n) {
  llvm::Value *r = fma(builder, n, constant(x, -kLn2High), x);
  r = fma(builder, n, constant(x, -kLn2Low), r);
  // 1 is added last: r + r^2 T(r) has at most 0.42 in magnitude, so its
  // rounding error stays a fraction of the result's ulp.
  llvm::Value *tail = polynomial(
      builder, r,
      {kExpTail[0], kExpTail[1], kExpTail[2], kExpTail[3], kExpTail[4]});
  llvm::Value *square = builder.CreateFMul(r, r);
  return builder.CreateFAdd(constant(x, 1.0), fma(builder, square, tail, r));
}

} // namespace

// exp(x) = 2^n * e^r (reducedExp). 2^n is applied as two factors so that
// results down to the smallest subnormal round once: n + 254 is rounded
// with the exponent (roundExponent), its bits b split into b >> 1 and b - (b
// >> 1), each carrying half of the constant's bits (which shift out) and
// a biased exponent from 52 to 191 for n from -150 to 128. A NaN x gives a
// NaN e^r, whatever bits its n has.
llvm::Value *emitInlineExpF32(llvm::IRBuilderBase &builder, llvm::Value *x) {
  llvm::Type *floatType = x->getType();
  // Beyond these bounds the result is inf or 0 anyway; clamping keeps n in
  // the range the two factors cover. NaN compares false and stays.
  llvm::Value *clamped = builder.CreateSelect(
      builder.CreateFCmpOGT(x, constant(x, 89.0)), constant(x, 89.0), x);
  // exp(x) rounds to 0 below about -103.97 (-inf included: a causal mask).
  llvm::Value *underflows = builder.CreateFCmpOLT(x, constant(x, -104.0));
  clamped = builder.CreateSelect(underflows, constant(x, -104.0), clamped);
  RoundedExponent rounded = roundExponent(builder, clamped, kLog2E, 254);
  llvm::Value *reduced = reducedExp(builder, clamped, rounded.n);
  // Where the result is 0 the mantissa is too, so that the scaling below
  // multiplies 0 instead of making a subnormal number on its way to 0:
  // x86 takes a microcode assist for each subnormal result (a softmax
  // over a causal mask ran 4x slower).
  llvm::Value *mantissa =
      builder.CreateSelect(underflows, constant(x, 0.0), reduced);
  llvm::Value *bits = intBits(builder, rounded.shifted);
  llvm::Value *half =
      builder.CreateLShr(bits, llvm::ConstantInt::get(bits->getType(), 1));
  llvm::Value *rest = builder.CreateSub(bits, half);
  return builder.CreateFMul(
      builder.CreateFMul(mantissa, powerOfTwo(builder, half, floatType)),
      powerOfTwo(builder, rest, floatType));
}

// exp(x) = 2^(n - 1) * e^r * 2 (reducedExp) for x >= -86: n >= -124, so
// 2^(n - 1) is a normal float (n + 126 rounded with the exponent, then
// shifted into place); x clamped to 89 above (+inf included) keeps n - 1
// at most 127, and the last doubling overflows to inf where exp does. A NaN
// x gives a NaN e^r, whatever bits its n has.
llvm::Value *emitInlineNormalExpF32(llvm::IRBuilderBase &builder,
                                    llvm::Value *x) {
  llvm::Value *clamped = builder.CreateSelect(
      builder.CreateFCmpOGT(x, constant(x, 89.0)), constant(x, 89.0), x);
  RoundedExponent rounded = roundExponent(builder, clamped, kLog2E, 126);
  llvm::Value *mantissa = reducedExp(builder, clamped, rounded.n);
  llvm::Value *scale =
      powerOfTwo(builder, intBits(builder, rounded.shifted), x->getType());
  return builder.CreateFMul(builder.CreateFMul(mantissa, scale),
                            constant(x, 2.0));
}

namespace {

// tanh(x) = sign(x) tanh(|x|), tanh(|x|) from `large` of |x| where |x| >=
// 0.55 (NaN included); below, x + x^3 S(x^2) with S a degree-4 fit
// (weighted least squares toward minimax) of the relative error over
// [0, 0.55]: 1.0e-9 relative, where the odd Taylor series needs terms to
// x^19 for 1e-8.
template <typename Large>
llvm::Value *tanhOf(llvm::IRBuilderBase &builder, llvm::Value *x, Large large) {
  llvm::Value *magnitude =
      builder.CreateIntrinsic(llvm::Intrinsic::fabs, {x->getType()}, {x});
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
      {builder.CreateSelect(useSeries, small, large(magnitude)), x});
}

} // namespace

// tanh(a) = e / (e + 2) with e = e^{2a} - 1 for a = |x| >= 0.55 (at most
// one ulp over all floats, as the series below 0.55), e from the parts of
// exp's reduction in halves: 2a = n ln 2 + 2h, e = 2^n (1 + 2p) - 1 with
// 2p = e^{2h} - 1 = 2h + (2h)^2 T(2h), that is p = h + h^2 T'(h) with
// T'(h) = 2 T(2h) (each coefficient scaled by a power of 2, so the same
// values as T's bit for bit), and e = fma(2^{n+1}, p, 2^n - 1). |x| is
// clamped to 9.1 first: tanh rounds to 1 from 9.02 on, so n is at most 26.
// n comes from adding 1.5 * 2^23 + 128 to 2a / ln 2 in one fma: the sum
// rounds to an integer, n + 128 in its low mantissa bits, and shifting its
// bits left by 23 makes the float 2^{n+1}; subtracting the constant again
// gives n exactly. About 26 vector instructions with the series, where
// 1 - 2 / (e^{2a} + 1) on a whole exp (the GPU's form below) took 31: the
// rounding to an integer, its conversion and the exponent's bias are one
// fma and one shift, and 2a's doubling lives in the constants.
llvm::Value *emitInlineTanhF32(llvm::IRBuilderBase &builder, llvm::Value *x) {
  return tanhOf(builder, x, [&](llvm::Value *magnitude) {
    // NaN compares false and stays (and makes NaN of every step below).
    llvm::Value *clamped =
        builder.CreateSelect(builder.CreateFCmpOGT(magnitude, constant(x, 9.1)),
                             constant(x, 9.1), magnitude);
    RoundedExponent rounded =
        roundExponent(builder, clamped, 2.0 * kLog2E, 128);
    llvm::Value *n = rounded.n;
    llvm::Value *h = fma(builder, n, constant(x, -kLn2High / 2.0), clamped);
    h = fma(builder, n, constant(x, -kLn2Low / 2.0), h);
    llvm::Value *tail =
        polynomial(builder, h,
                   {kExpTail[0] * 2.0, kExpTail[1] * 4.0, kExpTail[2] * 8.0,
                    kExpTail[3] * 16.0, kExpTail[4] * 32.0});
    llvm::Value *p = fma(builder, builder.CreateFMul(h, h), tail, h);
    llvm::Value *twiceScale =
        powerOfTwo(builder, intBits(builder, rounded.shifted), x->getType());
    llvm::Value *e =
        fma(builder, twiceScale, p,
            fma(builder, twiceScale, constant(x, 0.5), constant(x, -1.0)));
    return builder.CreateFDiv(e, builder.CreateFAdd(e, constant(x, 2.0)));
  });
}

// tanh(a) = 1 - 2 / (e^{2a} + 1) where the subtraction loses little (a >=
// 0.55, the fraction is at most 0.6).
llvm::Value *emitInlineTanhF32(llvm::IRBuilderBase &builder, llvm::Value *x,
                               ExpF32 exp) {
  return tanhOf(builder, x, [&](llvm::Value *magnitude) {
    llvm::Value *denominator = builder.CreateFAdd(
        exp(builder, builder.CreateFAdd(magnitude, magnitude)),
        constant(x, 1.0));
    return builder.CreateFSub(
        constant(x, 1.0), builder.CreateFDiv(constant(x, 2.0), denominator));
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
