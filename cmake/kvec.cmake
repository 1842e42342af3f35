# Shared compile settings and helpers for every kvec target.

add_library(kvec_options INTERFACE)
target_compile_options(kvec_options INTERFACE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(kvec_options INTERFACE
    KVEC_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    KVEC_VERSION="${PROJECT_VERSION}")
if(KVEC_FUZZ)
    # Every library is instrumented for libFuzzer's coverage; the harnesses link libFuzzer itself.
    target_compile_options(kvec_options INTERFACE -fsanitize=fuzzer-no-link)
endif()
if(KVEC_SANITIZE)
    # float-cast-overflow (a double too large for its integer type) is not in gcc's `undefined`.
    target_compile_options(kvec_options INTERFACE -fsanitize=address,undefined,float-cast-overflow
                           -fno-omit-frame-pointer -fno-sanitize-recover=undefined,float-cast-overflow)
    target_link_options(kvec_options INTERFACE -fsanitize=address,undefined,float-cast-overflow)
endif()

# kvec_cold(TARGET): under the sanitizers (presets asan and fuzz), a target that runs no hot loop
# compiles at -O0: the tests, the command-line tool, the evaluation's bookkeeping and the server's
# HTTP and JSON layer. Instrumented code generation at -O1 is most of a sanitizer build's time, and
# these files, heavy in JSON, CLI11 and GoogleTest templates, are most of its files; the engine
# (kernels, models, caches, policies, tokenizers) keeps -O1 (docs/reliability.md, "CI"). In the
# preset fuzz this slows the longbench and server harnesses' own code too, which matters only for
# long campaigns (scripts/fuzz.sh).
function(kvec_cold target)
    if(KVEC_SANITIZE)
        target_compile_options(${target} PRIVATE -O0)
    endif()
endfunction()

# kvec_module(NAME SOURCES... [DEPS targets...] [COLD]): one static library per src/ folder
# (COLD: kvec_cold).
function(kvec_module name)
    cmake_parse_arguments(ARG "COLD" "" "SOURCES;DEPS" ${ARGN})
    add_library(${name} STATIC ${ARG_SOURCES})
    target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
    target_link_libraries(${name} PUBLIC kvec_options ${ARG_DEPS})
    if(ARG_COLD)
        kvec_cold(${name})
    endif()
endfunction()

# kvec_test(NAME SOURCES... [DEPS targets...] [LABELS labels...]): one GoogleTest executable.
function(kvec_test name)
    cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
    add_executable(${name} ${ARG_SOURCES})
    target_link_libraries(${name} PRIVATE kvec_options ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/support)  # error_of.h
    kvec_cold(${name})
    gtest_discover_tests(${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} DISCOVERY_TIMEOUT 60
                         PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
