# Every non-matmul op of the CPU backend and the Backend implementation itself (CpuBackend,
# MakeCpuBackend). Included by kernels/cpu/CMakeLists.txt. No ISA flags: the hot loops are
# compiled for AVX-512, AVX2 and baseline via target_clones and picked at load time (vec_math.h).
target_sources(deltaserve_kernels_cpu PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/norm_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/rope.cc
  ${CMAKE_CURRENT_LIST_DIR}/paged_attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/conv1d.cc
  ${CMAKE_CURRENT_LIST_DIR}/gated_delta_rule.cc
  ${CMAKE_CURRENT_LIST_DIR}/moe.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_backend.cc)
