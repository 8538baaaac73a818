// Host memory for compiled programs: aligned allocations and a per-thread
// workspace reused across calls. Depends on runtime/Device.h, ir/Error.h.
#include "runtime/Device.h"

#include "ir/Error.h"

#include <cstdlib>
#include <memory>
#include <new>

namespace kiln::runtime {

namespace {

constexpr int64_t kAlignment = 64;

struct ThreadWorkspace {
  struct Free {
    void operator()(char *memory) const { std::free(memory); }
  };
  std::unique_ptr<char, Free> memory;
  int64_t bytes = 0;
  bool inUse = false;
};

ThreadWorkspace &threadWorkspace() {
  thread_local ThreadWorkspace state;
  return state;
}

char *alignedAllocation(int64_t bytes) {
  if (bytes < 0)
    throw Error("cpu device: a negative allocation of " +
                std::to_string(bytes) + " bytes");
  // aligned_alloc wants a multiple of the alignment, and > 0.
  int64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void *memory = std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
  if (!memory)
    throw Error("cpu device: out of memory allocating " +
                std::to_string(bytes) + " bytes");
  return static_cast<char *>(memory);
}

} // namespace

Workspace::Workspace(Workspace &&other) noexcept
    : device_(other.device_), data_(other.data_), token_(other.token_) {
  other.device_ = nullptr;
}

Workspace::~Workspace() {
  if (device_)
    device_->releaseWorkspace(data_, token_);
}

CpuDevice &CpuDevice::get() {
  static CpuDevice device;
  return device;
}

char *CpuDevice::allocate(int64_t bytes) { return alignedAllocation(bytes); }

void CpuDevice::deallocate(char *memory) { std::free(memory); }

Workspace CpuDevice::workspace(int64_t bytes) {
  if (bytes <= 0)
    return Workspace();
  ThreadWorkspace &state = threadWorkspace();
  if (state.inUse) // a nested call: memory of its own, freed after it
    return Workspace(this, alignedAllocation(bytes), nullptr);
  if (state.bytes < bytes) {
    state.memory.reset(alignedAllocation(bytes));
    state.bytes = bytes;
  }
  state.inUse = true;
  return Workspace(this, state.memory.get(), &state);
}

void CpuDevice::releaseWorkspace(char *data, void *token) {
  if (token)
    static_cast<ThreadWorkspace *>(token)->inUse = false;
  else
    std::free(data);
}

} // namespace kiln::runtime
