// Test helper: start a process with extra environment, capture stdout and stderr, wait with a
// timeout. Only processes started here are ever signalled. Also what the launcher tests read
// back: a run's events, its rank pids, and which of its processes remain.
#pragma once

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <random>
#include <sstream>
#include <string>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/process_signal.h"

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
                shard::protocol::signalProcess(pid, SIGKILL);
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

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t)
{
    return std::chrono::duration<double>(Clock::now() - t).count();
}

inline std::string readFile(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// The last `dist-selftest` record in a launcher's stdout (rank 0's, forwarded by the launcher);
// empty when there is none.
inline nlohmann::json lastSelftestReport(const std::string& out)
{
    nlohmann::json report;
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.value("type", "") == "selftest")
            report = j;
    }
    return report;
}

inline std::vector<nlohmann::json> events(const std::string& dir)
{
    std::vector<nlohmann::json> out;
    std::istringstream lines(readFile(dir + "/events.jsonl"));
    std::string line;
    while (std::getline(lines, line))
        if (!line.empty())
            out.push_back(nlohmann::json::parse(line, nullptr, false));
    return out;
}

// A loopback port free at the time of the call (a launcher's --master-port).
inline int freePort()
{
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
}

// (rank, pid) pairs from <run>/launcher-ranks.pids.
inline std::vector<std::pair<int, pid_t>> rankPids(
    const std::string& dir, double timeoutSec = 10, const std::string& file = "launcher-ranks.pids")
{
    auto deadline = Clock::now() + std::chrono::milliseconds(int(timeoutSec * 1000));
    std::vector<std::pair<int, pid_t>> pids;
    while (Clock::now() < deadline) {
        pids.clear();
        std::istringstream in(readFile(dir + "/" + file));
        int rank;
        long pid;
        while (in >> rank >> pid)
            pids.emplace_back(rank, static_cast<pid_t>(pid));
        if (!pids.empty())
            return pids;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return pids;
}

// Processes (other than zombies) whose environment names this run directory.
inline std::vector<pid_t> processesOfRun(const std::string& dir)
{
    std::vector<pid_t> found;
    const std::string needle = "SHARD_RUN_DIR=" + dir;
    DIR* proc = opendir("/proc");
    while (dirent* e = readdir(proc)) {
        char* end = nullptr;
        long pid = std::strtol(e->d_name, &end, 10);
        if (!end || *end)
            continue;
        std::string env = readFile("/proc/" + std::string(e->d_name) + "/environ");
        std::string stat = readFile("/proc/" + std::string(e->d_name) + "/stat");
        auto close = stat.rfind(')');
        const bool zombie
            = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
        std::string entry;
        std::istringstream parts(env);
        while (std::getline(parts, entry, '\0'))
            if (entry == needle && !zombie)
                found.push_back(static_cast<pid_t>(pid));
    }
    closedir(proc);
    return found;
}

inline bool noneRemain(
    const std::string& dir, const std::vector<std::pair<int, pid_t>>& pids, double withinSec)
{
    auto deadline = Clock::now() + std::chrono::milliseconds(int(withinSec * 1000));
    while (true) {
        bool any = !processesOfRun(dir).empty();
        for (auto [rank, pid] : pids)
            any = any || shard::protocol::signalGroup(pid, 0) == 0; // the rank's process group
        if (!any)
            return true;
        if (Clock::now() > deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

// Kills `p` with SIGKILL once `trigger` exists (a checkpoint's DONE marker, say); false when the
// process ended first or did not die of the signal.
inline bool killWhen(Process& p, const std::string& trigger)
{
    for (int i = 0; i < 120000; ++i) {
        if (std::filesystem::exists(trigger)) {
            shard::protocol::signalProcess(p.pid, SIGKILL);
            p.wait(30);
            return WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL;
        }
        if (p.pump(1))
            return false;
    }
    return false;
}

// The loss of every step in `run`/metrics.jsonl (a resumed run logs some steps twice: the later
// record counts).
inline std::map<int64_t, double> stepLosses(const std::string& run)
{
    std::map<int64_t, double> out;
    std::ifstream in(run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line);
        out[j["step"].get<int64_t>()] = j["loss"].get<double>();
    }
    return out;
}

// 64 pre-tokenized JSONL records (seeded): runs of consecutive ids below 256, 10 to
// 10 + spread - 1 tokens long.
inline void writeTokenRows(const std::string& path, int spread)
{
    std::ofstream out(path);
    std::mt19937 rng(0);
    for (int i = 0; i < 64; ++i) {
        const int n = 10 + static_cast<int>(rng() % static_cast<unsigned>(spread));
        const int s = static_cast<int>(rng() % 200);
        std::vector<int> ids;
        for (int k = 0; k < n; ++k)
            ids.push_back((s + k) % 256);
        out << nlohmann::json {{"input_ids", ids}}.dump() << "\n";
    }
}

// What the run tests train on: root/model (tiny-1m, seed 1) and root/data.jsonl
// (writeTokenRows, spread 50). False after saying on stderr why init-model failed.
inline bool makeTinyRunInputs(const std::string& root)
{
    writeTokenRows(root + "/data.jsonl", 50);
    auto init = spawnProcess({workerPath(), "init-model", "--preset", "tiny-1m", "--out",
        root + "/model", "--seed", "1"});
    if (!init.wait(120) || init.exitCode() != 0) {
        std::fprintf(stderr, "init-model failed: %s\n", init.err.c_str());
        return false;
    }
    return true;
}

// What the planner-against-engine tests train on: root/model (`preset`, seed 1) and
// root/data.jsonl, 32 records of `seqLen` ids below 4096 from a fixed LCG (every row full length,
// so the plan's sequence length is the one trained). False after saying on stderr why init-model
// failed.
inline bool makeFullLengthRunInputs(const std::string& root, const std::string& preset, int seqLen)
{
    auto init = spawnProcess(
        {workerPath(), "init-model", "--preset", preset, "--out", root + "/model", "--seed", "1"});
    if (!init.wait(60) || init.exitCode() != 0) {
        std::fprintf(stderr, "init-model failed: %s\n", init.err.c_str());
        return false;
    }
    std::ofstream data(root + "/data.jsonl");
    uint64_t x = 777;
    for (int line = 0; line < 32; ++line) {
        data << "{\"input_ids\":[";
        for (int i = 0; i < seqLen; ++i) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            data << (i ? "," : "") << (x >> 33) % 4096;
        }
        data << "]}\n";
    }
    return true;
}

// Lines in a file (0 when it cannot be read).
inline int countLines(const std::string& path)
{
    const std::string text = readFile(path);
    return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// Mounts a tmpfs of `size` (e.g. "4m") at `dir` (created); false with the reason when this
// process may not mount (not root, a container without CAP_SYS_ADMIN).
inline bool mountTmpfs(const std::string& dir, const std::string& size, std::string* why)
{
    std::filesystem::create_directories(dir);
    const std::string options = "size=" + size;
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0)
        return true;
    *why = "cannot mount a tmpfs at " + dir + " (" + std::strerror(errno)
        + "); run the test as root";
    return false;
}

// Fills the file system holding `path` (a new file) until it reports ENOSPC.
inline void fillDisk(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    std::vector<char> chunk(1 << 16, 'x');
    size_t size = chunk.size();
    while (fd >= 0 && size > 0) {
        if (::write(fd, chunk.data(), size) < 0)
            size /= 2; // the last pages, in smaller pieces
    }
    if (fd >= 0)
        ::close(fd);
}

} // namespace shard::testing
