// The layout of a run directory (docs/ARCHITECTURE.md); every path in one place.
#pragma once

#include <stdexcept>
#include <string>

namespace shard::protocol {

// The exit code of a worker or launcher that could not write the run directory (EX_IOERR).
inline constexpr int kWriteFailedExitCode = 74;
// The exit code of a worker or launcher whose ranks wrote a checkpoint on a preemption signal
// (SIGUSR1: Slurm's --signal before a time limit, or a person) and stopped; the run continues
// from that checkpoint with --resume auto (EX_TEMPFAIL: try again).
inline constexpr int kPreemptedExitCode = 75;

// A write to the run directory failed (a full disk): the run stops with kWriteFailedExitCode.
class RunDirWriteError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class RunDir {
public:
    explicit RunDir(std::string root)
        : m_root(std::move(root))
    {
    }
    const std::string& root() const { return m_root; }
    std::string specFile() const { return m_root + "/run.json"; }
    // The spec a launcher was handed (written before any rank starts; run.json comes later).
    std::string launchSpecFile() const { return m_root + "/launch-spec.json"; }
    std::string metricsFile() const { return m_root + "/metrics.jsonl"; }
    std::string eventsFile() const { return m_root + "/events.jsonl"; }
    std::string logsDir() const { return m_root + "/logs"; }
    std::string rankLog(int rank) const
    {
        return logsDir() + "/rank-" + std::to_string(rank) + ".log";
    }
    std::string launcherLog() const { return logsDir() + "/launcher.log"; }
    std::string checkpointsDir() const { return m_root + "/checkpoints"; }
    std::string checkpointDir(long long step) const
    {
        return checkpointsDir() + "/step-" + std::to_string(step);
    }
    std::string pidFile() const { return m_root + "/launcher.pid"; }
    // Held (flock) by the run's launcher, or by a rank started without one (RunLock).
    std::string lockFile() const { return m_root + "/run.lock"; }
    std::string modelOutDir() const { return m_root + "/model"; }
    // LoRA runs: the PEFT adapter folder (the merged model is modelOutDir()).
    std::string adapterOutDir() const { return m_root + "/adapter"; }

private:
    std::string m_root;
};

} // namespace shard::protocol
