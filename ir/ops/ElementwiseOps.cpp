// Meta functions of the elementwise ops: unary and binary math, activations,
// comparisons, logical and bitwise ops, where, clamp and casts.
// Depends on ir/OpRegistry.h and ir/ops/MetaUtils.h.
#include "ir/Error.h"
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

#include <cmath>

namespace kiln {
namespace {

using meta::checkSupported;
using meta::DTypeSet;
using meta::elementwiseResult;
using meta::fail;
using meta::kAllTypes;
using meta::kBoolTypes;
using meta::kComplexTypes;
using meta::kFloatingTypes;
using meta::kIntegerTypes;
using meta::operandOf;
using meta::PromotionOperand;
using meta::resultType;

// The types of torch's kernel families, by what they compute.
constexpr DTypeSet kReal = meta::kRealTypes;
constexpr DTypeSet kRealNoBool = kIntegerTypes | kFloatingTypes;
constexpr DTypeSet kNoBool = kAllTypes - kBoolTypes;
constexpr DTypeSet kBitwise = kBoolTypes | kIntegerTypes;
constexpr DTypeSet kInexact = kFloatingTypes | kComplexTypes;

// How an elementwise op's result type follows from its operands.
enum class Result {
  Promoted, // torch.result_type of the operands: add, mul, minimum
  Float,    // the promoted type, with integers and bool made the default
            // float: div, sin
  Real,     // the promoted type, with complex made real: abs
  Bool,     // comparisons, logical ops, isnan
  Self,     // self's type; the other operands do not promote: lerp, elu
};

// An op's own argument checks beyond dtype support, given the type its
// kernel computes in.
using Check = void (*)(const MetaArgs &args, DType computation);

struct ElementwiseRule {
  // The arguments (tensors or Python scalars) the op iterates over, in the
  // order torch's TensorIterator sees them: the first operand's strides
  // decide the result's layout.
  std::vector<int> operands;
  Result result;
  // The computation types torch's kernels implement.
  DTypeSet supported;
  Check check = nullptr;
};

TensorMeta applyRule(const MetaArgs &args, const ElementwiseRule &rule) {
  std::vector<const TensorMeta *> tensors;
  std::vector<PromotionOperand> promoting;
  for (int index : rule.operands) {
    if (args.isNone(index))
      continue;
    if (args[index].isTensor()) {
      tensors.push_back(&args.tensor(index));
      promoting.push_back(operandOf(*tensors.back()));
    } else {
      promoting.push_back(operandOf(args[index]));
    }
  }
  DType computation = rule.result == Result::Self ? args.tensor(0).dtype
                                                  : resultType(promoting);
  if (rule.result == Result::Float && isIntegral(computation, true))
    computation = kDefaultFloatDType;
  if (rule.check)
    rule.check(args, computation);
  checkSupported(args, computation, rule.supported);
  DType dtype = rule.result == Result::Bool   ? DType::Bool
                : rule.result == Result::Real ? toRealType(computation)
                                              : computation;
  // TensorIterator first copies an input of another dtype to the common one
  // (`.to(dtype)`, memory_format=preserve): an expanded int64 operand of a
  // float64 op orders the result as its dense copy does, not as its
  // zero strides would.
  std::vector<TensorMeta> converted;
  converted.reserve(tensors.size());
  for (const TensorMeta *tensor : tensors) {
    converted.push_back(*tensor);
    if (rule.result != Result::Self && tensor->dtype != computation) {
      converted.back().strides = meta::preservedStrides(*tensor);
      converted.back().dtype = computation;
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i)
    tensors[i] = &converted[i];
  return elementwiseResult(tensors, dtype, promoting.size() == tensors.size());
}

MetaFunction elementwise(std::vector<int> operands, Result result,
                         DTypeSet supported, Check check = nullptr) {
  ElementwiseRule rule{std::move(operands), result, supported, check};
  return [rule](const MetaArgs &args) {
    return std::vector<TensorMeta>{applyRule(args, rule)};
  };
}

MetaFunction unary(Result result, DTypeSet supported, Check check = nullptr) {
  return elementwise({0}, result, supported, check);
}

MetaFunction binary(Result result, DTypeSet supported, Check check = nullptr) {
  return elementwise({0, 1}, result, supported, check);
}

DType dtypeOfOperand(const MetaArgs &args, int index) {
  return args[index].isTensor() ? args.tensor(index).dtype
                                : meta::scalarDType(args[index]);
}

// --- Checks torch makes on particular ops ---------------------------------

// add, sub and rsub scale `other` by `alpha`, which must fit the result.
void checkAlpha(const MetaArgs &args, DType computation) {
  const Argument &alpha = args[2];
  if (alpha.kind() == Argument::Kind::Bool && computation != DType::Bool)
    fail(args, "Boolean alpha only supported for Boolean results");
  if (alpha.kind() == Argument::Kind::Double && isIntegral(computation, true))
    fail(args, "for integral input tensors, argument alpha must not be a "
               "floating point number; pass an integer alpha");
}

void checkSubtraction(const MetaArgs &args, DType computation) {
  bool selfBool = dtypeOfOperand(args, 0) == DType::Bool;
  bool otherBool = dtypeOfOperand(args, 1) == DType::Bool;
  if (selfBool && otherBool)
    fail(args, "subtraction of two bool tensors is not supported; use "
               "logical_xor() (the ^ operator) instead");
  if (selfBool || otherBool)
    fail(args, "subtraction with a bool tensor is not supported; to invert a "
               "mask, use logical_not() (the ~ operator) instead");
  checkAlpha(args, computation);
}

void checkIntegerPower(const MetaArgs &args, DType) {
  const Argument &exponent = args[1];
  if (isIntegral(dtypeOfOperand(args, 0), true) &&
      exponent.kind() != Argument::Kind::Double && exponent.toInt() < 0)
    fail(args, "integers to negative integer powers are not allowed; make the "
               "base or the exponent floating point");
}

void checkHardtanh(const MetaArgs &args, DType computation) {
  // Integer inputs truncate the limits (torch's legacy behaviour).
  if (computation == DType::UInt8 &&
      (std::trunc(args.real(1)) < 0 || std::trunc(args.real(2)) < 0))
    fail(args, "cannot do hardtanh on an unsigned type with negative limits");
}

void checkClampBounds(const MetaArgs &args, DType) {
  if (args.isNone(1) && args.isNone(2))
    fail(args, "at least one of 'min' or 'max' must not be None");
  if (isComplex(args.tensor(0).dtype))
    fail(args, "clamp is not supported for complex types");
}

// lerp needs end, and weight unless it is 0-d, in self's type.
void checkLerp(const MetaArgs &args, DType) {
  DType self = args.tensor(0).dtype;
  for (int index : {1, 2}) {
    if (!args[index].isTensor())
      continue;
    const TensorMeta &operand = args.tensor(index);
    if (operand.dtype == self || (index == 2 && operand.dim() == 0))
      continue;
    fail(args, "expected dtype " + std::string(dtypeName(self)) + " for `" +
                   args.schema().arguments[index].name + "` but got dtype " +
                   std::string(dtypeName(operand.dtype)));
  }
}

void checkSameDTypes(const MetaArgs &args, DType) {
  if (args.tensor(0).dtype != args.tensor(1).dtype)
    fail(args, "heaviside is not yet implemented for tensors with different "
               "dtypes.");
}

void checkGelu(const MetaArgs &args, DType) {
  const std::string &approximate = args.string(1);
  if (approximate != "none" && approximate != "tanh")
    fail(args, "approximate argument must be either 'none' or 'tanh', got '" +
                   approximate + "'");
}

// --- Ops with their own shape of arguments --------------------------------

// div.Tensor_mode and div.Scalar_mode: true division, or rounding division
// that keeps integer types.
std::vector<TensorMeta> divideWithMode(const MetaArgs &args) {
  if (args.isNone(2))
    return {applyRule(args, {{0, 1}, Result::Float, kAllTypes})};
  const std::string &mode = args.string(2);
  if (mode != "trunc" && mode != "floor")
    fail(args, "expected rounding_mode to be one of None, 'trunc', or "
               "'floor', but found '" +
                   mode + "'");
  return {applyRule(args, {{0, 1}, Result::Promoted, kRealNoBool})};
}

// clamp.Tensor: with both bounds torch's kernel has no bool version; with
// one it runs clamp_min or clamp_max, which have.
std::vector<TensorMeta> clampTensor(const MetaArgs &args) {
  bool bothBounds = !args.isNone(1) && !args.isNone(2);
  return {applyRule(args, {{0, 1, 2},
                           Result::Promoted,
                           bothBounds ? kRealNoBool : kReal,
                           checkClampBounds})};
}

// lerp.Tensor: a 0-d weight takes part in type promotion, as a 0-d operand.
std::vector<TensorMeta> lerpTensor(const MetaArgs &args) {
  Result result = !args[2].isTensor() || args.tensor(2).dim() == 0
                      ? Result::Promoted
                      : Result::Self;
  return {applyRule(args, {{0, 1, 2}, result, kInexact, checkLerp})};
}

// pow.Scalar: torch allocates a contiguous result of the exponent's shape
// (it may short-circuit without iterating).
std::vector<TensorMeta> scalarPower(const MetaArgs &args) {
  const TensorMeta &exponent = args.tensor(1);
  DType dtype = resultType({operandOf(args[0]), operandOf(exponent)});
  checkSupported(args, dtype, kNoBool);
  return {meta::contiguousLike(dtype, exponent.sizes, exponent.device)};
}

// where(condition, self, other): self and other promote, condition only
// broadcasts (it comes first in the iteration). torch converts self and
// other to the result type before iterating, and a converted copy is dense,
// which changes its say in the result's layout.
std::vector<TensorMeta> where(const MetaArgs &args) {
  const TensorMeta &condition = args.tensor(0);
  if (condition.dtype != DType::Bool)
    fail(args, "expected condition to be a bool tensor, got " +
                   std::string(dtypeName(condition.dtype)) +
                   "; compare it with something or call .bool()");
  std::vector<PromotionOperand> promoting;
  for (int index : {1, 2})
    promoting.push_back(args[index].isTensor() ? operandOf(args.tensor(index))
                                               : operandOf(args[index]));
  DType dtype = resultType(promoting);
  std::vector<TensorMeta> converted{condition};
  for (int index : {1, 2}) {
    if (!args[index].isTensor())
      continue;
    TensorMeta operand = args.tensor(index);
    if (operand.dtype != dtype) {
      operand.strides = meta::preservedStrides(operand);
      operand.dtype = dtype;
    }
    converted.push_back(std::move(operand));
  }
  std::vector<const TensorMeta *> tensors;
  for (const TensorMeta &tensor : converted)
    tensors.push_back(&tensor);
  return {elementwiseResult(tensors, dtype, tensors.size() == 3)};
}

// log_sigmoid_forward (what F.logsigmoid calls): the output and a buffer for
// the backward, both contiguous on the CPU (the buffer holds exp(-|x|));
// on CUDA the output is empty_like(self) and the buffer empty.
// glu(self, dim): the first half of `dim` times the sigmoid of the second,
// laid out as an elementwise op over the two halves.
std::vector<TensorMeta> glu(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (self.dim() == 0)
    fail(args, "glu does not support scalars because halving size must be "
               "even");
  int64_t dim = meta::wrapDim(args.integer(1), self.dim());
  if (self.sizes[dim] % 2 != 0)
    fail(args, "Halving dimension must be even, but dimension " +
                   std::to_string(dim) + " is size " +
                   std::to_string(self.sizes[dim]));
  checkSupported(args, self.dtype, kFloatingTypes);
  TensorMeta first = self, second = self;
  first.sizes[dim] /= 2;
  second.sizes[dim] /= 2;
  second.storageOffset += first.sizes[dim] * self.strides[dim];
  return {elementwiseResult({&first, &second}, self.dtype, true)};
}

std::vector<TensorMeta> logSigmoidForward(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  checkSupported(args, self.dtype, kFloatingTypes);
  if (self.device.type == DeviceType::CUDA)
    return {TensorMeta(self.dtype, self.sizes, meta::preservedStrides(self), 0,
                       self.device),
            meta::contiguousLike(self.dtype, {0}, self.device)};
  return {meta::contiguousLike(self.dtype, self.sizes, self.device),
          meta::contiguousLike(self.dtype, self.sizes, self.device)};
}

// masked_fill: self's type, broadcast with the mask, and contiguous (torch
// fills a contiguous clone of the broadcast self).
std::vector<TensorMeta> maskedFill(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  const TensorMeta &mask = args.tensor(1);
  if (mask.dtype != DType::Bool)
    fail(args, "only bool masks are supported, got a " +
                   std::string(dtypeName(mask.dtype)) + " mask");
  if (args[2].isTensor() && args.tensor(2).dim() != 0)
    fail(args, "only a 0-dimensional value tensor is supported, got one with " +
                   std::to_string(args.tensor(2).dim()) + " dimensions");
  Shape shape = meta::broadcastShapes(self.sizes, mask.sizes);
  return {meta::contiguousLike(self.dtype, shape,
                               meta::commonDevice({&self, &mask}))};
}

// --- Casts -----------------------------------------------------------------

// The result of copying `self` to a dtype, device and memory format:
// Preserve keeps self's layout where it is dense.
TensorMeta copied(const MetaArgs &args, const TensorMeta &self,
                  std::optional<DType> dtype, std::optional<Device> device,
                  std::optional<MemoryFormat> format) {
  MemoryFormat memoryFormat = format.value_or(MemoryFormat::Preserve);
  Shape strides;
  try {
    strides = memoryFormat == MemoryFormat::Preserve
                  ? meta::preservedStrides(self)
                  : meta::stridesForFormat(self.sizes, memoryFormat);
  } catch (const Error &error) {
    fail(args, error.what());
  }
  return TensorMeta(dtype.value_or(self.dtype), self.sizes, strides, 0,
                    device.value_or(self.device));
}

void checkStrided(const MetaArgs &args, int layoutIndex) {
  if (layoutIndex >= 0 && !args.isNone(layoutIndex) &&
      args[layoutIndex].toLayout() != Layout::Strided)
    throw Unsupported(args.schema().qualifiedName() +
                      ": only the strided layout is supported");
}

// A device argument without an index means the current device of its type;
// kiln takes that to be the tensor's own device when the types agree.
bool sameDevice(const Device &requested, const Device &actual) {
  return requested.type == actual.type &&
         (requested.index == actual.index || requested.index == -1);
}

// The `to` overloads return self itself (an alias) when nothing changes,
// else a copy.
TensorMeta convertedTo(const MetaArgs &args, std::optional<DType> dtype,
                       std::optional<Device> device, bool copy,
                       std::optional<MemoryFormat> format) {
  const TensorMeta &self = args.tensor(0);
  MemoryFormat memoryFormat = format.value_or(MemoryFormat::Preserve);
  bool aliases = (!dtype || *dtype == self.dtype) &&
                 (!device || sameDevice(*device, self.device)) && !copy &&
                 (memoryFormat == MemoryFormat::Preserve ||
                  meta::suggestMemoryFormat(self) == memoryFormat);
  if (aliases)
    return self;
  if (device && device->index == -1 && device->type == self.device.type)
    device = self.device;
  return copied(args, self, dtype, device, format);
}

std::vector<TensorMeta> toCopy(const MetaArgs &args) {
  checkStrided(args, 2);
  return {copied(args, args.tensor(0), args.optionalDType(1),
                 args.optionalDevice(3), args.optionalMemoryFormat(6))};
}

std::vector<TensorMeta> toDType(const MetaArgs &args) {
  return {convertedTo(args, args.optionalDType(1), std::nullopt,
                      args.boolean(3), args.optionalMemoryFormat(4))};
}

std::vector<TensorMeta> toDTypeLayout(const MetaArgs &args) {
  checkStrided(args, 2);
  return {convertedTo(args, args.optionalDType(1), args.optionalDevice(3),
                      args.boolean(6), args.optionalMemoryFormat(7))};
}

std::vector<TensorMeta> toDevice(const MetaArgs &args) {
  return {convertedTo(args, args.optionalDType(2), args.optionalDevice(1),
                      args.boolean(4), args.optionalMemoryFormat(5))};
}

std::vector<TensorMeta> toOther(const MetaArgs &args) {
  const TensorMeta &other = args.tensor(1);
  return {convertedTo(args, other.dtype, other.device, args.boolean(3),
                      args.optionalMemoryFormat(4))};
}

} // namespace

void registerElementwiseOps(OpRegistry &registry) {
  using R = Result;
  const OpRegistration table[] = {
      // Arithmetic.
      {"add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
       binary(R::Promoted, kAllTypes, checkAlpha)},
      {"add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
       binary(R::Promoted, kAllTypes, checkAlpha)},
      {"sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
       binary(R::Promoted, kAllTypes, checkSubtraction)},
      {"sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
       binary(R::Promoted, kAllTypes, checkSubtraction)},
      // rsub(self, other) is sub(other, self): other iterates first.
      {"rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
       elementwise({1, 0}, R::Promoted, kAllTypes, checkSubtraction)},
      {"rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
       elementwise({1, 0}, R::Promoted, kAllTypes, checkSubtraction)},
      {"mul.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kAllTypes)},
      {"mul.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Promoted, kAllTypes)},
      {"div.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Float, kAllTypes)},
      {"div.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Float, kAllTypes)},
      {"div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> "
       "Tensor",
       divideWithMode},
      {"div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode) -> "
       "Tensor",
       divideWithMode},
      {"floor_divide(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"floor_divide.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"fmod.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"fmod.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"remainder.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"remainder.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"remainder.Scalar_Tensor(Scalar self, Tensor other) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor",
       binary(R::Promoted, kNoBool)},
      // pow(bool, True) is a copy and pow(bool, False) a fill: no kernel
      // needs to support bool.
      {"pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
       binary(R::Promoted, kAllTypes, checkIntegerPower)},
      {"pow.Scalar(Scalar self, Tensor exponent) -> Tensor", scalarPower},
      {"atan2(Tensor self, Tensor other) -> Tensor",
       binary(R::Float, kFloatingTypes)},
      {"minimum(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kReal)},
      {"maximum(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kReal)},
      {"lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor",
       elementwise({0, 1}, R::Self, kInexact, checkLerp)},
      {"lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor",
       lerpTensor},

      // Unary math: integers and bool compute in the default float type.
      {"exp(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"exp2(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"expm1(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"log(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"log2(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"log10(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"log1p(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"sqrt(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"rsqrt(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"reciprocal(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"sin(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"cos(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"tan(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"asin(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"acos(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"atan(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"sinh(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"cosh(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"tanh(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"sigmoid(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"erf(Tensor self) -> Tensor", unary(R::Float, kFloatingTypes)},
      {"erfc(Tensor self) -> Tensor", unary(R::Float, kFloatingTypes)},
      {"erfinv(Tensor self) -> Tensor", unary(R::Float, kFloatingTypes)},
      {"asinh(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"acosh(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"atanh(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"sinc(Tensor self) -> Tensor", unary(R::Float, kInexact)},
      {"deg2rad(Tensor self) -> Tensor", unary(R::Float, kFloatingTypes)},
      {"rad2deg(Tensor self) -> Tensor", unary(R::Float, kFloatingTypes)},
      {"logit(Tensor self, float? eps=None) -> Tensor",
       unary(R::Float, kFloatingTypes)},
      {"copysign.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Float, kFloatingTypes)},
      {"copysign.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Float, kFloatingTypes)},
      {"xlogy.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Float, kFloatingTypes)},
      {"xlogy.Scalar_Other(Tensor self, Scalar other) -> Tensor",
       binary(R::Float, kFloatingTypes)},
      {"hypot(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kFloatingTypes)},
      {"logaddexp(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kFloatingTypes)},
      {"logaddexp2(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kFloatingTypes)},
      {"heaviside(Tensor self, Tensor values) -> Tensor",
       binary(R::Promoted, kReal, checkSameDTypes)},
      {"fmax(Tensor self, Tensor other) -> Tensor", binary(R::Promoted, kReal)},
      {"fmin(Tensor self, Tensor other) -> Tensor", binary(R::Promoted, kReal)},
      // self + value * tensor1 * tensor2 (or / tensor2), all promoting.
      {"addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar "
       "value=1) -> Tensor",
       elementwise({0, 1, 2}, R::Promoted, kRealNoBool)},
      {"addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar "
       "value=1) -> Tensor",
       elementwise({0, 1, 2}, R::Promoted, kFloatingTypes)},

      // Unary ops that keep the input type.
      {"neg(Tensor self) -> Tensor", unary(R::Promoted, kNoBool)},
      {"abs(Tensor self) -> Tensor", unary(R::Real, kNoBool)},
      {"sign(Tensor self) -> Tensor", unary(R::Promoted, kReal)},
      {"sgn(Tensor self) -> Tensor", unary(R::Promoted, kAllTypes)},
      {"floor(Tensor self) -> Tensor", unary(R::Promoted, kRealNoBool)},
      {"ceil(Tensor self) -> Tensor", unary(R::Promoted, kRealNoBool)},
      {"round(Tensor self) -> Tensor", unary(R::Promoted, kRealNoBool)},
      {"round.decimals(Tensor self, *, int decimals) -> Tensor",
       unary(R::Promoted, kFloatingTypes)},
      {"trunc(Tensor self) -> Tensor", unary(R::Promoted, kRealNoBool)},
      {"frac(Tensor self) -> Tensor", unary(R::Promoted, kFloatingTypes)},
      {"nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? "
       "neginf=None) -> Tensor",
       unary(R::Promoted, kAllTypes)},

      // Activations.
      {"relu(Tensor self) -> Tensor", unary(R::Promoted, kRealNoBool)},
      {"gelu(Tensor self, *, str approximate=\"none\") -> Tensor",
       unary(R::Self, kFloatingTypes, checkGelu)},
      {"silu(Tensor self) -> Tensor", unary(R::Self, kInexact)},
      {"mish(Tensor self) -> Tensor", unary(R::Self, kFloatingTypes)},
      {"hardswish(Tensor self) -> Tensor", unary(R::Self, kFloatingTypes)},
      {"hardsigmoid(Tensor self) -> Tensor", unary(R::Self, kFloatingTypes)},
      {"hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor",
       unary(R::Self, kRealNoBool, checkHardtanh)},
      {"glu(Tensor self, int dim=-1) -> Tensor", glu},
      {"hardshrink(Tensor self, Scalar lambd=0.5) -> Tensor",
       unary(R::Self, kFloatingTypes)},
      {"softshrink(Tensor self, Scalar lambd=0.5) -> Tensor",
       unary(R::Self, kFloatingTypes)},
      {"leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor",
       unary(R::Self, kFloatingTypes)},
      {"elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar "
       "input_scale=1) -> Tensor",
       unary(R::Self, kFloatingTypes)},
      {"softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor",
       unary(R::Self, kFloatingTypes)},
      {"_prelu_kernel(Tensor self, Tensor weight) -> Tensor",
       binary(R::Promoted, kFloatingTypes)},
      {"celu(Tensor self, Scalar alpha=1.0) -> Tensor",
       unary(R::Self, kFloatingTypes)},
      {"threshold(Tensor self, Scalar threshold, Scalar value) -> Tensor",
       unary(R::Self, kRealNoBool)},
      {"log_sigmoid_forward(Tensor self) -> (Tensor output, Tensor buffer)",
       logSigmoidForward},

      // Clamping: the bounds take part in type promotion.
      {"clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
       elementwise({0, 1, 2}, R::Promoted, kRealNoBool, checkClampBounds)},
      {"clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> "
       "Tensor",
       clampTensor},
      {"clamp_min(Tensor self, Scalar min) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"clamp_min.Tensor(Tensor self, Tensor min) -> Tensor",
       binary(R::Promoted, kReal)},
      {"clamp_max(Tensor self, Scalar max) -> Tensor",
       binary(R::Promoted, kRealNoBool)},
      {"clamp_max.Tensor(Tensor self, Tensor max) -> Tensor",
       binary(R::Promoted, kReal)},

      {"signbit(Tensor self) -> Tensor", unary(R::Bool, kReal)},
      {"isposinf(Tensor self) -> Tensor", unary(R::Bool, kReal)},
      {"isneginf(Tensor self) -> Tensor", unary(R::Bool, kReal)},
      // Comparisons and predicates: bool results.
      {"eq.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kAllTypes)},
      {"eq.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Bool, kAllTypes)},
      {"ne.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kAllTypes)},
      {"ne.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Bool, kAllTypes)},
      {"lt.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kReal)},
      {"lt.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Bool, kReal)},
      {"le.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kReal)},
      {"le.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Bool, kReal)},
      {"gt.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kReal)},
      {"gt.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Bool, kReal)},
      {"ge.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kReal)},
      {"ge.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Bool, kReal)},
      {"logical_and(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kAllTypes)},
      {"logical_or(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kAllTypes)},
      {"logical_xor(Tensor self, Tensor other) -> Tensor",
       binary(R::Bool, kAllTypes)},
      {"logical_not(Tensor self) -> Tensor", unary(R::Bool, kAllTypes)},
      {"isnan(Tensor self) -> Tensor", unary(R::Bool, kAllTypes)},
      {"isinf(Tensor self) -> Tensor", unary(R::Bool, kAllTypes)},
      {"isfinite(Tensor self) -> Tensor", unary(R::Bool, kAllTypes)},

      // Bitwise ops: bool and integer types only.
      {"bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_and.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_and.Scalar_Tensor(Scalar self, Tensor other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_or.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_or.Scalar_Tensor(Scalar self, Tensor other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_xor.Scalar(Tensor self, Scalar other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_xor.Scalar_Tensor(Scalar self, Tensor other) -> Tensor",
       binary(R::Promoted, kBitwise)},
      {"bitwise_not(Tensor self) -> Tensor", unary(R::Promoted, kBitwise)},

      // Selection.
      {"where.self(Tensor condition, Tensor self, Tensor other) -> Tensor",
       where},
      {"where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> "
       "Tensor",
       where},
      {"where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> "
       "Tensor",
       where},
      {"where.Scalar(Tensor condition, Scalar self, Scalar other) -> Tensor",
       where},
      {"masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
       maskedFill},
      {"masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor",
       maskedFill},

      // Casts.
      {"_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
       "Device? device=None, bool? pin_memory=None, bool non_blocking=False, "
       "MemoryFormat? memory_format=None) -> Tensor",
       toCopy},
      {"to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, "
       "bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
       toDType},
      {"to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? "
       "layout=None, Device? device=None, bool? pin_memory=None, bool "
       "non_blocking=False, bool copy=False, MemoryFormat? "
       "memory_format=None) -> Tensor(a)",
       toDTypeLayout},
      {"to.device(Tensor(a) self, Device device, ScalarType dtype, bool "
       "non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) "
       "-> Tensor(a)",
       toDevice},
      {"to.other(Tensor(a) self, Tensor other, bool non_blocking=False, bool "
       "copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
       toOther},
  };
  for (const OpRegistration &registration : table)
    registry.add(registration);
}

} // namespace kiln
