// Fork/exec of the ranks, a signalfd + poll supervision loop, forwarding of rank 0's stdout,
// and the stop sequence (SIGTERM, grace period, SIGKILL) when a rank fails or the launcher is
// told to stop. Children lead their own process groups and die with the launcher
// (PR_SET_PDEATHSIG), so no process of a run survives it. The launcher holds the run folder's
// lock for the run's lifetime and watches each rank's heartbeat pipe for a rank that stopped
// making progress.
#include "launch/launcher.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "launch/node_rendezvous.h"
#include "launch/rank_heartbeat.h"
#include "protocol/checkpoint_discovery.h"
#include "protocol/launch_args.h"
#include "protocol/peer_loss.h"
#include "protocol/process_signal.h"
#include "protocol/records.h"
#include "protocol/run_dir.h"
#include "protocol/run_lock.h"

namespace shard::launch {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWriteFailedExit = protocol::kWriteFailedExitCode;
// The fd a rank's heartbeat pipe has in the rank.
constexpr int kRankHeartbeatFd = 3;
// After a failure with restarts on, how long (beyond the grace period) node 0 waits for another
// node to report its ranks down before it takes that node for lost.
constexpr double kPeerStopWaitSec = 30.0;

struct Rank {
    int localRank = 0;
    int globalRank = 0;
    pid_t pid = -1;
    bool running = false;
    int status = 0;
    // Heartbeat (rank_heartbeat.h): read end, partial line, what it last said and when.
    int beatFd = -1;
    std::string beatBuffer;
    bool beating = false; // sent at least one beat: watched from then on
    Clock::time_point lastBeat {};
    Clock::time_point lastProgress {};
    int64_t step = -1;
    int64_t firstStep = -1; // the first step it ran (slow: warm-up)
    RankPhase phase = RankPhase::Setup;
    double hangTimeoutSec = 0.0;
    std::string error; // the message of an error event it wrote to stdout (rank 0)
};

double secondsSince(Clock::time_point t, Clock::time_point now)
{
    return std::chrono::duration<double>(now - t).count();
}

// How long a rank may go without progress where it is now.
double hangLimitSec(const Rank& r)
{
    const bool slow
        = r.phase != RankPhase::Step || r.step == r.firstStep; // set-up, checkpoint, warm-up
    return r.hangTimeoutSec * (slow ? kSlowPhaseFactor : 1.0);
}

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

// 0, or the errno of the failed write.
int writeAll(int fd, const char* data, size_t size)
{
    while (size > 0) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        data += n;
        size -= static_cast<size_t>(n);
    }
    return 0;
}

// A write error that means the disk (not the reader) failed.
bool diskError(int err)
{
    return err == ENOSPC || err == EDQUOT || err == EIO || err == EFBIG || err == EROFS;
}

// events.jsonl is shared with rank 0; one O_APPEND write per line keeps lines whole. Says on
// stderr when the line could not be written (the disk is full: nothing else can record it).
bool appendEvent(const std::string& path, const protocol::EventRecord& event)
{
    std::string line = protocol::encodeLine(protocol::toJson(event)) + "\n";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int err = fd < 0 ? errno : writeAll(fd, line.data(), line.size());
    if (fd >= 0 && ::close(fd) != 0 && err == 0)
        err = errno;
    if (err != 0)
        std::fprintf(stderr, "launch: cannot append the %s event to %s: %s\n", event.kind.c_str(),
            path.c_str(), std::strerror(err));
    return err == 0;
}

// Writes `text` to `path` (truncating) and checks that it all reached the file.
void writeSmallFile(const std::string& path, const std::string& text)
{
    std::ofstream out(path, std::ios::trunc);
    out << text;
    out.flush();
    if (!out)
        throw std::runtime_error("launch: cannot write " + path + ": " + std::strerror(errno));
}

std::string selfExecutable()
{
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec)
        throw std::runtime_error("launch: cannot read /proc/self/exe: " + ec.message());
    return exe.string();
}

// What exec needs, prepared before fork: the child only calls async-signal-safe functions.
struct RankExec {
    std::string exe;
    std::vector<std::string> args; // argv's strings
    std::vector<char*> argv;
    std::vector<std::string> env; // every rank's (RANK and LOCAL_RANK come per rank)
    pid_t launcherPid = -1;
    int devNull = -1; // the ranks' stdin
};

// The environment every rank of this node gets (RANK and LOCAL_RANK come per rank): the
// launcher's own, less what the launcher sets.
std::vector<std::string> rankEnvironment(const LaunchOptions& o, int storePort)
{
    std::vector<std::string> baseEnv;
    const char* overridden[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "SHARD_RDZV_TIMEOUT_S", "SHARD_RUN_DIR",
        "SHARD_LAUNCHED", kHeartbeatFdEnv, protocol::kStoreListenFdEnv};
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
    baseEnv.push_back(std::string(kHeartbeatFdEnv) + "=" + std::to_string(kRankHeartbeatFd));
    auto setEnv = [&baseEnv](const std::string& name, double value) {
        for (auto& e : baseEnv)
            if (e.rfind(name + "=", 0) == 0)
                e.clear();
        baseEnv.push_back(name + "=" + std::to_string(value));
    };
    if (o.hangTimeoutSec >= 0)
        setEnv(kHangTimeoutEnv, o.hangTimeoutSec);
    if (o.collectiveTimeoutSec > 0)
        setEnv("SHARD_COLLECTIVE_TIMEOUT_S", o.collectiveTimeoutSec);
    baseEnv.erase(std::remove(baseEnv.begin(), baseEnv.end(), std::string()), baseEnv.end());
    if (!getenv("SHARD_NUM_THREADS")) {
        unsigned cores = std::thread::hardware_concurrency();
        int perRank = std::max(1, static_cast<int>(cores) / o.nprocPerNode);
        baseEnv.push_back("SHARD_NUM_THREADS=" + std::to_string(perRank));
    }
    return baseEnv;
}

// A failure's data (reason, signal, exit_code, rank_error) that another rank's failure may have
// caused: see Session::failureIsConsequence.
bool explainedByPeer(const nlohmann::json& data)
{
    const std::string reason = data.value("reason", "");
    if (reason == "node_failed")
        return true;
    if (reason != "rank_failed" || data.contains("signal") || data.value("exit_code", 1) != 1)
        return false;
    const std::string error = data.value("rank_error", "");
    return error.empty() || protocol::lostPeerError(error);
}

} // namespace

// One run's supervision: the ranks, their pipes, the stop sequence and the first cause of a
// failure.
struct Launcher::Session {
    explicit Session(const LaunchOptions& options)
        : o(options)
        , runDir(options.runDir)
        , workerArgs(options.workerArgs)
    {
    }
    ~Session()
    {
        if (storeListenFd >= 0)
            ::close(storeListenFd);
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Back to the state before spawnRanks, for a restart (every rank is down and reaped).
    void resetForRestart()
    {
        ranks.clear();
        stdoutBuffer.clear();
        stopping = false;
        killed = false;
        exitStatus = 0;
        failure = {};
        haveFailure = false;
        preemptedRanks = 0;
        if (rendezvous)
            for (auto& peer : rendezvous->peers())
                peer.stopped = peer.aborted = false;
        ++attempt;
    }

    double wallTime() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
    int runningCount() const
    {
        int n = 0;
        for (const auto& r : ranks)
            n += r.running ? 1 : 0;
        return n;
    }
    int64_t lastKnownStep() const
    {
        int64_t step = -1;
        for (const auto& r : ranks)
            step = std::max(step, r.step);
        return step;
    }
    // A rank that could not write the run directory is the cause, also when a peer that lost
    // it (a closed connection, a failed checkpoint agreement) exited first.
    bool peerFailureFirst() const
    {
        return haveFailure && failure.data.value("reason", "") == "rank_failed";
    }
    // A failure that another node's report explains better: "node N stopped the run", or a rank
    // of this node that exited with 1 (not killed) saying nothing or that its peers were lost.
    bool failureIsConsequence() const { return haveFailure && explainedByPeer(failure.data); }
    // Ends the failure's message with why the run is not restarted (also in its data, with the
    // restarts made so far); returns false, the answer of a restart decision that says no.
    bool notRestarted(const std::string& why, int restartsMade)
    {
        failure.message += "; not restarted: " + why;
        failure.data["restarts"] = restartsMade;
        failure.data["not_restarted"] = why;
        return false;
    }

    // Forks and execs local rank `local`: its own process group, stdin from /dev/null, stdout
    // to the forwarding pipe (rank 0) or its log, stderr to its log, the heartbeat pipe on fd 3.
    void startRank(int local, const RankExec& exec);
    void beginStop(const std::string& why);
    // ABORT with the failure (its message and data) to the other nodes.
    void sendAbort();
    void recordFailure(
        const std::string& kind, int status, const std::string& message, nlohmann::json data);
    void forward(const char* data, size_t size);
    void noteRankError(const std::string& text, size_t size);
    void drainStdout(bool final);
    void readBeats(Rank& r, Clock::time_point now);
    void checkHung(Clock::time_point now);
    // One turn of the loop: waits for output, a beat, a peer, a signal or the kill deadline.
    // Returns the index in `fds` of the first peer's socket.
    size_t waitForInput(std::vector<pollfd>& fds);
    void readSignals();
    void reapRanks(Clock::time_point now);
    void readPeers(const std::vector<pollfd>& fds, size_t peerBase);
    void peerAborted(NodeRendezvous::Peer& peer, const std::string& text);
    // Node 0 after a failure with restarts on: a node that has not reported its ranks down
    // (STOPPED) within the grace period and kPeerStopWaitSec is taken for lost.
    void checkPeersStopped();
    void checkLauncherLog();
    void killAfterGrace();

    const LaunchOptions& o;
    protocol::RunDir runDir;
    std::vector<std::string> workerArgs; // o.workerArgs; after a restart, with --resume auto
    int attempt = 0;                     // 0, then one more per restart
    std::shared_ptr<spdlog::logger> logger;
    std::string launcherLog;
    std::string logError; // spdlog's report of a failed write of the log file
    Clock::time_point start;
    sigset_t supervised {};
    sigset_t original {}; // the mask before the launcher blocked its signals (the children's)
    int sigFd = -1;
    std::unique_ptr<NodeRendezvous> rendezvous; // more than one node
    int storePort = 0;                          // where the ranks' TCPStore listens
    // The store's listening socket, held from the first attempt to the end and handed to global
    // rank 0 (protocol::kStoreListenFdEnv); -1 on nodes other than node 0.
    int storeListenFd = -1;
    std::vector<Rank> ranks;
    int stdoutPipe = -1; // rank 0's stdout, read end
    std::string stdoutBuffer;
    bool stopping = false;
    Clock::time_point killDeadline {};
    bool killed = false;
    int exitStatus = 0;
    protocol::EventRecord failure; // the first cause, written once everything is down
    bool haveFailure = false;
    bool peersDone = true;     // node 0: every other node said DONE (or closed)
    bool preemptAsked = false; // SIGUSR1 forwarded to the ranks
    int preemptedRanks = 0;    // ranks that exited with kPreemptedExitCode
    Clock::time_point lastPreemptForward {};
    // SIGUSR1 to every running rank. Sent again every few seconds until they stop: a rank still
    // starting ignores it until `train` has set its handler.
    void forwardPreemption();
};

void Launcher::Session::beginStop(const std::string& why)
{
    if (stopping)
        return;
    stopping = true;
    logger->warn(
        "{}; stopping the other ranks (SIGTERM, SIGKILL after {} s)", why, o.gracePeriodSec);
    for (auto& r : ranks)
        if (r.running)
            protocol::signalGroup(r.pid, SIGTERM);
    killDeadline = Clock::now()
        + std::chrono::milliseconds(static_cast<long long>(o.gracePeriodSec * 1000.0));
    sendAbort();
}

void Launcher::Session::sendAbort()
{
    if (rendezvous)
        rendezvous->sendAll(haveFailure ? "ABORT "
                    + nlohmann::json {{"message", failure.message}, {"data", failure.data}}.dump()
                                        : std::string("ABORT"));
}

void Launcher::Session::recordFailure(
    const std::string& kind, int status, const std::string& message, nlohmann::json data)
{
    const bool writeFailed = data.value("reason", "") == "write_failed";
    if (haveFailure && !(writeFailed && peerFailureFirst()))
        return;
    haveFailure = true;
    exitStatus = status;
    failure.kind = kind;
    failure.message = message;
    failure.data = std::move(data);
}

// Rank 0's stdout goes to ours (a log file, or the CLI); a full disk there stops the run.
void Launcher::Session::forward(const char* data, size_t size)
{
    const int err = writeAll(STDOUT_FILENO, data, size);
    if (err == 0 || !diskError(err) || stopping)
        return;
    const std::string message
        = std::string("launch: cannot write the run's output: ") + std::strerror(err);
    recordFailure(
        "error", kWriteFailedExit, message, {{"reason", "write_failed"}, {"node", o.nodeRank}});
    beginStop(message);
}

// The message of an error event rank 0 wrote (it may not have reached events.jsonl on a full
// disk): the launcher's own error names it.
void Launcher::Session::noteRankError(const std::string& text, size_t size)
{
    size_t at = 0;
    while (at < size) {
        size_t eol = text.find('\n', at);
        if (eol == std::string::npos || eol > size)
            eol = size;
        const std::string line = text.substr(at, eol - at);
        at = eol + 1;
        if (line.find("\"kind\":\"error\"") == std::string::npos)
            continue;
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_object() || j.value("type", "") != "event" || j.value("kind", "") != "error")
            continue;
        for (auto& r : ranks) {
            if (r.globalRank != 0 || !r.error.empty())
                continue;
            r.error = j.value("message", "");
            const auto data = j.value("data", nlohmann::json::object());
            if (data.is_object() && data.value("reason", "") == "write_failed") {
                // Known now, before the rank is reaped: its peers may exit first (their
                // connection to it closes) and the stop may end it by SIGTERM.
                recordFailure("error", kWriteFailedExit,
                    "rank 0 (pid " + std::to_string(r.pid) + ") could not write the run directory: "
                        + r.error + "; see " + runDir.rankLog(0),
                    {{"reason", "write_failed"}, {"rank", 0}, {"local_rank", r.localRank},
                        {"node", o.nodeRank}, {"pid", r.pid}, {"rank_error", r.error}});
                beginStop("rank 0 could not write the run directory");
            }
        }
    }
}

void Launcher::Session::drainStdout(bool final)
{
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
            noteRankError(stdoutBuffer, last + 1);
            forward(stdoutBuffer.data(), last + 1);
            stdoutBuffer.erase(0, last + 1);
        }
    }
    if (final && !stdoutBuffer.empty()) {
        forward(stdoutBuffer.data(), stdoutBuffer.size());
        stdoutBuffer.clear();
    }
}

// Beats of every rank (rank_heartbeat.h): "<step> <phase> <timeout>" lines.
void Launcher::Session::readBeats(Rank& r, Clock::time_point now)
{
    char chunk[4096];
    while (r.beatFd >= 0) {
        ssize_t n = ::read(r.beatFd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0) { // the rank exited (or closed it): nothing more to watch
                ::close(r.beatFd);
                r.beatFd = -1;
            }
            break;
        }
        r.beatBuffer.append(chunk, static_cast<size_t>(n));
    }
    size_t eol;
    while ((eol = r.beatBuffer.find('\n')) != std::string::npos) {
        const std::string text = r.beatBuffer.substr(0, eol);
        r.beatBuffer.erase(0, eol + 1);
        if (text.rfind("error ", 0) == 0) { // why it is about to fail (reportError)
            if (r.error.empty())
                r.error = text.substr(6);
            continue;
        }
        std::istringstream line(text);
        long long step = 0;
        std::string phase;
        double timeout = 0.0;
        if (!(line >> step >> phase >> timeout))
            continue;
        const RankPhase p = phaseFromName(phase);
        if (!r.beating || step != r.step || p != r.phase)
            r.lastProgress = now;
        if (p == RankPhase::Step && r.firstStep < 0)
            r.firstStep = step;
        r.beating = true;
        r.lastBeat = now;
        r.step = step;
        r.phase = p;
        r.hangTimeoutSec = timeout;
    }
}

// A rank that stopped making progress: the one silent longest (stopped, wedged) when its
// silence is more than a few beats, else the one whose progress is oldest. A healthy rank
// waiting in a collective for it keeps beating, so it is not the one named.
void Launcher::Session::checkHung(Clock::time_point now)
{
    const Rank* silent = nullptr;
    const Rank* stalled = nullptr;
    bool over = false;
    for (const auto& r : ranks) {
        if (!r.running || !r.beating || !(r.hangTimeoutSec > 0))
            continue;
        const double quiet = secondsSince(r.lastBeat, now);
        const double still = secondsSince(r.lastProgress, now);
        // Set-up (loading, rendezvous) has its own timeouts: there only silence counts.
        const double limit = hangLimitSec(r);
        // A beating rank without progress may only be slow (a loaded machine, a long step): it
        // gets kStallFactor times as long.
        over = over || quiet > limit
            || (r.phase != RankPhase::Setup && still > kStallFactor * limit);
        if (quiet > 3 * beatIntervalSec(r.hangTimeoutSec)
            && (!silent || r.lastBeat < silent->lastBeat))
            silent = &r;
        if (!stalled || r.lastProgress < stalled->lastProgress)
            stalled = &r;
    }
    if (!over)
        return;
    const Rank& r = silent ? *silent : *stalled;
    const double quiet = secondsSince(r.lastBeat, now);
    const double still = secondsSince(r.lastProgress, now);
    char detail[160];
    std::snprintf(detail, sizeof detail,
        silent ? "no heartbeat for %.1f s" : "no progress for %.1f s", silent ? quiet : still);
    std::string message = "rank " + std::to_string(r.globalRank) + " (pid " + std::to_string(r.pid)
        + ") stopped making progress: " + detail + " (last at step " + std::to_string(r.step)
        + ", phase " + phaseName(r.phase) + "; hang timeout "
        + std::to_string(static_cast<long long>(r.hangTimeoutSec)) + " s); see "
        + runDir.rankLog(r.globalRank);
    recordFailure("error", 1, message,
        {{"reason", "rank_hung"}, {"rank", r.globalRank}, {"local_rank", r.localRank},
            {"node", o.nodeRank}, {"pid", r.pid}, {"phase", phaseName(r.phase)},
            {"silent_sec", quiet}, {"stalled_sec", still}, {"hang_timeout_sec", r.hangTimeoutSec}});
    // A stopped process takes no SIGTERM until it is continued: KILL it now.
    protocol::signalGroup(r.pid, SIGKILL);
    beginStop(message);
}

void Launcher::Session::startRank(int local, const RankExec& exec)
{
    Rank& r = ranks[static_cast<size_t>(local)];
    r.localRank = local;
    r.globalRank = o.globalRank(local);
    std::vector<std::string> envStrings = exec.env;
    envStrings.push_back("RANK=" + std::to_string(r.globalRank));
    envStrings.push_back("LOCAL_RANK=" + std::to_string(local));
    const int listenFd = r.globalRank == 0 ? storeListenFd : -1;
    if (listenFd >= 0)
        envStrings.push_back(std::string(protocol::kStoreListenFdEnv) + "="
            + std::to_string(protocol::kStoreListenFd));
    std::vector<char*> envp;
    for (auto& e : envStrings)
        envp.push_back(e.data());
    envp.push_back(nullptr);

    const std::string logPath = runDir.rankLog(r.globalRank);
    int logFd = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logFd < 0)
        throw std::runtime_error("launch: cannot open " + logPath + ": " + std::strerror(errno));
    int pipeFds[2] = {-1, -1};
    const bool forwardStdout = r.globalRank == 0;
    if (forwardStdout && ::pipe2(pipeFds, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("launch: pipe failed: ") + std::strerror(errno));
    int beatFds[2] = {-1, -1};
    if (::pipe2(beatFds, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("launch: pipe failed: ") + std::strerror(errno));

    pid_t pid = ::fork();
    if (pid < 0)
        throw std::runtime_error(std::string("launch: fork failed: ") + std::strerror(errno));
    if (pid == 0) {
        ::setpgid(0, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != exec.launcherPid)
            ::_exit(126); // the launcher died before we armed the death signal
        ::signal(SIGPIPE, SIG_DFL);
        // A preemption signal forwarded before the rank set its handler must not end it (train
        // installs its handler first thing; other commands keep ignoring it).
        ::signal(SIGUSR1, SIG_IGN);
        ::sigprocmask(SIG_SETMASK, &original, nullptr);
        // The store's socket goes to a high descriptor first, so the dup2s below (onto 0-3)
        // cannot close it, and onto its fixed one last (what was there is already copied).
        const int storeFd
            = listenFd >= 0 ? ::fcntl(listenFd, F_DUPFD_CLOEXEC, protocol::kStoreListenFd + 6) : -1;
        ::dup2(exec.devNull, STDIN_FILENO);
        ::dup2(forwardStdout ? pipeFds[1] : logFd, STDOUT_FILENO);
        ::dup2(logFd, STDERR_FILENO);
        if (beatFds[1] == kRankHeartbeatFd)
            ::fcntl(kRankHeartbeatFd, F_SETFD, 0);
        else
            ::dup2(beatFds[1], kRankHeartbeatFd);
        if (storeFd >= 0)
            ::dup2(storeFd, protocol::kStoreListenFd);
        ::execve(exec.exe.c_str(), exec.argv.data(), envp.data());
        const char msg[] = "launch: execve of the worker failed\n";
        ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        ::_exit(127);
    }
    ::setpgid(pid, pid); // also here, so the group exists before we ever signal it
    ::close(logFd);
    ::close(beatFds[1]);
    r.beatFd = beatFds[0];
    ::fcntl(r.beatFd, F_SETFL, O_NONBLOCK);
    if (forwardStdout) {
        ::close(pipeFds[1]);
        stdoutPipe = pipeFds[0];
        ::fcntl(stdoutPipe, F_SETFL, O_NONBLOCK);
    }
    r.pid = pid;
    r.running = true;
}

size_t Launcher::Session::waitForInput(std::vector<pollfd>& fds)
{
    fds.push_back({sigFd, POLLIN, 0});
    if (stdoutPipe >= 0)
        fds.push_back({stdoutPipe, POLLIN, 0});
    for (const auto& r : ranks)
        if (r.beatFd >= 0)
            fds.push_back({r.beatFd, POLLIN, 0});
    const size_t peerBase = fds.size();
    if (rendezvous)
        for (auto& peer : rendezvous->peers())
            if (!peer.closed)
                fds.push_back({peer.fd, POLLIN, 0});
    int timeoutMs = 1000;
    if (stopping && !killed)
        timeoutMs = std::max(0,
            static_cast<int>(
                std::chrono::duration_cast<std::chrono::milliseconds>(killDeadline - Clock::now())
                    .count()));
    int rc = ::poll(fds.data(), fds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR)
        throw std::runtime_error(std::string("launch: poll failed: ") + std::strerror(errno));
    return peerBase;
}

void Launcher::Session::readSignals()
{
    signalfd_siginfo info;
    while (::read(sigFd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD)
            continue; // reaped below
        if (sig == SIGUSR1) {
            // Preemption (Slurm's --signal=USR1@N before a time limit, or a person): every rank
            // writes a checkpoint at its next logged step and exits with kPreemptedExitCode.
            if (!stopping) {
                logger->warn("launcher received SIGUSR1: the ranks write a checkpoint at their "
                             "next logged step and stop; the run continues from it with "
                             "--resume auto");
                preemptAsked = true;
                forwardPreemption();
            }
            continue;
        }
        recordFailure("finish", 128 + sig,
            "launcher received " + signalName(sig) + "; stopped all ranks",
            {{"reason", "stopped"}, {"signal", sig}, {"node", o.nodeRank}});
        beginStop("launcher received " + signalName(sig));
    }
}

void Launcher::Session::forwardPreemption()
{
    for (auto& r : ranks)
        if (r.running)
            protocol::signalProcess(r.pid, SIGUSR1);
    lastPreemptForward = Clock::now();
}

void Launcher::Session::reapRanks(Clock::time_point now)
{
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
            protocol::signalGroup(r.pid, SIGKILL); // anything the rank left in its group
            if (WIFEXITED(status) && WEXITSTATUS(status) == protocol::kPreemptedExitCode) {
                // Stopped after its preemption checkpoint; its peers agreed on the same step.
                ++preemptedRanks;
                logger->info("rank {} wrote its preemption checkpoint and stopped", r.globalRank);
                continue;
            }
            const bool writeFailed = WIFEXITED(status) && WEXITSTATUS(status) == kWriteFailedExit;
            // While stopping, a rank that could not write, or one killed by a signal the stop
            // did not send, explains the failure better than a lost peer.
            const bool ownSignal = WIFSIGNALED(status)
                && (WTERMSIG(status) == SIGTERM || (WTERMSIG(status) == SIGKILL && killed));
            const bool betterCause = stopping
                && ((writeFailed && peerFailureFirst())
                    || (WIFSIGNALED(status) && !ownSignal && failureIsConsequence()));
            if (failed(status) && (!stopping || betterCause)) {
                drainStdout(false); // its last records, an error event among them
                readBeats(r, now);  // its error line, written just before it exited
                if (haveFailure && !betterCause)
                    continue; // rank 0's write error, read from its stdout just now
                if (betterCause)
                    haveFailure = false; // replaced below
                recordFailure("error",
                    WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status),
                    "rank " + std::to_string(r.globalRank) + " (pid " + std::to_string(pid) + ") "
                        + describeStatus(status)
                        + (writeFailed ? " (a write to the run directory failed)" : "")
                        + (r.error.empty() ? "" : ": " + r.error) + "; see "
                        + runDir.rankLog(r.globalRank),
                    {{"reason", writeFailed ? "write_failed" : "rank_failed"},
                        {"rank", r.globalRank}, {"local_rank", r.localRank}, {"node", o.nodeRank},
                        {"pid", pid}});
                if (!r.error.empty())
                    failure.data["rank_error"] = r.error;
                if (WIFSIGNALED(status)) {
                    failure.data["signal"] = WTERMSIG(status);
                    failure.data["signal_name"] = signalName(WTERMSIG(status));
                } else {
                    failure.data["exit_code"] = WEXITSTATUS(status);
                }
                if (betterCause)
                    sendAbort(); // node 0 learns the better cause
                beginStop("rank " + std::to_string(r.globalRank) + " " + describeStatus(status));
            } else {
                logger->info("rank {} {}", r.globalRank, describeStatus(status));
            }
        }
    }
}

// The other nodes' launchers: DONE, ABORT, or a lost connection.
void Launcher::Session::readPeers(const std::vector<pollfd>& fds, size_t peerBase)
{
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
            else if (line == "STOPPED")
                peer.stopped = true;
            else if (line.rfind("ABORT", 0) == 0)
                peerAborted(peer, line.substr(5));
        }
        if (peer.closed && !peer.done && !peer.aborted && !peer.stopped) {
            // Gone without a word (killed, its machine down): the cause, also when this node's
            // ranks lost their connection to its ranks first.
            const std::string message
                = "lost the launcher of node " + std::to_string(peer.nodeRank);
            const nlohmann::json data = {{"reason", "node_lost"}, {"node", peer.nodeRank}};
            if (!stopping) {
                recordFailure("error", 1, message, data);
                beginStop(message);
            } else if (failureIsConsequence()) {
                logger->info("{}: the failure's cause", message);
                failure.message = message;
                failure.data = data;
            }
            peer.aborted = true; // said once
        }
    }
    if (o.nodeRank == 0) {
        peersDone = true;
        for (auto& peer : rendezvous->peers())
            peersDone = peersDone && (peer.done || peer.closed || peer.stopped);
    }
}

// A node's ABORT: "ABORT {message, data}" with its failure. The run stops; when this node's own
// failure is only a consequence (a rank that lost its connection to the dead one and exited, or
// "node N stopped the run"), the peer's dead or hung rank becomes the cause, so the restart and
// the error name the rank that failed first, wherever it ran.
void Launcher::Session::peerAborted(NodeRendezvous::Peer& peer, const std::string& text)
{
    peer.aborted = true;
    const auto report = nlohmann::json::parse(text, nullptr, false);
    nlohmann::json data = report.is_object() ? report.value("data", nlohmann::json::object())
                                             : nlohmann::json::object();
    if (!data.is_object())
        data = nlohmann::json::object();
    const std::string reason = data.value("reason", "");
    const bool rankCause = reason == "rank_failed" || reason == "rank_hung";
    const std::string node = "node " + std::to_string(peer.nodeRank);
    const std::string said = report.is_object() ? report.value("message", std::string()) : "";
    const std::string message = said.empty() ? node + " stopped the run" : node + ": " + said;
    if (!rankCause) // its launcher was stopped, its disk is full, it lost a node: not restarted
        data = {{"reason", "node_failed"}, {"node_reason", reason}};
    if (!data.contains("node"))
        data["node"] = peer.nodeRank;
    if (!stopping) {
        recordFailure("error", 1, message, data);
        beginStop(message);
        return;
    }
    if (rankCause && failureIsConsequence() && !explainedByPeer(data)) {
        logger->info("{} reports the failure's cause: {}", node, message);
        failure.message = message;
        failure.data = data;
    }
}

void Launcher::Session::checkPeersStopped()
{
    if (!rendezvous || o.nodeRank != 0 || o.maxRestarts <= 0 || !stopping || peersDone)
        return;
    const auto limit = killDeadline
        + std::chrono::milliseconds(static_cast<long long>(kPeerStopWaitSec * 1000.0));
    if (Clock::now() < limit)
        return;
    for (auto& peer : rendezvous->peers())
        if (!peer.done && !peer.closed && !peer.stopped) {
            logger->warn("node {} did not report its ranks stopped within {} s of the stop; "
                         "taking its launcher for lost",
                peer.nodeRank, o.gracePeriodSec + kPeerStopWaitSec);
            ::shutdown(peer.fd, SHUT_RDWR);
            peer.closed = true;
        }
    peersDone = true;
}

void Launcher::Session::checkLauncherLog()
{
    if (logError.empty() || stopping)
        return;
    const std::string message = "launch: cannot write " + launcherLog + ": " + logError;
    recordFailure(
        "error", kWriteFailedExit, message, {{"reason", "write_failed"}, {"node", o.nodeRank}});
    beginStop(message);
}

void Launcher::Session::killAfterGrace()
{
    if (!stopping || killed || Clock::now() < killDeadline)
        return;
    killed = true;
    for (auto& r : ranks)
        if (r.running) {
            logger->warn(
                "rank {} did not stop within {} s: SIGKILL", r.globalRank, o.gracePeriodSec);
            protocol::signalGroup(r.pid, SIGKILL);
        }
}

std::string rankPidsFile(const std::string& runDir, int nodeRank)
{
    return runDir + "/launcher-ranks" + (nodeRank == 0 ? "" : "-node" + std::to_string(nodeRank))
        + ".pids";
}

Launcher::Launcher(LaunchOptions options)
    : m_options(std::move(options))
{
}

Launcher::~Launcher() = default;

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
        // Only into a folder this launcher holds: a refused second start must not write into
        // the run that holds it.
        if (m_lock)
            appendEvent(protocol::RunDir(m_options.runDir).eventsFile(), event);
        throw;
    }
}

int Launcher::supervise()
{
    Session s(m_options);
    setUp(s);
    continueRequeuedJob(s);
    do {
        openStore(s);
        spawnRanks(s);
        watchRanks(s);
    } while (restartAfterFailure(s));
    tearDown(s);
    return finish(s);
}

void Launcher::setUp(Session& s)
{
    const LaunchOptions& o = m_options;
    std::error_code ec;
    std::filesystem::create_directories(s.runDir.logsDir(), ec);
    if (ec)
        throw std::runtime_error(
            "launch: cannot create " + s.runDir.logsDir() + ": " + ec.message());
    // Before anything is written: a second run into this folder stops here.
    m_lock = protocol::RunLock::acquire(o.nodeRank == 0
            ? s.runDir.lockFile()
            : o.runDir + "/run-node" + std::to_string(o.nodeRank) + ".lock");

    s.logger = std::make_shared<spdlog::logger>("launch");
    s.logger->sinks().push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    s.launcherLog = o.nodeRank == 0
        ? s.runDir.launcherLog()
        : s.runDir.logsDir() + "/launcher-node" + std::to_string(o.nodeRank) + ".log";
    s.logger->sinks().push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(s.launcherLog));
    s.logger->flush_on(spdlog::level::info);
    // spdlog reports a failed write of the log file here; the loop stops the run.
    s.logger->set_error_handler([&s](const std::string& msg) {
        if (s.logError.empty())
            s.logError = msg;
    });

    writeSmallFile(o.nodeRank == 0
            ? s.runDir.pidFile()
            : o.runDir + "/launcher-node" + std::to_string(o.nodeRank) + ".pid",
        std::to_string(::getpid()) + "\n");

    s.start = Clock::now();

    // Block the signals we supervise before anything else so none is lost; children get the
    // original mask back before exec.
    sigemptyset(&s.supervised);
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1})
        sigaddset(&s.supervised, sig);
    sigprocmask(SIG_BLOCK, &s.supervised, &s.original);
    s.sigFd = ::signalfd(-1, &s.supervised, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s.sigFd < 0)
        throw std::runtime_error(std::string("launch: signalfd failed: ") + std::strerror(errno));
    std::signal(SIGPIPE, SIG_IGN);
}

void Launcher::openStore(Session& s)
{
    const LaunchOptions& o = m_options;
    const auto rdzvTimeout
        = std::chrono::milliseconds(static_cast<long long>(o.rdzvTimeoutSec * 1000.0));
    if (o.nnodes > 1) {
        // Once: a restart keeps the nodes' control channel and node 0's store socket.
        if (s.rendezvous)
            return;
        s.logger->info("node {} of {}: rendezvous on {}:{} (timeout {} s)", o.nodeRank, o.nnodes,
            o.masterAddr, o.masterPort, o.rdzvTimeoutSec);
        s.rendezvous = std::make_unique<NodeRendezvous>(
            o.nnodes, o.nodeRank, o.nprocPerNode, o.masterAddr, o.masterPort, rdzvTimeout);
        s.storePort = s.rendezvous->storePort();
        s.storeListenFd = s.rendezvous->takeStoreListenFd();
    } else if (s.storeListenFd < 0) {
        // One node: the launcher listens on --master-port (0: a free port) itself, once; the
        // ranks of every attempt find the port held (docs/ARCHITECTURE.md, section 3, step 5).
        s.storeListenFd = listenOn(o.masterAddr, o.masterPort, protocol::kStoreBacklog);
        s.storePort = boundPort(s.storeListenFd);
    }
}

void Launcher::spawnRanks(Session& s)
{
    const LaunchOptions& o = m_options;
    RankExec exec;
    exec.exe = selfExecutable();
    exec.env = rankEnvironment(o, s.storePort);
    exec.args.push_back(exec.exe);
    exec.args.insert(exec.args.end(), s.workerArgs.begin(), s.workerArgs.end());
    for (auto& a : exec.args)
        exec.argv.push_back(a.data());
    exec.argv.push_back(nullptr);
    exec.launcherPid = ::getpid();
    exec.devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    s.ranks.resize(static_cast<size_t>(o.nprocPerNode));
    for (int local = 0; local < o.nprocPerNode; ++local)
        s.startRank(local, exec);
    ::close(exec.devNull);

    std::string pids;
    for (const auto& r : s.ranks)
        pids += std::to_string(r.globalRank) + " " + std::to_string(r.pid) + "\n";
    try {
        writeSmallFile(rankPidsFile(o.runDir, o.nodeRank), pids);
    } catch (...) {
        for (const auto& r : s.ranks)
            protocol::signalGroup(r.pid, SIGKILL);
        throw;
    }
    s.logger->info("started {} rank(s) {}..{} of {} (store {}:{}); logs in {}", o.nprocPerNode,
        s.ranks.front().globalRank, s.ranks.back().globalRank, o.worldSize(), o.masterAddr,
        s.storePort, s.runDir.logsDir());
}

void Launcher::watchRanks(Session& s)
{
    s.peersDone = !s.rendezvous || m_options.nodeRank != 0;
    while (s.runningCount() > 0 || s.stdoutPipe >= 0 || !s.peersDone) {
        std::vector<pollfd> fds;
        const size_t peerBase = s.waitForInput(fds);
        s.readSignals();
        // Heartbeats (read before the exits below, so a rank's last beat counts).
        const auto now = Clock::now();
        for (auto& r : s.ranks)
            s.readBeats(r, now);
        s.reapRanks(now);
        s.drainStdout(false);
        if (s.rendezvous)
            s.readPeers(fds, peerBase);
        if (!s.stopping) {
            // Beats read just now: forwarding output above may have blocked on a slow reader,
            // and what the ranks sent meanwhile is in the pipes, not lost.
            const auto checkedAt = Clock::now();
            for (auto& r : s.ranks)
                s.readBeats(r, checkedAt);
            s.checkHung(checkedAt);
        }
        s.checkPeersStopped();
        s.checkLauncherLog();
        if (s.preemptAsked && !s.stopping && secondsSince(s.lastPreemptForward, Clock::now()) > 5.0)
            s.forwardPreemption();
        s.killAfterGrace();
        if (s.runningCount() == 0 && s.stdoutPipe >= 0 && s.stopping)
            s.drainStdout(true);
    }
    s.drainStdout(true);
    for (auto& r : s.ranks)
        if (r.beatFd >= 0) {
            ::close(r.beatFd);
            r.beatFd = -1;
        }
}

void Launcher::tearDown(Session& s)
{
    if (s.rendezvous && !s.haveFailure)
        s.rendezvous->sendAll("DONE");
    ::close(s.sigFd);
    sigprocmask(SIG_SETMASK, &s.original, nullptr);
}

namespace {

// The worker command for a restart: `train` continues from the latest complete checkpoint
// (--resume auto, replacing any --resume the first start had); other commands start again as
// they were.
void resumeAuto(std::vector<std::string>& args)
{
    if (args.empty() || args.front() != "train")
        return;
    for (size_t i = 1; i < args.size(); ++i) {
        if (args[i].rfind("--resume=", 0) == 0) {
            args[i] = "--resume=auto";
            return;
        }
        if (args[i] == "--resume") {
            if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
                args[i + 1] = "auto";
            else
                args.insert(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, "auto");
            return;
        }
    }
    args.push_back("--resume");
    args.push_back("auto");
}

} // namespace

void Launcher::continueRequeuedJob(Session& s)
{
    const LaunchOptions& o = m_options;
    const char* count = std::getenv("SLURM_RESTART_COUNT");
    const int restarts = count ? std::atoi(count) : 0;
    if (restarts <= 0 || s.workerArgs.empty() || s.workerArgs.front() != "train")
        return;
    const char* jobEnv = std::getenv("SLURM_JOB_ID");
    const std::string job = jobEnv ? jobEnv : "?";
    const auto checkpoint = protocol::latestCompleteCheckpoint(o.runDir);
    std::error_code ec;
    const bool recorded = std::filesystem::file_size(s.runDir.metricsFile(), ec) > 0 && !ec;
    if (!checkpoint && recorded)
        throw std::runtime_error("Slurm restarted job " + job + " (restart "
            + std::to_string(restarts)
            + "), but the run has no complete checkpoint to continue from; give it "
              "--checkpoint-every N (a preemption signal, SIGUSR1, also writes one)");
    protocol::EventRecord event;
    event.kind = "requeued";
    event.step = checkpoint ? checkpoint->step : 0;
    event.wallTimeSec = s.wallTime();
    event.message = "Slurm restarted job " + job + " (restart " + std::to_string(restarts) + "); "
        + (checkpoint ? "the run continues from the checkpoint at step "
                    + std::to_string(checkpoint->step)
                      : std::string("no step was recorded: the run starts again"));
    event.data = {{"slurm_job_id", job}, {"restart_count", restarts}, {"node", o.nodeRank}};
    if (checkpoint) {
        event.data["checkpoint_step"] = checkpoint->step;
        event.data["checkpoint"] = checkpoint->dir;
        resumeAuto(s.workerArgs);
    }
    s.logger->warn("{}", event.message);
    if (o.nodeRank == 0 && !appendEvent(s.runDir.eventsFile(), event))
        throw std::runtime_error("cannot write the requeue event into " + s.runDir.eventsFile());
}

bool Launcher::restartAfterFailure(Session& s)
{
    const LaunchOptions& o = m_options;
    if (!s.haveFailure || o.maxRestarts <= 0)
        return false;
    if (s.rendezvous && o.nodeRank != 0)
        return followRestartVerdict(s);
    const bool restart = decideRestart(s);
    // Every other node waits for node 0's verdict (followRestartVerdict).
    if (s.rendezvous)
        s.rendezvous->sendAll(restart ? "RESTART" : "END");
    if (restart) {
        s.resetForRestart();
        resumeAuto(s.workerArgs);
    }
    return restart;
}

bool Launcher::followRestartVerdict(Session& s)
{
    const LaunchOptions& o = m_options;
    protocol::EventRecord& failure = s.failure;
    auto notRestarted = [&](const std::string& why) { return s.notRestarted(why, m_restarts); };
    // This node's launcher was told to stop, or could not write: it ends, and node 0 sees it go.
    const std::string reason = failure.data.value("reason", "");
    if (reason == "stopped" || reason == "write_failed")
        return false;
    NodeRendezvous::Peer& zero = s.rendezvous->peers().front();
    const double waitSec = o.rdzvTimeoutSec + o.gracePeriodSec + kPeerStopWaitSec;
    const auto deadline
        = Clock::now() + std::chrono::milliseconds(static_cast<long long>(waitSec * 1000.0));
    if (!zero.closed)
        s.rendezvous->sendAll("STOPPED");
    s.logger->info("this node's ranks are down; waiting for node 0 to restart or end the run");
    while (true) {
        for (const auto& line : s.rendezvous->readLines(zero)) {
            if (line == "END")
                return notRestarted("node 0 ended the run");
            if (line != "RESTART")
                continue; // an ABORT of the attempt that just ended
            ++m_restarts;
            s.logger->warn("node 0 restarts the run (restart {} of {}): this node's ranks start "
                           "again from the latest complete checkpoint",
                m_restarts, o.maxRestarts);
            s.resetForRestart();
            resumeAuto(s.workerArgs);
            return true;
        }
        if (zero.closed)
            return notRestarted("lost the launcher of node 0");
        if (Clock::now() > deadline)
            return notRestarted("node 0 neither restarted nor ended the run within "
                + std::to_string(static_cast<long long>(waitSec)) + " s");
        pollfd fds[2] = {{zero.fd, POLLIN, 0}, {s.sigFd, POLLIN, 0}};
        if (::poll(fds, 2, 500) <= 0 || !(fds[1].revents & POLLIN))
            continue;
        signalfd_siginfo info;
        while (::read(s.sigFd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
            const int sig = static_cast<int>(info.ssi_signo);
            if (sig != SIGCHLD && sig != SIGUSR1)
                return notRestarted("the launcher received " + signalName(sig));
        }
    }
}

bool Launcher::decideRestart(Session& s)
{
    const LaunchOptions& o = m_options;
    protocol::EventRecord& failure = s.failure;
    const std::string reason = failure.data.value("reason", "");
    auto notRestarted = [&](const std::string& why) { return s.notRestarted(why, m_restarts); };
    if (reason == "node_lost")
        return notRestarted("a restart brings back every node's ranks, and node "
            + std::to_string(failure.data.value("node", -1)) + "'s launcher is gone");
    // A dead or hung rank may be healed by a restart; a stop asked for or a full disk is not.
    if (reason != "rank_failed" && reason != "rank_hung")
        return false;
    const int64_t step = s.lastKnownStep();
    std::string cause = reason == "rank_hung" ? "a hung rank" : "a failed rank";
    if (failure.data.contains("signal_name"))
        cause += " (" + failure.data.value("signal_name", "") + ")";
    else if (failure.data.contains("exit_code"))
        cause += " (exit code " + std::to_string(failure.data.value("exit_code", 0)) + ")";
    const std::string key = cause + " at step " + std::to_string(step);
    const auto checkpoint = protocol::latestCompleteCheckpoint(o.runDir);
    if (s.rendezvous)
        for (const auto& peer : s.rendezvous->peers())
            if (peer.closed || peer.done)
                return notRestarted("the launcher of node " + std::to_string(peer.nodeRank)
                    + (peer.done ? " finished" : " is gone")
                    + " (a restart brings back every node's ranks)");
    if (key == m_lastFailureKey) {
        failure.data["repeated"] = true;
        return notRestarted("the same failure, " + key
            + ", repeated after a restart (a failure that comes back at the same step is not "
              "restarted again)");
    }
    if (m_restarts >= o.maxRestarts)
        return notRestarted("the " + std::to_string(o.maxRestarts)
            + " restart(s) allowed by --max-restarts are used up");
    if (!checkpoint)
        return notRestarted("the run has no complete checkpoint to restart from (give it "
                            "--checkpoint-every N)");
    ++m_restarts;
    m_lastFailureKey = key;
    const int64_t stepsLost = std::max<int64_t>(0, step - 1 - checkpoint->step);
    protocol::EventRecord event;
    event.kind = "restart";
    event.step = step;
    event.wallTimeSec = s.wallTime();
    event.message = failure.message + "; restarting every rank from the checkpoint at step "
        + std::to_string(checkpoint->step) + " (restart " + std::to_string(m_restarts) + " of "
        + std::to_string(o.maxRestarts) + ", " + std::to_string(stepsLost) + " step(s) lost)";
    event.data = failure.data;
    event.data["cause"] = reason;
    event.data["failed_step"] = step;
    event.data["checkpoint_step"] = checkpoint->step;
    event.data["checkpoint"] = checkpoint->dir;
    event.data["steps_lost"] = stepsLost;
    event.data["restart"] = m_restarts;
    event.data["max_restarts"] = o.maxRestarts;
    event.data.erase("reason");
    if (!appendEvent(s.runDir.eventsFile(), event))
        return notRestarted("the restart event could not be written");
    s.logger->warn("{}", event.message);
    return true;
}

int Launcher::finish(Session& s)
{
    if (!s.haveFailure && s.preemptedRanks > 0) {
        s.logger->warn("{} rank(s) wrote the preemption checkpoint and stopped after {:.1f} s; "
                       "the run continues from it with --resume auto",
            s.preemptedRanks, s.wallTime());
        return protocol::kPreemptedExitCode;
    }
    if (!s.haveFailure) {
        s.logger->info(
            "all {} rank(s) exited 0 after {:.1f} s", m_options.nprocPerNode, s.wallTime());
        return 0;
    }
    protocol::EventRecord& failure = s.failure;
    // A refusal the ranks share (a bad flag, a spec or a file every rank reads): said once, as
    // the run's error, rather than as one rank's exit with a pointer to its log.
    int sameError = 0; // ranks that said firstError; -1 once two said different things
    std::string firstError;
    for (const auto& r : s.ranks) {
        if (r.error.empty() || sameError < 0)
            continue;
        if (firstError.empty())
            firstError = r.error;
        sameError = r.error == firstError ? sameError + 1 : -1;
    }
    if (failure.data.value("reason", "") == "rank_failed" && sameError > 1) {
        failure.message = std::to_string(sameError) + " of " + std::to_string(s.ranks.size())
            + " ranks stopped with the same error: " + firstError + " (see " + s.runDir.logsDir()
            + ")";
        failure.data["rank_error"] = firstError;
        failure.data["ranks_with_error"] = sameError;
    }
    failure.wallTimeSec = s.wallTime();
    failure.step = s.lastKnownStep();
    // Node 0's verdict is the run's (it learned the other nodes' causes from their ABORTs); another
    // node records its own only when node 0 is gone and cannot.
    const bool records = m_options.nodeRank == 0
        || (failure.data.value("reason", "") == "node_lost" && failure.data.value("node", -1) == 0);
    if (records)
        appendEvent(s.runDir.eventsFile(), failure);
    if (records && failure.kind == "error") {
        protocol::EventRecord finish;
        finish.kind = "finish";
        finish.step = failure.step;
        finish.wallTimeSec = s.wallTime();
        finish.message = "run failed: " + failure.message;
        finish.data = failure.data;
        finish.data["reason"] = "failed";
        finish.data["cause"] = failure.data.value("reason", "");
        appendEvent(s.runDir.eventsFile(), finish);
    }
    s.logger->error("{}", failure.message);
    // One line on stderr even when the log file cannot take it.
    if (!s.logError.empty() || failure.data.value("reason", "") == "write_failed")
        std::fprintf(stderr, "launch: %s\n", failure.message.c_str());
    return s.exitStatus == 0 ? 1 : s.exitStatus;
}

} // namespace shard::launch
