// Which unary loop-IR ops are math-library functions, by the C library's
// name ("exp"): what targets call (SLEEF, libm, libdevice) and the CPU
// schedule counts as expensive. Depends on ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

namespace kiln::backend {

/// The C library's name of `op` ("exp"), or nullptr when `op` is not a
/// math-library function (negation, floor, ...).
const char *mathFunctionName(loop::UnaryOp op);

} // namespace kiln::backend
