// Meta functions of the reduction ops (sum, mean, amax, max, argmax, var,
// any, logsumexp, vector norm, ...) and of the cumulative scans.
// Depends on ir/OpRegistry.h and ir/ops/MetaUtils.h.
#include "ir/Error.h"
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

#include <cmath>

namespace kiln {
namespace {

using meta::checkSupported;
using meta::DTypeSet;
using meta::fail;
using meta::kAllTypes;
using meta::kBoolTypes;
using meta::kComplexTypes;
using meta::kFloatingTypes;
using meta::kIntegerTypes;

constexpr DTypeSet kReal = meta::kRealTypes;
constexpr DTypeSet kInexact = kFloatingTypes | kComplexTypes;

// How a reduction's result type follows from its input (and its dtype
// argument, where the schema has one).
enum class Output {
  Same,       // amax, max: the input's type
  Accumulate, // sum, prod: integers and bool accumulate in int64
  Mean,       // mean: the input's type, which must be floating or complex
  Real,       // var, std, norms: the real type of the input (or dtype=)
  Float,      // logsumexp: integers and bool give the default float
  AnyAll,     // any, all: uint8 stays uint8, others give bool
  Index,      // argmax: int64
};

// A second result some reductions return beside the first.
enum class Extra {
  None,
  Indices, // max.dim: int64 indices
  Mean,    // var_mean: the mean, in the input's type
  Maximum, // aminmax: the maximum, in the first's type
};

struct ReductionRule {
  Output output;
  // The input types torch's kernels take, and the result types they make.
  DTypeSet inputs = kAllTypes;
  DTypeSet outputs = kAllTypes;
  // Reductions without an identity (max, argmax) cannot reduce nothing: an
  // empty input needs named dims, each of non-zero size.
  bool needsIdentity = false;
  // any.dims and all.dims read `dim=[]` as no dims; the others as all.
  bool emptyDimsReduceNothing = false;
  Extra extra = Extra::None;
};

// The `dim` argument as a list: None where the schema has none or it is
// None (every dim); an int becomes a one-element list.
std::optional<std::vector<int64_t>> dimArgument(const MetaArgs &args) {
  int index = args.schema().findArgument("dim");
  if (index < 0 || args.isNone(index))
    return std::nullopt;
  return args.intList(index);
}

bool keepdimArgument(const MetaArgs &args) {
  int index = args.schema().findArgument("keepdim");
  return index >= 0 && args.boolean(index);
}

std::optional<DType> dtypeArgument(const MetaArgs &args) {
  int index = args.schema().findArgument("dtype");
  return index < 0 ? std::nullopt : args.optionalDType(index);
}

// The wrapped dims a reduction reduces, or an Error naming the bad dim.
std::vector<int64_t>
reducedDims(const MetaArgs &args,
            const std::optional<std::vector<int64_t>> &dims, int64_t ndim) {
  try {
    return meta::reductionDims(dims, ndim);
  } catch (const Error &error) {
    fail(args, error.what());
  }
}

// Empty inputs have nothing to reduce where there is no identity.
void checkNonEmptyReduction(const MetaArgs &args, const TensorMeta &self,
                            const std::optional<std::vector<int64_t>> &dims,
                            const std::vector<int64_t> &reduced) {
  if (self.numel() != 0)
    return;
  if (!dims || dims->empty())
    fail(args, "cannot reduce an empty tensor of shape " +
                   shapeToString(self.sizes) +
                   " over all dims, as the op has no identity: name the "
                   "reduction dims with 'dim'");
  for (int64_t dim : reduced)
    if (self.sizes[dim] == 0)
      fail(args, "expected reduction dim " + std::to_string(dim) +
                     " to have non-zero size (shape " +
                     shapeToString(self.sizes) + ")");
}

DType outputDType(const MetaArgs &args, const ReductionRule &rule,
                  DType input) {
  std::optional<DType> requested = dtypeArgument(args);
  switch (rule.output) {
  case Output::Same:
    return input;
  case Output::Accumulate:
    return requested.value_or(isIntegral(input, true) ? DType::Int64 : input);
  case Output::Mean:
    return requested.value_or(input);
  case Output::Real:
    return toRealType(requested.value_or(input));
  case Output::Float:
    return isIntegral(input, true) ? kDefaultFloatDType : input;
  case Output::AnyAll:
    return input == DType::UInt8 ? DType::UInt8 : DType::Bool;
  case Output::Index:
    return DType::Int64;
  }
  return input;
}

std::vector<TensorMeta> reduce(const MetaArgs &args,
                               const ReductionRule &rule) {
  const TensorMeta &self = args.tensor(0);
  checkSupported(args, self.dtype, rule.inputs);
  DType dtype = outputDType(args, rule, self.dtype);
  if (!rule.outputs.contains(dtype)) {
    bool hasDType = args.schema().findArgument("dtype") >= 0;
    fail(args, "cannot produce a " + std::string(dtypeName(dtype)) +
                   " result (torch's kernels make " + rule.outputs.str() + ")" +
                   (hasDType ? "; pass a dtype= among those" : ""));
  }
  std::optional<std::vector<int64_t>> dims = dimArgument(args);
  std::vector<int64_t> reduced;
  if (!(rule.emptyDimsReduceNothing && dims && dims->empty()))
    reduced = reducedDims(args, dims, self.dim());
  if (rule.needsIdentity)
    checkNonEmptyReduction(args, self, dims, reduced);
  Shape shape = meta::reducedShape(self.sizes, reduced, keepdimArgument(args));
  std::vector<TensorMeta> results{
      meta::contiguousLike(dtype, shape, self.device)};
  if (rule.extra == Extra::Indices)
    results.push_back(meta::contiguousLike(DType::Int64, shape, self.device));
  if (rule.extra == Extra::Mean || rule.extra == Extra::Maximum)
    results.push_back(meta::contiguousLike(self.dtype, shape, self.device));
  return results;
}

MetaFunction reduction(ReductionRule rule) {
  return [rule](const MetaArgs &args) { return reduce(args, rule); };
}

const ReductionRule kSum{Output::Accumulate};
const ReductionRule kMean{Output::Mean, kAllTypes, kInexact};
const ReductionRule kExtremum{Output::Same, kReal, kAllTypes, true};
const ReductionRule kExtremumWithIndices{Output::Same, kReal, kAllTypes,
                                         true,         false, Extra::Indices};
const ReductionRule kArgExtremum{Output::Index, kReal - kBoolTypes, kAllTypes,
                                 true};
const ReductionRule kVariance{Output::Real, kInexact};
const ReductionRule kVarianceAndMean{Output::Real, kInexact, kAllTypes,
                                     false,        false,    Extra::Mean};
const ReductionRule kAnyAll{Output::AnyAll};
const ReductionRule kAnyAllDims{Output::AnyAll, kAllTypes, kAllTypes, false,
                                true};

// logsumexp: torch's kernel fails on dim=[] without keepdim for non-empty
// tensors with dims (it adds the [1, 1] max to the [] sum), so kiln refuses
// it too.
std::vector<TensorMeta> logsumexp(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (args.intList(1).empty() && !args.boolean(2) && self.dim() > 0 &&
      self.numel() > 0)
    fail(args, "dim=[] without keepdim fails in torch's logsumexp; name the "
               "dims to reduce");
  return reduce(args, {Output::Float});
}

// nansum: a plain sum for integer and bool inputs; torch has no complex
// version for floating ones.
std::vector<TensorMeta> nansum(const MetaArgs &args) {
  if (isIntegral(args.tensor(0).dtype, true))
    return reduce(args, kSum);
  return reduce(args, {Output::Accumulate, kFloatingTypes, kReal});
}

// linalg_vector_norm: real results from floating or complex inputs; the
// inf and negative norms have no identity on empty inputs.
std::vector<TensorMeta> vectorNorm(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  checkSupported(args, self.dtype, kInexact);
  if (std::optional<DType> dtype = args.optionalDType(4)) {
    std::string name(dtypeName(*dtype));
    if (!kInexact.contains(*dtype))
      fail(args, "dtype should be floating point or complex, got " + name);
    if (isComplex(self.dtype) != isComplex(*dtype))
      fail(args, std::string("dtype should be ") +
                     (isComplex(self.dtype) ? "complex" : "real") + " for " +
                     (isComplex(self.dtype) ? "complex" : "real") +
                     " inputs, got " + name);
    if (promoteTypes(self.dtype, *dtype) != *dtype)
      fail(args, "the input's dtype " + std::string(dtypeName(self.dtype)) +
                     " should convert to dtype " + name + " without narrowing");
  }
  double ord = args.real(1);
  if (ord < 0 || std::isinf(ord)) {
    std::optional<std::vector<int64_t>> dims = dimArgument(args);
    checkNonEmptyReduction(args, self, dims,
                           reducedDims(args, dims, self.dim()));
  }
  return reduce(args, {Output::Real});
}

// cumsum and cumprod: a contiguous result of self's shape; integers and bool
// accumulate in int64, and no kernel accumulates in bool.
std::vector<TensorMeta> scan(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  try {
    meta::wrapDim(args.integer(1), self.dim());
  } catch (const Error &error) {
    fail(args, error.what());
  }
  std::optional<DType> requested = args.optionalDType(2);
  DType dtype = requested.value_or(isIntegral(self.dtype, true) ? DType::Int64
                                                                : self.dtype);
  checkSupported(args, dtype, kAllTypes - kBoolTypes);
  return {meta::contiguousLike(dtype, self.sizes, self.device)};
}

} // namespace

// mse_loss and smooth_l1_loss (self and target promoted) and huber_loss
// (self's dtype): elementwise over the two broadcast (reduction 0, none),
// else a 0-d mean (1) or sum (2).
std::vector<TensorMeta> pointwiseLoss(const MetaArgs &args, bool promotes) {
  const TensorMeta &self = args.tensor(0), &target = args.tensor(1);
  DType dtype =
      promotes
          ? meta::resultType({meta::operandOf(self), meta::operandOf(target)})
          : self.dtype;
  checkSupported(args, dtype, kFloatingTypes);
  int64_t reduction = args.integer(2);
  if (reduction < 0 || reduction > 2)
    fail(args, std::to_string(reduction) + " is not a valid value for "
                                           "reduction");
  if (reduction == 0)
    return {meta::elementwiseResult({&self, &target}, dtype, true)};
  meta::broadcastShapes(self.sizes, target.sizes);
  return {TensorMeta(dtype, {}, meta::commonDevice({&self, &target}))};
}

std::vector<TensorMeta> promotedLoss(const MetaArgs &args) {
  return pointwiseLoss(args, true);
}

std::vector<TensorMeta> selfTypedLoss(const MetaArgs &args) {
  return pointwiseLoss(args, false);
}

// binary_cross_entropy_with_logits(self, target, weight, pos_weight,
// reduction): self's dtype; target of self's sizes, the weights
// broadcasting to them; elementwise for reduction none, else 0-d.
std::vector<TensorMeta> logitsCrossEntropy(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0), &target = args.tensor(1);
  checkSupported(args, self.dtype, kFloatingTypes);
  if (target.sizes != self.sizes)
    fail(args, "Target size (" + shapeToString(target.sizes) +
                   ") must be the same as input size (" +
                   shapeToString(self.sizes) + ")");
  for (size_t index : {2, 3})
    if (const TensorMeta *weight = args.optionalTensor(index))
      if (meta::broadcastShapes(weight->sizes, self.sizes) != self.sizes)
        fail(args, "the weight of shape " + shapeToString(weight->sizes) +
                       " does not broadcast to the input's shape " +
                       shapeToString(self.sizes));
  int64_t reduction = args.integer(4);
  if (reduction < 0 || reduction > 2)
    fail(args, std::to_string(reduction) + " is not a valid value for "
                                           "reduction");
  if (reduction == 0)
    return {meta::contiguousLike(self.dtype, self.sizes, self.device)};
  return {TensorMeta(self.dtype, {}, self.device)};
}

// nll_loss_forward (self [N, C] or [C], target [N] or []) and
// nll_loss2d_forward (self [N, C, H, W], target [N, H, W]): the output has
// target's sizes for reduction none of a batch, else it is 0-d; the total
// weight is 0-d. torch's checks, in its words.
std::vector<TensorMeta> nllLoss(const MetaArgs &args, bool spatial) {
  const TensorMeta &self = args.tensor(0), &target = args.tensor(1);
  checkSupported(args, self.dtype, kFloatingTypes);
  if (target.dtype != DType::Int64 && target.dtype != DType::UInt8)
    fail(args, "expected target dtype to be Long or Byte, but got " +
                   std::string(dtypeName(target.dtype)));
  int64_t reduction = args.integer(3);
  if (reduction < 0 || reduction > 2)
    fail(args, std::to_string(reduction) + " is not a valid value for "
                                           "reduction");
  if (spatial) {
    if (self.dim() != 4)
      fail(args, "only batches of spatial inputs supported (4D tensors), but "
                 "got input of dimension: " +
                     std::to_string(self.dim()));
    if (target.dim() != 3)
      fail(args, "only batches of spatial targets supported (3D tensors) but "
                 "got targets of dimension: " +
                     std::to_string(target.dim()));
    if (self.sizes[0] != target.sizes[0] || self.sizes[2] != target.sizes[1] ||
        self.sizes[3] != target.sizes[2])
      fail(args, "input and target batch or spatial sizes don't match: "
                 "target " +
                     shapeToString(target.sizes) + ", input " +
                     shapeToString(self.sizes));
  } else {
    if (self.dim() < 1 || self.dim() > 2)
      fail(args, "input tensor should be 1D or 2D");
    if (target.dim() > 1)
      fail(args, "0D or 1D target tensor expected, multi-target not "
                 "supported");
    bool unbatched = self.dim() == 1 && target.dim() == 0;
    if (!unbatched && self.sizes[0] != target.numel())
      fail(args, "size mismatch (got input: " + shapeToString(self.sizes) +
                     ", target: " + shapeToString(target.sizes) + ")");
  }
  int64_t classes = self.sizes[spatial || self.dim() == 2 ? 1 : 0];
  if (const TensorMeta *weight = args.optionalTensor(2)) {
    if (weight->numel() != classes)
      fail(args, "weight tensor should be defined either for all " +
                     std::to_string(classes) +
                     " classes or no classes but got weight tensor of "
                     "shape: " +
                     shapeToString(weight->sizes));
    if (weight->dtype != self.dtype)
      fail(args, "expected the weight's dtype, " +
                     std::string(dtypeName(weight->dtype)) +
                     ", to be the input's, " +
                     std::string(dtypeName(self.dtype)));
  }
  Shape sizes = reduction == 0 && self.dim() > 1 ? target.sizes : Shape{};
  return {meta::contiguousLike(self.dtype, sizes, self.device),
          TensorMeta(self.dtype, {}, self.device)};
}

std::vector<TensorMeta> nllLoss1d(const MetaArgs &args) {
  return nllLoss(args, false);
}

std::vector<TensorMeta> nllLoss2d(const MetaArgs &args) {
  return nllLoss(args, true);
}

// trace: the sum of a matrix's diagonal, 0-d, integers summed as int64.
std::vector<TensorMeta> trace(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (self.dim() != 2)
    fail(args, "trace: expected a matrix, but got tensor with dim " +
                   std::to_string(self.dim()));
  checkSupported(args, self.dtype, kAllTypes - kBoolTypes);
  DType dtype = isIntegral(self.dtype, true) ? DType::Int64 : self.dtype;
  return {TensorMeta(dtype, {}, self.device)};
}

void registerReductionOps(OpRegistry &registry) {
  const OpRegistration table[] = {
      {"mse_loss(Tensor self, Tensor target, int reduction=1) -> Tensor",
       promotedLoss},
      {"binary_cross_entropy_with_logits(Tensor self, Tensor target, Tensor? "
       "weight=None, Tensor? pos_weight=None, int reduction=1) -> Tensor",
       logitsCrossEntropy},
      {"nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int "
       "reduction, SymInt ignore_index) -> (Tensor output, Tensor "
       "total_weight)",
       nllLoss1d},
      {"nll_loss2d_forward(Tensor self, Tensor target, Tensor? weight, int "
       "reduction, SymInt ignore_index) -> (Tensor output, Tensor "
       "total_weight)",
       nllLoss2d},
      {"soft_margin_loss(Tensor self, Tensor target, int reduction=1) -> "
       "Tensor",
       promotedLoss},
      {"smooth_l1_loss(Tensor self, Tensor target, int reduction=1, float "
       "beta=1.0) -> Tensor",
       promotedLoss},
      {"huber_loss(Tensor self, Tensor target, int reduction=1, float "
       "delta=1.0) -> Tensor",
       selfTypedLoss},
      {"sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       reduction(kSum)},
      {"sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
       "ScalarType? dtype=None) -> Tensor",
       reduction(kSum)},
      {"nansum(Tensor self, int[1]? dim=None, bool keepdim=False, *, "
       "ScalarType? dtype=None) -> Tensor",
       nansum},
      {"prod(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       reduction(kSum)},
      {"prod.dim_int(Tensor self, int dim, bool keepdim=False, *, "
       "ScalarType? dtype=None) -> Tensor",
       reduction(kSum)},
      {"mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
       reduction(kMean)},
      {"mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, "
       "ScalarType? dtype=None) -> Tensor",
       reduction(kMean)},
      {"amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
       reduction(kExtremum)},
      {"amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
       reduction(kExtremum)},
      {"max(Tensor self) -> Tensor", reduction(kExtremum)},
      {"min(Tensor self) -> Tensor", reduction(kExtremum)},
      {"aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor "
       "min, Tensor max)",
       reduction(
           {Output::Same, kReal, kAllTypes, true, false, Extra::Maximum})},
      {"count_nonzero(Tensor self, int? dim=None) -> Tensor",
       reduction({Output::Index})},
      {"count_nonzero.dim_IntList(Tensor self, int[] dim) -> Tensor",
       reduction({Output::Index})},
      {"trace(Tensor self) -> Tensor", trace},
      {"max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, "
       "Tensor indices)",
       reduction(kExtremumWithIndices)},
      {"min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, "
       "Tensor indices)",
       reduction(kExtremumWithIndices)},
      {"argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
       reduction(kArgExtremum)},
      {"argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
       reduction(kArgExtremum)},
      {"var(Tensor self, bool unbiased=True) -> Tensor", reduction(kVariance)},
      {"var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool "
       "keepdim=False) -> Tensor",
       reduction(kVariance)},
      {"var.correction(Tensor self, int[1]? dim=None, *, Scalar? "
       "correction=None, bool keepdim=False) -> Tensor",
       reduction(kVariance)},
      {"std(Tensor self, bool unbiased=True) -> Tensor", reduction(kVariance)},
      {"std.dim(Tensor self, int[1]? dim, bool unbiased=True, bool "
       "keepdim=False) -> Tensor",
       reduction(kVariance)},
      {"std.correction(Tensor self, int[1]? dim=None, *, Scalar? "
       "correction=None, bool keepdim=False) -> Tensor",
       reduction(kVariance)},
      {"var_mean(Tensor self, bool unbiased=True) -> (Tensor, Tensor)",
       reduction(kVarianceAndMean)},
      {"var_mean.dim(Tensor self, int[1]? dim, bool unbiased=True, bool "
       "keepdim=False) -> (Tensor, Tensor)",
       reduction(kVarianceAndMean)},
      {"var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? "
       "correction=None, bool keepdim=False) -> (Tensor, Tensor)",
       reduction(kVarianceAndMean)},
      {"std_mean(Tensor self, bool unbiased=True) -> (Tensor, Tensor)",
       reduction(kVarianceAndMean)},
      {"std_mean.dim(Tensor self, int[1]? dim, bool unbiased=True, bool "
       "keepdim=False) -> (Tensor, Tensor)",
       reduction(kVarianceAndMean)},
      {"std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? "
       "correction=None, bool keepdim=False) -> (Tensor, Tensor)",
       reduction(kVarianceAndMean)},
      {"any(Tensor self) -> Tensor", reduction(kAnyAll)},
      {"any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
       reduction(kAnyAll)},
      {"any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
       reduction(kAnyAllDims)},
      {"all(Tensor self) -> Tensor", reduction(kAnyAll)},
      {"all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
       reduction(kAnyAll)},
      {"all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
       reduction(kAnyAllDims)},
      {"logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
       logsumexp},
      {"linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool "
       "keepdim=False, *, ScalarType? dtype=None) -> Tensor",
       vectorNorm},
      {"cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
       scan},
      {"cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
       scan},
  };
  for (const OpRegistration &registration : table)
    registry.add(registration);
}

} // namespace kiln
