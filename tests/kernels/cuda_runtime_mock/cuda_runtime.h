// A stand-in for <cuda_runtime.h> that simulates the part of the CUDA runtime's host API that
// CudaBackend (kernels/cuda/cuda_backend.cu, cuda_backend_graph.cu) calls, on host memory, so
// that cuda_backend_host_test can run the backend's own logic on a machine without a GPU:
// allocation and its failure, the error state (set by a failing call, returned and cleared by
// cudaGetLastError), the current device, stream capture (work enqueued on a capturing stream is
// recorded instead of run; calls that cannot be captured fail and invalidate the capture) and
// graphs (instantiate, update when the recording has as many nodes, launch). Work on a stream
// runs at once (the mock has no asynchrony). Only a test target that puts this folder first on
// its include path sees it. Kernel launches are the test's own stub launchers, which call
// mock_cuda::Enqueue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorGraphExecUpdateFailure = 910,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
constexpr unsigned cudaStreamNonBlocking = 1;

struct CUstream_st {
  int device = 0;
  bool capturing = false;
  bool invalidated = false;
  std::vector<std::function<void()>> recorded;
};
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
};
using cudaStream_t = CUstream_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;

struct cudaDeviceProp {
  char name[256];
  int major = 0;
  int minor = 0;
  int multiProcessorCount = 0;
  size_t totalGlobalMem = 0;
};
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
};
struct cudaGraphExecUpdateResultInfo {
  int result = 0;
};

namespace mock_cuda {

struct Allocation {
  size_t bytes;
  int device;
};

// The simulated machine; tests set it up through Reset().
struct State {
  int device_count = 1;
  size_t capacity = size_t{1} << 30;  // per device
  std::map<int, size_t> used;
  std::map<void*, Allocation> allocations;
  std::set<void*> pinned;
  int current_device = 0;
  cudaError_t last_error = cudaSuccess;
  CUstream_st* capturing = nullptr;  // the calling thread's capturing stream, if any
  int streams = 0;
  int syncs = 0;
  int frees_on_wrong_device = 0;
  int set_device_calls = 0;
};
inline State& S() {
  static State state;
  return state;
}
inline void Reset(int device_count = 1) {
  for (auto& [p, a] : S().allocations) std::free(p);
  for (void* p : S().pinned) std::free(p);
  S() = State{};
  S().device_count = device_count;
}
inline cudaError_t Fail(cudaError_t err) {
  S().last_error = err;
  return err;
}
// A call that may not run while the thread captures: it fails and breaks the capture.
inline bool BreaksCapture() {
  if (S().capturing == nullptr) return false;
  S().capturing->invalidated = true;
  Fail(cudaErrorStreamCaptureUnsupported);
  return true;
}
// Runs `work` on `stream` now, or records it when the stream captures.
inline void Enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream != nullptr && stream->capturing) {
    stream->recorded.push_back(std::move(work));
  } else {
    work();
  }
}

}  // namespace mock_cuda

inline const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorGraphExecUpdateFailure:
      return "cudaErrorGraphExecUpdateFailure";
    default:
      return "cudaErrorInvalidValue";
  }
}
inline const char* cudaGetErrorString(cudaError_t err) {
  return err == cudaErrorMemoryAllocation ? "out of memory" : "mock error";
}
inline cudaError_t cudaGetLastError() {
  const cudaError_t err = mock_cuda::S().last_error;
  mock_cuda::S().last_error = cudaSuccess;
  return err;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 0;
  if (mock_cuda::S().device_count == 0) return mock_cuda::Fail(cudaErrorNoDevice);
  *n = mock_cuda::S().device_count;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* device) {
  *device = mock_cuda::S().current_device;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= mock_cuda::S().device_count) {
    return mock_cuda::Fail(cudaErrorInvalidDevice);
  }
  ++mock_cuda::S().set_device_calls;
  mock_cuda::S().current_device = device;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= mock_cuda::S().device_count) {
    return mock_cuda::Fail(cudaErrorInvalidDevice);
  }
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "Mock GPU %d", device);
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->totalGlobalMem = mock_cuda::S().capacity;
  return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const int d = mock_cuda::S().current_device;
  *total_bytes = mock_cuda::S().capacity;
  *free_bytes = mock_cuda::S().capacity - mock_cuda::S().used[d];
  return cudaSuccess;
}
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (mock_cuda::BreaksCapture()) return cudaErrorStreamCaptureUnsupported;
  mock_cuda::State& s = mock_cuda::S();
  size_t& used = s.used[s.current_device];
  if (bytes > s.capacity - used) return mock_cuda::Fail(cudaErrorMemoryAllocation);
  // 256-byte aligned like cudaMalloc; poisoned so that a missing zero fill shows.
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  std::memset(*p, 0xA5, bytes);
  used += bytes;
  s.allocations[*p] = {bytes, s.current_device};
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  if (mock_cuda::BreaksCapture()) return cudaErrorStreamCaptureUnsupported;
  mock_cuda::State& s = mock_cuda::S();
  const auto it = s.allocations.find(p);
  if (it == s.allocations.end()) return mock_cuda::Fail(cudaErrorInvalidValue);
  if (it->second.device != s.current_device) ++s.frees_on_wrong_device;
  s.used[it->second.device] -= it->second.bytes;
  std::free(p);
  s.allocations.erase(it);
  return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::malloc(bytes);
  mock_cuda::S().pinned.insert(*p);
  return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void* p) {
  mock_cuda::S().pinned.erase(p);
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  *attr = cudaPointerAttributes{};
  if (mock_cuda::S().pinned.count(const_cast<void*>(p)) != 0) attr->type = cudaMemoryTypeHost;
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
  *stream = new CUstream_st;
  (*stream)->device = mock_cuda::S().current_device;
  ++mock_cuda::S().streams;
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  --mock_cuda::S().streams;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream->capturing) {
    stream->invalidated = true;
    return mock_cuda::Fail(cudaErrorStreamCaptureUnsupported);
  }
  ++mock_cuda::S().syncs;
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  mock_cuda::Enqueue(stream, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t stream) {
  if (stream->capturing && kind != cudaMemcpyDeviceToDevice) {
    // A copy from or to pageable host memory cannot be captured: the runtime refuses it.
    stream->invalidated = true;
    return mock_cuda::Fail(cudaErrorStreamCaptureUnsupported);
  }
  mock_cuda::Enqueue(stream, [=] { std::memcpy(dst, src, bytes); });
  return cudaSuccess;
}
inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (stream->capturing) return mock_cuda::Fail(cudaErrorInvalidValue);
  stream->capturing = true;
  stream->invalidated = false;
  stream->recorded.clear();
  mock_cuda::S().capturing = stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  if (!stream->capturing) return mock_cuda::Fail(cudaErrorInvalidValue);
  stream->capturing = false;
  mock_cuda::S().capturing = nullptr;
  if (stream->invalidated) return mock_cuda::Fail(cudaErrorStreamCaptureInvalidated);
  *graph = new CUgraph_st{std::move(stream->recorded)};
  stream->recorded.clear();
  return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                        unsigned long long /*flags*/) {
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
// The topology must match: here, the number of nodes.
inline cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph,
                                       cudaGraphExecUpdateResultInfo*) {
  if (exec->nodes.size() != graph->nodes.size()) {
    return mock_cuda::Fail(cudaErrorGraphExecUpdateFailure);
  }
  exec->nodes = graph->nodes;
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  for (const auto& node : exec->nodes) mock_cuda::Enqueue(stream, node);
  return cudaSuccess;
}
