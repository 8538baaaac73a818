// The reduction algebra as LLVM IR for any target: identities, combining
// (argmax/argmin with positions), lane narrowing, accumulator dtypes.
// Depends on backend/llvm/LlvmTypes.h, ir/LoopIR.h, LLVM.
#pragma once

#include "backend/llvm/LlvmTypes.h"
#include "ir/LoopIR.h"

#include <utility>

namespace kiln::backend {

/// The dtype a reduction accumulates in (Bool for Any/All).
DType accumulatorDType(const loop::Reduction &reduction);
/// Whether a reduction is a floating-point sum (the compensated kind).
bool isFloatSum(const loop::Reduction &reduction);

class ReductionAlgebra {
public:
  explicit ReductionAlgebra(LlvmTypes &types);

  /// The value a reduction starts from, at `lanes` lanes.
  llvm::Value *identity(loop::ReduceOp op, DType dtype, int lanes);
  /// The reduction of one element `value` (of `dtype`, at `lanes` lanes),
  /// as a reduction over no loop gives it: the element combined with the
  /// identity, which only a float sum changes (eager's sums start from
  /// +0.0, so the sum of a single -0.0 is +0.0). ArgMax/ArgMin's position
  /// is 0 and not made here.
  llvm::Value *ofOneElement(loop::ReduceOp op, DType dtype, llvm::Value *value,
                            int lanes);
  /// Two partial results of Sum/Prod/Max/Min/Any/All combined; max and min
  /// propagate NaN.
  llvm::Value *combine(loop::ReduceOp op, DType dtype, llvm::Value *a,
                       llvm::Value *b);
  /// Two (value, position) partial results of ArgMax/ArgMin combined: the
  /// first position of the maximum (minimum) wins, NaN beyond everything.
  std::pair<llvm::Value *, llvm::Value *>
  combineArg(loop::ReduceOp op, DType dtype, llvm::Value *valueA,
             llvm::Value *indexA, llvm::Value *valueB, llvm::Value *indexB);
  /// One step of Kahan summation: `total` + `addend` less the running
  /// `compensation`, as (new total, new compensation). Once the total is
  /// infinite or NaN the compensation is zero, so that the sum ends as
  /// eager's does (inf, not inf - inf = NaN).
  std::pair<llvm::Value *, llvm::Value *>
  compensatedAdd(llvm::Value *total, llvm::Value *compensation,
                 llvm::Value *addend);
  /// Combines the upper half of a vector's lanes into the lower half until
  /// `lanes` remain (`position`: ArgMax/ArgMin's positions, else nullptr).
  std::pair<llvm::Value *, llvm::Value *>
  narrowLanes(loop::ReduceOp op, DType dtype, llvm::Value *value,
              llvm::Value *position, int lanes);

private:
  LlvmTypes &types_;
  llvm::IRBuilder<> &builder_;
};

} // namespace kiln::backend
