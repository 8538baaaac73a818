// Lowerings of the elementwise ops: math, activations, comparisons, logical
// and bitwise ops, where, clamp and casts, as virtual pointwise tensors.
// Depends on passes/lowerings/Lowerer.h and ir/ops/MetaUtils.h.
#include "ir/ops/MetaUtils.h"
#include "passes/lowerings/Lowerer.h"

#include <cmath>
#include <limits>

namespace kiln::lowering {
namespace {

using Values = std::vector<const Expr *>;

// torch.result_type of the node's arguments `arguments` (tensors and
// Python numbers; None is skipped).
DType promotedType(const Node &node, std::initializer_list<size_t> arguments) {
  std::vector<meta::PromotionOperand> operands;
  for (size_t index : arguments) {
    const Argument &argument = node.arguments().at(index);
    if (argument.isTensor())
      operands.push_back(meta::operandOf(argument.toTensor()->meta()));
    else if (argument.isScalar())
      operands.push_back(meta::operandOf(argument));
  }
  return meta::resultType(operands);
}

// The node's result, computed from `arguments` cast to `computation`.
LoweringResult map(Lowerer &lowerer, const Node &node,
                   std::initializer_list<size_t> arguments, DType computation,
                   const PointwiseBody &body) {
  std::vector<LoweredTensor> inputs;
  for (size_t index : arguments)
    if (!node.arguments().at(index).isNone())
      inputs.push_back(lowerer.input(node, index));
  const TensorMeta &meta = lowerer.resultMeta(node);
  return std::vector<LoweredTensor>{lowerer.pointwise(
      symbolicSizes(meta), computation, meta.dtype, inputs, body)};
}

DType resultType(Lowerer &lowerer, const Node &node) {
  return lowerer.resultMeta(node).dtype;
}

// Multi-node formulas (gelu, softplus) run in float32 for half types, as
// eager's kernels do.
DType mathType(Lowerer &lowerer, const Node &node) {
  return accumulationType(resultType(lowerer, node));
}

double scalarArgument(const Node &node, size_t index) {
  return node.arguments().at(index).toDouble();
}

// --- Families of ops, one template each ---

template <UnaryOp Op>
LoweringResult unaryOp(Lowerer &lowerer, const Node &node) {
  return map(lowerer, node, {0}, resultType(lowerer, node),
             [&lowerer](const Values &v) { return lowerer.unary(Op, v[0]); });
}

// floor, ceil, round and trunc keep integers as they are.
template <UnaryOp Op>
LoweringResult roundingOp(Lowerer &lowerer, const Node &node) {
  bool integral = !isFloatingPoint(resultType(lowerer, node));
  return map(lowerer, node, {0}, resultType(lowerer, node),
             [&lowerer, integral](const Values &v) {
               return integral ? v[0] : lowerer.unary(Op, v[0]);
             });
}

// eager's multiplication and true division of float16/bfloat16 by a second
// operand that is a number or a 0-d tensor compute in float32 with that
// operand's value as float32 (the CPU kernels read it with
// original_scalar_value): x / 1e5 of x = 174 is 0.00174, not x / inf.
// Elsewhere (add and sub too) the operand is rounded to the result's dtype
// first.
DType arithmeticType(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  if (dtype != DType::Float16 && dtype != DType::BFloat16)
    return dtype;
  const Argument &other = node.arguments().at(1);
  bool scalarLike = other.isScalar() ||
                    (other.isTensor() && other.toTensor()->meta().dim() == 0);
  return scalarLike ? DType::Float32 : dtype;
}

template <BinaryOp Op>
LoweringResult binaryOp(Lowerer &lowerer, const Node &node) {
  constexpr bool opmathWithScalars = Op == BinaryOp::Mul || Op == BinaryOp::Div;
  DType computation = opmathWithScalars ? arithmeticType(lowerer, node)
                                        : resultType(lowerer, node);
  return map(lowerer, node, {0, 1}, computation, [&lowerer](const Values &v) {
    return lowerer.binary(Op, v[0], v[1]);
  });
}

// Whether an integer division's divisor is a nonzero number (not a tensor,
// not a size that varies): it never raises eager's ZeroDivisionError.
bool divisorIsNonzeroNumber(const Node &node) {
  const Argument &divisor = node.arguments().at(1);
  return divisor.isScalar() && !divisor.isSymbolic() && divisor.toDouble() != 0;
}

// Ops whose integer forms raise on a zero divisor: native for floating
// results, and for integer ones by a nonzero number (x % 10, x // 2).
template <BinaryOp Op>
LoweringResult floatOnlyBinaryOp(Lowerer &lowerer, const Node &node) {
  if (!isFloatingPoint(resultType(lowerer, node)) &&
      !divisorIsNonzeroNumber(node))
    return std::nullopt;
  return binaryOp<Op>(lowerer, node);
}

template <BinaryOp Op>
LoweringResult comparisonOp(Lowerer &lowerer, const Node &node) {
  return map(
      lowerer, node, {0, 1}, promotedType(node, {0, 1}),
      [&lowerer](const Values &v) { return lowerer.binary(Op, v[0], v[1]); });
}

// Operands are first cast to their common dtype, as eager's kernels do: a
// 0-d int64 256 and'ed with a uint8 tensor is 0 (false) there.
template <BinaryOp Op>
LoweringResult logicalOp(Lowerer &lowerer, const Node &node) {
  return map(
      lowerer, node, {0, 1}, promotedType(node, {0, 1}),
      [&lowerer](const Values &v) { return lowerer.binary(Op, v[0], v[1]); });
}

// add, sub: self + alpha * other; rsub: other - alpha * self.
template <BinaryOp Op, bool Reversed>
LoweringResult alphaOp(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  double alpha = scalarArgument(node, 2);
  return map(lowerer, node, {0, 1}, dtype,
             [&lowerer, dtype, alpha](const Values &v) {
               const Expr *self = Reversed ? v[1] : v[0];
               const Expr *other = Reversed ? v[0] : v[1];
               if (alpha != 1)
                 other = lowerer.binary(BinaryOp::Mul, other,
                                        lowerer.constant(alpha, dtype));
               if (dtype == DType::Bool)
                 return lowerer.binary(BinaryOp::LogicalOr, self, other);
               return lowerer.binary(Op, self, other);
             });
}

// x ** c of a float tensor by a number: eager's CPU kernel computes the
// exponents 2, 3, 0.5, -0.5, -1 and -2 as products, square roots and
// reciprocals (so (-0.0) ** 0.5 is -0.0 and (-inf) ** 0.5 is NaN, as
// sqrt gives), and the rest with pow; float16's kernel takes pow for the
// square roots too.
LoweringResult powerByScalar(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  if (!isFloatingPoint(dtype))
    return std::nullopt;
  const Argument &exponentArgument = node.arguments().at(1);
  if (!exponentArgument.isScalar())
    return binaryOp<BinaryOp::Pow>(lowerer, node);
  double exponent = exponentArgument.toDouble();
  if (dtype == DType::Float16 && (exponent == 0.5 || exponent == -0.5))
    return binaryOp<BinaryOp::Pow>(lowerer, node);
  auto square = [&lowerer](const Expr *x) {
    return lowerer.binary(BinaryOp::Mul, x, x);
  };
  auto reciprocal = [&lowerer](const Expr *x) {
    return lowerer.unary(UnaryOp::Reciprocal, x);
  };
  // The loader runs after this function returns: lambdas hold copies.
  std::function<const Expr *(const Expr *)> special;
  if (exponent == 2)
    special = square;
  else if (exponent == 3)
    special = [&lowerer, square](const Expr *x) {
      return lowerer.binary(BinaryOp::Mul, square(x), x);
    };
  else if (exponent == 0.5)
    special = [&lowerer](const Expr *x) {
      return lowerer.unary(UnaryOp::Sqrt, x);
    };
  else if (exponent == -0.5)
    special = [&lowerer](const Expr *x) {
      return lowerer.unary(UnaryOp::Rsqrt, x);
    };
  else if (exponent == -1)
    special = reciprocal;
  else if (exponent == -2)
    special = [square, reciprocal](const Expr *x) {
      return reciprocal(square(x));
    };
  else
    return binaryOp<BinaryOp::Pow>(lowerer, node);
  // eager's float16 kernel computes these in float32 and rounds once; its
  // bfloat16 kernel rounds each product (x * x) to bfloat16.
  DType computation = dtype == DType::Float16 ? DType::Float32 : dtype;
  return map(lowerer, node, {0}, computation,
             [special](const Values &v) { return special(v[0]); });
}

// Floor division of floats is BinaryOp::FloorDiv, torch's exact algorithm
// (floor(a / b) is one off where the division rounds to an integer).
LoweringResult divideWithMode(Lowerer &lowerer, const Node &node) {
  const Argument &mode = node.arguments().at(2);
  if (mode.isNone())
    return binaryOp<BinaryOp::Div>(lowerer, node);
  bool integer = !isFloatingPoint(resultType(lowerer, node));
  if (integer && !divisorIsNonzeroNumber(node))
    return std::nullopt;
  if (mode.toString() != "trunc")
    return binaryOp<BinaryOp::FloorDiv>(lowerer, node);
  if (integer) // integer division truncates
    return map(lowerer, node, {0, 1}, resultType(lowerer, node),
               [&lowerer](const Values &v) {
                 return lowerer.binary(BinaryOp::Div, v[0], v[1]);
               });
  return map(lowerer, node, {0, 1}, resultType(lowerer, node),
             [&lowerer](const Values &v) {
               return lowerer.unary(UnaryOp::Trunc,
                                    lowerer.binary(BinaryOp::Div, v[0], v[1]));
             });
}

LoweringResult neg(Lowerer &lowerer, const Node &node) {
  if (resultType(lowerer, node) == DType::Bool)
    return std::nullopt; // torch refuses `-` on bool
  return unaryOp<UnaryOp::Neg>(lowerer, node);
}

LoweringResult abs(Lowerer &lowerer, const Node &node) {
  bool isBool = resultType(lowerer, node) == DType::Bool;
  return map(lowerer, node, {0}, resultType(lowerer, node),
             [&lowerer, isBool](const Values &v) {
               return isBool ? v[0] : lowerer.unary(UnaryOp::Abs, v[0]);
             });
}

LoweringResult frac(Lowerer &lowerer, const Node &node) {
  return map(lowerer, node, {0}, resultType(lowerer, node),
             [&lowerer](const Values &v) {
               return lowerer.binary(BinaryOp::Sub, v[0],
                                     lowerer.unary(UnaryOp::Trunc, v[0]));
             });
}

LoweringResult roundDecimals(Lowerer &lowerer, const Node &node) {
  if (node.arguments().at(1).toInt() != 0)
    return std::nullopt;
  return roundingOp<UnaryOp::Round>(lowerer, node);
}

template <UnaryOp Op>
LoweringResult floatPredicate(Lowerer &lowerer, const Node &node) {
  DType input = node.arguments().at(0).toTensor()->meta().dtype;
  bool floating = isFloatingPoint(input);
  return map(lowerer, node, {0}, input, [&lowerer, floating](const Values &v) {
    return floating ? lowerer.unary(Op, v[0])
                    : lowerer.constant(0, DType::Bool);
  });
}

LoweringResult isFinite(Lowerer &lowerer, const Node &node) {
  DType input = node.arguments().at(0).toTensor()->meta().dtype;
  bool floating = isFloatingPoint(input);
  return map(lowerer, node, {0}, input, [&lowerer, floating](const Values &v) {
    if (!floating)
      return lowerer.constant(1, DType::Bool);
    // x - x is 0 for finite x and NaN for infinities and NaN.
    const Expr *difference = lowerer.binary(BinaryOp::Sub, v[0], v[0]);
    return lowerer.binary(BinaryOp::Eq, difference,
                          lowerer.constant(0, v[0]->dtype()));
  });
}

LoweringResult logicalNot(Lowerer &lowerer, const Node &node) {
  return map(lowerer, node, {0}, DType::Bool, [&lowerer](const Values &v) {
    return lowerer.unary(UnaryOp::LogicalNot, v[0]);
  });
}

LoweringResult bitwiseNot(Lowerer &lowerer, const Node &node) {
  bool isBool = resultType(lowerer, node) == DType::Bool;
  return map(lowerer, node, {0}, resultType(lowerer, node),
             [&lowerer, isBool](const Values &v) {
               return lowerer.unary(
                   isBool ? UnaryOp::LogicalNot : UnaryOp::BitwiseNot, v[0]);
             });
}

// The largest finite value of a floating dtype.
double largestFinite(DType dtype) {
  switch (dtype) {
  case DType::Float16:
    return 65504.0;
  case DType::BFloat16:
    return 3.3895313892515355e38;
  case DType::Float32:
    return std::numeric_limits<float>::max();
  default:
    return std::numeric_limits<double>::max();
  }
}

LoweringResult nanToNum(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  if (!isFloatingPoint(dtype))
    return map(lowerer, node, {0}, dtype, [](const Values &v) { return v[0]; });
  double nan = doubleArgument(node, 1, 0),
         posinf = doubleArgument(node, 2, largestFinite(dtype)),
         neginf = doubleArgument(node, 3, -largestFinite(dtype));
  return map(lowerer, node, {0}, dtype, [=, &lowerer](const Values &v) {
    const Expr *infinity =
        lowerer.constant(std::numeric_limits<double>::infinity(), dtype);
    const Expr *result =
        lowerer.where(lowerer.binary(BinaryOp::Eq, v[0], infinity),
                      lowerer.constant(posinf, dtype), v[0]);
    result =
        lowerer.where(lowerer.binary(BinaryOp::Eq, v[0],
                                     lowerer.unary(UnaryOp::Neg, infinity)),
                      lowerer.constant(neginf, dtype), result);
    return lowerer.where(lowerer.unary(UnaryOp::IsNan, v[0]),
                         lowerer.constant(nan, dtype), result);
  });
}

// --- Activations ---

// x < 0 ? 0 : x, as eager's kernel: relu(-0.0) is -0.0 (a maximum would
// give +0.0) and NaN stays NaN.
LoweringResult relu(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  return map(lowerer, node, {0}, dtype, [&lowerer, dtype](const Values &v) {
    const Expr *zero = lowerer.constant(0, dtype);
    return lowerer.where(lowerer.binary(BinaryOp::Lt, v[0], zero), zero, v[0]);
  });
}

// Exact GELU in float32 math, to float32's relative accuracy also in the
// negative tail (where GELU is tiny and a reciprocal or a division by it
// shows every relative error): x Phi(x), Phi the normal distribution
// function, is x (1 - h) for x >= 0 and x h below, h = Phi(-|x|) =
// e^{-x^2/2 + M(|x|)} with M(a) = ln Phi(-a) + a^2/2 (the log of a Mills
// ratio: smooth, between -2.7 and -0.69) a degree-11 fit in a - 2.77 over
// [0, 5.5430408] (Lawson-weighted least squares, absolute error 1.9e-8, so
// h's relative error; 1.7e-7 evaluated in float32; Horner's rule, which
// measured faster than Estrin's here: the kernel is bound by instructions,
// not latency). No division: 44 AVX-512 instructions a vector where the
// rational erfc before (Numerical Recipes' erfcc: a division, a degree-9
// polynomial; 1.2e-7 fractional error) took 52, and the largest relative
// error over [-5.54, 5.54] 1.2e-6 against 2.6e-6. |x| is clamped to the
// fit's end, where h is 1.5e-8 and 1 - h rounds to 1; the exponent then
// stays in [-18.7, -0.69] (no subnormal; exp's normal-range form).
const Expr *exactGeluF32(Lowerer &lowerer, const Expr *x) {
  DType math = x->dtype();
  auto c = [&](double value) { return lowerer.constant(value, math); };
  constexpr double kTail = 5.5430408;
  const Expr *magnitude = lowerer.unary(UnaryOp::Abs, x);
  // NaN compares false and takes the end: x times anything stays NaN.
  const Expr *a = lowerer.where(
      lowerer.binary(BinaryOp::Lt, magnitude, c(kTail)), magnitude, c(kTail));
  const Expr *t = lowerer.binary(BinaryOp::Sub, a, c(kTail / 2));
  static constexpr double kMills[] = {
      -2.0411374544280672,    -0.3000806553410329,     0.039135791703173911,
      -0.0060287383792954705, 0.00093065354690266371,  -0.00013539014720433538,
      1.7486158154913324e-05, -1.8746372815719247e-06, 1.6025489857411356e-07,
      9.4748500779747998e-09, -1.1559124855162938e-08, 1.8610137545265076e-09};
  const Expr *mills = c(kMills[11]);
  for (int power = 10; power >= 0; --power)
    mills = lowerer.mulAdd(mills, t, c(kMills[power]));
  const Expr *exponent =
      lowerer.mulAdd(lowerer.binary(BinaryOp::Mul, a, c(-0.5)), a, mills);
  // The exponent is at least -18.7: a select-shaped clamp (a compare and a
  // blend) tells exp's emitter so.
  const Expr *h = lowerer.unary(
      UnaryOp::Exp,
      lowerer.where(lowerer.binary(BinaryOp::Lt, exponent, c(-60)), c(-60),
                    exponent));
  const Expr *phi = lowerer.where(lowerer.binary(BinaryOp::Ge, x, c(0)),
                                  lowerer.binary(BinaryOp::Sub, c(1), h), h);
  // eager's GELU is exactly zero once 1 + erf(x / sqrt 2) rounds to 0 in
  // float32 (below -5.5430408 on its vector path; the true tail there is
  // below 2e-8 in magnitude), NaN for -inf. The zero is -0.0, as
  // x * 0.5 * (1 + erf) gives it in float64 and on AVX-512 hosts (eager's
  // AVX2 float32 kernel gives +0.0 there: eager differs by host).
  const Expr *zero = lowerer.binary(BinaryOp::Mul, x, c(0));
  const Expr *tail = lowerer.binary(BinaryOp::Lt, x, c(-kTail));
  return lowerer.where(tail, zero, lowerer.binary(BinaryOp::Mul, x, phi));
}

LoweringResult gelu(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  bool tanhApproximation = node.arguments().at(1).toString() == "tanh";
  return map(
      lowerer, node, {0}, math,
      [&lowerer, math, tanhApproximation](const Values &v) {
        auto c = [&](double value) { return lowerer.constant(value, math); };
        const Expr *x = v[0];
        const Expr *inner;
        if (tanhApproximation) {
          const Expr *cube = lowerer.binary(
              BinaryOp::Mul, x, lowerer.binary(BinaryOp::Mul, x, x));
          const Expr *sum =
              lowerer.binary(BinaryOp::Add, x,
                             lowerer.binary(BinaryOp::Mul, c(0.044715), cube));
          inner = lowerer.unary(
              UnaryOp::Tanh,
              lowerer.binary(BinaryOp::Mul, c(std::sqrt(2.0 / M_PI)), sum));
        } else if (math == DType::Float32) {
          return exactGeluF32(lowerer, x);
        } else {
          inner = lowerer.unary(UnaryOp::Erf,
                                lowerer.binary(BinaryOp::Mul, x, c(M_SQRT1_2)));
        }
        const Expr *half = lowerer.binary(BinaryOp::Mul, x, c(0.5));
        return lowerer.binary(BinaryOp::Mul, half,
                              lowerer.binary(BinaryOp::Add, c(1), inner));
      });
}

LoweringResult silu(Lowerer &lowerer, const Node &node) {
  return map(lowerer, node, {0}, mathType(lowerer, node),
             [&lowerer](const Values &v) {
               return lowerer.binary(BinaryOp::Mul, v[0],
                                     lowerer.unary(UnaryOp::Sigmoid, v[0]));
             });
}

// softplus(x) = log1p(exp(beta x)) / beta, or x where beta x > threshold.
const Expr *softplus(Lowerer &lowerer, const Expr *x, double beta,
                     double threshold) {
  DType dtype = x->dtype();
  const Expr *scaled =
      lowerer.binary(BinaryOp::Mul, x, lowerer.constant(beta, dtype));
  const Expr *soft = lowerer.binary(
      BinaryOp::Div,
      lowerer.unary(UnaryOp::Log1p, lowerer.unary(UnaryOp::Exp, scaled)),
      lowerer.constant(beta, dtype));
  return lowerer.where(
      lowerer.binary(BinaryOp::Gt, scaled, lowerer.constant(threshold, dtype)),
      x, soft);
}

LoweringResult softplusOp(Lowerer &lowerer, const Node &node) {
  double beta = scalarArgument(node, 1), threshold = scalarArgument(node, 2);
  return map(lowerer, node, {0}, mathType(lowerer, node),
             [&lowerer, beta, threshold](const Values &v) {
               return softplus(lowerer, v[0], beta, threshold);
             });
}

// log_sigmoid_forward: log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), the
// formula of eager's kernels, and the CPU's buffer, exp(-|x|), which only a
// backward reads: a dead result unless the program returns it. On the GPU it
// stays torch's call (its output keeps the input's layout and its buffer is
// empty; not yet checked on a GPU).
LoweringResult logSigmoidForward(Lowerer &lowerer, const Node &node) {
  if (lowerer.device().type != DeviceType::CPU)
    return std::nullopt;
  DType math = mathType(lowerer, node);
  LoweredTensor input = lowerer.input(node, 0);
  const TensorMeta &output = lowerer.resultMeta(node, 0);
  const TensorMeta &buffer = lowerer.resultMeta(node, 1);
  std::vector<LoweredTensor> results{
      lowerer.pointwise(symbolicSizes(output), math, output.dtype, {input},
                        [&lowerer, math](const Values &v) {
                          return logSigmoid(lowerer, v[0], math);
                        })};
  results.push_back(lowerer.pointwise(
      symbolicSizes(buffer), math, buffer.dtype, {input},
      [&lowerer](const Values &v) {
        return lowerer.unary(
            UnaryOp::Exp,
            lowerer.unary(UnaryOp::Neg, lowerer.unary(UnaryOp::Abs, v[0])));
      }));
  return results;
}

LoweringResult mish(Lowerer &lowerer, const Node &node) {
  return map(
      lowerer, node, {0}, mathType(lowerer, node), [&lowerer](const Values &v) {
        return lowerer.binary(
            BinaryOp::Mul, v[0],
            lowerer.unary(UnaryOp::Tanh, softplus(lowerer, v[0], 1, 20)));
      });
}

// elu(x) = scale x where x > 0, else alpha scale expm1(inputScale x).
LoweringResult eluWith(Lowerer &lowerer, const Node &node, double alpha,
                       double scale, double inputScale) {
  DType math = mathType(lowerer, node);
  return map(lowerer, node, {0}, math, [=, &lowerer](const Values &v) {
    auto c = [&](double value) { return lowerer.constant(value, math); };
    const Expr *negative = lowerer.binary(
        BinaryOp::Mul,
        lowerer.unary(UnaryOp::Expm1,
                      lowerer.binary(BinaryOp::Mul, v[0], c(inputScale))),
        c(alpha * scale));
    return lowerer.where(lowerer.binary(BinaryOp::Gt, v[0], c(0)),
                         lowerer.binary(BinaryOp::Mul, v[0], c(scale)),
                         negative);
  });
}

LoweringResult elu(Lowerer &lowerer, const Node &node) {
  return eluWith(lowerer, node, scalarArgument(node, 1),
                 scalarArgument(node, 2), scalarArgument(node, 3));
}

// celu(x, alpha) = elu(x, alpha, scale 1, input scale 1 / alpha).
LoweringResult celu(Lowerer &lowerer, const Node &node) {
  double alpha = scalarArgument(node, 1);
  if (alpha == 0)
    return std::nullopt; // torch raises
  return eluWith(lowerer, node, alpha, 1, 1.0 / alpha);
}

// _prelu_kernel(x, weight): x where x > 0, else weight x (the weight
// broadcast along the channels).
LoweringResult prelu(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  return map(lowerer, node, {0, 1}, dtype, [dtype, &lowerer](const Values &v) {
    return lowerer.where(
        lowerer.binary(BinaryOp::Gt, v[0], lowerer.constant(0, dtype)), v[0],
        lowerer.binary(BinaryOp::Mul, v[1], v[0]));
  });
}

// threshold(x, threshold, value): value where x <= threshold, else x.
LoweringResult threshold(Lowerer &lowerer, const Node &node) {
  double bound = scalarArgument(node, 1), value = scalarArgument(node, 2);
  DType dtype = resultType(lowerer, node);
  return map(lowerer, node, {0}, dtype, [=, &lowerer](const Values &v) {
    return lowerer.where(
        lowerer.binary(BinaryOp::Le, v[0], lowerer.constant(bound, dtype)),
        lowerer.constant(value, dtype), v[0]);
  });
}

// deg2rad and rad2deg: a product by pi / 180 or its inverse (in float32
// for half types, as eager's scalar product).
template <bool ToRadians>
LoweringResult angleUnits(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  constexpr double factor = ToRadians ? M_PI / 180.0 : 180.0 / M_PI;
  return map(lowerer, node, {0}, math, [math, &lowerer](const Values &v) {
    return lowerer.binary(BinaryOp::Mul, v[0], lowerer.constant(factor, math));
  });
}

// sinc(x) = sin(pi x) / (pi x), 1 at 0.
LoweringResult sinc(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  if (!isFloatingPoint(math))
    return std::nullopt;
  return map(lowerer, node, {0}, math, [math, &lowerer](const Values &v) {
    const Expr *scaled =
        lowerer.binary(BinaryOp::Mul, v[0], lowerer.constant(M_PI, math));
    return lowerer.where(
        lowerer.binary(BinaryOp::Eq, v[0], lowerer.constant(0, math)),
        lowerer.constant(1, math),
        lowerer.binary(BinaryOp::Div, lowerer.unary(UnaryOp::Sin, scaled),
                       scaled));
  });
}

// logit(x, eps) = log(z / (1 - z)), z = x clamped into [eps, 1 - eps]
// where eps is given.
LoweringResult logit(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  const Argument &eps = node.arguments().at(1);
  std::optional<double> bound;
  if (!eps.isNone())
    bound = eps.toDouble();
  return map(lowerer, node, {0}, math, [=, &lowerer](const Values &v) {
    auto c = [&](double value) { return lowerer.constant(value, math); };
    const Expr *z = v[0];
    if (bound) {
      z = lowerer.where(lowerer.binary(BinaryOp::Lt, z, c(*bound)), c(*bound),
                        z);
      z = lowerer.where(lowerer.binary(BinaryOp::Gt, z, c(1 - *bound)),
                        c(1 - *bound), z);
    }
    return lowerer.unary(
        UnaryOp::Log, lowerer.binary(BinaryOp::Div, z,
                                     lowerer.binary(BinaryOp::Sub, c(1), z)));
  });
}

// signbit, isposinf, isneginf: bool predicates of the input's value.
enum class Predicate { SignBit, PositiveInfinity, NegativeInfinity };

template <Predicate Kind>
LoweringResult predicate(Lowerer &lowerer, const Node &node) {
  DType input = node.arguments().at(0).toTensor()->meta().dtype;
  return map(lowerer, node, {0}, input, [input, &lowerer](const Values &v) {
    auto c = [&](double value) { return lowerer.constant(value, input); };
    if (Kind == Predicate::SignBit)
      return isFloatingPoint(input)
                 ? lowerer.binary(
                       BinaryOp::Lt,
                       lowerer.binary(BinaryOp::Copysign, c(1), v[0]), c(0))
                 : lowerer.binary(BinaryOp::Lt, v[0], c(0));
    if (!isFloatingPoint(input))
      return lowerer.constant(0, DType::Bool);
    double infinity = std::numeric_limits<double>::infinity();
    return lowerer.binary(
        BinaryOp::Eq, v[0],
        c(Kind == Predicate::PositiveInfinity ? infinity : -infinity));
  });
}

// heaviside(x, values): values where x is 0, else 1 where x > 0 and 0
// otherwise (NaN too, as eager's kernel compares).
LoweringResult heaviside(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  return map(lowerer, node, {0, 1}, dtype, [dtype, &lowerer](const Values &v) {
    const Expr *zero = lowerer.constant(0, dtype);
    return lowerer.where(
        lowerer.binary(BinaryOp::Eq, v[0], zero), v[1],
        lowerer.cast(lowerer.binary(BinaryOp::Gt, v[0], zero), dtype));
  });
}

// fmax and fmin: the other operand where one is NaN.
template <BinaryOp Op>
LoweringResult nanIgnoringExtremum(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  bool floating = isFloatingPoint(dtype);
  return map(
      lowerer, node, {0, 1}, dtype, [floating, &lowerer](const Values &v) {
        const Expr *extremum = lowerer.binary(Op, v[0], v[1]);
        if (!floating)
          return extremum;
        return lowerer.where(
            lowerer.unary(UnaryOp::IsNan, v[0]), v[1],
            lowerer.where(lowerer.unary(UnaryOp::IsNan, v[1]), v[0], extremum));
      });
}

// hypot(a, b) = m sqrt(1 + (n / m)^2), m and n the larger and the smaller
// magnitude (no overflow of the squares); +inf where either is infinite,
// even with a NaN (std::hypot's rule).
LoweringResult hypot(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  return map(lowerer, node, {0, 1}, math, [math, &lowerer](const Values &v) {
    auto c = [&](double value) { return lowerer.constant(value, math); };
    const Expr *a = lowerer.unary(UnaryOp::Abs, v[0]);
    const Expr *b = lowerer.unary(UnaryOp::Abs, v[1]);
    const Expr *large = lowerer.binary(BinaryOp::Max, a, b);
    const Expr *small = lowerer.binary(BinaryOp::Min, a, b);
    const Expr *ratio = lowerer.binary(BinaryOp::Div, small, large);
    const Expr *scaled = lowerer.binary(
        BinaryOp::Mul, large,
        lowerer.unary(
            UnaryOp::Sqrt,
            lowerer.binary(BinaryOp::Add, c(1),
                           lowerer.binary(BinaryOp::Mul, ratio, ratio))));
    const Expr *infinite =
        lowerer.binary(BinaryOp::LogicalOr, lowerer.unary(UnaryOp::IsInf, a),
                       lowerer.unary(UnaryOp::IsInf, b));
    return lowerer.where(
        infinite, c(std::numeric_limits<double>::infinity()),
        lowerer.where(lowerer.binary(BinaryOp::Eq, large, c(0)), c(0), scaled));
  });
}

// logaddexp(a, b) = max + log1p(exp(-|a - b|)) (base 2: log2(1 + 2^-|a -
// b|)), a itself where a and b are the same infinity.
template <bool Base2>
LoweringResult logAddExp(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  return map(lowerer, node, {0, 1}, math, [math, &lowerer](const Values &v) {
    auto c = [&](double value) { return lowerer.constant(value, math); };
    const Expr *larger = lowerer.binary(BinaryOp::Max, v[0], v[1]);
    const Expr *gap = lowerer.unary(
        UnaryOp::Neg,
        lowerer.unary(UnaryOp::Abs, lowerer.binary(BinaryOp::Sub, v[0], v[1])));
    const Expr *rest =
        Base2 ? lowerer.binary(BinaryOp::Div,
                               lowerer.unary(UnaryOp::Log1p,
                                             lowerer.unary(UnaryOp::Exp2, gap)),
                               c(M_LN2))
              : lowerer.unary(UnaryOp::Log1p, lowerer.unary(UnaryOp::Exp, gap));
    const Expr *same = lowerer.binary(BinaryOp::LogicalAnd,
                                      lowerer.unary(UnaryOp::IsInf, v[0]),
                                      lowerer.binary(BinaryOp::Eq, v[0], v[1]));
    return lowerer.where(same, v[0],
                         lowerer.binary(BinaryOp::Add, larger, rest));
  });
}

// xlogy(x, y) = x log(y), 0 where x is 0 and y is not NaN.
LoweringResult xlogy(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  return map(lowerer, node, {0, 1}, math, [math, &lowerer](const Values &v) {
    const Expr *zero = lowerer.constant(0, math);
    return lowerer.where(
        lowerer.binary(BinaryOp::LogicalAnd,
                       lowerer.binary(BinaryOp::Eq, v[0], zero),
                       lowerer.unary(UnaryOp::LogicalNot,
                                     lowerer.unary(UnaryOp::IsNan, v[1]))),
        zero,
        lowerer.binary(BinaryOp::Mul, v[0], lowerer.unary(UnaryOp::Log, v[1])));
  });
}

// addcmul and addcdiv: self + (value * tensor1) * tensor2 (one fused
// multiply-add, as eager's vector kernel) or self + (value * tensor1) /
// tensor2, in float32 for half types.
template <BinaryOp Op>
LoweringResult addProductOrQuotient(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  double value = scalarArgument(node, 3);
  return map(lowerer, node, {0, 1, 2}, math, [=, &lowerer](const Values &v) {
    const Expr *scaled =
        lowerer.binary(BinaryOp::Mul, lowerer.constant(value, math), v[1]);
    if (Op == BinaryOp::Mul && isFloatingPoint(math))
      return lowerer.mulAdd(scaled, v[2], v[0]);
    return lowerer.binary(BinaryOp::Add, v[0],
                          lowerer.binary(Op, scaled, v[2]));
  });
}

LoweringResult leakyRelu(Lowerer &lowerer, const Node &node) {
  double slope = scalarArgument(node, 1);
  DType dtype = resultType(lowerer, node);
  return map(lowerer, node, {0}, dtype, [=, &lowerer](const Values &v) {
    return lowerer.where(
        lowerer.binary(BinaryOp::Gt, v[0], lowerer.constant(0, dtype)), v[0],
        lowerer.binary(BinaryOp::Mul, v[0], lowerer.constant(slope, dtype)));
  });
}

// min(max(x, low), high): NaN propagates, and low > high gives high, as
// torch.clamp does.
const Expr *clampExpr(Lowerer &lowerer, const Expr *x, const Expr *low,
                      const Expr *high) {
  if (low)
    x = lowerer.binary(BinaryOp::Max, x, low);
  if (high)
    x = lowerer.binary(BinaryOp::Min, x, high);
  return x;
}

LoweringResult hardtanh(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  double low = scalarArgument(node, 1), high = scalarArgument(node, 2);
  return map(lowerer, node, {0}, dtype, [=, &lowerer](const Values &v) {
    return clampExpr(lowerer, v[0], lowerer.constant(low, dtype),
                     lowerer.constant(high, dtype));
  });
}

// glu(self, dim): a * sigmoid(b), a and b the halves of `dim`.
LoweringResult glu(Lowerer &lowerer, const Node &node) {
  LoweredTensor input = lowerer.input(node, 0);
  if (input.isSymbolic())
    return std::nullopt;
  int64_t dim = wrapDim(node.arguments().at(1).toInt(), input.dim());
  Shape half = input.sizes;
  half[dim] /= 2;
  loop::ExprContext *exprs = &lowerer.exprs();
  int64_t shift = half[dim];
  LoweredTensor first =
      lowerer.remap(input, half, [](const Index &index) { return index; });
  LoweredTensor second = lowerer.remap(input, half, [=](const Index &index) {
    Index source = index;
    source[dim] = exprs->add(index[dim], exprs->integer(shift));
    return source;
  });
  DType math = mathType(lowerer, node);
  return std::vector<LoweredTensor>{lowerer.pointwise(
      half, math, resultType(lowerer, node), {first, second},
      [&lowerer](const Values &v) {
        return lowerer.binary(BinaryOp::Mul, v[0],
                              lowerer.unary(UnaryOp::Sigmoid, v[1]));
      })};
}

// hardshrink: 0 where -lambd <= x <= lambd, else x (NaN stays), compared
// in the tensor's dtype as torch's kernel does.
LoweringResult hardshrink(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  double lambd = scalarArgument(node, 1);
  return map(lowerer, node, {0}, dtype, [=, &lowerer](const Values &v) {
    const Expr *inside = lowerer.binary(
        BinaryOp::LogicalAnd,
        lowerer.binary(BinaryOp::Ge, v[0], lowerer.constant(-lambd, dtype)),
        lowerer.binary(BinaryOp::Le, v[0], lowerer.constant(lambd, dtype)));
    return lowerer.where(inside, lowerer.constant(0, dtype), v[0]);
  });
}

// softshrink: x - lambd above lambd, x + lambd below -lambd, else x * 0
// (NaN stays NaN).
LoweringResult softshrink(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  double lambd = scalarArgument(node, 1);
  return map(lowerer, node, {0}, math, [=, &lowerer](const Values &v) {
    const Expr *l = lowerer.constant(lambd, math);
    const Expr *minus = lowerer.constant(-lambd, math);
    return lowerer.where(
        lowerer.binary(BinaryOp::Gt, v[0], l),
        lowerer.binary(BinaryOp::Sub, v[0], l),
        lowerer.where(
            lowerer.binary(BinaryOp::Lt, v[0], minus),
            lowerer.binary(BinaryOp::Add, v[0], l),
            lowerer.binary(BinaryOp::Mul, v[0], lowerer.constant(0, math))));
  });
}

// relu6(x + 3) / 6, times x for hardswish.
template <bool TimesInput>
LoweringResult hardActivation(Lowerer &lowerer, const Node &node) {
  DType math = mathType(lowerer, node);
  return map(lowerer, node, {0}, math, [&lowerer, math](const Values &v) {
    auto c = [&](double value) { return lowerer.constant(value, math); };
    const Expr *gate = lowerer.binary(
        BinaryOp::Div,
        clampExpr(lowerer, lowerer.binary(BinaryOp::Add, v[0], c(3)), c(0),
                  c(6)),
        c(6));
    return TimesInput ? lowerer.binary(BinaryOp::Mul, v[0], gate) : gate;
  });
}

// clamp, clamp_min and clamp_max, with Scalar or Tensor bounds: arguments
// `low` and `high` of the node (0 where the op has none).
template <size_t Low, size_t High>
LoweringResult clamp(Lowerer &lowerer, const Node &node) {
  const auto &arguments = node.arguments();
  bool hasLow = Low && !arguments.at(Low).isNone();
  bool hasHigh = High && !arguments.at(High).isNone();
  if (!hasLow && !hasHigh)
    return std::nullopt; // torch raises
  std::vector<LoweredTensor> inputs{lowerer.input(node, 0)};
  if (hasLow)
    inputs.push_back(lowerer.input(node, Low));
  if (hasHigh)
    inputs.push_back(lowerer.input(node, High));
  const TensorMeta &meta = lowerer.resultMeta(node);
  return std::vector<LoweredTensor>{lowerer.pointwise(
      symbolicSizes(meta), meta.dtype, meta.dtype, inputs,
      [&lowerer, hasLow, hasHigh](const Values &v) {
        return clampExpr(lowerer, v[0], hasLow ? v[1] : nullptr,
                         hasHigh ? v[hasLow ? 2 : 1] : nullptr);
      })};
}

// lerp: self + weight (end - self), from the nearer end for weights >= 0.5
// as torch computes it.
LoweringResult lerp(Lowerer &lowerer, const Node &node) {
  DType dtype = resultType(lowerer, node);
  return map(
      lowerer, node, {0, 1, 2}, mathType(lowerer, node),
      [&lowerer, dtype](const Values &v) {
        DType math = v[0]->dtype();
        (void)dtype;
        const Expr *difference = lowerer.binary(BinaryOp::Sub, v[1], v[0]);
        const Expr *low =
            lowerer.binary(BinaryOp::Add, v[0],
                           lowerer.binary(BinaryOp::Mul, v[2], difference));
        const Expr *high = lowerer.binary(
            BinaryOp::Sub, v[1],
            lowerer.binary(BinaryOp::Mul, difference,
                           lowerer.binary(BinaryOp::Sub,
                                          lowerer.constant(1, math), v[2])));
        return lowerer.where(lowerer.binary(BinaryOp::Lt,
                                            lowerer.unary(UnaryOp::Abs, v[2]),
                                            lowerer.constant(0.5, math)),
                             low, high);
      });
}

// --- Selection and casts ---

// where(condition, self, other) with the condition at argument `condition`
// and the selected values at `then` and `otherwise`.
template <size_t Condition, size_t Then, size_t Otherwise>
LoweringResult select(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  std::vector<LoweredTensor> inputs{lowerer.input(node, Condition),
                                    lowerer.input(node, Then),
                                    lowerer.input(node, Otherwise)};
  return std::vector<LoweredTensor>{lowerer.pointwise(
      symbolicSizes(meta), {DType::Bool, meta.dtype, meta.dtype}, meta.dtype,
      inputs,
      [&lowerer](const Values &v) { return lowerer.where(v[0], v[1], v[2]); })};
}

// _to_copy, to, clone, lift_fresh_copy: the input in the result's dtype.
LoweringResult copy(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  LoweredTensor input = lowerer.input(node, 0);
  LoweredTensor result =
      lowerer.pointwise(symbolicSizes(meta), input.dtype, meta.dtype, {input},
                        [](const Values &v) { return v[0]; });
  result.cheap = input.cheap;
  return std::vector<LoweredTensor>{result};
}

// copy(self, src): src broadcast to self's shape and dtype.
LoweringResult copyFrom(Lowerer &lowerer, const Node &node) {
  const TensorMeta &meta = lowerer.resultMeta(node);
  LoweredTensor source = lowerer.input(node, 1);
  LoweredTensor result =
      lowerer.pointwise(symbolicSizes(meta), source.dtype, meta.dtype, {source},
                        [](const Values &v) { return v[0]; });
  result.cheap = source.cheap;
  return std::vector<LoweredTensor>{result};
}

} // namespace

const Expr *logSigmoid(Lowerer &lowerer, const Expr *x, DType math) {
  return lowerer.binary(
      BinaryOp::Sub,
      lowerer.binary(BinaryOp::Min, x, lowerer.constant(0, math)),
      lowerer.unary(
          UnaryOp::Log1p,
          lowerer.unary(
              UnaryOp::Exp,
              lowerer.unary(UnaryOp::Neg, lowerer.unary(UnaryOp::Abs, x)))));
}

void registerPointwiseLowerings(LoweringTable &table) {
  using B = BinaryOp;
  using U = UnaryOp;
  table.insert({
      {"aten::add.Tensor", alphaOp<B::Add, false>},
      {"aten::add.Scalar", alphaOp<B::Add, false>},
      {"aten::sub.Tensor", alphaOp<B::Sub, false>},
      {"aten::sub.Scalar", alphaOp<B::Sub, false>},
      {"aten::rsub.Tensor", alphaOp<B::Sub, true>},
      {"aten::rsub.Scalar", alphaOp<B::Sub, true>},
      {"aten::mul.Tensor", binaryOp<B::Mul>},
      {"aten::mul.Scalar", binaryOp<B::Mul>},
      {"aten::div.Tensor", binaryOp<B::Div>},
      {"aten::div.Scalar", binaryOp<B::Div>},
      {"aten::div.Tensor_mode", divideWithMode},
      {"aten::div.Scalar_mode", divideWithMode},
      {"aten::floor_divide", floatOnlyBinaryOp<BinaryOp::FloorDiv>},
      {"aten::floor_divide.Scalar", floatOnlyBinaryOp<BinaryOp::FloorDiv>},
      {"aten::fmod.Tensor", floatOnlyBinaryOp<B::Fmod>},
      {"aten::fmod.Scalar", floatOnlyBinaryOp<B::Fmod>},
      {"aten::remainder.Tensor", floatOnlyBinaryOp<B::Mod>},
      {"aten::remainder.Scalar", floatOnlyBinaryOp<B::Mod>},
      {"aten::remainder.Scalar_Tensor", floatOnlyBinaryOp<B::Mod>},
      {"aten::pow.Tensor_Tensor", floatOnlyBinaryOp<B::Pow>},
      {"aten::pow.Tensor_Scalar", powerByScalar},
      {"aten::pow.Scalar", floatOnlyBinaryOp<B::Pow>},
      {"aten::atan2", binaryOp<B::Atan2>},
      {"aten::minimum", binaryOp<B::Min>},
      {"aten::maximum", binaryOp<B::Max>},
      {"aten::lerp.Scalar", lerp},
      {"aten::lerp.Tensor", lerp},
      {"aten::exp", unaryOp<U::Exp>},
      {"aten::exp2", unaryOp<U::Exp2>},
      {"aten::expm1", unaryOp<U::Expm1>},
      {"aten::log", unaryOp<U::Log>},
      {"aten::log2", unaryOp<U::Log2>},
      {"aten::log10", unaryOp<U::Log10>},
      {"aten::log1p", unaryOp<U::Log1p>},
      {"aten::sqrt", unaryOp<U::Sqrt>},
      {"aten::rsqrt", unaryOp<U::Rsqrt>},
      {"aten::reciprocal", unaryOp<U::Reciprocal>},
      {"aten::sin", unaryOp<U::Sin>},
      {"aten::cos", unaryOp<U::Cos>},
      {"aten::tan", unaryOp<U::Tan>},
      {"aten::asin", unaryOp<U::Asin>},
      {"aten::acos", unaryOp<U::Acos>},
      {"aten::atan", unaryOp<U::Atan>},
      {"aten::sinh", unaryOp<U::Sinh>},
      {"aten::cosh", unaryOp<U::Cosh>},
      {"aten::tanh", unaryOp<U::Tanh>},
      {"aten::sigmoid", unaryOp<U::Sigmoid>},
      {"aten::erf", unaryOp<U::Erf>},
      {"aten::erfc", unaryOp<U::Erfc>},
      {"aten::neg", neg},
      {"aten::abs", abs},
      {"aten::sign", unaryOp<U::Sign>},
      {"aten::sgn", unaryOp<U::Sign>},
      {"aten::floor", roundingOp<U::Floor>},
      {"aten::ceil", roundingOp<U::Ceil>},
      {"aten::round", roundingOp<U::Round>},
      {"aten::round.decimals", roundDecimals},
      {"aten::trunc", roundingOp<U::Trunc>},
      {"aten::frac", frac},
      {"aten::nan_to_num", nanToNum},
      {"aten::relu", relu},
      {"aten::gelu", gelu},
      {"aten::silu", silu},
      {"aten::mish", mish},
      {"aten::hardswish", hardActivation<true>},
      {"aten::hardsigmoid", hardActivation<false>},
      {"aten::hardtanh", hardtanh},
      {"aten::glu", glu},
      {"aten::hardshrink", hardshrink},
      {"aten::softshrink", softshrink},
      {"aten::leaky_relu", leakyRelu},
      {"aten::elu", elu},
      {"aten::celu", celu},
      {"aten::_prelu_kernel", prelu},
      {"aten::threshold", threshold},
      {"aten::asinh", unaryOp<U::Asinh>},
      {"aten::acosh", unaryOp<U::Acosh>},
      {"aten::atanh", unaryOp<U::Atanh>},
      {"aten::sinc", sinc},
      {"aten::deg2rad", angleUnits<true>},
      {"aten::rad2deg", angleUnits<false>},
      {"aten::logit", logit},
      {"aten::signbit", predicate<Predicate::SignBit>},
      {"aten::isposinf", predicate<Predicate::PositiveInfinity>},
      {"aten::isneginf", predicate<Predicate::NegativeInfinity>},
      {"aten::copysign.Tensor", binaryOp<B::Copysign>},
      {"aten::copysign.Scalar", binaryOp<B::Copysign>},
      {"aten::heaviside", heaviside},
      {"aten::fmax", nanIgnoringExtremum<B::Max>},
      {"aten::fmin", nanIgnoringExtremum<B::Min>},
      {"aten::hypot", hypot},
      {"aten::logaddexp", logAddExp<false>},
      {"aten::logaddexp2", logAddExp<true>},
      {"aten::xlogy.Tensor", xlogy},
      {"aten::xlogy.Scalar_Other", xlogy},
      {"aten::addcmul", addProductOrQuotient<B::Mul>},
      {"aten::addcdiv", addProductOrQuotient<B::Div>},
      {"aten::softplus", softplusOp},
      {"aten::log_sigmoid_forward", logSigmoidForward},
      {"aten::clamp", clamp<1, 2>},
      {"aten::clamp.Tensor", clamp<1, 2>},
      {"aten::clamp_min", clamp<1, 0>},
      {"aten::clamp_min.Tensor", clamp<1, 0>},
      {"aten::clamp_max", clamp<0, 1>},
      {"aten::clamp_max.Tensor", clamp<0, 1>},
      {"aten::eq.Tensor", comparisonOp<B::Eq>},
      {"aten::eq.Scalar", comparisonOp<B::Eq>},
      {"aten::ne.Tensor", comparisonOp<B::Ne>},
      {"aten::ne.Scalar", comparisonOp<B::Ne>},
      {"aten::lt.Tensor", comparisonOp<B::Lt>},
      {"aten::lt.Scalar", comparisonOp<B::Lt>},
      {"aten::le.Tensor", comparisonOp<B::Le>},
      {"aten::le.Scalar", comparisonOp<B::Le>},
      {"aten::gt.Tensor", comparisonOp<B::Gt>},
      {"aten::gt.Scalar", comparisonOp<B::Gt>},
      {"aten::ge.Tensor", comparisonOp<B::Ge>},
      {"aten::ge.Scalar", comparisonOp<B::Ge>},
      {"aten::logical_and", logicalOp<B::LogicalAnd>},
      {"aten::logical_or", logicalOp<B::LogicalOr>},
      {"aten::logical_xor", logicalOp<B::LogicalXor>},
      {"aten::logical_not", logicalNot},
      {"aten::isnan", floatPredicate<U::IsNan>},
      {"aten::isinf", floatPredicate<U::IsInf>},
      {"aten::isfinite", isFinite},
      {"aten::bitwise_and.Tensor", binaryOp<B::BitwiseAnd>},
      {"aten::bitwise_and.Scalar", binaryOp<B::BitwiseAnd>},
      {"aten::bitwise_and.Scalar_Tensor", binaryOp<B::BitwiseAnd>},
      {"aten::bitwise_or.Tensor", binaryOp<B::BitwiseOr>},
      {"aten::bitwise_or.Scalar", binaryOp<B::BitwiseOr>},
      {"aten::bitwise_or.Scalar_Tensor", binaryOp<B::BitwiseOr>},
      {"aten::bitwise_xor.Tensor", binaryOp<B::BitwiseXor>},
      {"aten::bitwise_xor.Scalar", binaryOp<B::BitwiseXor>},
      {"aten::bitwise_xor.Scalar_Tensor", binaryOp<B::BitwiseXor>},
      {"aten::bitwise_not", bitwiseNot},
      {"aten::where.self", select<0, 1, 2>},
      {"aten::where.ScalarSelf", select<0, 1, 2>},
      {"aten::where.ScalarOther", select<0, 1, 2>},
      {"aten::where.Scalar", select<0, 1, 2>},
      {"aten::masked_fill.Scalar", select<1, 2, 0>},
      {"aten::masked_fill.Tensor", select<1, 2, 0>},
      {"aten::_to_copy", copy},
      {"aten::to.dtype", copy},
      {"aten::to.dtype_layout", copy},
      {"aten::to.device", copy},
      {"aten::to.other", copy},
      {"aten::clone", copy},
      {"aten::lift_fresh_copy", copy},
      {"aten::copy", copyFrom},
  });
}

} // namespace kiln::lowering
