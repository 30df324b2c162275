// Runs other tools trained, into the run store: TensorBoard event files (Hugging Face Trainer,
// torchtitan, DeepSpeed, Megatron-LM, Lightning, Keras, a bare SummaryWriter) and Hugging Face
// Trainer's trainer_state.json. A run is a folder holding event files (a restarted job's several
// files merge: by tag and step, the later wall time wins), or the newest trainer_state.json of a
// Trainer output folder that has no event files. Known tags fill the store's metric columns
// (tbio::knownTag); every scalar is also kept under its tag. Importing a path again updates
// the runs it holds, never duplicates them (a run is found again by its folder).
#pragma once

#include <QElapsedTimer>
#include <QString>
#include <QStringList>
#include <QTimer>
#include <QVector>

#include "jobs/launcher.h"
#include "jobs/result.h"
#include "jobs/run_watcher.h"
#include "jobs/ssh_client.h"

namespace shard::jobs {

class RunStore;

struct ImportedRun {
    qint64 runId = 0;
    bool created = false; // false: an earlier import of the same folder was updated
    QString name;
    QString folder;    // the run's folder (absolute)
    QString tool;      // "Hugging Face Trainer", "torchtitan", ... or "TensorBoard"
    QString format;    // "tensorboard" or "trainer_state"
    int steps = 0;     // steps with a value of a known metric
    int tags = 0;      // scalar tags kept
    qint64 points = 0; // scalar points read by this import (a later import of the same run
                       // reads only what its event files gained since)
    QStringList notes; // skipped records, CRC failures, non-scalar data, files refused
};

struct ImportReport {
    QVector<ImportedRun> runs;
    QStringList skipped; // folders or files with nothing to import, and why
};

// Imports every run under `path` (a folder searched recursively, an event file, a
// trainer_state.json or a job's stdout log), on this machine or, as HOST:PATH, on an SSH host
// (its event files, trainer_state.json, configs and logs are fetched over ssh into a mirror
// beside the store, then imported; the runs record the host and its path). Fails with a
// message naming the path when it does not exist or holds no run, or a file in it cannot be
// read as what its name says it is.
Result<ImportReport> importRuns(
    RunStore& store, const QString& path, const SshOptions& ssh = SshOptions::fromEnvironment());
// "HOST:PATH" for a path that names no file here (a user@host[:port]: prefix and a path).
bool isRemoteImportPath(const QString& path);

// Whether `folder` (searched recursively, up to the first hit) holds an event file or a
// trainer_state.json: a folder the studio opens is imported when it does and holds no run of
// its own (run.json, metrics.jsonl).
bool hasImportableFiles(const QString& folder);

// Ties an imported run to the Slurm job that writes it (`shard runs import PATH --slurm-job ID`):
// the job is asked for where the run's files are (its host, a login node, or this machine), the
// run records the job id and takes the job's state (queued, running), and its watcher follows
// the job to its end (completed: finished; cancelled: stopped; failed, timeout, node failure:
// failed). Fails, changing nothing, for a run that was not imported, an id that is not a Slurm
// job id, or a job Slurm does not know.
Status followSlurmJob(RunStore& store, qint64 runId, const QString& jobId,
    const SshOptions& ssh = SshOptions::fromEnvironment());

// Follows an imported run while its job writes: when the folder's event files (or its
// trainer_state.json) change, the run is imported again (each event file from where the last
// import stopped; a point replaces the one at its tag and step, so each is stored once) and
// pointsAdded is emitted. A run tied to a Slurm job
// (followSlurmJob) takes the job's state every 5 s (squeue through a shell, over ssh for a
// login node: not at every poll) and ends with it: imported a last time,
// its final status set, finished() emitted. Any other never ends by itself: the job that writes
// the files is not the studio's to watch.
class ImportWatcher : public RunWatcher {
    Q_OBJECT
public:
    // `store` must outlive the watcher and belong to this thread. `folder` is local, or
    // HOST:PATH (then fetched again every poll, as nothing tells this machine what changed).
    ImportWatcher(RunStore& store, qint64 runId, QString folder, QObject* parent = nullptr);
    qint64 runId() const override { return m_runId; }
    void start(int pollMs = 1000);
    // Imports again when the files changed since the last call; true when it did.
    bool poll();

private:
    QString signature() const;
    // A Slurm-tied run: its job's state now; the run's status follows, and the watcher ends when
    // the job has.
    void pollJob();
    RunStore& m_store;
    qint64 m_runId;
    QString m_folder;
    QString m_signature;
    QTimer m_timer;
    QString m_jobId;          // the run's Slurm job, or empty
    QString m_jobState;       // its state at the last poll
    QElapsedTimer m_jobAsked; // since Slurm was last asked (every kJobPollMs, not every poll)
    static constexpr qint64 kJobPollMs = 5000;
    bool m_ended = false; // the job ended: finished() was emitted
};

// The launch target of imported runs (RunRecord::target "import"): they can be watched and
// attached (imported), not started, stopped or resumed by the studio.
class ImportTarget : public Launcher {
public:
    explicit ImportTarget(RunStore* store)
        : m_store(store)
    {
    }
    TargetKind kind() const override { return TargetKind::Import; }
    Result<qint64> start(const LaunchRequest& request) override;
    Status stop(qint64 runId, int graceMs) override;
    Result<QString> describe(const LaunchRequest& request) const override;
    Result<HostCheck> checkHost(const QString& workerProgram) const override;
    Result<qint64> attach(const QString& runDir) override;
    std::optional<SshHost> fileHost(const RunRecord& run) const override;
    Result<std::unique_ptr<RunWatcher>> watch(const RunRecord& run, QObject* parent) override;

private:
    RunStore* m_store;
};

} // namespace shard::jobs
