// Tests of the CPU thread pool: which thread takes which chunks of a job.
#include "backend/cpu/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

/// Sets the pool's thread count for a test and restores the default.
struct PoolThreads {
  explicit PoolThreads(int count) {
    backend::ThreadPool::instance().setThreadCount(count);
  }
  ~PoolThreads() { backend::ThreadPool::instance().setThreadCount(0); }
};

/// Waits until `done()` holds or two seconds have passed; whether it held.
template <typename Done> bool waitFor(Done done) {
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  while (!done()) {
    if (Clock::now() > deadline)
      return false;
    std::this_thread::yield();
  }
  return true;
}

// With threads to spare, thread t's first chunk is the first of its block,
// t/n of the way in (as torch's static OpenMP split), so that every kernel
// of a call, and of the next call, gives each thread the rows it touched
// before (in its own caches). A shared counter would hand out 0, 1, 2, 3.
TEST(ThreadPool, EachThreadStartsWithItsOwnBlockOfChunks) {
  constexpr int kThreads = 4;
  PoolThreads threads(kThreads);
  ASSERT_EQ(backend::ThreadPool::instance().threadCount(), kThreads);
  std::mutex mutex;
  std::map<std::thread::id, int64_t> firstChunkOf;
  std::atomic<int> started{0};
  std::atomic<int> runs{0};
  const std::thread::id caller = std::this_thread::get_id();
  backend::ThreadPool::instance().run(16, [&](int64_t chunk) {
    runs.fetch_add(1);
    bool first;
    {
      std::lock_guard<std::mutex> lock(mutex);
      first = firstChunkOf.emplace(std::this_thread::get_id(), chunk).second;
    }
    if (!first)
      return;
    // Every thread holds its first chunk until all have started one, so
    // none finishes its block and moves on to another's first.
    started.fetch_add(1);
    waitFor([&] { return started.load() == kThreads; });
  });
  EXPECT_EQ(runs.load(), 16);
  ASSERT_EQ(firstChunkOf.size(), size_t(kThreads));
  EXPECT_EQ(firstChunkOf.at(caller), 0);
  std::set<int64_t> firsts;
  for (const auto &[thread, chunk] : firstChunkOf)
    firsts.insert(chunk);
  EXPECT_EQ(firsts, (std::set<int64_t>{0, 4, 8, 12}));
}

// A thread that stalls in a chunk does not hold up the rest of its block:
// the others, done with theirs, take its chunks (with a block a thread and
// no taking, chunk 0's thread would wait for chunks only it may run); each
// chunk runs once.
TEST(ThreadPool, TheChunksOfAStalledThreadGoToTheOthers) {
  constexpr int kThreads = 4;
  constexpr int64_t kChunks = 16;
  PoolThreads threads(kThreads);
  std::vector<std::atomic<int>> runsOf(kChunks);
  std::mutex mutex;
  std::map<int64_t, std::thread::id> threadOf;
  std::atomic<int> finished{0};
  bool othersFinished = false;
  backend::ThreadPool::instance().run(kChunks, [&](int64_t chunk) {
    runsOf[chunk].fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mutex);
      threadOf[chunk] = std::this_thread::get_id();
    }
    if (chunk == 0)
      othersFinished = waitFor([&] { return finished.load() == kChunks - 1; });
    finished.fetch_add(1);
  });
  EXPECT_TRUE(othersFinished);
  for (int64_t chunk = 0; chunk < kChunks; ++chunk)
    EXPECT_EQ(runsOf[chunk].load(), 1) << "chunk " << chunk;
  for (int64_t chunk = 1; chunk < kChunks / kThreads; ++chunk)
    EXPECT_NE(threadOf.at(chunk), threadOf.at(0)) << "chunk " << chunk;
}

// A job of fewer chunks than threads runs each once; none is an empty job.
TEST(ThreadPool, RunsEveryChunkOnceWhateverTheCount) {
  PoolThreads threads(3);
  for (int64_t count : {0, 1, 2, 3, 7, 64}) {
    std::vector<std::atomic<int>> runsOf(static_cast<size_t>(count));
    backend::ThreadPool::instance().run(
        count, [&](int64_t chunk) { runsOf[chunk].fetch_add(1); });
    for (int64_t chunk = 0; chunk < count; ++chunk)
      EXPECT_EQ(runsOf[chunk].load(), 1) << count << " chunks, " << chunk;
  }
}

} // namespace
} // namespace kiln
