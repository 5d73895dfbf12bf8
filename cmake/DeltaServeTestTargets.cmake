# What each ctest label needs built, so that a build can compile only what the tests it runs use
# (tests/run_all.sh builds the asan preset so: `--target tests-unit tests-golden ...`).
#
# deltaserve_label_target(<target> <labels...>) records a test program under each of its labels;
# deltaserve_label_build_targets(), called once after every test is registered, makes one custom
# target `tests-<label>` per label that depends on them. The programs a test starts are already
# its dependencies (add_dependencies(<test> deltaserve-worker) beside each such test), so they
# come along.
function(deltaserve_label_target target)
  foreach(label IN LISTS ARGN)
    set_property(GLOBAL APPEND PROPERTY DELTASERVE_LABEL_TARGETS_${label} ${target})
    set_property(GLOBAL APPEND PROPERTY DELTASERVE_TEST_LABELS ${label})
  endforeach()
endfunction()

function(deltaserve_label_build_targets)
  get_property(labels GLOBAL PROPERTY DELTASERVE_TEST_LABELS)
  list(REMOVE_DUPLICATES labels)
  foreach(label IN LISTS labels)
    get_property(targets GLOBAL PROPERTY DELTASERVE_LABEL_TARGETS_${label})
    add_custom_target(tests-${label})
    add_dependencies(tests-${label} ${targets})
  endforeach()
endfunction()

# Test programs' own sources are compiled at DELTASERVE_TEST_CXX_FLAGS, after the build type's
# flags (the last -O wins): the code under test keeps the build's optimisation (-O3 in release),
# while the test files - GoogleTest's templates, JSON literals, reference loops over small
# inputs - compile in about two thirds of the time at -O1 (measured on router_openai_api_test:
# 7.9 s at -O3, 5.3 s at -O1, g++ 12; the tests ran in the same CPU time). The asan preset uses
# -O0: clang with ASan took 6.1 s for sampler_test at -O2, 2.8 s at -O0, and the test ran in the
# same time (its work is in the library). Empty keeps the build type's flags.
set(DELTASERVE_TEST_CXX_FLAGS "-O1" CACHE STRING
    "Extra compile flags for test programs' own sources (after the build type's)")
function(deltaserve_test_code_options target)
  if(DELTASERVE_TEST_CXX_FLAGS)
    separate_arguments(_flags UNIX_COMMAND "${DELTASERVE_TEST_CXX_FLAGS}")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${_flags}>)
  endif()
endfunction()

# deltaserve_set_discovered_labels(<target> <labels>): gives every test that
# gtest_discover_tests finds in <target> the label list <labels>. Its PROPERTIES argument cannot
# carry a list (CMake 3.25 re-splits it in the generated script), so a second ctest include file,
# read after the discovered tests' own, sets the property on the `<target>_TESTS` list they define.
function(deltaserve_set_discovered_labels target labels)
  set(file "${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake")
  file(WRITE "${file}" "if(DEFINED ${target}_TESTS)\n"
       "  set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"${labels}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${file}")
endfunction()
