# Tests of the CPU backend's non-matmul ops and of CpuBackend (label `unit`): every op against a
# double-precision reference written from MODEL_SPEC.md, plus shape checks; and the thread pool
# they all run on.
foreach(op vec_math norm_ops rope paged_attention conv1d gated_delta_rule moe cpu_backend
           cpu_backend_layer thread_pool)
  deltaserve_test(NAME ${op}_test LABEL unit SOURCES ${CMAKE_CURRENT_LIST_DIR}/${op}_test.cc
                  LIBS deltaserve_kernels_cpu)
endforeach()
