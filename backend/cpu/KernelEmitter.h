// Turns one kernel of the loop IR into an LLVM function
// `void name(char *const *buffers, int64_t begin, int64_t end)`, vectorised
// for the host; `buffers` holds the data pointers of the buffers it uses.
// Depends on ir/LoopIR.h, backend/cpu/MathLibrary.h and LLVM.
#pragma once

#include "ir/LoopIR.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class Function;
class Module;
} // namespace llvm

namespace kiln::backend {

class MathLibrary;

/// What the host's vector unit is, as the code generator targets it.
struct HostTarget {
  int vectorBits = 128;
  int unroll = 1; // vectors one step of a vector loop covers
  /// Bytes from which a flat kernel writes its output with non-temporal
  /// stores (0: never; x86 only).
  int64_t streamingBytes = 0;
  std::string cpuName;
  std::string features; // "+avx2,+fma,..."
};

enum class VectorStrategy : uint8_t {
  Scalar,
  Inner, // the last variable of each loop with contiguous loads
  Outer, // the last outer variable: several outer points at once
};

struct EmittedKernel {
  llvm::Function *function = nullptr;
  VectorStrategy strategy = VectorStrategy::Scalar;
  int lanes = 1;
  int unroll = 1; // vectors one step of the vector loop covers
  /// The program buffer whose data pointer each element of the function's
  /// `buffers` argument is.
  std::vector<int64_t> buffers;
  /// The function's [begin, end) arguments range over the first
  /// `parallelDepth` outer loops flattened (row-major); 0 without any.
  size_t parallelDepth = 0;
};

/// Emits `kernel` into `module` as the function `name`. Throws
/// kiln::Unsupported for dtypes or operations it cannot compile.
EmittedKernel emitKernel(llvm::Module &module, const loop::Program &program,
                         const loop::Kernel &kernel, const std::string &name,
                         const HostTarget &host, const MathLibrary &math);

} // namespace kiln::backend
