// The beat thread of RankHeartbeat (see rank_heartbeat.h).
#include "launch/rank_heartbeat.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

namespace shard::launch {

namespace {

class Beater {
public:
    ~Beater()
    {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_quit = true;
        }
        m_cv.notify_all();
        if (m_thread.joinable())
            m_thread.join();
    }

    void start(int fd, double hangTimeoutSec)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        if (m_thread.joinable())
            return;
        m_fd = fd;
        m_timeoutSec = hangTimeoutSec;
        ::fcntl(m_fd, F_SETFL, ::fcntl(m_fd, F_GETFL) | O_NONBLOCK);
        ::fcntl(m_fd, F_SETFD, FD_CLOEXEC);
        m_thread = std::thread([this] { loop(); });
    }

    void report(int64_t step, RankPhase phase)
    {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            if (m_fd < 0)
                return;
            m_step = step;
            m_phase = phase;
            m_dirty = true;
        }
        m_cv.notify_all();
    }

    void reportError(std::string message, int fallbackFd)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        // Before start() (a flag or the spec refused): straight to the launcher's pipe.
        const int fd = m_fd >= 0 ? m_fd : fallbackFd;
        if (fd < 0)
            return;
        for (char& c : message)
            if (c == '\n' || c == '\r')
                c = ' ';
        // One write of at most PIPE_BUF bytes: the pipe takes it whole, no beat cuts into it.
        const std::string line = "error " + message.substr(0, PIPE_BUF - 8) + "\n";
        ssize_t w = ::write(fd, line.data(), line.size());
        (void)w;
    }

private:
    void loop()
    {
        std::unique_lock<std::mutex> lock(m_mutex);
        while (!m_quit) {
            char line[96];
            const int n = std::snprintf(line, sizeof line, "%lld %s %g\n",
                static_cast<long long>(m_step), phaseName(m_phase).c_str(), m_timeoutSec);
            m_dirty = false;
            lock.unlock();
            // Non-blocking: a launcher that stopped reading must not stall the rank.
            ssize_t w = ::write(m_fd, line, static_cast<size_t>(n));
            (void)w;
            lock.lock();
            m_cv.wait_for(lock,
                std::chrono::milliseconds(
                    static_cast<long long>(1000 * beatIntervalSec(m_timeoutSec))),
                [this] { return m_quit || m_dirty; });
        }
    }

    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::thread m_thread;
    int m_fd = -1;
    double m_timeoutSec = 0.0;
    int64_t m_step = 0;
    RankPhase m_phase = RankPhase::Setup;
    bool m_dirty = false;
    bool m_quit = false;
};

Beater& beater()
{
    static Beater b;
    return b;
}

} // namespace

double beatIntervalSec(double hangTimeoutSec)
{
    return hangTimeoutSec > 0 ? std::clamp(hangTimeoutSec / 5, 0.1, 1.0) : 1.0;
}

std::string phaseName(RankPhase phase)
{
    switch (phase) {
    case RankPhase::Setup:
        return "setup";
    case RankPhase::Step:
        return "step";
    case RankPhase::Checkpoint:
        return "checkpoint";
    case RankPhase::Final:
        return "final";
    }
    return "step";
}

RankPhase phaseFromName(const std::string& name)
{
    for (RankPhase p : {RankPhase::Setup, RankPhase::Checkpoint, RankPhase::Final})
        if (name == phaseName(p))
            return p;
    return RankPhase::Step;
}

namespace {

// The pipe the launcher handed over, or -1.
int heartbeatFd()
{
    const char* v = std::getenv(kHeartbeatFdEnv);
    if (!v || !*v)
        return -1;
    char* end = nullptr;
    const long fd = std::strtol(v, &end, 10);
    if (*end != '\0' || fd < 0 || fd > INT_MAX || ::fcntl(static_cast<int>(fd), F_GETFD) < 0)
        return -1; // not handed a pipe (a worker started by hand with a stale environment)
    return static_cast<int>(fd);
}

} // namespace

void RankHeartbeat::start(double hangTimeoutSec)
{
    const int fd = heartbeatFd();
    if (fd >= 0)
        beater().start(fd, hangTimeoutSec);
}

void RankHeartbeat::report(int64_t step, RankPhase phase)
{
    beater().report(step, phase);
}

void RankHeartbeat::reportError(const std::string& message)
{
    beater().reportError(message, heartbeatFd());
}

} // namespace shard::launch
