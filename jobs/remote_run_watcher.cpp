// Remote tailing over OpenSSH (see remote_run_watcher.h).
#include "jobs/remote_run_watcher.h"

#include "jobs/local_run_watcher.h"

namespace shard::jobs {

namespace {

QString tailScript(const QString& runDir, IngestFile file, qint64 offset, bool follow)
{
    // tail counts bytes from 1; -F waits for the file to appear and follows it.
    return QStringLiteral("exec tail -c +%1 %2 -- %3")
        .arg(offset + 1)
        .arg(follow ? QStringLiteral("-F") : QString())
        .arg(SshClient::shellQuote(runDir + '/' + fileName(file)));
}

} // namespace

RemoteRunWatcher::RemoteRunWatcher(RunStore& store, qint64 runId, SshHost host, QString runDir,
    SshOptions options, QObject* parent)
    : RunWatcher(parent)
    , m_store(store)
    , m_ingestor(store)
    , m_runId(runId)
    , m_host(std::move(host))
    , m_runDir(std::move(runDir))
    , m_ssh(std::move(options))
    , m_metricsCatchUp(metricsCatchUp(m_store, m_ingestor, m_runId, m_ssh, m_host, m_runDir))
{
    m_streams[0].file = IngestFile::Metrics;
    m_streams[1].file = IngestFile::Events;
    m_aliveTimer.setInterval(3000);
    connect(&m_aliveTimer, &QTimer::timeout, this, [this] { checkAlive(); });
}

RemoteRunWatcher::~RemoteRunWatcher()
{
    stop();
}

void RemoteRunWatcher::start()
{
    m_active = true;
    m_finishing = false;
    for (Stream& s : m_streams)
        startStream(s);
    if (m_pid > 0)
        m_aliveTimer.start();
}

void RemoteRunWatcher::stop()
{
    m_active = false;
    m_aliveTimer.stop();
    for (Stream& s : m_streams) {
        if (s.process) {
            s.process->disconnect(this);
            s.process->kill();
            s.process->waitForFinished(2000);
            delete s.process;
            s.process = nullptr;
        }
    }
    if (m_aliveProbe) {
        m_aliveProbe->disconnect(this);
        m_aliveProbe->kill();
        m_aliveProbe->waitForFinished(2000);
        delete m_aliveProbe;
        m_aliveProbe = nullptr;
    }
}

void RemoteRunWatcher::startStream(Stream& s)
{
    if (!m_active)
        return;
    auto offset = m_store.ingestOffset(m_runId, fileKey(s.file));
    if (!offset) {
        Q_EMIT errorOccurred(m_runId, offset.error());
        return;
    }
    s.pending.clear();
    s.pendingOffset = *offset;
    delete s.process;
    s.process = new QProcess(this);
    connect(s.process, &QProcess::readyReadStandardOutput, this, [this, &s] { onData(s); });
    connect(s.process, &QProcess::finished, this, [this, &s] { onStreamEnded(s); });
    connect(s.process, &QProcess::errorOccurred, this, [this, &s](QProcess::ProcessError e) {
        if (e == QProcess::FailedToStart)
            onStreamEnded(s);
    });
    s.process->start(QStringLiteral("ssh"),
        m_ssh.sshArgs(m_host) << tailScript(m_runDir, s.file, *offset, true));
}

void RemoteRunWatcher::onData(Stream& s)
{
    s.pending += s.process->readAllStandardOutput();
    qint64 consumed = 0;
    // The two files stream apart: an events chunk that ends the run first stores the metrics
    // the stream of metrics.jsonl may not have brought yet.
    auto stats = m_ingestor.ingestBytes(
        m_runId, s.file, s.pending, s.pendingOffset, &consumed, m_metricsCatchUp);
    if (!stats) {
        Q_EMIT errorOccurred(m_runId, stats.error());
        return;
    }
    s.pending.remove(0, consumed);
    s.pendingOffset += consumed;
    if (m_reportedOutage) {
        m_reportedOutage = false;
        m_backoffMs = 500;
    }
    handleStats(*stats);
}

void RemoteRunWatcher::handleStats(const IngestStats& stats)
{
    if (stats.metrics > 0)
        Q_EMIT pointsAdded(m_runId, stats.lastStep);
    if (stats.events > 0)
        Q_EMIT eventsAdded(m_runId);
    if (!stats.status)
        return;
    if (isTerminal(*stats.status) && m_pid > 0) {
        // A rank's own finish can come before its launcher's verdict (which rank died): while
        // the launcher lives, the streams go on; the probe ends the watch once it is gone.
        Q_EMIT statusChanged(m_runId, *stats.status, stats.statusMessage);
        checkAlive();
    } else if (isTerminal(*stats.status)) {
        if (!m_finishing) {
            m_finishing = true;
            // Give the metrics stream a moment, then read the rest once and end.
            QTimer::singleShot(300, this,
                [this, st = *stats.status, msg = stats.statusMessage] { finish(st, msg); });
        }
    } else {
        Q_EMIT statusChanged(m_runId, *stats.status, stats.statusMessage);
    }
}

void RemoteRunWatcher::onStreamEnded(Stream& s)
{
    if (!m_active || m_finishing || !s.process)
        return;
    const QByteArray err = s.process->readAllStandardError();
    const int code = s.process->exitStatus() == QProcess::NormalExit ? s.process->exitCode() : -1;
    // Keep what arrived before the drop; the restart re-reads from the stored offset.
    s.process->deleteLater();
    s.process = nullptr;
    ++m_reconnects;
    if (!m_reportedOutage) {
        m_reportedOutage = true;
        Q_EMIT errorOccurred(m_runId,
            SshClient::describeFailure(m_host, code, err) + QStringLiteral("; reconnecting"));
    }
    QTimer::singleShot(m_backoffMs, this, [this, &s] {
        if (m_active && !m_finishing && !s.process)
            startStream(s);
    });
    m_backoffMs = std::min(m_backoffMs * 2, 10000);
}

void RemoteRunWatcher::checkAlive()
{
    if (m_aliveProbe || m_finishing || m_pid <= 0)
        return;
    m_aliveProbe = new QProcess(this);
    connect(m_aliveProbe, &QProcess::finished, this, [this](int code, QProcess::ExitStatus st) {
        m_aliveProbe->deleteLater();
        m_aliveProbe = nullptr;
        // 0: alive; 3: gone; anything else (255: ssh trouble) says nothing about the run.
        if (st != QProcess::NormalExit || code != 3 || m_finishing)
            return;
        m_finishing = true;
        auto caught = catchUp(m_store, m_runId, m_ssh, m_host, m_runDir);
        if (caught)
            handleStats(*caught);
        auto run = m_store.run(m_runId);
        if (run && isTerminal(run->status)) {
            finish(run->status, run->message);
            return;
        }
        auto settled = settleVanishedRun(m_store, m_runId, QString());
        finish(settled ? *settled : RunStatus::Interrupted,
            QStringLiteral("the launcher on %1 ended without a finish event")
                .arg(m_host.toString()));
    });
    const QString script = QStringLiteral("kill -0 %1 2>/dev/null && exit 0; exit 3").arg(m_pid);
    m_aliveProbe->start(QStringLiteral("ssh"), m_ssh.sshArgs(m_host) << script);
}

void RemoteRunWatcher::finish(RunStatus status, const QString& message)
{
    if (!m_active)
        return;
    for (Stream& s : m_streams) {
        if (s.process) {
            s.process->disconnect(this);
            s.process->kill();
            s.process->waitForFinished(2000);
            s.process->deleteLater();
            s.process = nullptr;
        }
    }
    auto caught = catchUp(m_store, m_runId, m_ssh, m_host, m_runDir);
    if (!caught)
        Q_EMIT errorOccurred(m_runId, caught.error());
    else if (caught->metrics > 0)
        Q_EMIT pointsAdded(m_runId, caught->lastStep);
    stop();
    auto run = m_store.run(m_runId);
    const RunStatus final = run ? run->status : status;
    Q_EMIT statusChanged(m_runId, final, run ? run->message : message);
    Q_EMIT finished(m_runId, final);
}

namespace {

// The bytes of one run file after its stored offset, read once over SSH and stored.
Result<IngestStats> catchUpFile(RunStore& store, Ingestor& ingestor, qint64 runId, IngestFile file,
    const SshClient& ssh, const SshHost& host, const QString& runDir, const MetricsCatchUp& metrics)
{
    auto offset = store.ingestOffset(runId, fileKey(file));
    if (!offset)
        return fail(offset.error());
    auto r = ssh.run(host,
        QStringLiteral("[ -f %1 ] || exit 0; ")
                .arg(SshClient::shellQuote(runDir + '/' + fileName(file)))
            + tailScript(runDir, file, *offset, false));
    if (!r)
        return fail(r.error());
    qint64 consumed = 0;
    return ingestor.ingestBytes(runId, file, r->out, *offset, &consumed, metrics);
}

} // namespace

MetricsCatchUp RemoteRunWatcher::metricsCatchUp(RunStore& store, Ingestor& ingestor, qint64 runId,
    const SshClient& ssh, const SshHost& host, const QString& runDir)
{
    return [&store, &ingestor, runId, &ssh, &host, runDir] {
        return catchUpFile(store, ingestor, runId, IngestFile::Metrics, ssh, host, runDir, {});
    };
}

Result<IngestStats> RemoteRunWatcher::catchUp(
    RunStore& store, qint64 runId, const SshClient& ssh, const SshHost& host, const QString& runDir)
{
    Ingestor ingestor(store);
    const MetricsCatchUp metrics = metricsCatchUp(store, ingestor, runId, ssh, host, runDir);
    IngestStats total;
    // Events first: the worker writes its finish event after its last metric, so metrics read
    // after the events hold every point of a run those events end. (Metrics first lost the
    // points written between the two reads whenever the run ended in between.)
    for (IngestFile file : {IngestFile::Events, IngestFile::Metrics}) {
        auto stats = catchUpFile(store, ingestor, runId, file, ssh, host, runDir, metrics);
        if (!stats)
            return fail(stats.error());
        total.add(*stats);
    }
    return total;
}

} // namespace shard::jobs
