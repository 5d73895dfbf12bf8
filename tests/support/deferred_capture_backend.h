// A test backend with step capture (kernels/backend.h "step capture") that behaves like the CUDA
// backend's graphs, so that the engine's use of them is checked on a machine without a GPU. It
// wraps another backend (the CPU backend, or the StrictDeviceBackend for its memory checks too):
// - outside a capture every call goes straight to the wrapped backend;
// - while capturing, every op is recorded as a closure holding its arguments BY VALUE (pointers,
//   shapes, scalars; host arrays such as MatMulGroup's w and y copied), as a CUDA graph node
//   keeps its kernel parameters, and is NOT run: nothing is read or written until the launch,
//   so an engine that reads a result on the host before the launch, or passes a host pointer
//   whose contents change after the call, computes something else than without capture;
// - Allocate, ImportWeights, CopyToDevice, CopyToHost and Synchronize are refused while
//   capturing (kInvalidArgument / empty / null, the capture staying valid), and freeing one of
//   its buffers while capturing spoils the capture (as cudaFree does) and is a violation;
// - EndStepCapture(key) keeps the recording under `key`: "updated" when the recording kept there
//   has the same sequence of ops (names and shapes: what cudaGraphExecUpdate needs to apply a
//   new recording in place), else "instantiated"; LaunchStepGraph(key) runs the kept recording.
// Failures can be injected: an op of the next capture failing (a spoilt CUDA capture: the op
// returns kDeviceError, EndStepCapture fails), or the next EndStepCapture failing.
//
//   DeferredCaptureBackend backend(std::make_unique<StrictDeviceBackend>(2));
//   auto model = Qwen35Model::Load(path, backend);   // decode steps are captured
//   ... Forward ...
//   EXPECT_TRUE(backend.violations().empty());
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"

namespace deltaserve::testing {

class DeferredCaptureBackend final : public kernels::Backend {
 public:
  explicit DeferredCaptureBackend(std::unique_ptr<kernels::Backend> inner);
  ~DeferredCaptureBackend() override;
  DeferredCaptureBackend(const DeferredCaptureBackend&) = delete;
  DeferredCaptureBackend& operator=(const DeferredCaptureBackend&) = delete;

  kernels::Backend& inner() { return *inner_; }
  // Op `index` (0 = the first) of the next capture fails with kDeviceError (once).
  void FailOpOfNextCapture(int64_t index) { fail_op_ = index; }
  // The next EndStepCapture fails with kDeviceError (once).
  void FailNextEndCapture() { fail_end_ = true; }
  // Contract breaches seen: a buffer freed while capturing.
  std::vector<std::string> violations() const;
  // Calls refused while capturing ("CopyToDevice", ...), in order.
  const std::vector<std::string>& refused() const { return refused_; }
  int64_t ops_recorded() const { return ops_recorded_; }
  size_t graphs() const { return graphs_.size(); }
  bool capturing() const { return capturing_; }

  std::string_view name() const override { return "deferred-capture"; }
  bool host_memory() const override { return inner_->host_memory(); }

  bool SupportsStepCapture() const override { return true; }
  kernels::KernelStatus BeginStepCapture() override;
  kernels::KernelStatus EndStepCapture(uint64_t key) override;
  kernels::KernelStatus LaunchStepGraph(uint64_t key) override;
  void AbortStepCapture() override;
  StepGraphStats step_graph_stats() const override { return stats_; }

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
  // Records a copy of the step's host pointer arrays (the device arrays are backend memory).
  kernels::KernelStatus DeltaNetDecodeStep(const kernels::DeltaNetStep& step) override;
  kernels::KernelStatus MoeRoute(const kernels::Mat& logits, int64_t k, int32_t* ids,
                                 float* weights) override;
  kernels::KernelStatus MoeFfn(const kernels::Mat& x, const int32_t* ids, const float* weights,
                               int64_t k, const kernels::WeightView& gate_exps,
                               const kernels::WeightView& up_exps,
                               const kernels::WeightView& down_exps, kernels::Mat& y) override;

 private:
  using Op = std::function<kernels::KernelStatus()>;
  struct Recording {
    std::vector<std::string> signature;  // per op: its name and shapes
    std::vector<Op> ops;
  };

  // Runs `op` now, or records it (with `signature`) while capturing.
  kernels::KernelStatus Run(std::string signature, Op op);
  // True (and noted) when `what` is called while capturing.
  bool Refused(const char* what);
  // Wraps an allocation of the inner backend so that its free is seen here.
  kernels::DeviceBuffer Wrap(kernels::DeviceBuffer inner);
  static void FreeWrapped(void* owner, void* data);

  std::unique_ptr<kernels::Backend> inner_;
  // Atomic: a buffer may be freed on another thread (FreeWrapped reads them).
  std::atomic<bool> capturing_{false};
  std::atomic<bool> spoilt_{false};  // an op failed or a buffer was freed during this capture
  Recording recording_;
  std::map<uint64_t, Recording> graphs_;
  StepGraphStats stats_;
  int64_t fail_op_ = -1;
  bool fail_end_ = false;
  int64_t ops_recorded_ = 0;
  std::vector<std::string> refused_;
  mutable std::mutex mu_;  // the two fields below (buffers may be freed on any thread)
  std::map<void*, kernels::DeviceBuffer> buffers_;
  std::vector<std::string> violations_;
};

}  // namespace deltaserve::testing
