// A stand-in for <cuda_runtime.h> that lets the host compiler build and run CUDA kernels written
// in the subset our .cuh files use (__global__/__device__ functions, __shared__ arrays,
// threadIdx/blockIdx, __syncthreads, __shfl_xor_sync on floats), so that a unit test on a machine
// without a GPU executes the kernels' own code, index math and barrier placement included.
// Only a test target that puts this folder first on its include path sees it.
//
//   cuda_emu::Launch({grid_x, grid_y}, threads, &MyKernel, args...);  // false: a barrier hang
//
// Model: the blocks of a grid run one after another; the threads of a block are fibers
// (ucontext) on the calling thread. In each round every runnable thread runs, in a fresh
// pseudo-random order (fixed seed: runs repeat), until it reaches __syncthreads or a shuffle,
// or finishes. A barrier releases when every thread of the block waits at it, a full-warp
// shuffle when all 32 lanes of the warp have posted their value. Running whole phases one thread
// at a time, in shuffled orders, is adversarial for a missing barrier: between two barriers, a
// thread runs its next phase before (or after) another has run the current one, so a read that
// needs another thread's write (or a write that must wait for another thread's read) sees the
// wrong value. __shared__ arrays are `static` (one block at a time shares them). Not modelled:
// memory of other blocks running concurrently, atomics, warp divergence inside a shuffle (reported
// as a hang), timing.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

namespace deltaserve::cuda_emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

enum class FiberState { kRunnable, kBarrier, kShuffle, kDone };

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  Dim3 thread;
  FiberState state = FiberState::kRunnable;
  float shuffle_in = 0.0f;   // the value this lane posts
  float shuffle_out = 0.0f;  // what it receives
  unsigned shuffle_src = 0;  // the lane it reads
};

struct BlockRun {
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  unsigned current = 0;
  Dim3 block;
  const std::function<void()>* body = nullptr;
};

// The scheduler's order source, shared by all launches of the process (deterministic).
inline std::mt19937& ScheduleRng() {
  static std::mt19937 rng(20261125);
  return rng;
}

inline BlockRun*& CurrentBlock() {
  static BlockRun* run = nullptr;
  return run;
}
inline Dim3 ThreadIdx() { return CurrentBlock()->fibers[CurrentBlock()->current].thread; }
inline Dim3 BlockIdx() { return CurrentBlock()->block; }

inline void Yield(FiberState state) {
  BlockRun* run = CurrentBlock();
  Fiber& f = run->fibers[run->current];
  f.state = state;
  swapcontext(&f.context, &run->scheduler);
}

inline float ShuffleXor(float value, int lane_mask) {
  BlockRun* run = CurrentBlock();
  const unsigned me = run->current;
  run->fibers[me].shuffle_in = value;
  run->fibers[me].shuffle_src = (run->fibers[me].thread.x % 32) ^ static_cast<unsigned>(lane_mask);
  Yield(FiberState::kShuffle);
  return run->fibers[me].shuffle_out;
}

inline void FiberMain() {
  BlockRun* run = CurrentBlock();
  (*run->body)();
  run->fibers[run->current].state = FiberState::kDone;
}  // returns to uc_link: the scheduler

// Runs `body` as every thread of block `block`; false when the threads hang (a barrier or
// shuffle some of them never reach).
inline bool RunBlock(Dim3 block, unsigned threads, const std::function<void()>& body) {
  constexpr size_t kStack = 64 * 1024;
  BlockRun run;
  run.block = block;
  run.body = &body;
  run.fibers.resize(threads);
  for (unsigned i = 0; i < threads; ++i) {
    Fiber& f = run.fibers[i];
    f.thread = Dim3{i, 0, 0};
    f.stack.reset(new char[kStack]);
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.get();
    f.context.uc_stack.ss_size = kStack;
    f.context.uc_link = &run.scheduler;
    makecontext(&f.context, FiberMain, 0);
  }
  CurrentBlock() = &run;
  std::vector<unsigned> order(threads);
  std::iota(order.begin(), order.end(), 0u);
  bool ok = true;
  for (;;) {
    std::shuffle(order.begin(), order.end(), ScheduleRng());
    for (const unsigned i : order) {
      if (run.fibers[i].state != FiberState::kRunnable) continue;
      run.current = i;
      swapcontext(&run.scheduler, &run.fibers[i].context);
    }
    bool released = false;
    for (unsigned lo = 0; lo < threads; lo += 32) {
      const unsigned hi = lo + 32 < threads ? lo + 32 : threads;
      unsigned at_shuffle = 0;
      for (unsigned i = lo; i < hi; ++i) at_shuffle += run.fibers[i].state == FiberState::kShuffle;
      if (at_shuffle == 0 || at_shuffle != hi - lo) continue;
      for (unsigned i = lo; i < hi; ++i) {
        Fiber& f = run.fibers[i];
        f.shuffle_out = run.fibers[lo + f.shuffle_src].shuffle_in;
        f.state = FiberState::kRunnable;
      }
      released = true;
    }
    if (released) continue;
    unsigned at_barrier = 0, done = 0;
    for (const Fiber& f : run.fibers) {
      at_barrier += f.state == FiberState::kBarrier;
      done += f.state == FiberState::kDone;
    }
    if (done == threads) break;
    if (at_barrier != threads) {  // some wait for threads that finished or wait elsewhere
      ok = false;
      break;
    }
    for (Fiber& f : run.fibers) f.state = FiberState::kRunnable;
  }
  CurrentBlock() = nullptr;
  return ok;
}

// Runs kernel(args...) over `grid` blocks of `threads` threads, block (0,0) first, x fastest.
template <typename Kernel, typename... Args>
bool Launch(Dim3 grid, unsigned threads, Kernel kernel, Args... args) {
  const std::function<void()> body = [&] { kernel(args...); };
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        if (!RunBlock(Dim3{x, y, z}, threads, body)) return false;
      }
    }
  }
  return true;
}

}  // namespace deltaserve::cuda_emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define threadIdx (::deltaserve::cuda_emu::ThreadIdx())
#define blockIdx (::deltaserve::cuda_emu::BlockIdx())

inline void __syncthreads() {
  ::deltaserve::cuda_emu::Yield(::deltaserve::cuda_emu::FiberState::kBarrier);
}
inline float __shfl_xor_sync(unsigned /*full mask only*/, float value, int lane_mask) {
  return ::deltaserve::cuda_emu::ShuffleXor(value, lane_mask);
}
