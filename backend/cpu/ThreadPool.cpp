// The process-wide pool of worker threads for CPU kernels: workers sleep on
// a condition variable and take chunks of the current job from an atomic
// counter. Depends on backend/cpu/ThreadPool.h.
#include "backend/cpu/ThreadPool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::backend {

struct ThreadPool::State {
  // Held by the thread whose job the workers run; others run inline.
  std::mutex dispatchMutex;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable finished;
  std::vector<std::thread> workers;
  bool stopping = false;
  // The current job; valid while `jobOpen`.
  const std::function<void(int64_t)> *task = nullptr;
  int64_t chunkCount = 0;
  std::atomic<int64_t> nextChunk{0};
  uint64_t generation = 0;
  bool jobOpen = false;
  int workersInJob = 0;

  void runChunks() {
    for (int64_t chunk = nextChunk.fetch_add(1); chunk < chunkCount;
         chunk = nextChunk.fetch_add(1))
      (*task)(chunk);
  }

  void workerLoop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stopping || generation != seen; });
      if (stopping)
        return;
      seen = generation;
      if (!jobOpen)
        continue;
      ++workersInJob;
      lock.unlock();
      runChunks();
      lock.lock();
      if (--workersInJob == 0)
        finished.notify_all();
    }
  }

  void start(int threads) {
    stopping = false;
    for (int index = 1; index < threads; ++index)
      workers.emplace_back([this] { workerLoop(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
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
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.task = &task;
    state.chunkCount = chunkCount;
    state.nextChunk.store(0);
    state.jobOpen = true;
    ++state.generation;
  }
  state.wake.notify_all();
  state.runChunks();
  std::unique_lock<std::mutex> lock(state.mutex);
  // Workers that have not joined yet must not join a finished job.
  state.jobOpen = false;
  state.finished.wait(lock, [&] { return state.workersInJob == 0; });
  state.task = nullptr;
}

} // namespace kiln::backend
