// The host CPU as kiln's CPU code generator targets it: vector width, unroll,
// the streaming-store threshold, LLVM's CPU name and features; detected once
// per process (with the KILN_CPU_* overrides), and the attributes that give
// a function of LLVM IR that target. Depends on nothing in kiln.
#pragma once

#include <cstdint>
#include <string>

namespace llvm {
class Function;
} // namespace llvm

namespace kiln::backend {

/// What the host's vector unit is, as the code generator targets it.
struct HostTarget {
  int vectorBits = 128;
  int unroll = 1; // vectors one step of a vector loop covers
  /// Bytes from which a flat kernel writes its output with non-temporal
  /// stores (0: never; x86 only).
  int64_t streamingBytes = 0;
  /// How far ahead of its contiguous vector loads a kernel that computes
  /// between them prefetches (0: never; x86 only).
  int64_t prefetchBytes = 0;
  std::string cpuName;
  std::string features; // "+avx2,+fma,..."
};

/// The process's host, detected on the first call: AVX-512/AVX2/SSE width
/// (KILN_CPU_VECTOR_BITS narrows it), unroll (KILN_CPU_UNROLL), streaming
/// bytes (half the last-level cache, or KILN_CPU_STREAMING_BYTES), prefetch
/// distance (a page, or KILN_CPU_PREFETCH_BYTES).
const HostTarget &hostTarget();

/// Gives `function` the host's CPU and features and, where `host` narrows
/// the vectors below what its features allow (KILN_CPU_VECTOR_BITS=256 on
/// an AVX-512 host), the attributes that keep LLVM's code to that width:
/// without them a vector type wider than it is still made of the widest
/// registers.
void setTargetAttributes(llvm::Function &function, const HostTarget &host);

} // namespace kiln::backend
