// RemoteRunWatcher: follows a run directory on an SSH host with `tail -c +OFFSET -F`, one stream
// per file, ingests from the stored offsets and signals. A dropped connection is retried with
// back-off and resumes from the stored offset (no point lost or stored twice); a launcher that
// vanished without a finish event marks the run interrupted.
#pragma once

#include <QElapsedTimer>
#include <QProcess>
#include <QTimer>

#include "jobs/ingestor.h"
#include "jobs/run_watcher.h"
#include "jobs/ssh_client.h"

namespace shard::jobs {

class RemoteRunWatcher : public RunWatcher {
    Q_OBJECT
public:
    // `store` must outlive the watcher and belong to this thread.
    RemoteRunWatcher(RunStore& store, qint64 runId, SshHost host, QString runDir,
        SshOptions options = SshOptions::fromEnvironment(), QObject* parent = nullptr);
    ~RemoteRunWatcher() override;

    qint64 runId() const override { return m_runId; }
    // Node 0's launcher pid on the host, to notice a run that died without a finish event.
    void setProcess(qint64 pid) { m_pid = pid; }
    void start();
    void stop();
    bool isActive() const { return m_active; }
    int reconnects() const { return m_reconnects; }

    // Blocking: reads what is new in both files from the stored offsets, for this watcher's run
    // (after stop(), when its job is known to have ended).
    Result<IngestStats> drain() { return catchUp(m_store, m_runId, m_ssh, m_host, m_runDir); }
    // Blocking: reads what is new in both files from the stored offsets (attach, stop, CLI).
    static Result<IngestStats> catchUp(RunStore& store, qint64 runId, const SshClient& ssh,
        const SshHost& host, const QString& runDir);

private:
    struct Stream {
        IngestFile file;
        QProcess* process = nullptr;
        QByteArray pending;
        qint64 pendingOffset = 0; // file offset of pending[0]
    };
    void startStream(Stream& s);
    void onData(Stream& s);
    void onStreamEnded(Stream& s);
    void checkAlive();
    void finish(RunStatus status, const QString& message);
    void handleStats(const IngestStats& stats);
    // Reads and stores metrics.jsonl after its stored offset, over SSH, when called.
    static MetricsCatchUp metricsCatchUp(RunStore& store, Ingestor& ingestor, qint64 runId,
        const SshClient& ssh, const SshHost& host, const QString& runDir);

    RunStore& m_store;
    Ingestor m_ingestor;
    qint64 m_runId;
    SshHost m_host;
    QString m_runDir;
    SshClient m_ssh;
    // Stores the rest of metrics.jsonl over SSH before an events chunk that ends the run.
    MetricsCatchUp m_metricsCatchUp;
    qint64 m_pid = 0;
    Stream m_streams[2];
    QTimer m_aliveTimer;
    QProcess* m_aliveProbe = nullptr;
    bool m_active = false;
    bool m_finishing = false;
    int m_reconnects = 0;
    int m_backoffMs = 500;
    bool m_reportedOutage = false;
};

} // namespace shard::jobs
