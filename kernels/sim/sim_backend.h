// The `sim` device (deltaserve-worker --device sim): a TEST AND DEVELOPMENT device, not a way to
// serve. It computes with the CPU backend (same math, same bits as --device cpu) but gives its
// memory the properties of a GPU's, so that everything written for a GPU — the VRAM plan, the
// host/device discipline, MoE experts split between device and host memory, expert moves — runs
// and is tested on machines without one:
// - host_memory() is false, name() is "sim": the engine treats it as a device.
// - It has a device-memory capacity (SimDeviceOptions::capacity_bytes, the worker's --vram):
//   Allocate and ImportWeights beyond it return an empty handle / null, as a full GPU does.
//   allocated_bytes() and peak_allocated_bytes() say what a GPU would have had to hold.
// - Allocate and ImportWeights hand out memory of their own: an mmap'd region per allocation,
//   PROT_NONE except while an op of this backend runs on it, with a PROT_NONE guard page after
//   it (each allocation ends right before its guard page, so an overrun faults). Weights are
//   copied, as a GPU backend copies them.
// - Every op first checks that every pointer argument (Mat, Vec and WeightView data over the
//   whole range the shapes address — a weight stack over WeightView::StackBytes(), its matrices
//   matrix_stride apart — token ids, positions, page tables, KV pools, conv and delta-rule state,
//   the decode step's state pointer arrays and every pointer in them, MoE route ids and weights)
//   lies inside one of its allocations; an op that gets a host pointer, or a range running past
//   its allocation, fails with kInvalidArgument without running and records which op and which
//   argument (violations()). Only then are the touched allocations made readable and writable,
//   the CPU op runs, and they are locked again.
// - CopyToDevice / CopyToHost / CopyOnDevice check the device side is backend memory and the
//   host side is not (a device pointer used as a host buffer is the same bug the other way).
// - Calls are serialised (one at a time, whichever thread makes them); with
//   SimDeviceOptions::single_thread a call from any thread but the one that made the backend is
//   recorded as a violation too (tests that step the scheduler on their own thread).
// A host read or write of backend memory outside an op faults (SIGSEGV); InstallFaultReporter
// makes that fault print which allocation was touched before the process dies.
//
// What it is not: fast (every op maps and unmaps protections, nothing overlaps), or a model of a
// GPU's speed, rounding or allocator. Timing on it says nothing about a GPU.
//
// kernels/ rules: the C++ library and POSIX only (no Abseil).
//
//   kernels::SimDeviceBackend sim({.n_threads = 2, .capacity_bytes = 8ull << 30});
//   auto model = Qwen35Model::Load(path, sim);        // weights copied into sim memory
//   ... Forward, scheduler, snapshots ...
//   if (!sim.violations().empty()) ... the engine touched memory a GPU would not let it
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kernels/backend.h"

namespace deltaserve::kernels {

struct SimDeviceOptions {
  int n_threads = 1;            // threads of the wrapped CPU backend (0: one per core)
  uint64_t capacity_bytes = 0;  // device memory; 0: no limit
  // Record calls from a thread other than the one that made the backend (see the file comment).
  bool single_thread = false;
  // Print each violation to stderr as it is found (the first 20, then a count): a worker on the
  // sim device says why a request failed.
  bool print_violations = false;
};

class SimDeviceBackend : public Backend {
 public:
  explicit SimDeviceBackend(const SimDeviceOptions& options);
  ~SimDeviceBackend() override;
  SimDeviceBackend(const SimDeviceBackend&) = delete;
  SimDeviceBackend& operator=(const SimDeviceBackend&) = delete;

  // Prints the faulting address and the allocation it falls in to stderr when the process gets
  // SIGSEGV inside one of a sim backend's regions, then lets the signal kill the process. Once
  // per process; safe to call again.
  static void InstallFaultReporter();

  // What the checks found, in order: "GetRows: argument 'ids' (0x..., 12 bytes) is not backend
  // memory". Empty when the engine behaved. Kept up to 10,000; violation_count() counts all.
  std::vector<std::string> violations() const;
  uint64_t violation_count() const;
  // Allocations now held, and ops run so far (to show a test really went through this backend).
  size_t live_allocations() const;
  // Bytes asked of Allocate (and ImportWeights) now held, and the most ever held at once: what
  // a GPU would have had to hold, for checks against the memory plan.
  uint64_t allocated_bytes() const;
  uint64_t peak_allocated_bytes() const;
  // The device memory (SimDeviceOptions::capacity_bytes; 0: no limit), and allocations refused
  // because they would have gone beyond it.
  uint64_t capacity_bytes() const { return options_.capacity_bytes; }
  int64_t refused_allocations() const;
  int64_t ops_run() const;
  // CopyToHost calls so far: each one waits for the device on a GPU.
  int64_t copies_to_host() const;
  // True when [p, p + bytes) lies inside one allocation.
  bool IsBackendMemory(const void* p, size_t bytes) const;

  std::string_view name() const override { return "sim"; }
  bool host_memory() const override { return false; }

  DeviceBuffer Allocate(size_t bytes) override;
  KernelStatus CopyToDevice(void* dst, const void* src, size_t bytes) override;
  KernelStatus CopyToHost(void* dst, const void* src, size_t bytes) override;
  const void* ImportWeights(const void* host, size_t bytes, DeviceBuffer& storage) override;
  KernelStatus CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  KernelStatus Synchronize() override;

  KernelStatus MatMul(const WeightView& w, const Mat& x, Mat& y) override;
  KernelStatus MatMulGroup(const WeightView* w, int n, const Mat& x, Mat* y) override;
  KernelStatus GetRows(const WeightView& table, const int32_t* ids, int64_t n, Mat& out) override;
  KernelStatus RmsNorm(const Mat& x, Vec w, float eps, Mat& y) override;
  KernelStatus L2Norm(Mat& x, int64_t group, float eps) override;
  KernelStatus Copy(const Mat& src, Mat& dst) override;
  KernelStatus Add(Mat& x, const Mat& y) override;
  KernelStatus SwiGlu(const Mat& gate, const Mat& up, Mat& out) override;
  KernelStatus MulSigmoid(Mat& x, const Mat& gate) override;
  KernelStatus RopeNeox(Mat& x, const int32_t* positions, int64_t n_heads, int64_t n_rot,
                        float freq_base) override;
  KernelStatus StoreKv(const Mat& k, const Mat& v, const PagedKvView& kv,
                       int64_t first_pos) override;
  KernelStatus PagedAttention(const Mat& q, const PagedKvView& kv, int64_t n_past, int64_t n_head,
                              int64_t n_head_kv, float scale, Mat& out) override;
  KernelStatus CausalConv1dSilu(const Mat& x, const float* w, int64_t kernel, float* state,
                                Mat& y) override;
  KernelStatus GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v, const Mat& g,
                              const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                              int64_t head_dim, float* state, Mat& out) override;
  KernelStatus GatedRmsNorm(const Mat& x, Vec w, const Mat& z, float eps, Mat& y) override;
  KernelStatus DeltaNetGates(Mat& alpha_to_g, Mat& beta, Vec ssm_a, Vec dt_bias) override;
  // Also checks every state pointer inside step.conv_states / delta_states (read as a kernel
  // would) and that the host copies hold the same pointers.
  KernelStatus DeltaNetDecodeStep(const DeltaNetStep& step) override;
  KernelStatus MoeRoute(const Mat& logits, int64_t k, int32_t* ids, float* weights) override;
  // ids < 0 are skipped (backend.h); each stack is checked over its StackBytes().
  KernelStatus MoeFfn(const Mat& x, const int32_t* ids, const float* weights, int64_t k,
                      const WeightView& gate_exps, const WeightView& up_exps,
                      const WeightView& down_exps, Mat& y) override;

 private:
  struct Region;
  class OpGuard;

  // The region holding [p, p + bytes), or null (mu_ held).
  Region* FindLocked(const void* p, size_t bytes) const;
  // True when [p, p + bytes) shares a byte with an allocation (mu_ held).
  bool OverlapsLocked(const void* p, size_t bytes) const;
  void RecordLocked(std::string what);
  static void FreeRegion(void* owner, void* data);

  const SimDeviceOptions options_;
  std::unique_ptr<Backend> cpu_;
  std::mutex call_mu_;  // held for the duration of every call
  const std::thread::id owner_ = std::this_thread::get_id();
  mutable std::mutex mu_;                                 // the fields below
  std::map<uintptr_t, std::unique_ptr<Region>> regions_;  // by data address
  std::vector<std::string> violations_;
  uint64_t violation_count_ = 0;
  int64_t ops_run_ = 0;
  uint64_t allocated_ = 0, peak_ = 0;
  int64_t refused_ = 0;
  int64_t copies_to_host_ = 0;
};

}  // namespace deltaserve::kernels
