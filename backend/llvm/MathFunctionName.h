// Which unary loop-IR ops are math-library functions, by the C library's
// double-precision name ("exp", "log1p", ...): every target calls them by
// these names (CPU: inline math, SLEEF or libm; GPU: libdevice), and the
// CPU schedule counts them as expensive. Depends on ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

namespace kiln::backend {

/// The C library's name of `op` ("exp"), or nullptr when `op` is not a
/// math-library function (negation, floor, ...).
const char *mathFunctionName(loop::UnaryOp op);

} // namespace kiln::backend
