// The machine code of a compiled program's kernels, as every target hands
// it to the runtime: run the kernel of one step on the buffers' addresses.
// Depends on nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::backend {

/// Where a call runs: the stream GPU kernels are queued on (the caller's
/// current CUDA stream; null is the default stream). The CPU ignores it.
struct LaunchContext {
  void *stream = nullptr;
  /// The call's value of each size symbol, for a program whose sizes vary
  /// between calls (null for a static one).
  const std::vector<int64_t> *symbols = nullptr;
};

class KernelCode {
public:
  virtual ~KernelCode() = default;
  /// Runs the kernel of program step `stepIndex` (a Kernel step) on
  /// `buffers`: the data address of every program buffer, by buffer number.
  virtual void runKernel(size_t stepIndex, char *const *buffers,
                         const LaunchContext &context) const = 0;
};

} // namespace kiln::backend
