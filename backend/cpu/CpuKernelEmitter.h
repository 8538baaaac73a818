// One loop-IR kernel as an LLVM function `void name(char *const *buffers,
// int64_t begin, int64_t end)` for the host CPU, as its CpuSchedule says.
// Depends on backend/cpu/{CpuSchedule,HostTarget}.h, ir/LoopIR.h, LLVM.
#pragma once

#include "backend/cpu/CpuSchedule.h"
#include "backend/cpu/GemmEmitter.h"
#include "backend/cpu/HostTarget.h"
#include "ir/LoopIR.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace llvm {
class Function;
class Module;
} // namespace llvm

namespace kiln::backend {

class MathLibrary;

/// The slot in a kernel's `buffers` argument that holds the address of the
/// call's size-symbol values (int64_t[]) instead of a buffer's, where the
/// kernel reads sizes that vary between calls.
constexpr int64_t kSymbolSlot = -1;
/// The slot that holds B packed ahead (EmittedKernel::packB).
constexpr int64_t kPackedBSlot = -2;

struct EmittedKernel {
  llvm::Function *function = nullptr;
  /// The program buffer whose data pointer each element of the function's
  /// `buffers` argument is (kSymbolSlot: the symbol values; kPackedBSlot:
  /// B packed ahead).
  std::vector<int64_t> buffers;
  /// A GEMM whose B is fixed for as long as the code lives (an exported
  /// model's weight) reads it packed ahead: `packB`, with the same
  /// arguments, packs it over [0, packRange) (split across threads like
  /// `function`) into packedBBytes of 64-byte aligned memory, the
  /// kPackedBSlot argument. It runs once, before the first call of
  /// `function`. Null where the kernel packs as it goes.
  llvm::Function *packB = nullptr;
  int64_t packRange = 0;
  int64_t packedBBytes = 0;
  /// The range [0, parallelRange) the function takes as [begin, end) and
  /// splits across threads, the elements it touches (roughly), and the
  /// multiple chunk boundaries keep. emitCpuStep fills them in; null where a
  /// kernel's schedule says (emitCpuKernel leaves them so). Expressions over
  /// the size symbols where sizes vary.
  SymSize parallelRange = nullptr;
  SymSize work = nullptr;
  int64_t alignment = 1;
  /// Whether the range's units are of equal work (a GEMM's tiles, where
  /// consecutive tiles of a column block share their packing of B): the
  /// threads take them in chunks of equal counts (equalChunks), else in
  /// about four chunks a thread, of a fixed size.
  bool equalUnits = false;
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

/// The GEMM epilogue (GemmEmitter.h) of a contraction kernel whose one
/// store writes `value`, an expression over the kernel's sum (reduction 0),
/// its outer variables ([batch,] row, column) and loads of buffers that
/// `slotOf` maps to slots of the GEMM's buffers argument. The references
/// must outlive the GEMM's emission.
GemmEpilogue
contractionEpilogue(llvm::Module &module, const loop::Program &program,
                    const loop::Kernel &kernel, const loop::Expr *value,
                    std::unordered_map<int64_t, int64_t> slotOf,
                    const HostTarget &host, const MathLibrary &math);

} // namespace kiln::backend
