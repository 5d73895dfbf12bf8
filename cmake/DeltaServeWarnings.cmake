# Warnings as errors for DeltaServe's own targets: deltaserve_target_warnings(<target>).
function(deltaserve_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>)
endfunction()
