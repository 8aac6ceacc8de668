# Helpers that give every kvserve target the same warnings, sanitizers and test wiring.

set(KVSERVE_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# Warnings become errors only where we control the compiler (CI, `make test`, developers
# who ask): compilers and their versions warn differently, and a packager's or user's
# build with its own flags must not fail on a new false positive.
if(KVSERVE_WERROR)
  list(APPEND KVSERVE_WARNINGS -Werror)
endif()

# GCC contracts a * b + c into a fused multiply-add wherever the target has one: on
# AArch64 (every CPU has fmadd) the portable code, the scalar kernels the vector levels
# are tested against included, would round differently than on baseline x86-64 (which
# has none). There, rounding stays operation by operation; the vector kernels fuse
# explicitly (vfmaq_f32).
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  add_compile_options(-ffp-contract=off)
endif()

if(KVSERVE_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(KVSERVE_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

if(KVSERVE_FUZZ)
  # Coverage instrumentation for every library the fuzz targets link. An undefined-behaviour
  # report stops the run (a failed test, its input saved), as in the AddressSanitizer build:
  # UBSan's default prints it and goes on, exit status 0.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# kvserve_library(NAME SRCS ... DEPS ...): a static library of our own code.
function(kvserve_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${name} PRIVATE ${KVSERVE_WARNINGS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# kvserve_binary(NAME SRCS ... DEPS ...): an executable of our own code.
function(kvserve_binary name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_compile_options(${name} PRIVATE ${KVSERVE_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()

# kvserve_test(NAME SRCS ... DEPS ... [LABELS ...] [ARGS ...]): a GoogleTest binary
# registered with CTest (run with ARGS).
# Tests run from the build directory; KVSERVE_MODELS_DIR points at the fetched model files.
# Every test has a timeout (KVSERVE_TEST_TIMEOUT seconds, default 600: the slowest suite
# under AddressSanitizer takes a few minutes), so a deadlock fails CI instead of hanging it.
#
# GRPC marks a test that runs gRPC calls: under ThreadSanitizer it gets the options of
# tests/tsan_grpc.supp (Debian's gRPC is not instrumented; README, Tests).
function(kvserve_test name)
  cmake_parse_arguments(ARG "GRPC" "" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  kvserve_binary(${name} SRCS ${ARG_SRCS} DEPS ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  set(environment "KVSERVE_MODELS_DIR=${PROJECT_SOURCE_DIR}/models"
                  "KVSERVE_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  if(ARG_GRPC)
    list(APPEND environment "TSAN_OPTIONS=${KVSERVE_TSAN_GRPC_OPTIONS}")
  endif()
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "${environment}"
    LABELS "${ARG_LABELS}"
    TIMEOUT ${KVSERVE_TEST_TIMEOUT})
  # Labels "asan" / "tsan" put the test into the sanitizer suites (make test-asan / test-tsan).
  foreach(label IN LISTS ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY KVSERVE_TESTS_${label} ${name})
  endforeach()
endfunction()

set(KVSERVE_TEST_TIMEOUT 600 CACHE STRING "CTest timeout of each GoogleTest binary, in seconds")

# ThreadSanitizer options of the tests that run gRPC (kvserve_test GRPC), and of the
# servers they start (children inherit the environment): accesses and interceptors inside
# the uninstrumented gRPC, Abseil and protobuf libraries are ignored, and the races wholly
# inside gRPC's own header code are suppressed one by one (tests/tsan_grpc.supp says why).
set(KVSERVE_TSAN_GRPC_OPTIONS
  "ignore_noninstrumented_modules=1:history_size=7:suppressions=${PROJECT_SOURCE_DIR}/tests/tsan_grpc.supp")

# kvserve_test_variant(NAME TEST ARGS ... [LABELS ...]): TEST's binary again as CTest
# test NAME with ARGS. A run whose tests all skipped itself (GTEST_SKIP, e.g. a SIMD
# level this CPU lacks) is reported by CTest as "Skipped", never as a silent pass.
function(kvserve_test_variant name)
  cmake_parse_arguments(ARG "" "TEST" "ARGS;LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND ${ARG_TEST} ${ARG_ARGS})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "KVSERVE_MODELS_DIR=${PROJECT_SOURCE_DIR}/models;KVSERVE_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    LABELS "${ARG_LABELS}"
    TIMEOUT ${KVSERVE_TEST_TIMEOUT}
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\] [0-9]+ test")
  # A variant labelled "<suite>-only" (e.g. "tsan-only": a smaller run for the slow
  # ThreadSanitizer build, which `make test-plain` skips) still builds TEST in that suite.
  foreach(label IN LISTS ARG_LABELS)
    string(REGEX REPLACE "-only$" "" suite "${label}")
    set_property(GLOBAL APPEND PROPERTY KVSERVE_TESTS_${suite} ${ARG_TEST})
  endforeach()
endfunction()

# kvserve_fuzzer(NAME SRCS ... DEPS ... CORPUS dir): a libFuzzer target, built only with
# KVSERVE_FUZZ=ON (clang). The test suite runs each briefly (see tests/CMakeLists.txt).
function(kvserve_fuzzer name)
  cmake_parse_arguments(ARG "" "CORPUS" "SRCS;DEPS" ${ARGN})
  if(NOT KVSERVE_FUZZ)
    return()
  endif()
  kvserve_binary(${name} SRCS ${ARG_SRCS} DEPS ${ARG_DEPS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  # libFuzzer writes new inputs into its first corpus folder: give it one in the build
  # tree so the committed seed corpus (read-only input, second folder) stays untouched.
  set(scratch ${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus)
  file(MAKE_DIRECTORY ${scratch})
  add_test(NAME ${name} COMMAND ${name} -max_total_time=20 -rss_limit_mb=2048 ${scratch} ${ARG_CORPUS})
  set_tests_properties(${name} PROPERTIES LABELS "fuzz" TIMEOUT 300)
  set_property(GLOBAL APPEND PROPERTY KVSERVE_TESTS_fuzz ${name})
endfunction()

# Aggregate targets that build just the tests of one suite: kvserve_asan_tests,
# kvserve_tsan_tests, kvserve_fuzzers. Call once, after every add_subdirectory.
function(kvserve_suite_targets)
  foreach(pair "asan;kvserve_asan_tests" "tsan;kvserve_tsan_tests" "fuzz;kvserve_fuzzers")
    list(GET pair 0 label)
    list(GET pair 1 target)
    get_property(members GLOBAL PROPERTY KVSERVE_TESTS_${label})
    list(REMOVE_DUPLICATES members)
    add_custom_target(${target})
    if(members)
      add_dependencies(${target} ${members})
    endif()
  endforeach()
endfunction()
