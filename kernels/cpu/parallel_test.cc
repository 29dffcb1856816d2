#include "kernels/cpu/parallel.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace glm::cpu {
namespace {

TEST(ParallelFor, CoversEveryIndexOnceInFixedChunks) {
  for (int64_t n : {1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    std::vector<std::pair<int64_t, int64_t>> chunks;
    std::mutex mutex;
    ParallelFor(n, kMinParallelWork, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++hits[i];
      std::lock_guard<std::mutex> lock(mutex);
      chunks.push_back({begin, end});
    });
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hits[i], 1) << "n " << n << " index " << i;
    EXPECT_LE(chunks.size(), static_cast<size_t>(NumThreads()));
  }
}

TEST(ParallelFor, SmallWorkStaysOnTheCallingThread) {
  const std::thread::id caller = std::this_thread::get_id();
  ParallelFor(100, kMinParallelWork - 1, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
    EXPECT_EQ(std::this_thread::get_id(), caller);
  });
}

TEST(ParallelFor, NestedCallsRunInline) {
  std::atomic<int64_t> total{0};
  ParallelFor(8, kMinParallelWork, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      ParallelFor(10, kMinParallelWork,
                  [&](int64_t b, int64_t e) { total += e - b; });
    }
  });
  EXPECT_EQ(total, 80);
}

TEST(ParallelFor, CallsFromSeveralThreadsAllFinish) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int call = 0; call < 200; ++call) {
        ParallelFor(64, kMinParallelWork,
                    [&](int64_t begin, int64_t end) { total += end - begin; });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total, 4 * 200 * 64);
}

TEST(ParallelFor, ManyCallsInARowFinish) {
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 2000; ++call) {
    ParallelFor(64, kMinParallelWork,
                [&](int64_t begin, int64_t end) { total += end - begin; });
  }
  EXPECT_EQ(total, 2000 * 64);
}

}  // namespace
}  // namespace glm::cpu
