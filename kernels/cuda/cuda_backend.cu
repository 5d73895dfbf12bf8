// Placeholder until CudaBackend lands (issue 16): the device probe is real, the backend is not.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"

namespace deltaserve::kernels {

int CudaDeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "no CUDA device";
  return n;
}

bool QueryCudaDevice(int, CudaDeviceInfo*, std::string* error) {
  if (error != nullptr) *error = "the CUDA backend is not built yet";
  return false;
}

std::unique_ptr<Backend> MakeCudaBackend(const CudaBackendOptions&, std::string* error) {
  if (error != nullptr) *error = "the CUDA backend is not built yet";
  return nullptr;
}

}  // namespace deltaserve::kernels
