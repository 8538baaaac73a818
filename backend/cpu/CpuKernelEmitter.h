// One loop-IR kernel as an LLVM function `void name(char *const *buffers,
// int64_t begin, int64_t end)` for the host CPU, as its CpuSchedule says.
// Depends on backend/cpu/{CpuSchedule,HostTarget}.h, ir/LoopIR.h, LLVM.
#pragma once

#include "backend/cpu/CpuSchedule.h"
#include "backend/cpu/HostTarget.h"
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

struct EmittedKernel {
  llvm::Function *function = nullptr;
  /// The program buffer whose data pointer each element of the function's
  /// `buffers` argument is.
  std::vector<int64_t> buffers;
  /// The range [0, parallelRange) the function takes as [begin, end) and
  /// splits across threads, the elements it touches (roughly), and the
  /// multiple chunk boundaries keep. emitCpuStep fills them in; -1 where a
  /// kernel's schedule says (emitCpuKernel leaves them so).
  int64_t parallelRange = -1;
  int64_t work = -1;
  int64_t alignment = 1;
  /// The kernel cache's key where the function's own IR is not all of its
  /// code (it calls functions emitted with it); empty: its IR.
  std::string key;
};

/// Emits `kernel` into `module` as the function `name`, scheduled by
/// `schedule`. Throws kiln::Unsupported for dtypes or operations it cannot
/// compile.
EmittedKernel emitCpuKernel(llvm::Module &module, const loop::Program &program,
                            const loop::Kernel &kernel,
                            const KernelSchedule &schedule,
                            const std::string &name, const HostTarget &host,
                            const MathLibrary &math);

} // namespace kiln::backend
