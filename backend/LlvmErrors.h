// LLVM's Expected and Error turned into kiln::Error exceptions, for the code
// that drives LLVM (the JIT, the CPU backend). Depends on LLVM, ir/Error.h.
#pragma once

#include "ir/Error.h"

#include <llvm/Support/Error.h>

#include <string>

namespace kiln::backend {

/// The value of `value`, or kiln::Error("<what>: <LLVM's message>").
template <typename T> T unwrapLlvm(llvm::Expected<T> value, const char *what) {
  if (!value)
    throw Error(std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

/// Throws kiln::Error("<what>: <LLVM's message>") when `error` is set.
inline void checkLlvm(llvm::Error error, const char *what) {
  if (error)
    throw Error(std::string(what) + ": " + llvm::toString(std::move(error)));
}

} // namespace kiln::backend
