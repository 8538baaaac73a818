// The process-wide pool of threads for CPU kernels. Where the process has
// an OpenMP runtime loaded (torch's), kernels run on its thread team, as
// torch's own operators and Inductor's kernels do: a second pool of busy
// threads would compete for the cores with OpenMP's, which spin for
// milliseconds after each parallel region. Otherwise kiln keeps its own
// workers: a job is published through an atomic generation counter;
// between jobs a worker spins for a short while before it sleeps on a
// condition variable, so that the kernels of one graph start without a
// wake-up through the kernel. Either way each thread takes the chunks of
// its own block of the job first (see Job).
// Depends on backend/cpu/ThreadPool.h and libdl.
#include "backend/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <memory>
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

/// A parallel job. Its chunks are split in one contiguous block a thread,
/// in order (thread t's block starts about t/threads of the way in, as
/// torch's static OpenMP split of the same range does); each thread takes
/// the chunks of its own block first, then those other threads have not
/// taken yet. So in balanced runs every thread touches the same rows in
/// every kernel and call, rows its own caches hold from the kernel before
/// (or from torch's operator before), and a slow thread's chunks still
/// go to the others.
struct Job {
  const std::function<void(int64_t)> *task = nullptr;
  int64_t chunkCount = 0;
  /// How many threads take chunks: threads numbered from it return.
  int64_t takers = 1;
  /// By thread: the next chunk of its block and the block's end, each on a
  /// cache line of its own.
  struct alignas(64) Block {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::unique_ptr<Block[]> blocks;

  /// Splits the chunks among `threads` takers (at least one).
  void assign(int64_t threads) {
    takers = std::max<int64_t>(1, std::min(threads, chunkCount));
    blocks.reset(new Block[static_cast<size_t>(takers)]);
    for (int64_t thread = 0; thread < takers; ++thread) {
      blocks[thread].next.store(thread * chunkCount / takers);
      blocks[thread].end = (thread + 1) * chunkCount / takers;
    }
  }
  /// Runs the chunks thread `thread` takes: its block's, then the rest.
  void runChunks(int64_t thread) {
    if (thread < 0 || thread >= takers)
      return;
    for (int64_t step = 0; step < takers; ++step) {
      Block &block = blocks[(thread + step) % takers];
      for (int64_t chunk = block.next.fetch_add(1); chunk < block.end;
           chunk = block.next.fetch_add(1))
        (*task)(chunk);
    }
  }
};

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
  Job job;

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

  /// Worker `index` (the caller is thread 0) runs the chunks of each job
  /// published after generation `seen`.
  void workerLoop(int index, uint64_t seen) {
    while (awaitJob(seen)) {
      seen = generation.load();
      active.fetch_add(1);
      if (open.load())
        job.runChunks(index);
      active.fetch_sub(1);
    }
  }

  void start(int threads) {
    stopping.store(false);
    // A worker joins jobs from the generation at its start, not at its
    // thread's first instructions: a job published in between is its too.
    for (int index = 1; index < threads; ++index)
      workers.emplace_back(
          [this, index, seen = generation.load()] { workerLoop(index, seen); });
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

/// The entry points kiln needs of a loaded OpenMP runtime (GNU libgomp's
/// ABI, which LLVM's and Intel's runtimes export as well).
struct HostOpenMp {
  void (*parallel)(void (*)(void *), void *, unsigned, unsigned) = nullptr;
  int (*maxThreads)() = nullptr;
  int (*threadNumber)() = nullptr; // omp_get_thread_num
};

// A loaded library whose file name names an OpenMP runtime, opened again
// (without loading anything) to look its symbols up.
int findOpenMpLibrary(struct dl_phdr_info *info, size_t, void *out) {
  const char *name = info->dlpi_name;
  if (!name || (!std::strstr(name, "libgomp") &&
                !std::strstr(name, "libiomp") && !std::strstr(name, "libomp")))
    return 0;
  *static_cast<void **>(out) = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
  return *static_cast<void **>(out) ? 1 : 0;
}

/// The process's OpenMP runtime, looked up once; empty where none is
/// loaded or KILN_OPENMP=0 asks for kiln's own workers.
const HostOpenMp &hostOpenMp() {
  static const HostOpenMp runtime = [] {
    HostOpenMp found;
    if (const char *text = std::getenv("KILN_OPENMP"))
      if (std::strcmp(text, "0") == 0)
        return found;
    void *library = RTLD_DEFAULT;
    if (!dlsym(library, "GOMP_parallel")) {
      library = nullptr;
      dl_iterate_phdr(findOpenMpLibrary, &library);
      if (!library)
        return found;
    }
    auto parallel = reinterpret_cast<decltype(HostOpenMp::parallel)>(
        dlsym(library, "GOMP_parallel"));
    auto maxThreads = reinterpret_cast<decltype(HostOpenMp::maxThreads)>(
        dlsym(library, "omp_get_max_threads"));
    auto threadNumber = reinterpret_cast<decltype(HostOpenMp::threadNumber)>(
        dlsym(library, "omp_get_thread_num"));
    if (parallel && maxThreads && threadNumber) {
      found.parallel = parallel;
      found.maxThreads = maxThreads;
      found.threadNumber = threadNumber;
    }
    return found;
  }();
  return runtime;
}

/// Runs the chunks of the Job `data` that the calling member of an OpenMP
/// team takes (GOMP_parallel's function).
void runChunksOnOpenMp(void *data) {
  static_cast<Job *>(data)->runChunks(hostOpenMp().threadNumber());
}

/// The thread count KILN_NUM_THREADS asks for; 0 where it says nothing.
int requestedThreadCount() {
  if (const char *text = std::getenv("KILN_NUM_THREADS")) {
    int count = std::atoi(text);
    if (count > 0)
      return count;
  }
  return 0;
}

/// The threads kiln's own pool starts: the `requested` count, else one per
/// hardware thread.
int ownThreadCount(int requested) {
  if (requested > 0)
    return requested;
  unsigned hardware = std::thread::hardware_concurrency();
  return hardware == 0 ? 1 : static_cast<int>(hardware);
}

} // namespace

ThreadPool &ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() : state_(new State) {
  requested_.store(requestedThreadCount());
  if (!hostOpenMp().parallel)
    state_->start(ownThreadCount(requested_.load()));
}

ThreadPool::~ThreadPool() {
  state_->stop();
  delete state_;
}

bool ThreadPool::usesOpenMp() const { return hostOpenMp().parallel; }

int ThreadPool::threadCount() const {
  int requested = requested_.load();
  if (usesOpenMp())
    return requested > 0 ? requested : std::max(1, hostOpenMp().maxThreads());
  return static_cast<int>(state_->workers.size()) + 1;
}

void ThreadPool::setThreadCount(int count) {
  std::lock_guard<std::mutex> dispatch(state_->dispatchMutex);
  requested_.store(count > 0 ? count : requestedThreadCount());
  if (usesOpenMp())
    return;
  state_->stop();
  state_->start(ownThreadCount(requested_.load()));
}

void ThreadPool::run(int64_t chunkCount,
                     const std::function<void(int64_t)> &task) {
  if (chunkCount <= 0)
    return;
  if (usesOpenMp()) {
    Job job;
    job.task = &task;
    job.chunkCount = chunkCount;
    if (threadCount() <= 1 || chunkCount <= 1) {
      for (int64_t chunk = 0; chunk < chunkCount; ++chunk)
        task(chunk);
      return;
    }
    job.assign(threadCount());
    // Every region asks for the same team, the one torch's own regions
    // use (OpenMP's thread count, or kiln's where that is larger), and the
    // threads the job does not need return at once: GNU libgomp ends the
    // threads a smaller team leaves out and starts new ones for the next
    // larger team, so sizing a team by its job would make the region after
    // it (a torch operator's, kiln's next kernel's) pay for thread starts.
    int team = std::max(threadCount(), hostOpenMp().maxThreads());
    hostOpenMp().parallel(&runChunksOnOpenMp, &job, static_cast<unsigned>(team),
                          0);
    return;
  }
  std::unique_lock<std::mutex> dispatch(state_->dispatchMutex,
                                        std::try_to_lock);
  if (!dispatch.owns_lock() || state_->workers.empty() || chunkCount <= 1) {
    for (int64_t chunk = 0; chunk < chunkCount; ++chunk)
      task(chunk);
    return;
  }
  State &state = *state_;
  state.job.task = &task;
  state.job.chunkCount = chunkCount;
  state.job.assign(static_cast<int64_t>(state.workers.size()) + 1);
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
  state.job.runChunks(0);
  // Workers that count themselves active from here on see the job closed.
  state.open.store(false);
  for (int spins = 0; state.active.load() != 0; ++spins) {
    if (spins < 4096)
      cpuRelax();
    else
      std::this_thread::yield();
  }
  state.job.task = nullptr;
}

int64_t equalChunks(int64_t units, int threads) {
  const int64_t step = std::max(threads, 1);
  for (int64_t chunks = 4 * step; chunks > 0; chunks -= step)
    if (chunks <= units && units % chunks == 0)
      return chunks;
  return std::max<int64_t>(units, 1);
}

} // namespace kiln::backend
