# shard_add_test(<name> SOURCES <files...> [LIBS <targets...>] [LABELS <labels...>]
#                [TIMEOUT <s>] [ENV <VAR=value...>] [QT])
# One executable per unit (tst_<unit>.cpp). With QT the executable links Qt6::Test and runs
# offscreen; without it the test is a plain main() that returns non-zero on failure.
function(shard_add_test name)
    cmake_parse_arguments(T "QT" "TIMEOUT" "SOURCES;LIBS;LABELS;ENV" ${ARGN})
    add_executable(${name} ${T_SOURCES})
    target_link_libraries(${name} PRIVATE ${T_LIBS})
    # Helpers shared across test folders are included as "<folder>/<header>".
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
    target_compile_definitions(${name} PRIVATE
        SHARD_SOURCE_DIR="${CMAKE_SOURCE_DIR}" SHARD_BINARY_DIR="${CMAKE_BINARY_DIR}")
    if(T_QT)
        target_link_libraries(${name} PRIVATE Qt6::Test)
        # Torch headers and Qt's `slots`/`signals` keywords do not mix.
        target_compile_definitions(${name} PRIVATE QT_NO_KEYWORDS)
        set_target_properties(${name} PROPERTIES AUTOMOC ON)
    endif()
    add_test(NAME ${name} COMMAND ${name})
    if(NOT T_TIMEOUT)
        set(T_TIMEOUT 300)
    endif()
    set(env "QT_QPA_PLATFORM=offscreen;OMP_NUM_THREADS=1")
    if(T_QT)
        # Qt Test's watchdog (300 s a function by default) ends a function just before CTest
        # would end the test, so a slow machine fails a wait with its own message (and Qt's
        # stack trace) rather than on a watchdog shorter than the waits it cuts.
        math(EXPR watchdog_ms "(${T_TIMEOUT} - 15) * 1000")
        list(APPEND env "QTEST_FUNCTION_TIMEOUT=${watchdog_ms}")
    endif()
    set_tests_properties(${name} PROPERTIES
        LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
        ENVIRONMENT "${env};${T_ENV}")
endfunction()
