// A program compiled for an NVIDIA GPU, before any driver call: its PTX and
// how each kernel step is launched. Depends on nothing in kiln.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::backend {

/// How one kernel is launched. Its parameters are the addresses of
/// `buffers` (program buffer numbers), in order.
struct KernelLaunch {
  std::string entry;
  std::array<unsigned, 3> grid = {1, 1, 1};
  std::array<unsigned, 3> block = {1, 1, 1};
  unsigned sharedBytes = 0;
  std::vector<int64_t> buffers;
};

struct GpuCode {
  std::string ptx;
  std::string computeCapability; // "sm_90"
  /// By step: the launch of each Kernel step, nullopt for the others.
  std::vector<std::optional<KernelLaunch>> launches;
};

} // namespace kiln::backend
