// Local run tailing (see local_run_watcher.h).
#include "jobs/local_run_watcher.h"

#include <QFileInfo>

#include "jobs/local_process.h"

namespace shard::jobs {

Result<RunStatus> settleVanishedRun(RunStore& store, qint64 runId, const QString& runDir)
{
    Ingestor ingestor(store);
    if (!runDir.isEmpty()) {
        auto s = ingestor.ingestRunDir(runId, runDir);
        if (!s)
            return fail(s.error());
    }
    auto run = store.run(runId);
    if (!run)
        return fail(run.error());
    if (isTerminal(run->status))
        return run->status;
    auto events = store.events(runId);
    if (!events)
        return fail(events.error());
    QString lastError;
    for (const auto& e : *events)
        if (e.kind == "error")
            lastError = e.message.isEmpty() ? QString::fromUtf8(e.dataJson) : e.message;
    const RunStatus status = lastError.isEmpty() ? RunStatus::Interrupted : RunStatus::Failed;
    const QString message = lastError.isEmpty()
        ? QStringLiteral("the launcher process ended without a finish event")
        : lastError;
    protocol::EventRecord e;
    e.kind = lastError.isEmpty() ? "interrupted" : "error";
    e.message = message.toStdString();
    if (auto s = store.addEvent(runId, e); !s)
        return fail(s.error());
    if (auto s = store.setStatus(runId, status, message); !s)
        return fail(s.error());
    return status;
}

LocalRunWatcher::LocalRunWatcher(RunStore& store, qint64 runId, QString runDir, QObject* parent)
    : RunWatcher(parent)
    , m_store(store)
    , m_ingestor(store)
    , m_runId(runId)
    , m_runDir(std::move(runDir))
{
    connect(&m_timer, &QTimer::timeout, this, [this] { (void)poll(); });
    m_soon.setSingleShot(true);
    m_soon.setInterval(40); // coalesce bursts of file changes into one ingest
    connect(&m_soon, &QTimer::timeout, this, [this] { (void)poll(); });
    connect(&m_fsWatcher, &QFileSystemWatcher::fileChanged, this, [this] { scheduleSoon(); });
    connect(&m_fsWatcher, &QFileSystemWatcher::directoryChanged, this, [this] {
        watchFiles();
        scheduleSoon();
    });
}

void LocalRunWatcher::setProcess(qint64 pid, qint64 startTime)
{
    m_pid = pid;
    m_startTime = startTime;
}

void LocalRunWatcher::start(int pollMs)
{
    m_done = false;
    if (QFileInfo(m_runDir).isDir())
        m_fsWatcher.addPath(m_runDir);
    watchFiles();
    m_timer.start(pollMs);
    scheduleSoon();
}

void LocalRunWatcher::stop()
{
    m_timer.stop();
    m_soon.stop();
    if (!m_fsWatcher.files().isEmpty())
        m_fsWatcher.removePaths(m_fsWatcher.files());
    if (!m_fsWatcher.directories().isEmpty())
        m_fsWatcher.removePaths(m_fsWatcher.directories());
}

void LocalRunWatcher::scheduleSoon()
{
    if (m_timer.isActive() && !m_soon.isActive())
        m_soon.start();
}

void LocalRunWatcher::watchFiles()
{
    for (IngestFile f : {IngestFile::Metrics, IngestFile::Events}) {
        const QString path = m_runDir + QLatin1Char('/') + fileName(f);
        if (QFileInfo::exists(path) && !m_fsWatcher.files().contains(path))
            m_fsWatcher.addPath(path);
    }
}

void LocalRunWatcher::endRun(RunStatus status, const QString& message)
{
    stop();
    m_done = true;
    Q_EMIT statusChanged(m_runId, status, message);
    Q_EMIT finished(m_runId, status);
}

Result<IngestStats> LocalRunWatcher::poll()
{
    if (m_done)
        return IngestStats {};
    // Check the process before reading, so records written just before it exited are read.
    const bool processGone = m_pid > 0 && !LocalProcess::isAlive(m_pid, m_startTime);
    auto stats = m_ingestor.ingestRunDir(m_runId, m_runDir);
    if (!stats) {
        Q_EMIT errorOccurred(m_runId, stats.error());
        return stats;
    }
    if (stats->metrics > 0)
        Q_EMIT pointsAdded(m_runId, stats->lastStep);
    if (stats->events > 0)
        Q_EMIT eventsAdded(m_runId);
    // A rank's own finish event can come before its launcher's verdict (a rank whose peer died
    // fails its collective and says so first): while the launcher lives, it has the last word.
    if (stats->status && isTerminal(*stats->status) && (m_pid <= 0 || processGone)) {
        endRun(*stats->status, stats->statusMessage);
        return stats;
    }
    if (stats->status)
        Q_EMIT statusChanged(m_runId, *stats->status, stats->statusMessage);
    if (processGone) {
        auto settled = settleVanishedRun(m_store, m_runId, m_runDir);
        if (!settled) {
            Q_EMIT errorOccurred(m_runId, settled.error());
            return stats;
        }
        auto run = m_store.run(m_runId);
        endRun(*settled, run ? run->message : QString());
    }
    return stats;
}

} // namespace shard::jobs
