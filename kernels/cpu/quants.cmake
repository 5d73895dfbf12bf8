# Block formats and matrix products of the CPU backend (included by CMakeLists.txt here).
# The library stays baseline x86-64; only the ISA files get wider instructions, and they
# run only at the level ActiveIsa() names (cpu_features.h), which the CPU has.
target_sources(deltaserve_kernels_cpu PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/quants.cc
  ${CMAKE_CURRENT_LIST_DIR}/matmul.cc
  ${CMAKE_CURRENT_LIST_DIR}/matmul_int8.cc)

# No FMA contraction anywhere here: decoded weights must be bit-identical between the scalar
# reference and the SIMD paths, and GCC would otherwise fuse the intrinsics' separate multiply
# and add of the decoders (it contracts by default outside ISO C).
set_source_files_properties(
  ${CMAKE_CURRENT_LIST_DIR}/quants.cc
  ${CMAKE_CURRENT_LIST_DIR}/matmul.cc
  ${CMAKE_CURRENT_LIST_DIR}/matmul_int8.cc
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  target_sources(deltaserve_kernels_cpu PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/matmul_avx2.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx2.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx2_quantize.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avxvnni.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_avx512.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_rows.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_batch.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_tiles.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_quantize.cc)
  set_source_files_properties(
    ${CMAKE_CURRENT_LIST_DIR}/matmul_avx2.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx2.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx2_quantize.cc
    PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-ffp-contract=off")
  # AVX-VNNI without any AVX-512 flag: with -mavx512vl the same intrinsics would be EVEX-encoded,
  # which the AVX-VNNI CPUs without AVX-512 (Alder Lake and later client cores) cannot run.
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avxvnni.cc PROPERTIES
    COMPILE_OPTIONS "-mavx2;-mfma;-mf16c;-mavxvnni;-ffp-contract=off")
  set_source_files_properties(
    ${CMAKE_CURRENT_LIST_DIR}/matmul_avx512.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_rows.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_batch.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_tiles.cc
    ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_avx512_quantize.cc
    PROPERTIES
    COMPILE_OPTIONS
    "-mavx512f;-mavx512bw;-mavx512vl;-mavx512vnni;-mavx512bf16;-mavx2;-mfma;-mf16c;-ffp-contract=off")
  # The SIMD paths are compiled in (deltaserve_cpu_features says the same in CMakeLists.txt).
  target_compile_definitions(deltaserve_kernels_cpu PRIVATE DELTASERVE_HAVE_X86_SIMD=1)
endif()
