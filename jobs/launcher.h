// One interface for starting, stopping, resuming, describing and following a run, whatever its
// target: this machine (LocalLauncher), SSH hosts (SshLauncher), a Slurm cluster
// (SlurmLauncher), or a folder another tool wrote (ImportTarget) (docs/ARCHITECTURE.md, "The run
// service"). Each implements Launcher itself; the CLI (`shard run/stop/attach`) and the studio's
// RunService reach them only through it, and makeLauncher / launcherOf are the only places that
// switch over a target's kind.
#pragma once

#include <memory>
#include <optional>

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>

#include "jobs/host_check.h"
#include "jobs/launch_request.h"
#include "jobs/log_tail.h"
#include "jobs/result.h"
#include "jobs/run_store.h"
#include "jobs/run_watcher.h"
#include "jobs/slurm_options.h"
#include "jobs/ssh_client.h"

namespace shard::jobs {

// Where a run starts.
struct LaunchTarget {
    TargetKind kind = TargetKind::Local;
    QStringList hosts;  // ssh: [user@]host[:port], node 0 first
    SlurmOptions slurm; // slurm (slurm.via: a login node, or this machine)

    static LaunchTarget ssh(const QStringList& hosts);
    static LaunchTarget onSlurm(const SlurmOptions& options);
    // The target a recorded run was started on (its kind, SSH hosts, Slurm options).
    static LaunchTarget of(const RunRecord& run);
    // The first SSH host, or the Slurm login node; empty for this machine.
    QString sshHost() const { return kind == TargetKind::Slurm ? slurm.via : hosts.value(0); }
};

// A continued run's learning rate after its checkpoint (RunSpec::scheduleStart, scheduleSteps).
enum class ContinueSchedule {
    Stretch, // the decay stretches over the new total; warm-up is not repeated
    Keep,    // the finished schedule: constant at its end value
    Restart, // warm-up and decay again, over the new steps
};

class Launcher {
public:
    virtual ~Launcher() = default;

    virtual TargetKind kind() const = 0;
    // Creates the run record and starts it; returns the run id. Needs a store.
    virtual Result<qint64> start(const LaunchRequest& request) = 0;
    // Stops every rank of a recorded run (TERM, then KILL after graceMs; scancel for Slurm).
    virtual Status stop(qint64 runId, int graceMs = 10000) = 0;
    // Exactly what start() will run for `request`, as a shell user reads it: the command line on
    // this machine, the script each SSH host runs, or the sbatch script; and the launch spec.
    virtual Result<QString> describe(const LaunchRequest& request) const = 0;
    // Whether the target can run a worker: its `--version` line and the GPUs there, or the
    // one-line reason (unreachable, auth refused, host key, worker not installed). Blocking.
    virtual Result<HostCheck> checkHost(const QString& workerProgram = "shard-worker") const = 0;
    // The run that writes `runDir` on this target: the one recorded for it, or a new record
    // (local and SSH folders started anywhere); either way caught up with what the folder holds
    // (from the stored offsets, so nothing twice) and settled when its launcher is gone. Returns
    // the run id. Needs a store; over SSH it waits for the host.
    virtual Result<qint64> attach(const QString& runDir) = 0;
    // The host that holds a run's files, when they are not on this machine.
    virtual std::optional<SshHost> fileHost(const RunRecord& run) const = 0;
    // A started watcher that ingests the run into the store until it ends.
    virtual Result<std::unique_ptr<RunWatcher>> watch(
        const RunRecord& run, QObject* parent = nullptr)
        = 0;
    // A tail of rank `rank`'s log, read where the run's files are (a file, or over SSH).
    std::unique_ptr<LogTail> logTail(const RunRecord& run, int rank) const;

    // Starts a recorded run again in its directory, on its target, from its latest complete
    // checkpoint, in the same record; moreSteps > 0 raises its step count first ("continue for
    // N more steps"), its learning rate after the checkpoint as `schedule` says. Returns the run
    // id.
    Result<qint64> resume(const RunRecord& run, qint64 moreSteps = 0,
        ContinueSchedule schedule = ContinueSchedule::Stretch);
};

// A launcher's store: fails with "no run store is open" when it has none (a launcher made for
// describe() and checkHost() only).
Status requireStore(const RunStore* store);
// The launch spec as describe() ends with it: the file's path as a comment, then its JSON.
QString launchSpecSection(const LaunchRequest& request);

// A launcher for a target; `store` may be null for describe() and checkHost().
Result<std::unique_ptr<Launcher>> makeLauncher(const LaunchTarget& target, RunStore* store,
    const SshOptions& sshOptions = SshOptions::fromEnvironment());
// The launcher a recorded run was started with (its target and hosts).
Result<std::unique_ptr<Launcher>> launcherOf(RunStore& store, const RunRecord& run,
    const SshOptions& sshOptions = SshOptions::fromEnvironment());

} // namespace shard::jobs
