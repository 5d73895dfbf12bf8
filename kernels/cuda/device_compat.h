// Lets one header hold index math and block decoding that both the CUDA kernels and the CPU
// unit tests run: under nvcc DS_HOST_DEVICE marks a function __host__ __device__, under a plain
// C++ compiler it is empty. Headers written this way include only the C++ library and this file,
// so tests/kernels can check a kernel's addressing (page offsets, split ranges, block layouts,
// partial-softmax merges) on the build machine, which has no GPU.
#pragma once

#if defined(__CUDACC__)
#define DS_HOST_DEVICE __host__ __device__
#define DS_INLINE __forceinline__
#else
#define DS_HOST_DEVICE
#define DS_INLINE inline
#endif
