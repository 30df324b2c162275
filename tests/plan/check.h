// Minimal checks for the planner's plain-main() tests: every failure prints file:line and the
// expression, and the test exits non-zero at the end.
#pragma once

#include <cmath>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>

namespace shard::plan::test {

inline int& failures()
{
    static int n = 0;
    return n;
}

inline void fail(const char* file, int line, const std::string& what)
{
    std::fprintf(stderr, "%s:%d: FAIL: %s\n", file, line, what.c_str());
    ++failures();
}

template<typename A, typename B>
void checkEq(const A& a, const B& b, const char* ea, const char* eb, const char* file, int line)
{
    if (!(a == b)) {
        std::ostringstream os;
        os << ea << " == " << eb << " (" << a << " vs " << b << ")";
        fail(file, line, os.str());
    }
}

inline void checkNear(
    double a, double b, double rel, const char* ea, const char* eb, const char* file, int line)
{
    double scale = std::max(std::fabs(a), std::fabs(b));
    if (!(std::fabs(a - b) <= rel * scale)) {
        std::ostringstream os;
        os.precision(12);
        os << ea << " ~= " << eb << " (" << a << " vs " << b << ", rel " << rel << ")";
        fail(file, line, os.str());
    }
}

inline int finish(const char* name)
{
    if (failures()) {
        std::fprintf(stderr, "%s: %d check(s) failed\n", name, failures());
        return 1;
    }
    std::printf("%s: all checks passed\n", name);
    return 0;
}

} // namespace shard::plan::test

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            shard::plan::test::fail(__FILE__, __LINE__, #cond);                                    \
    } while (0)
#define CHECK_EQ(a, b) shard::plan::test::checkEq((a), (b), #a, #b, __FILE__, __LINE__)
#define CHECK_NEAR(a, b, rel)                                                                      \
    shard::plan::test::checkNear((a), (b), (rel), #a, #b, __FILE__, __LINE__)
// Expects `expr` to throw std::exception whose message contains `needle`.
#define CHECK_THROWS_WITH(expr, needle)                                                            \
    do {                                                                                           \
        bool thrown_ = false;                                                                      \
        try {                                                                                      \
            (void)(expr);                                                                          \
        } catch (const std::exception& e_) {                                                       \
            thrown_ = true;                                                                        \
            if (std::string(e_.what()).find(needle) == std::string::npos)                          \
                shard::plan::test::fail(__FILE__, __LINE__,                                        \
                    std::string("message of ") + #expr + " lacks '" + (needle)                     \
                        + "': " + e_.what());                                                      \
        }                                                                                          \
        if (!thrown_)                                                                              \
            shard::plan::test::fail(__FILE__, __LINE__, std::string(#expr) + " did not throw");    \
    } while (0)
