// Test helper: start a process with extra environment, capture stdout and stderr, wait with a
// timeout. Only processes started here are ever signalled.
#pragma once

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace shard::testing {

struct Process {
    pid_t pid = -1;
    int outFd = -1;
    int errFd = -1;
    std::string out;
    std::string err;
    int status = -1;
    bool exited = false;

    // Reads what is available; returns true once the process has exited and pipes are drained.
    bool pump(int timeoutMs)
    {
        std::vector<pollfd> fds;
        if (outFd >= 0)
            fds.push_back({outFd, POLLIN, 0});
        if (errFd >= 0)
            fds.push_back({errFd, POLLIN, 0});
        if (!fds.empty())
            ::poll(fds.data(), fds.size(), timeoutMs);
        else if (!exited)
            ::usleep(static_cast<useconds_t>(timeoutMs) * 1000);
        for (auto* pair : {&outFd, &errFd}) {
            int& fd = *pair;
            if (fd < 0)
                continue;
            char buf[65536];
            ssize_t n = ::read(fd, buf, sizeof buf);
            if (n > 0)
                (pair == &outFd ? out : err).append(buf, static_cast<size_t>(n));
            else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                ::close(fd);
                fd = -1;
            }
        }
        if (!exited && ::waitpid(pid, &status, WNOHANG) == pid)
            exited = true;
        return exited && outFd < 0 && errFd < 0;
    }

    // Waits until exit; returns false on timeout (the process is then killed).
    bool wait(double timeoutSec)
    {
        auto deadline = std::chrono::steady_clock::now()
            + std::chrono::milliseconds(static_cast<long long>(timeoutSec * 1000));
        while (!pump(50)) {
            if (std::chrono::steady_clock::now() > deadline) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &status, 0);
                exited = true;
                return false;
            }
        }
        return true;
    }

    // Pumps until `needle` appears in stdout or the timeout passes.
    bool waitForOutput(const std::string& needle, double timeoutSec)
    {
        auto deadline = std::chrono::steady_clock::now()
            + std::chrono::milliseconds(static_cast<long long>(timeoutSec * 1000));
        while (out.find(needle) == std::string::npos) {
            if (std::chrono::steady_clock::now() > deadline || pump(50))
                return out.find(needle) != std::string::npos;
        }
        return true;
    }

    int exitCode() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
    int termSignal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }
};

inline Process spawnProcess(
    const std::vector<std::string>& argv, const std::vector<std::string>& env = {})
{
    int outPipe[2], errPipe[2];
    if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) {
        std::perror("pipe");
        std::exit(2);
    }
    pid_t pid = ::fork();
    if (pid == 0) {
        ::dup2(outPipe[1], 1);
        ::dup2(errPipe[1], 2);
        for (const auto& e : env)
            ::putenv(const_cast<char*>(e.c_str()));
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        ::execv(args[0], args.data());
        ::_exit(127);
    }
    ::close(outPipe[1]);
    ::close(errPipe[1]);
    Process p;
    p.pid = pid;
    p.outFd = outPipe[0];
    p.errFd = errPipe[0];
    ::fcntl(p.outFd, F_SETFL, O_NONBLOCK);
    ::fcntl(p.errFd, F_SETFL, O_NONBLOCK);
    return p;
}

inline std::string workerPath()
{
    const char* w = std::getenv("SHARD_WORKER");
    return w ? w : SHARD_BINARY_DIR "/engine/worker/shard-worker";
}

inline std::vector<std::string>& tempDirs()
{
    static std::vector<std::string> dirs;
    return dirs;
}

// Removes the directories made by makeTempDir (call on success; failures keep them to inspect).
inline void removeTempDirs()
{
    for (const auto& d : tempDirs())
        std::filesystem::remove_all(d);
    tempDirs().clear();
}

inline std::string makeTempDir(const std::string& tag)
{
    std::string tmpl = "/tmp/shard-" + tag + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) {
        std::perror("mkdtemp");
        std::exit(2);
    }
    tempDirs().push_back(buf.data());
    return buf.data();
}

inline int g_failures = 0;

#define SHARD_EXPECT(cond, msg)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            ++shard::testing::g_failures;                                                          \
            std::fprintf(stderr, "%s:%d: FAIL: %s (%s)\n", __FILE__, __LINE__, #cond,              \
                std::string(msg).c_str());                                                         \
        }                                                                                          \
    } while (0)

} // namespace shard::testing
