// The process-wide pool of worker threads for CPU kernels. A job is
// published through an atomic generation counter; workers take its chunks
// from an atomic counter. Between jobs a worker spins for a short while
// before it sleeps on a condition variable, so that the kernels of one
// graph, which follow each other within microseconds, start without a
// wake-up through the kernel. Depends on backend/cpu/ThreadPool.h.
#include "backend/cpu/ThreadPool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::backend {

namespace {

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

using Clock = std::chrono::steady_clock;

/// How long an idle worker spins for the next job before it sleeps
/// (KILN_SPIN_US; 0 sleeps at once).
std::chrono::microseconds spinTime() {
  static const std::chrono::microseconds time = [] {
    if (const char *text = std::getenv("KILN_SPIN_US"))
      return std::chrono::microseconds(std::max(0, std::atoi(text)));
    return std::chrono::microseconds(50);
  }();
  return time;
}

} // namespace

struct ThreadPool::State {
  // Held by the thread whose job the workers run; others run inline.
  std::mutex dispatchMutex;
  std::vector<std::thread> workers;

  // Sleeping: a worker that has spun long enough waits on `wake` under
  // `mutex`, counted in `sleepers`, for the generation to move.
  std::mutex mutex;
  std::condition_variable wake;
  std::atomic<int> sleepers{0};
  std::atomic<bool> stopping{false};

  // The job. Its fields are written while `open` is false and no worker
  // is `active`; a worker reads them only after it has counted itself
  // active and then seen `open`, so the dispatcher, which closes the job
  // and then waits for `active` to drain, never changes them under it.
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> open{false};
  std::atomic<int> active{0};
  const std::function<void(int64_t)> *task = nullptr;
  int64_t chunkCount = 0;
  std::atomic<int64_t> nextChunk{0};

  void runChunks() {
    for (int64_t chunk = nextChunk.fetch_add(1); chunk < chunkCount;
         chunk = nextChunk.fetch_add(1))
      (*task)(chunk);
  }

  /// Waits until the generation differs from `seen`; false when stopping.
  bool awaitJob(uint64_t seen) {
    Clock::time_point deadline = Clock::now() + spinTime();
    for (int spins = 0;; ++spins) {
      if (stopping.load() || generation.load() != seen)
        return !stopping.load();
      cpuRelax();
      if (spins % 64 == 63 && Clock::now() >= deadline)
        break;
    }
    std::unique_lock<std::mutex> lock(mutex);
    sleepers.fetch_add(1);
    wake.wait(lock,
              [&] { return stopping.load() || generation.load() != seen; });
    sleepers.fetch_sub(1);
    return !stopping.load();
  }

  void workerLoop() {
    uint64_t seen = generation.load();
    while (awaitJob(seen)) {
      seen = generation.load();
      active.fetch_add(1);
      if (open.load())
        runChunks();
      active.fetch_sub(1);
    }
  }

  void start(int threads) {
    stopping.store(false);
    for (int index = 1; index < threads; ++index)
      workers.emplace_back([this] { workerLoop(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping.store(true);
    }
    wake.notify_all();
    for (std::thread &worker : workers)
      worker.join();
    workers.clear();
  }
};

namespace {

int defaultThreadCount() {
  if (const char *text = std::getenv("KILN_NUM_THREADS")) {
    int count = std::atoi(text);
    if (count > 0)
      return count;
  }
  unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

} // namespace

ThreadPool &ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() : state_(new State) {
  state_->start(defaultThreadCount());
}

ThreadPool::~ThreadPool() {
  state_->stop();
  delete state_;
}

int ThreadPool::threadCount() const {
  return static_cast<int>(state_->workers.size()) + 1;
}

void ThreadPool::setThreadCount(int count) {
  std::lock_guard<std::mutex> dispatch(state_->dispatchMutex);
  state_->stop();
  state_->start(count < 1 ? 1 : count);
}

void ThreadPool::run(int64_t chunkCount,
                     const std::function<void(int64_t)> &task) {
  std::unique_lock<std::mutex> dispatch(state_->dispatchMutex,
                                        std::try_to_lock);
  if (!dispatch.owns_lock() || state_->workers.empty() || chunkCount <= 1) {
    for (int64_t chunk = 0; chunk < chunkCount; ++chunk)
      task(chunk);
    return;
  }
  State &state = *state_;
  state.task = &task;
  state.chunkCount = chunkCount;
  state.nextChunk.store(0);
  state.open.store(true);
  state.generation.fetch_add(1);
  if (state.sleepers.load() > 0) {
    // The lock orders this notification after a sleeper's last look at
    // the generation.
    {
      std::lock_guard<std::mutex> lock(state.mutex);
    }
    state.wake.notify_all();
  }
  state.runChunks();
  // Workers that count themselves active from here on see the job closed.
  state.open.store(false);
  for (int spins = 0; state.active.load() != 0; ++spins) {
    if (spins < 4096)
      cpuRelax();
    else
      std::this_thread::yield();
  }
  state.task = nullptr;
}

} // namespace kiln::backend
