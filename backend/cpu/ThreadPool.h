// The process-wide pool of worker threads that runs the chunks of a CPU
// kernel in parallel. Depends on the C++ standard library only.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln::backend {

/// Persistent workers plus the calling thread. One parallel job runs at a
/// time; a caller that finds the pool busy runs its job on its own thread.
class ThreadPool {
public:
  static ThreadPool &instance();
  ~ThreadPool();

  /// Threads a job uses, the calling thread included.
  int threadCount() const;
  /// Restarts the workers so that jobs use `count` threads (at least 1).
  void setThreadCount(int count);
  /// Runs `task(chunk)` for every chunk in [0, chunkCount) and returns when
  /// all have finished.
  void run(int64_t chunkCount, const std::function<void(int64_t)> &task);

private:
  ThreadPool();
  struct State;
  State *state_;
};

} // namespace kiln::backend
