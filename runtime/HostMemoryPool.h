// Large host blocks kept for reuse: a compiled function's big outputs come
// from here, so that a call does not fault in fresh pages the allocator
// just gave back to the system. No Python. Depends on nothing in kiln.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace kiln::runtime {

/// A process-wide cache of page-aligned anonymous mappings, by capacity.
/// Blocks of at least 2 MiB are 2 MiB-aligned and advised as huge pages.
/// Thread-safe; never destroyed (tensors may return blocks at exit).
class HostMemoryPool {
public:
  static HostMemoryPool &get();

  /// Requests smaller than this are better served by malloc.
  static constexpr int64_t kMinimumBytes = int64_t(1) << 20;

  /// A block of at least `bytes` (> 0), and its capacity, which `release`
  /// wants back. Reuses a cached block of that capacity when there is one;
  /// throws kiln::Error when the system has no memory.
  char *acquire(int64_t bytes, int64_t &capacity);
  /// Keeps the block for reuse, or unmaps it when the cache would exceed
  /// its limit.
  void release(char *block, int64_t capacity);

  struct Stats {
    int64_t reused = 0;      // acquisitions served from the cache
    int64_t mapped = 0;      // acquisitions that mapped fresh memory
    int64_t cachedBytes = 0; // bytes held for reuse now
    int64_t limitBytes = 0;
  };
  Stats stats();
  /// Unmaps every cached block.
  void trim();
  /// The most bytes the cache holds (default: an eighth of physical memory,
  /// at most 1 GiB; KILN_CPU_POOL_BYTES overrides it, 0 turns pooling off).
  void setLimit(int64_t bytes);

  /// The capacity `acquire` gives for `bytes`.
  static int64_t capacityFor(int64_t bytes);

private:
  HostMemoryPool();
  std::mutex mutex_;
  std::multimap<int64_t, char *> free_; // capacity -> block
  Stats stats_;
};

} // namespace kiln::runtime
