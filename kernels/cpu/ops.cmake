# Every non-matmul op of the CPU backend and the Backend implementation itself (CpuBackend,
# MakeCpuBackend). Included by kernels/cpu/CMakeLists.txt. No ISA flags: the hot loops are
# compiled for AVX-512, AVX2 and baseline by target attributes and picked per call from the
# kernel level (DELTASERVE_ISA_DISPATCH, vec_math.h).
set(_deltaserve_cpu_op_sources
  ${CMAKE_CURRENT_LIST_DIR}/norm_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/rope.cc
  ${CMAKE_CURRENT_LIST_DIR}/paged_attention.cc
  ${CMAKE_CURRENT_LIST_DIR}/conv1d.cc
  ${CMAKE_CURRENT_LIST_DIR}/gated_delta_rule.cc
  ${CMAKE_CURRENT_LIST_DIR}/moe.cc
  ${CMAKE_CURRENT_LIST_DIR}/cpu_backend.cc)
target_sources(deltaserve_kernels_cpu PRIVATE ${_deltaserve_cpu_op_sources})
# -fno-trapping-math: g++ vectorises no loop over vec_math.h's FastExp / FastSigmoid / FastSilu
# without it (their clamps are float compares, which may raise FP exceptions, so if-conversion
# keeps them as branches: "control flow in loop"); nothing here reads the FP exception flags.
# The sampler does the same (worker/CMakeLists.txt).
set_source_files_properties(${_deltaserve_cpu_op_sources} PROPERTIES
  COMPILE_OPTIONS "-fno-trapping-math")

# The exception: f16 K/V converted inside the attention tiles needs the F16C conversion of a
# whole vector at once, which the generic vector code cannot ask for (g++ 12 emits 4-wide
# conversions for the generic vector form): paged_attention_avx512.cc runs only at the avx512
# level, paged_attention_avx2.cc only at avx2 and avx_vnni (cpu_features.h).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  target_sources(deltaserve_kernels_cpu PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/paged_attention_avx512.cc
    ${CMAKE_CURRENT_LIST_DIR}/paged_attention_avx2.cc)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/paged_attention_avx512.cc PROPERTIES
    COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx2;-mfma;-mf16c;-fno-trapping-math")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/paged_attention_avx2.cc PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-fno-trapping-math")
endif()
