# CUDA detection. When nvcc exists (it does on the build machines, which have no GPU) and
# DELTASERVE_CUDA is ON, the CUDA language is enabled so that every .cu file under
# kernels/cuda is compiled, by CI included, from its first line. -DDELTASERVE_CUDA=OFF skips it.
set(DELTASERVE_HAVE_CUDA OFF)
if(DELTASERVE_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # One architecture by default keeps CI's nvcc time small (CI compiles every .cu but runs
    # none); release builds name theirs: -DDELTASERVE_CUDA_ARCHS="80;86;89;90;120" (A100, RTX
    # 30xx, RTX 40xx/L40, H100/H200, RTX 50xx).
    set(DELTASERVE_CUDA_ARCHS "90" CACHE STRING "CUDA architectures (sm numbers) to compile for")
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${DELTASERVE_CUDA_ARCHS})
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag; device code is C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(DELTASERVE_HAVE_CUDA ON)
    message(STATUS "DeltaServe: CUDA enabled (${CMAKE_CUDA_COMPILER}, archs ${CMAKE_CUDA_ARCHITECTURES})")
  else()
    message(STATUS "DeltaServe: nvcc not found, CUDA backend off")
  endif()
else()
  message(STATUS "DeltaServe: CUDA backend off (-DDELTASERVE_CUDA=OFF)")
endif()
