// Loop-IR expressions as LLVM IR for any target (XLA's ElementalIrEmitter);
// hooks for loads, math functions and reuse; stores and loops are targets'.
// Depends on backend/llvm/{InlineMath,LlvmTypes,LoopEmitter}.h, ir/LoopIR.h,
// LLVM.
#pragma once

#include "backend/llvm/InlineMath.h"
#include "backend/llvm/LlvmTypes.h"
#include "backend/llvm/LoopEmitter.h"
#include "ir/LoopIR.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace llvm {
class Module;
} // namespace llvm

namespace kiln::backend {

class ExprEmitter : public LlvmTypes {
public:
  ExprEmitter(llvm::Module &module, const loop::Program &program,
              std::string generator);
  virtual ~ExprEmitter();

  /// The value of `expr` at the current point: one lane, or (`vector`, in a
  /// vector region) the vector of the current lanes of the vectorised
  /// variable. Values are computed once per scope.
  llvm::Value *emit(const loop::Expr *expr, bool vector);
  llvm::Value *emitUnary(loop::UnaryOp op, llvm::Value *x, DType dtype);
  /// `value` behind an arithmetic fence where it is a select or a call
  /// (see the .cpp: an LLVM 19 min/max folding bug).
  llvm::Value *fenced(llvm::Value *value);
  llvm::Value *emitBinary(loop::BinaryOp op, llvm::Value *a, llvm::Value *b,
                          DType dtype);
  /// a / b for a float32 `b` that is a constant (or a splat of one), where
  /// the target asks for it; nullptr otherwise.
  llvm::Value *quotientByConstant(llvm::Value *a, llvm::Value *b);
  llvm::Value *emitCast(llvm::Value *value, DType from, DType to);

  /// Where a loop range, a size, a stride or an offset of the loop IR
  /// becomes a value in the emitted code: a constant, or (sizes that vary
  /// between calls) arithmetic over the call's symbol values.
  llvm::Value *sizeValue(int64_t size);
  llvm::Value *sizeValue(SymSize size);

protected:
  // ------------------------------------------------------------ the hooks
  /// The data pointer of program buffer `buffer`.
  virtual llvm::Value *bufferPointer(int64_t buffer) = 0;
  /// The value of size symbol s<number> in this call; targets without
  /// symbolic sizes refuse (kiln::Unsupported).
  virtual llvm::Value *symbolValue(int64_t number);
  /// The elements `load` reads, in the storage type of `dtype` (its
  /// buffer's dtype): scalar by default, vectors are the target's.
  virtual llvm::Value *loadElements(const loop::Expr *load, DType dtype,
                                    bool vector);
  /// The C library function `name` ("exp", "atan2") of `args` (float or
  /// double, scalars or vectors).
  virtual llvm::Value *callMath(const char *name,
                                std::vector<llvm::Value *> args) = 0;
  /// A unary op that mathFunctionName names, of a float or double `x`:
  /// float32 exp, tanh and erf inline (backend/llvm/InlineMath, tanh and
  /// erf on expF32's exp), the rest through callMath.
  virtual llvm::Value *emitMathFunction(loop::UnaryOp op, llvm::Value *x);
  /// The target's float32 exp: InlineMath's portable one, or the target's
  /// own.
  virtual ExpF32 expF32() const { return emitInlineExpF32; }
  /// The target's float32 exp of arguments clamped from below to at least
  /// -86 (emitInlineNormalExpF32's domain; a target without a cheaper one
  /// gives expF32's).
  virtual ExpF32 normalExpF32() const { return emitInlineNormalExpF32; }
  /// The target's float32 tanh: InlineMath's, on its own exp unless the
  /// target has a cheaper one.
  virtual llvm::Value *emitTanhF32(llvm::Value *x);
  /// Whether a float32 division by a constant is a product by its
  /// reciprocal with one correction (ExprEmitter::quotientByConstant).
  virtual bool dividesByConstantsAsProducts() const { return false; }
  /// Whether a float remainder is computed from its quotient's integer part
  /// where that is exact (ExprEmitter::emitFloatFmod) rather than as LLVM's
  /// frem.
  virtual bool exactRemaindersInFloat64() const { return false; }
  /// The truth of a comparison where the target knows it at every point
  /// it emits (nullopt: compute it).
  virtual std::optional<bool> knownComparison(const loop::Expr *) {
    return std::nullopt;
  }
  /// A value the target has kept from an earlier loop (nullptr: compute it),
  /// and the notice of each value computed.
  virtual llvm::Value *reuse(const loop::Expr *expr, bool vector);
  virtual void computed(const loop::Expr *expr, llvm::Value *value);

  // ------------------------------------------------------- the emission
  /// Whether `expr` differs between the lanes of the current vector.
  bool varying(const loop::Expr *expr);
  bool indexReadsVectorReduction(const loop::Expr *expr);
  /// Vector regions: expressions over Var(`var`) take `lanes` lanes.
  void enterVector(int64_t var, int lanes);
  void leaveVector();
  /// emitCountedLoop with a scope of computed values around the body.
  void countedLoop(llvm::Value *start, llvm::Value *end, int64_t step,
                   LoopBody body);

  llvm::Module &module_;
  const loop::Program &program_;
  int64_t vectorVar_ = -1;
  int currentLanes_ = 1;
  /// The value of each loop variable where the emission is (nullptr outside
  /// its loop), and of each reduction of the kernel once it is final.
  std::vector<llvm::Value *> vars_;
  std::vector<llvm::Value *> reductionValues_;
  struct Scope {
    std::unordered_map<const loop::Expr *, llvm::Value *> scalar, vector;
  };
  std::vector<Scope> scopes_;
  std::unordered_map<const loop::Expr *, bool> varyingMemo_;

private:
  llvm::Value *emitNode(const loop::Expr *expr, bool vector);
  llvm::Value *emitLoad(const loop::Expr *expr, bool vector);
  llvm::Value *emitIntegerDivision(loop::BinaryOp op, llvm::Value *a,
                                   llvm::Value *b, bool isUnsigned);
  llvm::Value *remainderAgainstDivisor(llvm::Value *remainder,
                                       llvm::Value *divisor);
  llvm::Value *emitFloatFloorDivision(llvm::Value *a, llvm::Value *b);
  /// The truth of a condition of knownComparison's comparisons (and their
  /// logical and and or) where the target knows it.
  std::optional<bool> knownCondition(const loop::Expr *condition);
  /// C's fmod of floats (torch.fmod): LLVM's frem, or where the target says
  /// so a - trunc(a / b) b computed exactly.
  llvm::Value *emitFloatFmod(llvm::Value *a, llvm::Value *b);
  llvm::Value *emitIntegerPower(llvm::Value *base, llvm::Value *exponent,
                                bool isUnsigned);
};

} // namespace kiln::backend
