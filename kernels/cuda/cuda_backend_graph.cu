// CudaBackend's CUDA-graph capture of a decode step (cuda_backend_class.h "CUDA graphs"; the
// engine's side is in kernels/cuda/README.md). One executable graph per key (batch-size
// bucket); each step's recording is applied to it with cudaGraphExecUpdate, which takes new
// kernel arguments (pointers, n_past, grid sizes) without rebuilding, and only a changed
// sequence of kernels costs a fresh cudaGraphInstantiate.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_backend_class.h"

namespace deltaserve::kernels {

KernelStatus CudaBackend::BeginCapture() {
  if (capturing_) {
    last_error_ = "BeginCapture: already capturing";
    return KernelStatus::kInvalidArgument;
  }
  if (!UseDevice()) return KernelStatus::kDeviceError;
  // Thread-local mode: only this (the engine) thread is barred from calls that cannot be
  // captured; other threads using CUDA meanwhile are unaffected.
  const KernelStatus s = Check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                               "cudaStreamBeginCapture");
  capturing_ = s == KernelStatus::kOk;
  return s;
}

void CudaBackend::AbortCapture() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(stream_, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
}

KernelStatus CudaBackend::EndCaptureAndLaunch(int64_t key) {
  if (!capturing_) {
    last_error_ = "EndCaptureAndLaunch: not capturing";
    return KernelStatus::kInvalidArgument;
  }
  if (KernelStatus s = EndCapture(key); s != KernelStatus::kOk) return s;
  return ReplayGraph(key);
}

KernelStatus CudaBackend::EndCapture(int64_t key) {
  if (!capturing_) {
    last_error_ = "EndCapture: not capturing";
    return KernelStatus::kInvalidArgument;
  }
  capturing_ = false;
  if (!UseDevice()) return KernelStatus::kDeviceError;
  cudaGraph_t graph = nullptr;
  // Fails when something in the capture was not capturable (the capture is then invalidated).
  if (KernelStatus s = Check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
      s != KernelStatus::kOk) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return s;
  }
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(it->second, graph, &info) == cudaSuccess) {
      ++graph_stats_.updated;
    } else {
      // Another sequence of kernels (a launcher chose another path for these shapes): rebuild.
      cudaGetLastError();
      cudaGraphExecDestroy(it->second);
      graphs_.erase(it);
      it = graphs_.end();
    }
  }
  if (it == graphs_.end()) {
    cudaGraphExec_t exec = nullptr;
    const KernelStatus s = Check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    if (s != KernelStatus::kOk) {
      cudaGraphDestroy(graph);
      return s;
    }
    ++graph_stats_.instantiated;
    it = graphs_.emplace(key, exec).first;
  }
  cudaGraphDestroy(graph);
  return KernelStatus::kOk;
}

KernelStatus CudaBackend::ReplayGraph(int64_t key) {
  const auto it = graphs_.find(key);
  if (capturing_ || it == graphs_.end()) {
    last_error_ =
        "ReplayGraph: no graph " + std::to_string(key) + (capturing_ ? " (capturing)" : "");
    return KernelStatus::kInvalidArgument;
  }
  if (!UseDevice()) return KernelStatus::kDeviceError;
  ++graph_stats_.launched;
  return Check(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
}

void CudaBackend::DropGraphs() {
  if (!graphs_.empty()) UseDevice();
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  cudaGetLastError();
}

}  // namespace deltaserve::kernels
