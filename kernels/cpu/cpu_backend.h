// The CPU implementation of the Backend interface (kernels/backend.h): host memory, a thread
// pool shared by all ops, and the kernels of kernels/cpu. Made with MakeCpuBackend(n_threads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace deltaserve::kernels {

// See the file comment. "Device" memory is host memory: Allocate returns 64-byte aligned,
// zero-filled heap blocks, the copies are memcpy and ImportWeights is zero copy. Every op checks
// its shapes and returns kInvalidArgument on a mismatch before touching memory.
class CpuBackend final : public Backend {
 public:
  // `n_threads` threads in all, the calling thread included (0: one per core).
  explicit CpuBackend(int n_threads);

  std::string_view name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  int n_threads() const { return pool_.size(); }

  DeviceBuffer Allocate(size_t bytes) override;
  KernelStatus CopyToDevice(void* dst, const void* src, size_t bytes) override;
  KernelStatus CopyToHost(void* dst, const void* src, size_t bytes) override;
  const void* ImportWeights(const void* host, size_t bytes, DeviceBuffer& storage) override;
  KernelStatus CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  KernelStatus Synchronize() override { return KernelStatus::kOk; }

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

  KernelStatus MoeRoute(const Mat& logits, int64_t k, int32_t* ids, float* weights) override;
  KernelStatus MoeFfn(const Mat& x, const int32_t* ids, const float* weights, int64_t k,
                      const WeightView& gate_exps, const WeightView& up_exps,
                      const WeightView& down_exps, Mat& y) override;

 private:
  ThreadPool pool_;
};

}  // namespace deltaserve::kernels
