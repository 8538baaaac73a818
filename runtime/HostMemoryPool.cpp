// The host block cache: anonymous mappings, reused by exact capacity.
// Depends on runtime/HostMemoryPool.h, ir/Error.h.
#include "runtime/HostMemoryPool.h"

#include "ir/Error.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace kiln::runtime {

namespace {

constexpr int64_t kHugePage = int64_t(2) << 20;

int64_t roundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

int64_t defaultLimit() {
  if (const char *text = std::getenv("KILN_CPU_POOL_BYTES"))
    return std::max<int64_t>(0, std::atoll(text));
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  int64_t physical = pages > 0 && pageSize > 0
                         ? static_cast<int64_t>(pages) * pageSize
                         : int64_t(8) << 30;
  return std::min<int64_t>(physical / 8, int64_t(1) << 30);
}

// A fresh mapping of `capacity` bytes; those of huge-page multiples are
// aligned to a huge page (mapped larger, the ends unmapped) and advised.
char *mapBlock(int64_t capacity) {
  bool huge = capacity % kHugePage == 0;
  size_t length = static_cast<size_t>(capacity + (huge ? kHugePage : 0));
  void *mapping = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED)
    throw Error("cpu device: out of memory mapping " +
                std::to_string(capacity) + " bytes");
  char *start = static_cast<char *>(mapping);
  if (!huge)
    return start;
  auto address = reinterpret_cast<uintptr_t>(start);
  char *aligned = reinterpret_cast<char *>(
      roundUp(static_cast<int64_t>(address), kHugePage));
  size_t head = static_cast<size_t>(aligned - start);
  if (head > 0)
    munmap(start, head);
  size_t tail = length - head - static_cast<size_t>(capacity);
  if (tail > 0)
    munmap(aligned + capacity, tail);
#ifdef MADV_HUGEPAGE
  madvise(aligned, static_cast<size_t>(capacity), MADV_HUGEPAGE);
#endif
  return aligned;
}

} // namespace

HostMemoryPool &HostMemoryPool::get() {
  static HostMemoryPool *pool = new HostMemoryPool(); // outlives tensors
  return *pool;
}

HostMemoryPool::HostMemoryPool() { stats_.limitBytes = defaultLimit(); }

int64_t HostMemoryPool::capacityFor(int64_t bytes) {
  // Huge pages from 2 MiB; below, whole 64 KiB steps.
  return bytes >= kHugePage ? roundUp(bytes, kHugePage)
                            : roundUp(std::max<int64_t>(bytes, 1), 64 << 10);
}

char *HostMemoryPool::acquire(int64_t bytes, int64_t &capacity) {
  capacity = capacityFor(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = free_.find(capacity);
    if (found != free_.end()) {
      char *block = found->second;
      free_.erase(found);
      stats_.cachedBytes -= capacity;
      ++stats_.reused;
      return block;
    }
    ++stats_.mapped;
  }
  return mapBlock(capacity);
}

void HostMemoryPool::release(char *block, int64_t capacity) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stats_.cachedBytes + capacity <= stats_.limitBytes) {
      free_.emplace(capacity, block);
      stats_.cachedBytes += capacity;
      return;
    }
  }
  munmap(block, static_cast<size_t>(capacity));
}

HostMemoryPool::Stats HostMemoryPool::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void HostMemoryPool::trim() {
  std::multimap<int64_t, char *> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks.swap(free_);
    stats_.cachedBytes = 0;
  }
  for (const auto &[capacity, block] : blocks)
    munmap(block, static_cast<size_t>(capacity));
}

void HostMemoryPool::setLimit(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.limitBytes = std::max<int64_t>(0, bytes);
    if (stats_.cachedBytes <= stats_.limitBytes)
      return;
  }
  trim();
}

} // namespace kiln::runtime
