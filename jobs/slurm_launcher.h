// SlurmLauncher: writes an sbatch script (nodes, one launcher task per node, GPUs, time,
// partition, account, environment, the `srun shard-worker launch` line) into the run directory,
// submits it with sbatch on this machine or on a login node over SSH, tracks it with
// squeue / scontrol / sacct, cancels with scancel. The run directory is ingested like any other.
#pragma once

#include <optional>

#include "jobs/launch_request.h"
#include "jobs/launcher.h"
#include "jobs/run_store.h"
#include "jobs/run_watcher.h"
#include "jobs/slurm_options.h"
#include "jobs/ssh_client.h"

class QTimer;

namespace shard::jobs {

// A job's state as Slurm names it (PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, TIMEOUT, ...).
struct SlurmJobState {
    QString state; // "" when Slurm no longer knows the job
    bool ended() const;
    RunStatus runStatus() const;
};

class SlurmLauncher : public Launcher {
public:
    // A launcher for jobs with `options` (start() submits with them); `store` may be null for
    // describe(), checkHost() and the static helpers.
    SlurmLauncher(RunStore* store, SlurmOptions options = {}, SshClient ssh = SshClient())
        : m_store(store)
        , m_slurm(std::move(options))
        , m_ssh(std::move(ssh))
    {
    }

    TargetKind kind() const override { return TargetKind::Slurm; }
    // submit() with this launcher's options.
    Result<qint64> start(const LaunchRequest& request) override { return submit(request, m_slurm); }
    // scancel (Slurm signals the job's steps; the launcher stops its ranks).
    Status stop(qint64 runId, int /*graceMs*/ = 10000) override { return cancel(runId); }
    // The batch script submit() writes, and the launch spec.
    Result<QString> describe(const LaunchRequest& request) const override;
    // The worker on the submitting machine (this one, or the login node over SSH).
    Result<HostCheck> checkHost(const QString& workerProgram = "shard-worker") const override;
    // The run recorded for a job's folder (a Slurm run is recorded when it is submitted).
    Result<qint64> attach(const QString& runDir) override;
    // The login node, when jobs are submitted over SSH.
    std::optional<SshHost> fileHost(const RunRecord& run) const override;
    // A SlurmRunWatcher: the job's state and its folder.
    Result<std::unique_ptr<RunWatcher>> watch(
        const RunRecord& run, QObject* parent = nullptr) override;

    // The options a run's job needs: the spec's node count, and under device cuda one GPU per
    // rank of a node (--gpus-per-node), unless given; a given value the spec contradicts is an
    // error that says which. submit() and sbatchScript() apply it.
    static Result<SlurmOptions> fitToRun(const LaunchRequest& request, const SlurmOptions& given);
    // The batch script for a run directory (also shown by the studio's preview). The job is
    // requeueable and appends to its output; with options.preemptSignalSec, Slurm's SIGUSR1
    // before the time limit makes the ranks checkpoint and exit 75, and the script requeues the
    // job, whose launcher then continues from that checkpoint (SLURM_RESTART_COUNT). A job
    // cancelled by the user is not requeued.
    static Result<QString> sbatchScript(
        const LaunchRequest& request, const SlurmOptions& options, const QString& runDir);

    // The script's first lines for any job: the #SBATCH options (then `directives`, each
    // without its "#SBATCH "), `set -eu`, the exported environment (the options' then `env`); an
    // entry that is not KEY=VALUE is an error.
    static Result<QStringList> sbatchHeader(const QString& name, const SlurmOptions& options,
        const QStringList& env, const QString& runDir, const QStringList& directives = {});

    // Whether sbatch and a controller answer where jobs are submitted; the reason when not.
    Status available(const SlurmOptions& options) const;
    // Writes <run>/job.sbatch and submits it; the run is `queued` with its job id.
    Result<qint64> submit(const LaunchRequest& request, const SlurmOptions& options);
    // Submits `scriptPath` to run in `absDir` (its output in logs/slurm-<job>.out); returns the
    // job id, or why Slurm refused it.
    Result<QString> sbatch(
        const SlurmOptions& options, const QString& absDir, const QString& scriptPath) const;
    // The launch info recorded with a Slurm run (what optionsOf() reads back), with `extra`
    // keys (the program the job runs).
    static QByteArray launchInfo(const SlurmOptions& options, const QString& scriptPath,
        const QList<QPair<QString, QString>>& extra);
    // A shell command on the submitting machine (this one, or the via host over SSH), with the
    // options' client environment.
    Result<SshResult> shell(
        const SlurmOptions& options, const QString& script, const QByteArray& stdinData = {}) const;

    Result<SlurmJobState> jobState(const QString& jobId, const SlurmOptions& options) const;
    // Updates the run's status from Slurm (queued -> running; ended jobs settle from their
    // events, else from Slurm's final state). A run that ended (preempted, stopped by the
    // requeue) while Slurm keeps its job is followed on: queued again while the job waits,
    // running again once the restarted job says "requeued". Returns the run's status;
    // `jobAlive` (when given) says whether Slurm still has the job pending or running.
    Result<RunStatus> poll(qint64 runId, bool* jobAlive = nullptr);
    Status cancel(qint64 runId);

    // The submission options recorded with a run (via host, client env).
    static SlurmOptions optionsOf(const RunRecord& run);

private:
    RunStore* m_store;
    SlurmOptions m_slurm;
    SshClient m_ssh;
};

// Follows a Slurm run: ingests its run directory (locally, or over SSH on the via host) and
// polls the job's state; finished() when the job has ended and everything is ingested (a run
// preempted or stopped by a requeue is followed on while Slurm keeps its job).
class SlurmRunWatcher : public RunWatcher {
    Q_OBJECT
public:
    SlurmRunWatcher(RunStore& store, qint64 runId,
        SshOptions sshOptions = SshOptions::fromEnvironment(), QObject* parent = nullptr);
    ~SlurmRunWatcher() override;
    qint64 runId() const override { return m_runId; }
    void start(int pollMs = 2000);
    void stop();

private:
    void pollJob();
    // The watcher of the run folder (local, or over SSH on the via host), again after a requeue.
    void startInner(const RunRecord& run);
    void stopInner();
    RunStore& m_store;
    qint64 m_runId;
    SshOptions m_sshOptions;
    RunWatcher* m_inner = nullptr;
    bool m_innerEnded = false; // it saw the run end (a requeued job needs a new one)
    QTimer* m_timer = nullptr;
    int m_pollMs = 2000;
    bool m_done = false;
};

} // namespace shard::jobs
