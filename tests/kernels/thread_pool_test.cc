// ThreadPool: every thread runs every job with its own index, ParallelFor covers its range
// exactly once, many back-to-back jobs (the lock-free hand-off while threads spin) and jobs
// after the workers went to sleep (the condition-variable path) all complete, and an idle pool
// uses no CPU (the "no busy-spinning when idle").
#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace deltaserve::kernels {
namespace {

TEST(ThreadPoolTest, RunCallsEveryThreadOnceWithItsIndex) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool(n);
    ASSERT_EQ(pool.size(), n);
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
    pool.Run([&](int index, int count) {
      ASSERT_EQ(count, n);
      ASSERT_GE(index, 0);
      ASSERT_LT(index, n);
      calls[static_cast<size_t>(index)].fetch_add(1);
    });
    for (int i = 0; i < n; ++i) EXPECT_EQ(calls[static_cast<size_t>(i)].load(), 1) << n << " " << i;
  }
}

TEST(ThreadPoolTest, ParallelForCoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 7, 64, 1000}) {
    for (int64_t grain : {1, 3, 64, 5000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
        ASSERT_LT(begin, end);
        ASSERT_LE(end - begin, grain);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " grain=" << grain;
      }
    }
  }
}

// 20,000 jobs back to back (the spinning hand-off), each seeing the previous job's writes.
TEST(ThreadPoolTest, BackToBackJobsAllComplete) {
  ThreadPool pool(2);
  int64_t total = 0;
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 20000; ++job) {
    pool.Run([&](int index, int) { sum.fetch_add(index + 1); });
    total += 3;  // 1 + 2
    ASSERT_EQ(sum.load(), total) << "job " << job;
  }
}

// Jobs separated by pauses longer than the spin (so the workers sleep on the condition
// variable), and jobs that keep the caller waiting past its own spin.
TEST(ThreadPoolTest, JobsAfterSleepAndSlowJobsComplete) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  for (int job = 0; job < 20; ++job) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pool.Run([&](int index, int) {
      if (index == 2 && job % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ran.fetch_add(1);
    });
    ASSERT_EQ(ran.load(), 3 * (job + 1));
  }
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// After its last job a pool spins ~50 us and sleeps: over 300 ms of idleness the whole process
// uses a few ms of CPU (thread wake-ups, the test's own sleep), where its 3 workers spinning
// would use ~900 ms and a single one 300 ms. The bound is half of one spinning thread: far
// above what sanitizer runtimes' background threads and a loaded machine add to an idle process
// (it measures CPU time, not wall time, so a slow machine does not push it up), far below any
// spin.
TEST(ThreadPoolTest, IdlePoolUsesNoCpu) {
  ThreadPool pool(3);
  pool.Run([](int, int) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double before = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double used = ProcessCpuSeconds() - before;
  EXPECT_LT(used, 0.150) << "CPU seconds used while idle";
}

}  // namespace
}  // namespace deltaserve::kernels
