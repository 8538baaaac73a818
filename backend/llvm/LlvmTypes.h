// kiln's dtypes as LLVM IR for any target: compute and storage types, lanes,
// splats, constants, half/bfloat16 rounding, conversions to and from storage.
// Depends on ir/DType.h, ir/LoopIR.h, LLVM.
#pragma once

#include "ir/DType.h"
#include "ir/LoopIR.h"

#include <llvm/IR/IRBuilder.h>

#include <cstdint>
#include <string>

namespace kiln::backend {

/// Whether `dtype` compares and converts as an unsigned integer.
bool isUnsignedType(DType dtype);

/// Bytes of the type a value of `dtype` is computed in.
int computeBytes(DType dtype);

/// `value` rounded to the nearest bfloat16 (ties to even, NaN kept quiet).
float roundToBFloat16(float value);

/// The IR builder every kiln emitter writes through, with kiln's dtypes:
/// Float16 and BFloat16 are computed in float and rounded after every
/// operation; Bool is i1 in registers and a byte in memory.
class LlvmTypes {
public:
  /// `generator` names the code generator in error messages ("the CPU code
  /// generator").
  LlvmTypes(llvm::LLVMContext &context, std::string generator);

  llvm::Type *computeType(DType dtype);
  llvm::Type *storageType(DType dtype);
  llvm::Type *withLanes(llvm::Type *type, int lanes);
  static int lanesOf(llvm::Value *value);
  llvm::Value *splat(llvm::Value *value, int lanes);
  /// A Constant expression as a value of its dtype's compute type.
  llvm::Value *constantOf(const loop::Expr *expr);
  /// `value` as a constant of the type (and lanes) of `like`.
  llvm::Value *integerLike(llvm::Value *like, int64_t value);
  llvm::Value *floatLike(llvm::Value *like, double value);
  /// <0, 1, ..., lanes - 1> as i64.
  llvm::Value *laneOffsets(int lanes);
  /// Rounds a float value to the nearest value of `dtype` (half or
  /// bfloat16), ties to even; others are returned as they are.
  llvm::Value *roundTo(DType dtype, llvm::Value *value);
  /// A loaded value of `dtype` in its compute type, and back.
  llvm::Value *fromStorage(DType dtype, llvm::Value *value);
  llvm::Value *toStorage(DType dtype, llvm::Value *value);
  /// An overloaded intrinsic of the first argument's type.
  llvm::Value *callIntrinsic(llvm::Intrinsic::ID id,
                             std::vector<llvm::Value *> args);

  llvm::IRBuilder<> &builder() { return builder_; }
  const std::string &generator() const { return generator_; }

protected:
  llvm::LLVMContext &context_;
  llvm::IRBuilder<> builder_;
  std::string generator_;
};

} // namespace kiln::backend
