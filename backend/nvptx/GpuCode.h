// A program compiled for an NVIDIA GPU, before any driver call: its PTX and
// how each kernel step is launched. Depends on nothing in kiln.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::backend {

/// An access a kernel makes as one wide vector: aligned where parameter
/// `parameter`'s address plus `byteOffset` is a multiple of `alignment`.
struct AlignedAccess {
  size_t parameter = 0;
  int64_t byteOffset = 0;
  unsigned alignment = 1;

  bool operator==(const AlignedAccess &other) const {
    return parameter == other.parameter && byteOffset == other.byteOffset &&
           alignment == other.alignment;
  }
};

/// How one kernel is launched. Its parameters are the addresses of
/// `buffers` (program buffer numbers), in order.
struct KernelLaunch {
  std::string entry;
  std::array<unsigned, 3> grid = {1, 1, 1};
  std::array<unsigned, 3> block = {1, 1, 1};
  unsigned sharedBytes = 0;
  std::vector<int64_t> buffers;
  /// Non-empty: `entry` has only its vector body, for launches where every
  /// one of these accesses is aligned; the others run the step's entry in
  /// the program's scalar code (generateScalarGpuCode).
  std::vector<AlignedAccess> aligned;
};

struct GpuCode {
  std::string ptx;
  std::string computeCapability; // "sm_90"
  /// By step: the launch of each Kernel step, nullopt for the others.
  std::vector<std::optional<KernelLaunch>> launches;
};

} // namespace kiln::backend
