// CudaBackend (cuda_backend_class.h): device memory, the stream, the scratch area, error
// mapping, and the ops, which forward to the launchers of cuda_ops.h (matmul, MoE FFN,
// attention, delta rule: other .cu files) and elementwise_ops.h (the rest).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_class.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elementwise_ops.h"

namespace deltaserve::kernels {
namespace {

// cudaMalloc hands out 256-byte aligned blocks; sizes are rounded up to it so that a vector
// access past the last element of a buffer stays inside the allocation.
constexpr size_t kAlignment = 256;

// The device a thread last made current through a backend: cudaSetDevice on every op would be
// an API call per kernel launch.
thread_local int current_device = -1;

// DeviceBuffer's free function; `owner` carries the device index (not the backend, which the
// buffer may outlive). Never throws; a failure is cleared so that no later launch check reports
// it.
void FreeDevice(void* owner, void* data) {
  const int device = static_cast<int>(reinterpret_cast<intptr_t>(owner));
  int previous = -1;
  const bool switch_device = cudaGetDevice(&previous) != cudaSuccess || previous != device;
  if (switch_device) cudaSetDevice(device);
  cudaFree(data);
  if (switch_device && previous >= 0) cudaSetDevice(previous);
  if (switch_device) current_device = previous;
  cudaGetLastError();
}

std::string CudaText(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
}

// True when `p` is page-locked or managed host memory: an asynchronous copy from it runs after
// the call returns, so CopyToDevice must wait before the caller may reuse it. (From pageable
// memory the runtime stages the bytes before returning.)
bool IsPinnedHost(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeManaged;
}

}  // namespace

int CudaDeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why != nullptr) *why = "cudaGetDeviceCount: " + CudaText(err);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "no CUDA device";
  return n;
}

bool QueryCudaDevice(int device, CudaDeviceInfo* info, std::string* error) {
  auto fail = [&](const std::string& text) {
    cudaGetLastError();
    if (error != nullptr) *error = text;
    return false;
  };
  if (info == nullptr) return fail("QueryCudaDevice: no output");
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) return fail(why);
  if (device < 0 || device >= count) {
    return fail("cuda:" + std::to_string(device) + " does not exist (" + std::to_string(count) +
                " devices)");
  }
  cudaDeviceProp prop{};
  if (cudaError_t err = cudaGetDeviceProperties(&prop, device); err != cudaSuccess) {
    return fail("cudaGetDeviceProperties: " + CudaText(err));
  }
  int previous = -1;
  if (cudaError_t err = cudaGetDevice(&previous); err != cudaSuccess) {
    return fail("cudaGetDevice: " + CudaText(err));
  }
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) {
    return fail("cudaSetDevice: " + CudaText(err));
  }
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t mem_err = cudaMemGetInfo(&free_bytes, &total_bytes);
  cudaSetDevice(previous);
  current_device = previous;
  if (mem_err != cudaSuccess) return fail("cudaMemGetInfo: " + CudaText(mem_err));
  info->name = prop.name;
  info->total_bytes = total_bytes;
  info->free_bytes = free_bytes;
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->sm_count = prop.multiProcessorCount;
  return true;
}

std::unique_ptr<Backend> MakeCudaBackend(const CudaBackendOptions& options, std::string* error) {
  return CudaBackend::Create(options, error);
}

// --- lifetime --------------------------------------------------------------------------------

std::unique_ptr<CudaBackend> CudaBackend::Create(const CudaBackendOptions& options,
                                                 std::string* error) {
  auto fail = [&](const std::string& text) -> std::unique_ptr<CudaBackend> {
    if (error != nullptr) *error = text;
    return nullptr;
  };
  std::string text;
  CudaDeviceInfo info;
  if (!QueryCudaDevice(options.device, &info, &text)) return fail(text);
  // The constructor is private (Create is the only way to get a working backend).
  std::unique_ptr<CudaBackend> backend(new CudaBackend());
  backend->device_ = options.device;
  backend->name_ = "cuda:" + std::to_string(options.device);
  backend->info_ = std::move(info);
  if (!backend->UseDevice()) return fail(backend->last_error_);
  cudaStream_t stream = nullptr;
  if (backend->Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags") != KernelStatus::kOk) {
    return fail(backend->last_error_);
  }
  backend->stream_ = stream;
  if (options.scratch_bytes > 0) {
    backend->scratch_ = backend->AllocateUninitialised(options.scratch_bytes);
    if (backend->scratch_.data() == nullptr) {
      return fail("the scratch area (" + std::to_string(options.scratch_bytes) +
                  " bytes) does not fit on " + backend->name_ + " (" +
                  std::to_string(backend->info_.free_bytes) + " of " +
                  std::to_string(backend->info_.total_bytes) +
                  " bytes free): " + backend->last_error_);
    }
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) {
    UseDevice();
    AbortCapture();
    DropGraphs();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaGetLastError();
  }
  // scratch_ is freed after this body (member destruction), through FreeDevice.
}

cuda::LaunchContext CudaBackend::Context() const {
  cuda::LaunchContext ctx;
  ctx.stream = stream_;
  ctx.device = device_;
  ctx.sm_count = info_.sm_count;
  ctx.cc_major = info_.cc_major;
  ctx.cc_minor = info_.cc_minor;
  ctx.scratch = scratch_.data();
  ctx.scratch_bytes = scratch_.bytes();
  return ctx;
}

bool CudaBackend::UseDevice() {
  if (current_device == device_) return true;
  if (Check(cudaSetDevice(device_), "cudaSetDevice") != KernelStatus::kOk) return false;
  current_device = device_;
  return true;
}

KernelStatus CudaBackend::Check(int cuda_error, std::string_view what) {
  const auto err = static_cast<cudaError_t>(cuda_error);
  if (err == cudaSuccess) return KernelStatus::kOk;
  last_error_ = std::string(what) + ": " + CudaText(err);
  cudaGetLastError();  // clear, so the next launch check does not report this one
  return err == cudaErrorMemoryAllocation ? KernelStatus::kOutOfMemory : KernelStatus::kDeviceError;
}

KernelStatus CudaBackend::Launched(KernelStatus status, std::string_view op) {
  if (status != KernelStatus::kOk) {
    last_error_ = std::string(op) + ": " + std::string(KernelStatusName(status));
    if (status == KernelStatus::kOutOfMemory) last_error_ += " (scratch area too small)";
  }
  return status;
}

// --- memory ----------------------------------------------------------------------------------

DeviceBuffer CudaBackend::AllocateUninitialised(size_t bytes) {
  const size_t rounded =
      bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) {
    last_error_ = "cudaMalloc: " + std::to_string(bytes) + " bytes overflow";
    return {};
  }
  if (!UseDevice()) return {};
  void* data = nullptr;
  if (Check(cudaMalloc(&data, rounded), "cudaMalloc(" + std::to_string(rounded) + " bytes)") !=
      KernelStatus::kOk) {
    return {};
  }
  return DeviceBuffer(data, bytes, &FreeDevice,
                      reinterpret_cast<void*>(static_cast<intptr_t>(device_)));
}

bool CudaBackend::RefusedWhileCapturing(std::string_view what) {
  if (!capturing_) return false;
  last_error_ = std::string(what) + ": not allowed while capturing a graph";
  return true;
}

DeviceBuffer CudaBackend::Allocate(size_t bytes) {
  if (RefusedWhileCapturing("Allocate")) return {};
  DeviceBuffer buffer = AllocateUninitialised(bytes);
  if (buffer.data() == nullptr) return {};
  const size_t rounded =
      bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (Check(cudaMemsetAsync(buffer.data(), 0, rounded, stream_), "cudaMemsetAsync") !=
      KernelStatus::kOk) {
    return {};
  }
  return buffer;
}

KernelStatus CudaBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return KernelStatus::kOk;
  if (dst == nullptr || src == nullptr) return KernelStatus::kInvalidArgument;
  if (RefusedWhileCapturing("CopyToDevice")) return KernelStatus::kInvalidArgument;
  if (!UseDevice()) return KernelStatus::kDeviceError;
  if (KernelStatus s = Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
                             "cudaMemcpyAsync(host to device)");
      s != KernelStatus::kOk) {
    return s;
  }
  if (!IsPinnedHost(src)) return KernelStatus::kOk;
  return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

KernelStatus CudaBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return KernelStatus::kOk;
  if (dst == nullptr || src == nullptr) return KernelStatus::kInvalidArgument;
  if (RefusedWhileCapturing("CopyToHost")) return KernelStatus::kInvalidArgument;
  if (!UseDevice()) return KernelStatus::kDeviceError;
  if (KernelStatus s = Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
                             "cudaMemcpyAsync(device to host)");
      s != KernelStatus::kOk) {
    return s;
  }
  return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

KernelStatus CudaBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return KernelStatus::kOk;
  if (dst == nullptr || src == nullptr) return KernelStatus::kInvalidArgument;
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (s < d + bytes && d < s + bytes) return KernelStatus::kInvalidArgument;
  if (!UseDevice()) return KernelStatus::kDeviceError;
  return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync(device to device)");
}

const void* CudaBackend::ImportWeights(const void* host, size_t bytes, DeviceBuffer& storage) {
  if (host == nullptr && bytes > 0) return nullptr;
  if (RefusedWhileCapturing("ImportWeights")) return nullptr;
  DeviceBuffer buffer = AllocateUninitialised(bytes);
  if (buffer.data() == nullptr) return nullptr;
  if (bytes > 0) {
    if (Check(cudaMemcpyAsync(buffer.data(), host, bytes, cudaMemcpyHostToDevice, stream_),
              "cudaMemcpyAsync(weights)") != KernelStatus::kOk ||
        Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize") != KernelStatus::kOk) {
      return nullptr;
    }
  }
  storage = std::move(buffer);
  return storage.data();
}

KernelStatus CudaBackend::Synchronize() {
  if (RefusedWhileCapturing("Synchronize")) return KernelStatus::kInvalidArgument;
  if (!UseDevice()) return KernelStatus::kDeviceError;
  return Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

// --- ops -------------------------------------------------------------------------------------
// Each makes the device current and forwards; the launcher checks the shapes.

#define DS_CUDA_OP(op, call)                             \
  do {                                                   \
    if (!UseDevice()) return KernelStatus::kDeviceError; \
    return Launched(cuda::call, op);                     \
  } while (false)

KernelStatus CudaBackend::MatMul(const WeightView& w, const Mat& x, Mat& y) {
  DS_CUDA_OP("MatMul", LaunchMatMul(Context(), w, x, y));
}

KernelStatus CudaBackend::MatMulGroup(const WeightView* w, int n, const Mat& x, Mat* y) {
  DS_CUDA_OP("MatMulGroup", LaunchMatMulGroup(Context(), w, n, x, y));
}

KernelStatus CudaBackend::GetRows(const WeightView& table, const int32_t* ids, int64_t n,
                                  Mat& out) {
  DS_CUDA_OP("GetRows", LaunchGetRows(Context(), table, ids, n, out));
}

KernelStatus CudaBackend::RmsNorm(const Mat& x, Vec w, float eps, Mat& y) {
  DS_CUDA_OP("RmsNorm", LaunchRmsNorm(Context(), x, w, eps, y));
}

KernelStatus CudaBackend::L2Norm(Mat& x, int64_t group, float eps) {
  DS_CUDA_OP("L2Norm", LaunchL2Norm(Context(), x, group, eps));
}

KernelStatus CudaBackend::Copy(const Mat& src, Mat& dst) {
  DS_CUDA_OP("Copy", LaunchCopy(Context(), src, dst));
}

KernelStatus CudaBackend::Add(Mat& x, const Mat& y) {
  DS_CUDA_OP("Add", LaunchAdd(Context(), x, y));
}

KernelStatus CudaBackend::SwiGlu(const Mat& gate, const Mat& up, Mat& out) {
  DS_CUDA_OP("SwiGlu", LaunchSwiGlu(Context(), gate, up, out));
}

KernelStatus CudaBackend::MulSigmoid(Mat& x, const Mat& gate) {
  DS_CUDA_OP("MulSigmoid", LaunchMulSigmoid(Context(), x, gate));
}

KernelStatus CudaBackend::RopeNeox(Mat& x, const int32_t* positions, int64_t n_heads, int64_t n_rot,
                                   float freq_base) {
  DS_CUDA_OP("RopeNeox", LaunchRopeNeox(Context(), x, positions, n_heads, n_rot, freq_base));
}

KernelStatus CudaBackend::StoreKv(const Mat& k, const Mat& v, const PagedKvView& kv,
                                  int64_t first_pos) {
  DS_CUDA_OP("StoreKv", LaunchStoreKv(Context(), k, v, kv, first_pos));
}

KernelStatus CudaBackend::PagedAttention(const Mat& q, const PagedKvView& kv, int64_t n_past,
                                         int64_t n_head, int64_t n_head_kv, float scale, Mat& out) {
  DS_CUDA_OP("PagedAttention",
             LaunchPagedAttention(Context(), q, kv, n_past, n_head, n_head_kv, scale, out));
}

KernelStatus CudaBackend::CausalConv1dSilu(const Mat& x, const float* w, int64_t kernel,
                                           float* state, Mat& y) {
  DS_CUDA_OP("CausalConv1dSilu", LaunchCausalConv1dSilu(Context(), x, w, kernel, state, y));
}

KernelStatus CudaBackend::GatedDeltaRule(const Mat& q, const Mat& k, const Mat& v, const Mat& g,
                                         const Mat& beta, int64_t n_k_heads, int64_t n_v_heads,
                                         int64_t head_dim, float* state, Mat& out) {
  DS_CUDA_OP("GatedDeltaRule", LaunchGatedDeltaRule(Context(), q, k, v, g, beta, n_k_heads,
                                                    n_v_heads, head_dim, state, out));
}

KernelStatus CudaBackend::GatedRmsNorm(const Mat& x, Vec w, const Mat& z, float eps, Mat& y) {
  DS_CUDA_OP("GatedRmsNorm", LaunchGatedRmsNorm(Context(), x, w, z, eps, y));
}

KernelStatus CudaBackend::DeltaNetGates(Mat& alpha_to_g, Mat& beta, Vec ssm_a, Vec dt_bias) {
  DS_CUDA_OP("DeltaNetGates", LaunchDeltaNetGates(Context(), alpha_to_g, beta, ssm_a, dt_bias));
}

KernelStatus CudaBackend::DeltaNetDecodeStep(const DeltaNetStep& step) {
  DS_CUDA_OP("DeltaNetDecodeStep", LaunchDeltaNetDecodeStep(Context(), step));
}

KernelStatus CudaBackend::MoeRoute(const Mat& logits, int64_t k, int32_t* ids, float* weights) {
  DS_CUDA_OP("MoeRoute", LaunchMoeRoute(Context(), logits, k, ids, weights));
}

KernelStatus CudaBackend::MoeFfn(const Mat& x, const int32_t* ids, const float* weights, int64_t k,
                                 const WeightView& gate_exps, const WeightView& up_exps,
                                 const WeightView& down_exps, Mat& y) {
  DS_CUDA_OP("MoeFfn",
             LaunchMoeFfn(Context(), x, ids, weights, k, gate_exps, up_exps, down_exps, y));
}

#undef DS_CUDA_OP

}  // namespace deltaserve::kernels
