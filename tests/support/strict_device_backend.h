// A test backend that makes the CPU backend's memory behave like a GPU's, so that every place
// where the engine (worker/) touches backend memory from the host shows up on a machine without
// a GPU. It wraps a CpuBackend (same math, same bits) and changes only memory:
// - host_memory() is false, name() is "strict".
// - Allocate and ImportWeights hand out memory of their own: an mmap'd region per allocation,
//   PROT_NONE except while an op of this backend runs on it, with a PROT_NONE guard page after
//   it (each allocation ends right before its guard page, so an overrun faults). Weights are
//   copied, as a GPU backend copies them.
// - Every op first checks that every pointer argument (Mat, Vec and WeightView data over the
//   whole range the shapes address, token ids, positions, page tables, KV pools, conv and
//   delta-rule state, the decode step's state pointer arrays and every pointer in them, MoE
//   route ids and weights) lies inside one of its allocations; an op that
//   gets a host pointer, or a range running past its allocation, fails with kInvalidArgument and
//   records which op and which argument (violations()). Only then are the touched allocations
//   made readable and writable, the CPU op runs, and they are locked again.
// - CopyToDevice / CopyToHost / CopyOnDevice check the device side is backend memory and the
//   host side is not (a device pointer used as a host buffer is the same bug the other way).
// - A call from any thread but the one that made the backend is recorded too: a Backend is
//   driven by one engine thread (tests step the scheduler on the test thread).
// A host read or write of backend memory outside an op faults (SIGSEGV); InstallFaultReporter
// makes that fault print which allocation was touched before the process dies.
//
//   auto strict = std::make_unique<StrictDeviceBackend>(/*n_threads=*/2);
//   auto model = Qwen35Model::Load(path, *strict);        // weights copied into strict memory
//   ... Forward, scheduler, snapshots ...
//   EXPECT_TRUE(strict->violations().empty()) << strict->Report();
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

namespace deltaserve::testing {

class StrictDeviceBackend final : public kernels::Backend {
 public:
  // `n_threads` threads for the wrapped CPU backend.
  explicit StrictDeviceBackend(int n_threads);
  ~StrictDeviceBackend() override;
  StrictDeviceBackend(const StrictDeviceBackend&) = delete;
  StrictDeviceBackend& operator=(const StrictDeviceBackend&) = delete;

  // Prints the faulting address and the allocation it falls in to stderr when the process gets
  // SIGSEGV inside one of this backend's regions, then lets the signal kill the process. Once
  // per process; safe to call again.
  static void InstallFaultReporter();

  // What the checks found, in order: "GetRows: argument 'ids' (0x..., 12 bytes) is not backend
  // memory". Empty when the engine behaved.
  std::vector<std::string> violations() const;
  // The violations as one text, for a test's failure message.
  std::string Report() const;
  // Allocations now held, and ops run so far (to show a test really went through this backend).
  size_t live_allocations() const;
  // Bytes asked of Allocate (and ImportWeights) now held, and the most ever held at once: what
  // a GPU would have had to hold, for checks against the memory plan.
  uint64_t allocated_bytes() const;
  uint64_t peak_allocated_bytes() const;
  int64_t ops_run() const { return ops_run_; }
  // CopyToHost calls so far: each one waits for the device on a GPU.
  int64_t copies_to_host() const { return copies_to_host_; }
  // True when [p, p + bytes) lies inside one allocation.
  bool IsBackendMemory(const void* p, size_t bytes) const;

  std::string_view name() const override { return "strict"; }
  bool host_memory() const override { return false; }

  kernels::DeviceBuffer Allocate(size_t bytes) override;
  kernels::KernelStatus CopyToDevice(void* dst, const void* src, size_t bytes) override;
  kernels::KernelStatus CopyToHost(void* dst, const void* src, size_t bytes) override;
  const void* ImportWeights(const void* host, size_t bytes,
                            kernels::DeviceBuffer& storage) override;
  kernels::KernelStatus CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  kernels::KernelStatus Synchronize() override;

  kernels::KernelStatus MatMul(const kernels::WeightView& w, const kernels::Mat& x,
                               kernels::Mat& y) override;
  kernels::KernelStatus MatMulGroup(const kernels::WeightView* w, int n, const kernels::Mat& x,
                                    kernels::Mat* y) override;
  kernels::KernelStatus GetRows(const kernels::WeightView& table, const int32_t* ids, int64_t n,
                                kernels::Mat& out) override;
  kernels::KernelStatus RmsNorm(const kernels::Mat& x, kernels::Vec w, float eps,
                                kernels::Mat& y) override;
  kernels::KernelStatus L2Norm(kernels::Mat& x, int64_t group, float eps) override;
  kernels::KernelStatus Copy(const kernels::Mat& src, kernels::Mat& dst) override;
  kernels::KernelStatus Add(kernels::Mat& x, const kernels::Mat& y) override;
  kernels::KernelStatus SwiGlu(const kernels::Mat& gate, const kernels::Mat& up,
                               kernels::Mat& out) override;
  kernels::KernelStatus MulSigmoid(kernels::Mat& x, const kernels::Mat& gate) override;
  kernels::KernelStatus RopeNeox(kernels::Mat& x, const int32_t* positions, int64_t n_heads,
                                 int64_t n_rot, float freq_base) override;
  kernels::KernelStatus StoreKv(const kernels::Mat& k, const kernels::Mat& v,
                                const kernels::PagedKvView& kv, int64_t first_pos) override;
  kernels::KernelStatus PagedAttention(const kernels::Mat& q, const kernels::PagedKvView& kv,
                                       int64_t n_past, int64_t n_head, int64_t n_head_kv,
                                       float scale, kernels::Mat& out) override;
  kernels::KernelStatus CausalConv1dSilu(const kernels::Mat& x, const float* w, int64_t kernel,
                                         float* state, kernels::Mat& y) override;
  kernels::KernelStatus GatedDeltaRule(const kernels::Mat& q, const kernels::Mat& k,
                                       const kernels::Mat& v, const kernels::Mat& g,
                                       const kernels::Mat& beta, int64_t n_k_heads,
                                       int64_t n_v_heads, int64_t head_dim, float* state,
                                       kernels::Mat& out) override;
  kernels::KernelStatus GatedRmsNorm(const kernels::Mat& x, kernels::Vec w, const kernels::Mat& z,
                                     float eps, kernels::Mat& y) override;
  kernels::KernelStatus DeltaNetGates(kernels::Mat& alpha_to_g, kernels::Mat& beta,
                                      kernels::Vec ssm_a, kernels::Vec dt_bias) override;
  // Also checks every state pointer inside step.conv_states / delta_states (read as a kernel
  // would) and that the host copies hold the same pointers.
  kernels::KernelStatus DeltaNetDecodeStep(const kernels::DeltaNetStep& step) override;
  kernels::KernelStatus MoeRoute(const kernels::Mat& logits, int64_t k, int32_t* ids,
                                 float* weights) override;
  kernels::KernelStatus MoeFfn(const kernels::Mat& x, const int32_t* ids, const float* weights,
                               int64_t k, const kernels::WeightView& gate_exps,
                               const kernels::WeightView& up_exps,
                               const kernels::WeightView& down_exps, kernels::Mat& y) override;

 private:
  struct Region;
  class OpGuard;

  // The region holding [p, p + bytes), or null (mu_ held).
  Region* FindLocked(const void* p, size_t bytes) const;
  // True when [p, p + bytes) shares a byte with an allocation (mu_ held).
  bool OverlapsLocked(const void* p, size_t bytes) const;
  void RecordLocked(std::string what);
  static void FreeRegion(void* owner, void* data);

  std::unique_ptr<kernels::Backend> cpu_;
  std::mutex call_mu_;  // held for the duration of every call
  const std::thread::id owner_ = std::this_thread::get_id();
  mutable std::mutex mu_;                                 // the fields below
  std::map<uintptr_t, std::unique_ptr<Region>> regions_;  // by data address
  std::vector<std::string> violations_;
  int64_t ops_run_ = 0;
  uint64_t allocated_ = 0, peak_ = 0;
  int64_t copies_to_host_ = 0;
};

}  // namespace deltaserve::testing
