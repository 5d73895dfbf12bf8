// The CudaBackend class itself, for callers that need more than the Backend interface: the text
// of the last CUDA error, the device's properties, and CUDA-graph capture of a decode step
// (kernels/cuda/README.md "CUDA graphs" says what the engine must do around it).
// Host-only like cuda_backend.h (the CUDA handle types are forward-declared), so worker/ code
// compiled by the host compiler can use it:
//
//   auto* gpu = AsCudaBackend(backend.get());          // null for the CPU backend
//   if (gpu != nullptr && status != KernelStatus::kOk) LOG(ERROR) << gpu->last_error();
//
// Threading: like every Backend, one engine thread drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

// The runtime's handle types (cudaStream_t is CUstream_st*, and so on), declared here so that
// this header needs no CUDA include.
struct CUstream_st;
struct CUgraphExec_st;

namespace deltaserve::kernels {

namespace cuda {
struct LaunchContext;
}  // namespace cuda

// See cuda_backend.h. Memory: Allocate is cudaMalloc (256-byte aligned) zero-filled on the
// stream; the copies are stream-ordered (CopyToHost waits for them, so the host data is valid
// on return; CopyToDevice returns when `src` may be reused). Every op is enqueued on one
// non-blocking stream in call order; Synchronize waits for it. CUDA errors are kDeviceError
// (a failed allocation kOutOfMemory) and their text is kept for last_error().
class CudaBackend final : public Backend {
 public:
  // The backend on options.device; null with *error set (see MakeCudaBackend).
  static std::unique_ptr<CudaBackend> Create(const CudaBackendOptions& options, std::string* error);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return name_; }
  bool host_memory() const override { return false; }

  // What the last failed call said ("cudaMalloc(1073741824 bytes): out of memory"); empty
  // while nothing has failed.
  std::string last_error() const { return last_error_; }
  // The device as queried when the backend was made (free_bytes as of then).
  const CudaDeviceInfo& device_info() const { return info_; }
  int device() const { return device_; }
  size_t scratch_bytes() const { return scratch_.bytes(); }

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
  KernelStatus DeltaNetDecodeStep(const DeltaNetStep& step) override;

  KernelStatus MoeRoute(const Mat& logits, int64_t k, int32_t* ids, float* weights) override;
  KernelStatus MoeFfn(const Mat& x, const int32_t* ids, const float* weights, int64_t k,
                      const WeightView& gate_exps, const WeightView& up_exps,
                      const WeightView& down_exps, Mat& y) override;

  // --- CUDA graphs ----------------------------------------------------------------------
  // A decode step is hundreds of small launches; replayed as one graph the GPU runs them back
  // to back instead of waiting on each launch. Between BeginCapture and EndCaptureAndLaunch the
  // ops are recorded, not run (cudaStreamBeginCapture, thread-local mode). EndCaptureAndLaunch
  // then updates the executable graph cached under `key` (a batch-size bucket) in place with
  // the new recording (cudaGraphExecUpdate: the same graph shape, new arguments such as
  // n_past), or instantiates one when there is none or the update is refused (another number or
  // order of launches), and launches it. While capturing, Allocate, ImportWeights,
  // CopyToDevice, CopyToHost and Synchronize are refused (kInvalidArgument: they cannot be part
  // of a graph) and no DeviceBuffer may be freed (cudaFree breaks a capture); an op that fails
  // while capturing leaves the capture broken: call AbortCapture.
  KernelStatus BeginCapture();
  KernelStatus EndCaptureAndLaunch(int64_t key);
  // EndCaptureAndLaunch without the launch: the cached graph under `key` is updated or built,
  // and nothing runs until ReplayGraph(key). On failure nothing recorded will run.
  KernelStatus EndCapture(int64_t key);
  // Ends a capture and throws the recording away (after an op failed mid-step); no-op if none.
  void AbortCapture();
  // Launches the graph cached under `key` again, unchanged: only valid when every argument of
  // every recorded op (pointers and host scalars such as n_past) is still what it should be.
  KernelStatus ReplayGraph(int64_t key);
  bool capturing() const { return capturing_; }
  bool HasGraph(int64_t key) const { return graphs_.count(key) != 0; }
  // Destroys every cached graph (the engine's buckets changed, or memory is needed).
  void DropGraphs();
  // instantiated: graphs built from scratch; updated: recordings applied to a cached graph in
  // place; launched: EndCaptureAndLaunch and ReplayGraph launches.
  using GraphStats = StepGraphStats;
  const GraphStats& graph_stats() const { return graph_stats_; }

  // The Backend interface's step capture (kernels/backend.h) is the API above: Begin ->
  // BeginCapture, End -> EndCapture, Launch -> ReplayGraph, Abort -> AbortCapture.
  bool SupportsStepCapture() const override { return true; }
  KernelStatus BeginStepCapture() override { return BeginCapture(); }
  KernelStatus EndStepCapture(uint64_t key) override {
    return EndCapture(static_cast<int64_t>(key));
  }
  KernelStatus LaunchStepGraph(uint64_t key) override {
    return ReplayGraph(static_cast<int64_t>(key));
  }
  void AbortStepCapture() override { AbortCapture(); }
  StepGraphStats step_graph_stats() const override { return graph_stats_; }

 private:
  CudaBackend() = default;

  cuda::LaunchContext Context() const;
  // Makes the device current for this thread; false (error kept) when that fails.
  bool UseDevice();
  // kOk for cudaSuccess; else keeps "<what>: <CUDA's text>", clears the runtime's error state
  // and maps the error (cudaErrorMemoryAllocation: kOutOfMemory, the rest: kDeviceError).
  KernelStatus Check(int cuda_error, std::string_view what);
  // The status of a launcher; a kDeviceError is recorded as "<op>: launch failed".
  KernelStatus Launched(KernelStatus status, std::string_view op);
  // cudaMalloc without the zero fill (ImportWeights overwrites everything anyway).
  DeviceBuffer AllocateUninitialised(size_t bytes);
  // True (with the error kept) when `what` is called while capturing.
  bool RefusedWhileCapturing(std::string_view what);

  int device_ = 0;
  std::string name_;
  CudaDeviceInfo info_;
  CUstream_st* stream_ = nullptr;
  DeviceBuffer scratch_;
  std::string last_error_;
  bool capturing_ = false;
  std::map<int64_t, CUgraphExec_st*> graphs_;
  GraphStats graph_stats_;
};

// `backend` as a CudaBackend; null when it is another backend.
inline CudaBackend* AsCudaBackend(Backend* backend) { return dynamic_cast<CudaBackend*>(backend); }

}  // namespace deltaserve::kernels
