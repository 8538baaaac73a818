// Meta functions of the elementwise ops: unary and binary math, comparisons,
// logical and bitwise ops, where, clamp and casts.
// Depends on ir/OpRegistry.h and ir/ops/MetaUtils.h.
#include "ir/OpRegistry.h"
#include "ir/ops/MetaUtils.h"

namespace kiln {
namespace {

using meta::elementwiseResult;
using meta::operandOf;
using meta::resultType;

// self (Tensor) op other (Tensor or Scalar): the promoted type.
std::vector<TensorMeta> binaryArithmetic(const MetaArgs &args) {
  const TensorMeta &self = args.tensor(0);
  if (args[1].isTensor()) {
    const TensorMeta &other = args.tensor(1);
    DType dtype = resultType({operandOf(self), operandOf(other)});
    return {elementwiseResult({&self, &other}, dtype)};
  }
  DType dtype = resultType({operandOf(self), operandOf(args[1])});
  return {elementwiseResult({&self}, dtype)};
}

} // namespace

void registerElementwiseOps(OpRegistry &registry) {
  const OpRegistration table[] = {
      {"add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
       binaryArithmetic},
      {"add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
       binaryArithmetic},
  };
  for (const OpRegistration &registration : table)
    registry.add(registration);
}

} // namespace kiln
