// The process-wide pool of worker threads that runs the chunks of a CPU
// kernel in parallel. Depends on the C++ standard library only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace kiln::backend {

/// The process's OpenMP team where an OpenMP runtime is loaded (torch's;
/// KILN_OPENMP=0 opts out), else persistent workers of kiln's own plus the
/// calling thread, of which one parallel job runs at a time (a caller that
/// finds them busy runs its job on its own thread).
class ThreadPool {
public:
  static ThreadPool &instance();
  ~ThreadPool();

  /// Threads a job uses, the calling thread included: the count set by
  /// setThreadCount or KILN_NUM_THREADS, else OpenMP's (torch's
  /// set_num_threads), else the hardware's.
  int threadCount() const;
  /// Jobs use `count` threads from now on; 0 or less: the default again.
  void setThreadCount(int count);
  /// Whether jobs run on the process's OpenMP runtime.
  bool usesOpenMp() const;
  /// Runs `task(chunk)` for every chunk in [0, chunkCount) and returns when
  /// all have finished. Thread t of n (the caller is thread 0) runs the
  /// chunks from about t/n to (t+1)/n of the way first, then helps with
  /// the chunks others have not started.
  void run(int64_t chunkCount, const std::function<void(int64_t)> &task);

private:
  ThreadPool();
  struct State;
  State *state_;
  std::atomic<int> requested_{
      0}; // set by setThreadCount or KILN_NUM_THREADS; 0: none
};

/// The chunks that `threads` threads take `units` units of equal work in:
/// the most chunks, at most four a thread, that are a multiple of the
/// threads and divide the units (so that every thread takes as many
/// units, in chunks it takes as it finishes others); where no such count
/// is, one unit a chunk. 64 GEMM tiles on 2 threads are 8 chunks of 8
/// (consecutive tiles share their packing of B), on 16 threads 64 chunks
/// of 1; 22 tiles on 2 threads 2 chunks of 11, not 8 of 3 (12 tiles on
/// one thread, 10 on the other).
int64_t equalChunks(int64_t units, int threads);

} // namespace kiln::backend
