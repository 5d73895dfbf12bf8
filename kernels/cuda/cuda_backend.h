// The CUDA implementation of the Backend interface (kernels/backend.h), made by MakeCudaBackend:
// device memory from cudaMalloc owned through DeviceBuffer, one stream per backend on which every
// op is enqueued in order, a scratch area the launchers of cuda_ops.h share, and the kernels of
// kernels/cuda. This header needs no CUDA headers, so worker/ code compiled by the host compiler
// includes it; it exists only in builds where DELTASERVE_HAVE_CUDA is defined.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kernels/backend.h"

namespace deltaserve::kernels {

// What a device is, for the memory planner, GetWorkerInfo and logs.
struct CudaDeviceInfo {
  std::string name;          // "NVIDIA H100 80GB HBM3"
  size_t total_bytes = 0;    // device memory
  size_t free_bytes = 0;     // free at the time of the query (other processes included)
  int cc_major = 0;          // compute capability
  int cc_minor = 0;
  int sm_count = 0;
};

// Usable CUDA devices; 0 with *why set (no driver, no device, a driver/runtime mismatch) where
// there is none. Never aborts: a CPU-only machine gets 0 and a reason.
int CudaDeviceCount(std::string* why);

// Properties of device `device`; false with *error set when it cannot be queried.
bool QueryCudaDevice(int device, CudaDeviceInfo* info, std::string* error);

struct CudaBackendOptions {
  int device = 0;
  // Device memory shared by the launchers for temporaries (attention partials, MoE sorting,
  // chunked delta-rule blocks); the planner sizes it from cuda_ops.h's *ScratchBytes().
  size_t scratch_bytes = size_t{256} << 20;
};

// The backend on options.device ("cuda:N"); null with *error set when the device cannot be
// used (absent, out of memory for the scratch area, a CUDA error).
std::unique_ptr<Backend> MakeCudaBackend(const CudaBackendOptions& options, std::string* error);

}  // namespace deltaserve::kernels
