# Generates shard/version.h (SHARD_VERSION string) for every executable's --version.
set(SHARD_GIT_REV "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short HEAD
        WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE SHARD_GIT_REV
        OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT SHARD_GIT_REV)
        set(SHARD_GIT_REV "unknown")
    endif()
endif()
file(WRITE ${CMAKE_BINARY_DIR}/generated/shard/version.h.in
"#pragma once\n#define SHARD_VERSION \"@PROJECT_VERSION@\"\n#define SHARD_GIT_REV \"@SHARD_GIT_REV@\"\n")
configure_file(${CMAKE_BINARY_DIR}/generated/shard/version.h.in
    ${CMAKE_BINARY_DIR}/generated/shard/version.h @ONLY)
add_library(shard_version INTERFACE)
target_include_directories(shard_version INTERFACE ${CMAKE_BINARY_DIR}/generated)
