// A fixed pool of worker threads for the CPU kernels. The calling thread takes part in every
// job. Between the jobs of one forward pass workers spin briefly (a job usually follows within
// microseconds); after ~50 us without work they sleep on a condition variable, so an idle
// worker uses no CPU.
//
// A decode step hands ~100 jobs to the pool, so the hand-off is lock-free while the other side
// spins: the job is published with the generation counter and picked up without the mutex, and
// the mutex and condition variables are touched only when a worker (or the caller, waiting for
// the end of a job) has gone to sleep. An empty job on 2 threads went from 1.7-2.1 us (mutex
// on both sides of every hand-off) to 0.12 us, or from 1.9 to 0.74-0.81 us at another time of
// the same day (the guest's two cores are not always equally close); an OpenMP parallel region
// took 1.3 us then (bench/thread_pool_bench.cc). In a decode step that is ~0.1-0.2 ms of
// ~13 ms, below what engine runs on this guest resolve (alternating runs: within +-2%).
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
  // Job hand-off: job_ and remaining_ are written before generation_ is bumped (release), and
  // read after a worker sees the new generation (acquire).
  std::atomic<uint64_t> generation_{0};
  std::atomic<const std::function<void(int, int)>*> job_{nullptr};
  std::atomic<int> remaining_{0};
  std::atomic<bool> stop_{false};
  // Sleeping: workers_asleep_ counts workers that are (about to be) waiting on wake_, and
  // caller_asleep_ says the caller waits on done_; both are set under mu_ and read by the other
  // side after its own store (sequentially consistent), so a wake-up is never lost.
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<int> workers_asleep_{0};
  std::atomic<bool> caller_asleep_{false};
};

}  // namespace deltaserve::kernels
