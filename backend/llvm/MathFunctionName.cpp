// The C library's name of each unary loop-IR op that is a math-library
// function. Depends on backend/llvm/MathFunctionName.h, ir/LoopIR.h.
#include "backend/llvm/MathFunctionName.h"

namespace kiln::backend {

using loop::UnaryOp;

const char *mathFunctionName(UnaryOp op) {
  switch (op) {
  case UnaryOp::Exp:
    return "exp";
  case UnaryOp::Exp2:
    return "exp2";
  case UnaryOp::Expm1:
    return "expm1";
  case UnaryOp::Log:
    return "log";
  case UnaryOp::Log2:
    return "log2";
  case UnaryOp::Log10:
    return "log10";
  case UnaryOp::Log1p:
    return "log1p";
  case UnaryOp::Sin:
    return "sin";
  case UnaryOp::Cos:
    return "cos";
  case UnaryOp::Tan:
    return "tan";
  case UnaryOp::Asin:
    return "asin";
  case UnaryOp::Acos:
    return "acos";
  case UnaryOp::Atan:
    return "atan";
  case UnaryOp::Sinh:
    return "sinh";
  case UnaryOp::Cosh:
    return "cosh";
  case UnaryOp::Tanh:
    return "tanh";
  case UnaryOp::Asinh:
    return "asinh";
  case UnaryOp::Acosh:
    return "acosh";
  case UnaryOp::Atanh:
    return "atanh";
  case UnaryOp::Erf:
    return "erf";
  case UnaryOp::Erfc:
    return "erfc";
  case UnaryOp::Lgamma:
    return "lgamma";
  default:
    return nullptr;
  }
}

} // namespace kiln::backend
