// Turns one kernel of the loop IR into an NVPTX kernel function whose
// parameters are the addresses of the buffers it uses; the lanes of each
// outer point (a thread, a warp, a block, or a column mapping's lanes: the
// GPU schedule's mapping) share the kernel's loops at that point.
// Depends on backend/llvm/, backend/nvptx/GpuSchedule.h, ir/LoopIR.h, LLVM.
#pragma once

#include "backend/nvptx/GpuCode.h"
#include "backend/nvptx/GpuSchedule.h"
#include "ir/LoopIR.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llvm {
class Module;
} // namespace llvm

namespace kiln::backend {

struct NvptxKernel {
  std::string entry;
  /// The program buffer each kernel parameter is the address of.
  std::vector<int64_t> buffers;
  /// The accesses the host checks before launching the vector body alone
  /// (empty: the kernel needs no check).
  std::vector<AlignedAccess> aligned;
};

/// The bodies a kernel whose threads take kGroup consecutive positions at
/// once (one 128-bit access each where aligned) is given.
enum class GroupedBodies {
  /// The vector body alone where the accesses' offsets from their buffers'
  /// addresses are constants (the host then checks their alignment:
  /// NvptxKernel::aligned); elsewhere both bodies, chosen in the kernel.
  Vector,
  /// The scalar body alone, for launches the host found misaligned; only
  /// for kernels that Vector gave the vector body alone.
  Scalar,
};

/// Emits `kernel` into `module` as kernel entry `name`. Math functions
/// other than float32 exp/tanh/erf are calls to libdevice (`__nv_*`), which
/// the caller links in. Throws kiln::Unsupported for what it cannot emit.
NvptxKernel emitNvptxKernel(llvm::Module &module, const loop::Program &program,
                            const loop::Kernel &kernel,
                            const GpuKernelSchedule &schedule,
                            const std::string &name,
                            GroupedBodies bodies = GroupedBodies::Vector);

} // namespace kiln::backend
