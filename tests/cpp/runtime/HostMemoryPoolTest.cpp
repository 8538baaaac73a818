// The host block pool: capacities, reuse by capacity, huge-page alignment,
// the limit, trimming, and use from several threads.
// Depends on runtime/HostMemoryPool.h, GoogleTest.
#include "runtime/HostMemoryPool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

using kiln::runtime::HostMemoryPool;

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

// The process's pool with a known limit and nothing cached, restored after.
class PoolTest : public ::testing::Test {
protected:
  void SetUp() override {
    limit_ = pool().stats().limitBytes;
    pool().trim();
    pool().setLimit(256 * kMiB);
  }
  void TearDown() override {
    pool().trim();
    pool().setLimit(limit_);
  }
  static HostMemoryPool &pool() { return HostMemoryPool::get(); }

private:
  int64_t limit_ = 0;
};

} // namespace

TEST_F(PoolTest, CapacitiesRoundToHugePagesFromTwoMebibytes) {
  EXPECT_EQ(HostMemoryPool::capacityFor(1), 64 << 10);
  EXPECT_EQ(HostMemoryPool::capacityFor(kMiB + 1), kMiB + (64 << 10));
  EXPECT_EQ(HostMemoryPool::capacityFor(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(HostMemoryPool::capacityFor(5 * kMiB), 6 * kMiB);
}

TEST_F(PoolTest, ReleasedBlocksServeRequestsOfTheirCapacity) {
  int64_t capacity = 0;
  char *block = pool().acquire(5 * kMiB, capacity);
  ASSERT_EQ(capacity, 6 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(block) % (2 * kMiB), 0u);
  std::memset(block, 1, static_cast<size_t>(capacity)); // it is all mapped
  HostMemoryPool::Stats before = pool().stats();
  pool().release(block, capacity);
  EXPECT_EQ(pool().stats().cachedBytes, capacity);

  int64_t other = 0;
  char *smaller = pool().acquire(3 * kMiB, other); // another capacity
  EXPECT_NE(smaller, block);
  int64_t again = 0;
  EXPECT_EQ(pool().acquire(6 * kMiB - 100, again), block);
  EXPECT_EQ(again, capacity);
  EXPECT_EQ(block[capacity - 1], 1); // the same pages, not fresh ones
  HostMemoryPool::Stats after = pool().stats();
  EXPECT_EQ(after.reused, before.reused + 1);
  EXPECT_EQ(after.mapped, before.mapped + 1);
  EXPECT_EQ(after.cachedBytes, 0);
  pool().release(block, capacity);
  pool().release(smaller, other);
}

TEST_F(PoolTest, BlocksOverTheLimitAreUnmapped) {
  pool().setLimit(4 * kMiB);
  int64_t first = 0, second = 0;
  char *a = pool().acquire(4 * kMiB, first);
  char *b = pool().acquire(4 * kMiB, second);
  pool().release(a, first);
  pool().release(b, second); // would exceed 4 MiB
  EXPECT_EQ(pool().stats().cachedBytes, 4 * kMiB);
  pool().setLimit(0); // lowering the limit trims
  EXPECT_EQ(pool().stats().cachedBytes, 0);
}

TEST_F(PoolTest, ThreadsShareThePoolSafely) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int round = 0; round < 200; ++round) {
        int64_t capacity = 0;
        char *block = pool().acquire((1 + (round + t) % 3) * kMiB, capacity);
        block[0] = static_cast<char>(t);
        block[capacity - 1] = static_cast<char>(round);
        EXPECT_EQ(block[0], static_cast<char>(t));
        pool().release(block, capacity);
      }
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_LE(pool().stats().cachedBytes, 256 * kMiB);
}
