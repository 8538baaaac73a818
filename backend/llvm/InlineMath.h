// Float32 exp, tanh and erf written as LLVM IR in the kernel itself (no call),
// so that they vectorise, unroll and schedule with the code around them.
// exp and tanh are within one ulp of the correctly rounded result over all
// floats (checked exhaustively against float64 when written), erf about
// one; tests/py/backend/test_cpu_math.py measures them against float64.
// Depends on LLVM.
#pragma once

namespace llvm {
class Value;
class IRBuilderBase;
} // namespace llvm

namespace kiln::backend {

/// exp(x) for a float or a vector of floats.
llvm::Value *emitInlineExpF32(llvm::IRBuilderBase &builder, llvm::Value *x);

/// exp(x) where x is at least -86 or NaN (the code that makes x clamps it
/// from below): every result is a normal float, inf or NaN, so it needs
/// neither the underflow handling nor the two-factor scaling of
/// emitInlineExpF32 (about 6 of its 22 vector instructions). Same accuracy
/// there.
llvm::Value *emitInlineNormalExpF32(llvm::IRBuilderBase &builder,
                                    llvm::Value *x);

/// An exp of float32 values, for tanh and erf to build on (a target's own,
/// or emitInlineExpF32).
using ExpF32 = llvm::Value *(*)(llvm::IRBuilderBase &builder, llvm::Value *x);

/// tanh(x) for a float or a vector of floats, on an exp of its own (fused
/// into e^{2|x|} - 1: about 26 vector instructions and a division).
llvm::Value *emitInlineTanhF32(llvm::IRBuilderBase &builder, llvm::Value *x);

/// tanh(x) on a target's exp (of arguments at least 0).
llvm::Value *emitInlineTanhF32(llvm::IRBuilderBase &builder, llvm::Value *x,
                               ExpF32 exp);

/// erf(x) for a float or a vector of floats.
llvm::Value *emitInlineErfF32(llvm::IRBuilderBase &builder, llvm::Value *x,
                              ExpF32 exp = emitInlineExpF32);

} // namespace kiln::backend
