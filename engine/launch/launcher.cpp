// Fork/exec of the ranks, a signalfd + poll supervision loop, forwarding of rank 0's stdout,
// and the stop sequence (SIGTERM, grace period, SIGKILL) when a rank fails or the launcher is
// told to stop. Children lead their own process groups and die with the launcher
// (PR_SET_PDEATHSIG), so no process of a run survives it.
#include "launch/launcher.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "launch/node_rendezvous.h"
#include "protocol/records.h"
#include "protocol/run_dir.h"

namespace shard::launch {

namespace {

using Clock = std::chrono::steady_clock;

struct Rank {
    int localRank = 0;
    int globalRank = 0;
    pid_t pid = -1;
    bool running = false;
    int status = 0;
};

std::string signalName(int sig)
{
    const char* abbrev = sigabbrev_np(sig);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describeStatus(int status)
{
    if (WIFSIGNALED(status))
        return "was killed by signal " + std::to_string(WTERMSIG(status)) + " ("
            + signalName(WTERMSIG(status)) + ")";
    return "exited with code " + std::to_string(WEXITSTATUS(status));
}

bool failed(int status)
{
    return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
}

void writeAll(int fd, const char* data, size_t size)
{
    while (size > 0) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return; // stdout gone: nothing useful to do
        data += n;
        size -= static_cast<size_t>(n);
    }
}

// events.jsonl is shared with rank 0; one O_APPEND write per line keeps lines whole.
void appendEvent(const std::string& path, const protocol::EventRecord& event)
{
    std::string line = protocol::encodeLine(protocol::toJson(event)) + "\n";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        spdlog::error("launch: cannot append to {}: {}", path, std::strerror(errno));
        return;
    }
    writeAll(fd, line.data(), line.size());
    ::close(fd);
}

std::string selfExecutable()
{
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec)
        throw std::runtime_error("launch: cannot read /proc/self/exe: " + ec.message());
    return exe.string();
}

} // namespace

std::string rankPidsFile(const std::string& runDir, int nodeRank)
{
    return runDir + "/launcher-ranks" + (nodeRank == 0 ? "" : "-node" + std::to_string(nodeRank))
        + ".pids";
}

Launcher::Launcher(LaunchOptions options)
    : m_options(std::move(options))
{
}

int Launcher::run()
{
    try {
        return supervise();
    } catch (const std::exception& e) {
        // Set-up errors (busy port, rendezvous timeout, ...) are recorded like a failed run.
        protocol::EventRecord event;
        event.kind = "error";
        event.message = e.what();
        event.data = {{"reason", "launch_failed"}, {"node", m_options.nodeRank}};
        std::error_code ec;
        if (std::filesystem::is_directory(m_options.runDir, ec))
            appendEvent(protocol::RunDir(m_options.runDir).eventsFile(), event);
        throw;
    }
}

int Launcher::supervise()
{
    const LaunchOptions& o = m_options;
    protocol::RunDir runDir(o.runDir);
    std::error_code ec;
    std::filesystem::create_directories(runDir.logsDir(), ec);
    if (ec)
        throw std::runtime_error("launch: cannot create " + runDir.logsDir() + ": " + ec.message());

    auto logger = std::make_shared<spdlog::logger>("launch");
    logger->sinks().push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    const std::string launcherLog = o.nodeRank == 0
        ? runDir.launcherLog()
        : runDir.logsDir() + "/launcher-node" + std::to_string(o.nodeRank) + ".log";
    logger->sinks().push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(launcherLog));
    logger->flush_on(spdlog::level::info);

    {
        const std::string pidPath = o.nodeRank == 0
            ? runDir.pidFile()
            : o.runDir + "/launcher-node" + std::to_string(o.nodeRank) + ".pid";
        std::ofstream pidFile(pidPath, std::ios::trunc);
        pidFile << ::getpid() << "\n";
        if (!pidFile)
            throw std::runtime_error("launch: cannot write " + pidPath);
    }

    const auto start = Clock::now();
    auto wallTime = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

    // Block the signals we supervise before anything else so none is lost; children get the
    // original mask back before exec.
    sigset_t supervised, original;
    sigemptyset(&supervised);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP})
        sigaddset(&supervised, sig);
    sigprocmask(SIG_BLOCK, &supervised, &original);
    int sigFd = ::signalfd(-1, &supervised, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigFd < 0)
        throw std::runtime_error(std::string("launch: signalfd failed: ") + std::strerror(errno));
    std::signal(SIGPIPE, SIG_IGN);

    // Where the ranks' TCPStore listens.
    std::unique_ptr<NodeRendezvous> rendezvous;
    int storePort = o.masterPort;
    const auto rdzvTimeout
        = std::chrono::milliseconds(static_cast<long long>(o.rdzvTimeoutSec * 1000.0));
    if (o.nnodes > 1) {
        logger->info("node {} of {}: rendezvous on {}:{} (timeout {} s)", o.nodeRank, o.nnodes,
            o.masterAddr, o.masterPort, o.rdzvTimeoutSec);
        rendezvous = std::make_unique<NodeRendezvous>(
            o.nnodes, o.nodeRank, o.nprocPerNode, o.masterAddr, o.masterPort, rdzvTimeout);
        storePort = rendezvous->storePort();
    } else if (storePort == 0) {
        storePort = pickFreePort(o.masterAddr);
    } else {
        checkPortFree(o.masterAddr, storePort);
    }

    // Everything exec needs is prepared before fork: the child only calls async-signal-safe
    // functions.
    const std::string exe = selfExecutable();
    std::vector<std::string> baseEnv;
    const char* overridden[]
        = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "NODE_RANK", "SHARD_RDZV_TIMEOUT_S", "SHARD_RUN_DIR", "SHARD_LAUNCHED"};
    for (const auto& [key, value] : currentEnvironment()) {
        bool skip = false;
        for (const char* name : overridden)
            skip = skip || key == name;
        if (!skip)
            baseEnv.push_back(key + "=" + value);
    }
    baseEnv.push_back("WORLD_SIZE=" + std::to_string(o.worldSize()));
    baseEnv.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o.nprocPerNode));
    baseEnv.push_back("NODE_RANK=" + std::to_string(o.nodeRank));
    baseEnv.push_back("MASTER_ADDR=" + o.masterAddr);
    baseEnv.push_back("MASTER_PORT=" + std::to_string(storePort));
    baseEnv.push_back("SHARD_RDZV_TIMEOUT_S=" + std::to_string(o.rdzvTimeoutSec));
    baseEnv.push_back("SHARD_RUN_DIR=" + o.runDir);
    baseEnv.push_back("SHARD_LAUNCHED=1");
    if (!getenv("SHARD_NUM_THREADS")) {
        unsigned cores = std::thread::hardware_concurrency();
        int perRank = std::max(1, static_cast<int>(cores) / o.nprocPerNode);
        baseEnv.push_back("SHARD_NUM_THREADS=" + std::to_string(perRank));
    }
    std::vector<std::string> argvStrings;
    argvStrings.push_back(exe);
    argvStrings.insert(argvStrings.end(), o.workerArgs.begin(), o.workerArgs.end());
    std::vector<char*> argv;
    for (auto& a : argvStrings)
        argv.push_back(a.data());
    argv.push_back(nullptr);

    const pid_t launcherPid = ::getpid();
    int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::vector<Rank> ranks(static_cast<size_t>(o.nprocPerNode));
    int stdoutPipe = -1; // rank 0's stdout, read end
    std::string stdoutBuffer;

    for (int local = 0; local < o.nprocPerNode; ++local) {
        Rank& r = ranks[static_cast<size_t>(local)];
        r.localRank = local;
        r.globalRank = o.globalRank(local);
        std::vector<std::string> envStrings = baseEnv;
        envStrings.push_back("RANK=" + std::to_string(r.globalRank));
        envStrings.push_back("LOCAL_RANK=" + std::to_string(local));
        std::vector<char*> envp;
        for (auto& e : envStrings)
            envp.push_back(e.data());
        envp.push_back(nullptr);

        const std::string logPath = runDir.rankLog(r.globalRank);
        int logFd = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (logFd < 0)
            throw std::runtime_error(
                "launch: cannot open " + logPath + ": " + std::strerror(errno));
        int pipeFds[2] = {-1, -1};
        const bool forwardStdout = r.globalRank == 0;
        if (forwardStdout && ::pipe2(pipeFds, O_CLOEXEC) != 0)
            throw std::runtime_error(std::string("launch: pipe failed: ") + std::strerror(errno));

        pid_t pid = ::fork();
        if (pid < 0)
            throw std::runtime_error(std::string("launch: fork failed: ") + std::strerror(errno));
        if (pid == 0) {
            ::setpgid(0, 0);
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != launcherPid)
                ::_exit(126); // the launcher died before we armed the death signal
            ::signal(SIGPIPE, SIG_DFL);
            ::sigprocmask(SIG_SETMASK, &original, nullptr);
            ::dup2(devNull, STDIN_FILENO);
            ::dup2(forwardStdout ? pipeFds[1] : logFd, STDOUT_FILENO);
            ::dup2(logFd, STDERR_FILENO);
            ::execve(exe.c_str(), argv.data(), envp.data());
            const char msg[] = "launch: execve of the worker failed\n";
            ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
            (void)ignored;
            ::_exit(127);
        }
        ::setpgid(pid, pid); // also here, so the group exists before we ever signal it
        ::close(logFd);
        if (forwardStdout) {
            ::close(pipeFds[1]);
            stdoutPipe = pipeFds[0];
            ::fcntl(stdoutPipe, F_SETFL, O_NONBLOCK);
        }
        r.pid = pid;
        r.running = true;
    }
    ::close(devNull);
    {
        std::ofstream pids(rankPidsFile(o.runDir, o.nodeRank), std::ios::trunc);
        for (const auto& r : ranks)
            pids << r.globalRank << " " << r.pid << "\n";
    }
    logger->info("started {} rank(s) {}..{} of {} (store {}:{}); logs in {}", o.nprocPerNode,
        ranks.front().globalRank, ranks.back().globalRank, o.worldSize(), o.masterAddr, storePort,
        runDir.logsDir());

    // Supervision.
    bool stopping = false;
    Clock::time_point killDeadline {};
    bool killed = false;
    int exitStatus = 0;
    protocol::EventRecord failure; // the first cause, written once everything is down
    bool haveFailure = false;

    auto beginStop = [&](const std::string& why) {
        if (stopping)
            return;
        stopping = true;
        logger->warn(
            "{}; stopping the other ranks (SIGTERM, SIGKILL after {} s)", why, o.gracePeriodSec);
        for (auto& r : ranks)
            if (r.running)
                ::kill(-r.pid, SIGTERM);
        killDeadline = Clock::now()
            + std::chrono::milliseconds(static_cast<long long>(o.gracePeriodSec * 1000.0));
        if (rendezvous)
            rendezvous->sendAll("ABORT");
    };
    auto runningCount = [&] {
        int n = 0;
        for (const auto& r : ranks)
            n += r.running ? 1 : 0;
        return n;
    };
    auto drainStdout = [&](bool final) {
        if (stdoutPipe < 0)
            return;
        char chunk[65536];
        while (true) {
            ssize_t n = ::read(stdoutPipe, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                if (n == 0) {
                    ::close(stdoutPipe);
                    stdoutPipe = -1;
                }
                break;
            }
            stdoutBuffer.append(chunk, static_cast<size_t>(n));
            // Forward whole lines only, so records never interleave with anything else.
            auto last = stdoutBuffer.rfind('\n');
            if (last != std::string::npos) {
                writeAll(STDOUT_FILENO, stdoutBuffer.data(), last + 1);
                stdoutBuffer.erase(0, last + 1);
            }
        }
        if (final && !stdoutBuffer.empty()) {
            writeAll(STDOUT_FILENO, stdoutBuffer.data(), stdoutBuffer.size());
            stdoutBuffer.clear();
        }
    };
    bool peersDone = !rendezvous || o.nodeRank != 0;

    while (runningCount() > 0 || stdoutPipe >= 0 || !peersDone) {
        std::vector<pollfd> fds;
        fds.push_back({sigFd, POLLIN, 0});
        if (stdoutPipe >= 0)
            fds.push_back({stdoutPipe, POLLIN, 0});
        const size_t peerBase = fds.size();
        if (rendezvous)
            for (auto& peer : rendezvous->peers())
                if (!peer.closed)
                    fds.push_back({peer.fd, POLLIN, 0});
        int timeoutMs = 1000;
        if (stopping && !killed)
            timeoutMs = std::max(0,
                static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                    killDeadline - Clock::now())
                                     .count()));
        int rc = ::poll(fds.data(), fds.size(), timeoutMs);
        if (rc < 0 && errno != EINTR)
            throw std::runtime_error(std::string("launch: poll failed: ") + std::strerror(errno));

        // Signals.
        signalfd_siginfo info;
        while (::read(sigFd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
            int sig = static_cast<int>(info.ssi_signo);
            if (sig == SIGCHLD)
                continue; // reaped below
            if (!haveFailure) {
                haveFailure = true;
                exitStatus = 128 + sig;
                failure.kind = "finish";
                failure.message = "launcher received " + signalName(sig) + "; stopped all ranks";
                failure.data = {{"reason", "stopped"}, {"signal", sig}, {"node", o.nodeRank}};
            }
            beginStop("launcher received " + signalName(sig));
        }

        // Exited ranks.
        while (true) {
            int status = 0;
            pid_t pid = ::waitpid(-1, &status, WNOHANG);
            if (pid <= 0)
                break;
            for (auto& r : ranks) {
                if (r.pid != pid || !r.running)
                    continue;
                r.running = false;
                r.status = status;
                ::kill(-r.pid, SIGKILL); // anything the rank left in its group
                if (failed(status) && !stopping) {
                    haveFailure = true;
                    exitStatus = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
                    failure.kind = "error";
                    failure.message = "rank " + std::to_string(r.globalRank) + " (pid "
                        + std::to_string(pid) + ") " + describeStatus(status) + "; see "
                        + runDir.rankLog(r.globalRank);
                    failure.data = {{"reason", "rank_failed"}, {"rank", r.globalRank},
                        {"local_rank", r.localRank}, {"node", o.nodeRank}, {"pid", pid}};
                    if (WIFSIGNALED(status)) {
                        failure.data["signal"] = WTERMSIG(status);
                        failure.data["signal_name"] = signalName(WTERMSIG(status));
                    } else {
                        failure.data["exit_code"] = WEXITSTATUS(status);
                    }
                    beginStop(
                        "rank " + std::to_string(r.globalRank) + " " + describeStatus(status));
                } else {
                    logger->info("rank {} {}", r.globalRank, describeStatus(status));
                }
            }
        }

        drainStdout(false);

        // Other nodes.
        if (rendezvous) {
            size_t idx = peerBase;
            for (auto& peer : rendezvous->peers()) {
                if (peer.closed)
                    continue;
                bool readable = idx < fds.size() && (fds[idx].revents != 0);
                ++idx;
                if (!readable)
                    continue;
                for (const auto& line : rendezvous->readLines(peer)) {
                    if (line == "DONE")
                        peer.done = true;
                    else if (line.rfind("ABORT", 0) == 0 && !stopping) {
                        if (!haveFailure) {
                            haveFailure = true;
                            exitStatus = 1;
                            failure.kind = "error";
                            failure.message = "node " + std::to_string(peer.nodeRank)
                                + " stopped the run (one of its ranks failed)";
                            failure.data = {{"reason", "node_failed"}, {"node", peer.nodeRank}};
                        }
                        beginStop(failure.message);
                    }
                }
                if (peer.closed && !peer.done && !stopping) {
                    if (!haveFailure) {
                        haveFailure = true;
                        exitStatus = 1;
                        failure.kind = "error";
                        failure.message
                            = "lost the launcher of node " + std::to_string(peer.nodeRank);
                        failure.data = {{"reason", "node_lost"}, {"node", peer.nodeRank}};
                    }
                    beginStop(failure.message);
                }
            }
            if (o.nodeRank == 0) {
                peersDone = true;
                for (auto& peer : rendezvous->peers())
                    peersDone = peersDone && (peer.done || peer.closed);
            }
        }

        if (stopping && !killed && Clock::now() >= killDeadline) {
            killed = true;
            for (auto& r : ranks)
                if (r.running) {
                    logger->warn("rank {} did not stop within {} s: SIGKILL", r.globalRank,
                        o.gracePeriodSec);
                    ::kill(-r.pid, SIGKILL);
                }
        }
        if (runningCount() == 0 && stdoutPipe >= 0 && stopping)
            drainStdout(true);
    }
    drainStdout(true);

    if (rendezvous && !haveFailure)
        rendezvous->sendAll("DONE");
    ::close(sigFd);
    sigprocmask(SIG_SETMASK, &original, nullptr);

    if (haveFailure) {
        failure.wallTimeSec = wallTime();
        appendEvent(runDir.eventsFile(), failure);
        if (failure.kind == "error") {
            protocol::EventRecord finish;
            finish.kind = "finish";
            finish.wallTimeSec = wallTime();
            finish.message = "run failed: " + failure.message;
            finish.data = failure.data;
            finish.data["reason"] = "failed";
            finish.data["cause"] = failure.data.value("reason", "");
            appendEvent(runDir.eventsFile(), finish);
        }
        logger->error("{}", failure.message);
        return exitStatus == 0 ? 1 : exitStatus;
    }
    logger->info("all {} rank(s) exited 0 after {:.1f} s", o.nprocPerNode, wallTime());
    return 0;
}

} // namespace shard::launch
