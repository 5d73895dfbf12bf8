#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace deltaserve::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// How long a thread spins for new work or for job completion before blocking.
constexpr auto kSpinFor = std::chrono::microseconds(50);

// Spins until done() or kSpinFor has passed; returns done().
template <class Done>
bool SpinUntil(const Done& done) {
  const auto spin_until = std::chrono::steady_clock::now() + kSpinFor;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= spin_until) return done();
    for (int i = 0; i < 64 && !done(); ++i) CpuRelax();
  }
  return true;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads > 0
                     ? n_threads
                     : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  // Empty on purpose: a worker between its check of the generation and its wait holds mu_, so
  // after this it is either waiting (and gets the notify) or will see the new generation.
  { std::lock_guard<std::mutex> lock(mu_); }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Sequentially consistent loads in both predicates: each pairs with the other side's
    // read-modify-write in a store-buffering pattern (see the header).
    auto changed = [&] { return generation_.load() != seen; };
    if (!SpinUntil(changed)) {
      std::unique_lock<std::mutex> lock(mu_);
      workers_asleep_.fetch_add(1);  // seq_cst: Run reads it after bumping the generation
      wake_.wait(lock, changed);
      workers_asleep_.fetch_sub(1);
    }
    seen = generation_.load();
    if (stop_.load()) return;
    (*job_.load(std::memory_order_relaxed))(index, n_threads_);
    if (remaining_.fetch_sub(1) == 1 && caller_asleep_.load()) {
      // The caller stopped spinning: wake it under the mutex, so that the notify cannot fall
      // between its check of remaining_ and its wait.
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_.store(&fn, std::memory_order_relaxed);
  remaining_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job, ordered before workers_asleep_
  if (workers_asleep_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_.notify_all();
  }
  fn(0, n_threads_);
  auto finished = [&] { return remaining_.load() == 0; };
  if (!SpinUntil(finished)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_asleep_.store(true);  // seq_cst: the last worker reads it after its decrement
    done_.wait(lock, finished);
    caller_asleep_.store(false);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  Run([&](int, int) {
    for (;;) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) return;
      fn(begin, std::min(n, begin + grain));
    }
  });
}

}  // namespace deltaserve::kernels
