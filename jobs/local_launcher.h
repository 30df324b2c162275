// LocalLauncher: starts `shard-worker launch ...` on this machine, detached in its own session
// so the run outlives the CLI and the studio; records pid (+ start time) and run directory;
// re-attaches after a restart; stops with TERM, then KILL after a grace period.
#pragma once

#include <QVector>

#include "jobs/launch_request.h"
#include "jobs/launcher.h"
#include "jobs/run_store.h"

namespace shard::jobs {

// One of this project's programs, by name: a path as it is; else $envVar (when given and set:
// that file or nothing); else beside this program, or in `buildTreeDirs` relative to it (where
// the build tree puts it); else on PATH. Empty when it is not found or not executable.
QString findProjectProgram(
    const QString& name, const char* envVar, const QStringList& buildTreeDirs = {});

class LocalLauncher : public Launcher {
public:
    // `store` may be null for describe() and checkHost().
    explicit LocalLauncher(RunStore* store)
        : m_store(store)
    {
    }

    TargetKind kind() const override { return TargetKind::Local; }
    // The command line start() spawns, and the launch spec.
    Result<QString> describe(const LaunchRequest& request) const override;
    // The worker found here, its --version line and this machine's GPUs.
    Result<HostCheck> checkHost(const QString& workerProgram = "shard-worker") const override;
    std::optional<SshHost> fileHost(const RunRecord&) const override { return std::nullopt; }
    // A LocalRunWatcher on the run folder and the recorded launcher process.
    Result<std::unique_ptr<RunWatcher>> watch(
        const RunRecord& run, QObject* parent = nullptr) override;

    // $SHARD_WORKER, next to this executable (install or build tree), then PATH; or "" .
    static QString findWorker(const QString& requested = QStringLiteral("shard-worker"));
    // $SHARD_RUNS_DIR or <AppDataLocation>/runs.
    static QString defaultRunsRoot();

    // Creates the run record, prepares the run directory and starts the launcher.
    Result<qint64> start(const LaunchRequest& request) override;

    // After a restart: local runs still marked queued/running whose launcher is alive are
    // returned (watch them again); the others are settled (interrupted, or failed/finished by
    // their events).
    static Result<QVector<qint64>> reconcile(RunStore& store);

    // TERM to the launcher (it stops its ranks), KILL to its session after graceMs.
    Status stop(qint64 runId, int graceMs = 10000) override;

    // The run recorded for a run folder on this machine, or a new record made from its run.json
    // (or, before the run writes that, its launch-spec.json); either way ingested from the
    // store's offsets, so nothing twice. A run whose launcher is gone (or, without a pid file,
    // whose folder has not been written for a minute) is settled from its events.
    Result<qint64> attach(const QString& directory) override;

    // Pid and start time recorded for a local run (0 when none).
    static qint64 startTimeOf(const RunRecord& run);

private:
    RunStore* m_store;
};

} // namespace shard::jobs
