// RunDirFollower: a poller on a worker thread reading JSON lines by byte offset.
#include "widgets/run_dir_follower.h"

#include <algorithm>
#include <fstream>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QTimer>

#include "jobs/local_process.h"
#include "jobs/log_tail.h"
#include "protocol/jsonl_reader.h"
#include "protocol/run_dir.h"

namespace shard::widgets {

class RunDirFollowerWorker : public QObject {
    Q_OBJECT
public:
    void start(const QString& directory, quint64 generation)
    {
        m_generation = generation;
        m_dir = protocol::RunDir(QDir(directory).absolutePath().toStdString());
        m_metricsOffset = m_eventsOffset = m_logOffset = 0;
        m_specSeen = false;
        m_launchSpecSeen = false;
        m_reportedMissing = false;
        m_live = false;
        m_reportedGone = false;
        m_polls = 0;
        m_shownRank = -2;
        m_failedRank = -1;
        m_requestedRank = RunDirFollower::kFailingRank;
        m_logRanks.clear();
        if (!m_timer) {
            m_timer = new QTimer(this);
            m_timer->setInterval(RunDirFollower::kPollMs);
            connect(m_timer, &QTimer::timeout, this, &RunDirFollowerWorker::poll);
        }
        m_timer->start();
        poll();
    }
    void halt()
    {
        if (m_timer)
            m_timer->stop();
    }
    void setLogRank(int rank)
    {
        m_requestedRank = rank;
        if (m_timer && m_timer->isActive())
            poll();
    }

Q_SIGNALS:
    void updated(const shard::widgets::FollowUpdate& update);
    void failed(const QString& message, quint64 generation);

private:
    void poll()
    {
        FollowUpdate u;
        u.generation = m_generation;
        const QString root = QString::fromStdString(m_dir.root());
        if (!m_specSeen) {
            if (!QFileInfo(root).isDir()) {
                reportOnce(tr("%1: no such folder; open the folder a run writes (it holds "
                              "run.json)")
                               .arg(root));
                return;
            }
            std::ifstream in(m_dir.specFile());
            if (in) {
                try {
                    in >> u.spec;
                    m_specSeen = true;
                    u.specChanged = true;
                } catch (const std::exception&) {
                    // run.json is written once; a partial read means the writer is mid-way.
                    return;
                }
            } else if (!m_launchSpecSeen) {
                // A launched run that has not written run.json yet (or failed before it could):
                // the launch spec names it, and its events and logs say how it is going.
                std::ifstream launch(m_dir.launchSpecFile());
                nlohmann::json spec;
                if (launch) {
                    try {
                        launch >> spec;
                        m_launchSpecSeen = true;
                        u.spec = std::move(spec);
                        u.specChanged = true;
                    } catch (const std::exception&) {
                        return;
                    }
                } else if (!QFileInfo::exists(QString::fromStdString(m_dir.eventsFile()))) {
                    reportOnce(tr("%1: no run.json yet; this is not a run folder, or the run "
                                  "has not started writing")
                                   .arg(root));
                    return;
                }
            }
        }
        // Whether the launcher is gone is asked before the files are read, so that a finish
        // event written just before it exited is seen first. Once a second is enough.
        const bool checkLauncher = m_polls++ % 5 == 0;
        const std::optional<bool> launcherAlive = checkLauncher
            ? jobs::LocalProcess::pidFileAlive(QString::fromStdString(m_dir.pidFile()))
            : std::nullopt;
        m_metricsOffset += protocol::readJsonlFile(
            m_dir.metricsFile(), m_metricsOffset,
            [&](const nlohmann::json& j, int64_t) {
                try {
                    if (j.value("type", std::string("metric")) == "metric")
                        u.metrics.push_back(protocol::metricFromJson(j));
                } catch (const std::exception&) {
                    ++u.badLines;
                }
            },
            [&](const std::string&, const std::string&) {
                ++u.badLines;
            }).consumedBytes;
        m_eventsOffset += protocol::readJsonlFile(
            m_dir.eventsFile(), m_eventsOffset,
            [&](const nlohmann::json& j, int64_t) {
                try {
                    u.events.push_back(protocol::eventFromJson(j));
                } catch (const std::exception&) {
                    ++u.badLines;
                }
            },
            [&](const std::string&, const std::string&) {
                ++u.badLines;
            }).consumedBytes;
        bool started = false;
        for (const auto& e : u.events) {
            if (e.kind == "error" && m_failedRank < 0 && e.data.contains("rank")
                && e.data["rank"].is_number_integer())
                m_failedRank = e.data["rank"].get<int>();
            if (e.kind == "start") {
                m_live = true;
                m_reportedGone = false;
                started = true;
            } else if (e.kind == "finish") {
                m_live = false;
            }
        }
        // A start read now may belong to a launcher that wrote its pid file after the check.
        if (m_live && !started && !m_reportedGone && launcherAlive == false) {
            m_reportedGone = true;
            u.endedWithoutFinish = tr("its launcher is gone and it wrote no finish event (killed, "
                                      "or its machine restarted)");
        }
        if (checkLauncher || m_logRanks.isEmpty()) {
            const QList<int> ranks = logRanks();
            if (ranks != m_logRanks) {
                m_logRanks = ranks;
                u.logRanks = ranks;
            }
        }
        const int rank = m_requestedRank >= 0 ? m_requestedRank : std::max(0, m_failedRank);
        if (rank != m_shownRank) {
            m_shownRank = rank;
            m_logOffset = 0;
            u.logReset = true;
        }
        u.logRank = rank;
        u.logLines = jobs::readLogTail(QString::fromStdString(m_dir.rankLog(rank)), &m_logOffset);
        if (!u.endedWithoutFinish.isEmpty() || u.specChanged || !u.metrics.empty()
            || !u.events.empty() || !u.logLines.isEmpty() || u.badLines > 0 || u.logReset
            || !u.logRanks.isEmpty())
            Q_EMIT updated(u);
    }

    QList<int> logRanks() const
    {
        QList<int> ranks;
        static const QRegularExpression name(QStringLiteral("^rank-(\\d+)\\.log$"));
        for (const QString& f :
            QDir(QString::fromStdString(m_dir.logsDir())).entryList(QDir::Files)) {
            const auto m = name.match(f);
            if (m.hasMatch())
                ranks.append(m.captured(1).toInt());
        }
        std::sort(ranks.begin(), ranks.end());
        return ranks;
    }

    void reportOnce(const QString& message)
    {
        if (m_reportedMissing)
            return;
        m_reportedMissing = true;
        Q_EMIT failed(message, m_generation);
    }

    protocol::RunDir m_dir {""};
    QTimer* m_timer = nullptr;
    int64_t m_metricsOffset = 0;
    int64_t m_eventsOffset = 0;
    qint64 m_logOffset = 0;
    bool m_specSeen = false;
    bool m_launchSpecSeen = false;
    int m_requestedRank = RunDirFollower::kFailingRank;
    int m_failedRank = -1; // the first rank an error event names
    int m_shownRank = -2;  // whose log m_logOffset is in
    QList<int> m_logRanks;
    bool m_reportedMissing = false;
    bool m_live = false;         // a start event without a finish after it
    bool m_reportedGone = false; // endedWithoutFinish sent for this start
    quint64 m_polls = 0;
    quint64 m_generation = 0;
};

RunDirFollower::RunDirFollower(QObject* parent)
    : QObject(parent)
{
    qRegisterMetaType<shard::widgets::FollowUpdate>();
    m_worker = new RunDirFollowerWorker;
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &RunDirFollowerWorker::updated, this, [this](const FollowUpdate& u) {
        if (u.generation == m_generation)
            Q_EMIT updated(u);
    });
    connect(m_worker, &RunDirFollowerWorker::failed, this,
        [this](const QString& message, quint64 generation) {
            if (generation == m_generation)
                Q_EMIT failed(message);
        });
    m_thread.setObjectName("run-dir-follower");
    m_thread.start();
}

RunDirFollower::~RunDirFollower()
{
    m_thread.quit();
    m_thread.wait();
}

void RunDirFollower::follow(const QString& directory)
{
    m_directory = directory;
    const quint64 generation = ++m_generation;
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, directory, generation] { w->start(directory, generation); });
}

void RunDirFollower::setLogRank(int rank)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, rank] { w->setLogRank(rank); });
}

void RunDirFollower::stop()
{
    ++m_generation;
    QMetaObject::invokeMethod(m_worker, [w = m_worker] { w->halt(); });
}

} // namespace shard::widgets

#include "run_dir_follower.moc"
