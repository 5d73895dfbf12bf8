# Tests of the CPU backend's non-matmul ops and of CpuBackend (label `unit`): every op against a
# double-precision reference written from MODEL_SPEC.md, plus shape checks. They run the ops at
# the level DELTASERVE_CPU_ISA names: label `kernels` too (tests/isa_matrix.sh).
foreach(op vec_math norm_ops rope paged_attention conv1d gated_delta_rule moe cpu_backend
           cpu_backend_layer)
  deltaserve_test(NAME ${op}_test LABEL unit EXTRA_LABELS kernels
                  SOURCES ${CMAKE_CURRENT_LIST_DIR}/${op}_test.cc LIBS deltaserve_kernels_cpu)
endforeach()
# The thread pool they all run on (no ISA path).
deltaserve_test(NAME thread_pool_test LABEL unit
                SOURCES ${CMAKE_CURRENT_LIST_DIR}/thread_pool_test.cc LIBS deltaserve_kernels_cpu)
