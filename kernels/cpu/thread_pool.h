// A fixed pool of worker threads for the CPU kernels. The calling thread takes part in every
// job. Between the jobs of one forward pass workers spin briefly (a job usually follows within
// microseconds); after ~50 us without work they sleep on a condition variable, so an idle
// worker uses no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltaserve::kernels {

// See the file comment. Run/ParallelFor must be called from one thread at a time.
class ThreadPool {
 public:
  // `n_threads` threads in all, the caller included (0: one per online core).
  explicit ThreadPool(int n_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) on every thread (the caller is index 0); returns when all
  // have finished.
  void Run(const std::function<void(int, int)>& fn);

  // Calls fn(begin, end) over [0, n) in chunks of `grain` items, handed out dynamically so
  // uneven chunks balance; returns when all are done.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  const std::function<void(int, int)>* job_ = nullptr;
  bool stop_ = false;
};

}  // namespace deltaserve::kernels
