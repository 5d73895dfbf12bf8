# The kernel levels and DELTASERVE_CPU_ISA (kernels/cpu/cpu_features.h). Label `kernels` (also
# here and in ops.cmake): runs at the level DELTASERVE_CPU_ISA names, so tests/isa_matrix.sh runs
# it once per level the machine supports.
deltaserve_test(NAME cpu_features_test LABEL unit EXTRA_LABELS kernels
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/cpu_features_test.cc LIBS deltaserve_cpu_features)
# Block formats and matrix products of the CPU backend (kernels/cpu/quants.cmake). No `kernels`
# label: these compare every level the CPU supports with the scalar one in each run (the
# explicit-ISA entry points), whatever DELTASERVE_CPU_ISA says.
deltaserve_test(NAME quants_test LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/quants_test.cc
                LIBS deltaserve_kernels_cpu)
deltaserve_test(NAME matmul_test LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/matmul_test.cc
                LIBS deltaserve_kernels_cpu)
deltaserve_test(NAME matmul_int8_test LABEL unit
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_test.cc LIBS deltaserve_kernels_cpu)
deltaserve_test(NAME matmul_int8_codec_test LABEL unit
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/matmul_int8_codec_test.cc
                LIBS deltaserve_kernels_cpu)
deltaserve_test(NAME matmul_group_test LABEL unit
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/matmul_group_test.cc LIBS deltaserve_kernels_cpu)
# llama.cpp's quantized golden files decoded against the f32 model they came from.
deltaserve_test(NAME quants_golden_test LABEL golden
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/quants_golden_test.cc
                LIBS deltaserve_kernels_cpu deltaserve_common)
