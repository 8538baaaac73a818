// The GPU schedule pass: how each kernel of a program maps onto a CUDA grid,
// as data to print (KILN_LOGS=schedule) and to test. Pointwise kernels and
// many short reductions: a thread per outer point (its loops run in that
// thread); long reductions over enough rows (softmax, layer_norm, row
// sums): a warp per outer point. Blocks of 256 threads.
// Depends on ir/LoopIR.h.
#pragma once

#include "ir/LoopIR.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::backend {

struct GpuKernelSchedule {
  std::string name;
  int64_t points = 0; // outer points
  /// Threads per outer point: 1 (a thread runs the point's loops), or 32
  /// (a warp: its lanes share each loop's points, reductions combine
  /// across the lanes with shuffles).
  unsigned lanesPerPoint = 1;
  unsigned block = 256; // threads per block
  unsigned grid = 0;    // blocks (0: an empty domain, nothing to launch)
};

struct GpuSchedule {
  /// By step: a record for each Kernel step, nullopt for the others.
  std::vector<std::optional<GpuKernelSchedule>> kernels;
  /// One line per kernel: "step 0 kernel_add_0: grid=16 block=256
  /// points=4096 mapping=thread-per-point".
  std::string str() const;
};

/// Throws kiln::Unsupported for a kernel with more outer points than one
/// grid dimension holds, and for reductions the mapping runs slowly (few
/// threads, or long serial work per thread): torch runs those graphs.
GpuSchedule scheduleForGpu(const loop::Program &program);

} // namespace kiln::backend
