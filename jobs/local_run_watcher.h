// LocalRunWatcher: tails a local run directory (QFileSystemWatcher plus a polling timer as a
// fallback), ingests new records and signals; notices a launcher that vanished without a finish
// event and marks the run interrupted (or failed when it logged an error).
#pragma once

#include <QFileSystemWatcher>
#include <QTimer>

#include "jobs/ingestor.h"
#include "jobs/run_watcher.h"

namespace shard::jobs {

class LocalRunWatcher : public RunWatcher {
    Q_OBJECT
public:
    // `store` must outlive the watcher and belong to this thread.
    LocalRunWatcher(RunStore& store, qint64 runId, QString runDir, QObject* parent = nullptr);

    qint64 runId() const override { return m_runId; }
    // The launcher process to watch (0: don't watch a process, e.g. a Slurm job).
    void setProcess(qint64 pid, qint64 startTime);
    void start(int pollMs = 500);
    void stop();
    bool isActive() const { return m_timer.isActive(); }

    // Ingests what is new now and emits; returns the stats (also used by the CLI's loop).
    Result<IngestStats> poll();

private:
    void scheduleSoon();
    void watchFiles();
    void endRun(RunStatus status, const QString& message);

    RunStore& m_store;
    Ingestor m_ingestor;
    qint64 m_runId;
    QString m_runDir;
    qint64 m_pid = 0;
    qint64 m_startTime = 0;
    QTimer m_timer;
    QTimer m_soon;
    QFileSystemWatcher m_fsWatcher;
    bool m_done = false;
};

// Ends a run whose process is gone: after a last ingest, a run without a finish event becomes
// `failed` (it logged an error event) or `interrupted`. Returns the status it now has.
Result<RunStatus> settleVanishedRun(RunStore& store, qint64 runId, const QString& runDir);

} // namespace shard::jobs
