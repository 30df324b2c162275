// Minimal checks for the engine tests (plain main(), non-zero exit on failure).
#pragma once

#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace shard::test {

inline int& failures()
{
    static int n = 0;
    return n;
}

inline void check(bool ok, const std::string& what, const char* file, int line)
{
    if (!ok) {
        std::fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what.c_str());
        ++failures();
    }
}

// Expects fn to throw std::exception whose message contains every one of `parts`.
inline void expectThrow(const std::function<void()>& fn, std::initializer_list<std::string> parts,
    const char* file, int line)
{
    try {
        fn();
    } catch (const std::exception& e) {
        const std::string msg = e.what();
        for (const auto& p : parts)
            if (msg.find(p) == std::string::npos) {
                std::fprintf(stderr, "FAIL %s:%d: message '%s' lacks '%s'\n", file, line,
                    msg.c_str(), p.c_str());
                ++failures();
                return;
            }
        return;
    }
    std::fprintf(stderr, "FAIL %s:%d: no exception thrown\n", file, line);
    ++failures();
}

inline std::string tempDir(const std::string& name)
{
    auto dir = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir.string();
}

// What a shell command printed on stdout (append " 2>&1" for stderr too) and its exit code
// (-1 when it did not exit normally or could not start).
struct CommandOutput {
    int code = -1;
    std::string output;
};

inline CommandOutput runCaptured(const std::string& shellCommand)
{
    CommandOutput r;
    FILE* pipe = popen(shellCommand.c_str(), "r");
    if (!pipe)
        return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0)
        r.output.append(buf, n);
    const int status = pclose(pipe);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

inline int finish(const char* name)
{
    if (failures() == 0)
        std::printf("%s: all checks passed\n", name);
    return failures() == 0 ? 0 : 1;
}

} // namespace shard::test

#define T_CHECK(cond) ::shard::test::check(static_cast<bool>(cond), #cond, __FILE__, __LINE__)
#define T_CHECK_MSG(cond, msg)                                                                     \
    ::shard::test::check(static_cast<bool>(cond), msg, __FILE__, __LINE__)
#define EXPECT_THROW_WITH(stmt, ...)                                                               \
    ::shard::test::expectThrow([&] { stmt; }, {__VA_ARGS__}, __FILE__, __LINE__)
