// StoreService: a QThread with a StoreWorker that owns RunStore, LocalLauncher and watchers.
#include "widgets/store_service.h"

#include <limits>
#include <map>
#include <memory>

#include <QDir>
#include <QFileInfo>
#include <QHash>
#include <QTimer>

#include "jobs/ingestor.h"
#include "jobs/local_launcher.h"
#include "jobs/local_run_watcher.h"
#include "jobs/log_tail.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"
#include "jobs/watch_run.h"
#include "protocol/checkpoint_discovery.h"
#include "protocol/run_dir.h"

namespace shard::widgets {

namespace {

// An event row of the store as the record the run wrote.
protocol::EventRecord eventFromRow(const jobs::EventRow& row)
{
    protocol::EventRecord e;
    e.kind = row.kind.toStdString();
    e.step = row.step;
    e.wallTimeSec = row.wallTime;
    e.message = row.message.toStdString();
    e.data = nlohmann::json::parse(row.dataJson.toStdString(), nullptr, false);
    if (!e.data.is_object())
        e.data = nlohmann::json::object();
    return e;
}

} // namespace

class StoreWorker : public QObject {
    Q_OBJECT
public:
    ~StoreWorker() override { unfollow(); }

    void open(const QString& path)
    {
        QDir().mkpath(QFileInfo(path).absolutePath());
        QString warning;
        auto store = jobs::RunStore::openBestEffort(path, &warning);
        if (!store) {
            Q_EMIT openFailed(tr("Run store %1: %2").arg(path, store.error()));
            return;
        }
        m_store = std::make_unique<jobs::RunStore>(std::move(store.value()));
        Q_EMIT opened(path, m_store->isReadOnly(), warning);
        // Runs this studio (or another) started and that are still alive are watched again.
        if (!m_store->isReadOnly()) {
            auto alive = jobs::LocalLauncher::reconcile(*m_store);
            if (alive)
                for (qint64 id : alive.value())
                    watch(id);
        }
    }

    void listRuns(const QString& filter)
    {
        if (!ready())
            return;
        jobs::RunQuery q;
        q.text = filter;
        auto runs = m_store->listRuns(q);
        if (!runs) {
            Q_EMIT errorOccurred(tr("Could not list runs: %1").arg(runs.error()));
            return;
        }
        Q_EMIT runsListed(runs.value());
    }

    void loadSeries(const QVector<qint64>& ids, quint64 ticket)
    {
        if (!ready())
            return;
        std::vector<RunSeries> out;
        for (qint64 id : ids) {
            auto run = m_store->run(id);
            auto metrics = run ? m_store->metricSeries(id)
                               : jobs::Result<jobs::MetricSeries>(jobs::fail(run.error()));
            auto memory = run ? m_store->memorySeries(id)
                              : jobs::Result<QVector<jobs::MemorySeries>>(jobs::fail(run.error()));
            if (!run || !metrics || !memory) {
                Q_EMIT errorOccurred(tr("Could not load run %1: %2")
                                         .arg(id)
                                         .arg(!run          ? run.error()
                                                 : !metrics ? metrics.error()
                                                            : memory.error()));
                continue;
            }
            RunSeries s;
            s.id = QString::number(id);
            s.name = run->name;
            s.directory = run->runDir;
            try {
                s.config = nlohmann::json::parse(run->specJson.toStdString());
            } catch (const std::exception&) {
                s.config = nlohmann::json::object();
            }
            const jobs::MetricSeries& m = metrics.value();
            s.step = m.step;
            s.tokens = m.tokens;
            s.wallTimeSec = m.wallTime;
            s.loss = m.loss;
            s.lr = m.lr;
            s.gradNorm = m.gradNorm;
            s.tokensPerSec = m.tokensPerSec;
            s.stepTimeSec = m.stepTime;
            s.commBytes = m.commBytes;
            // Eval losses sit on their own steps: NaN where a step has none.
            s.evalLoss.fill(std::numeric_limits<double>::quiet_NaN(), s.step.size());
            for (int k = 0, j = 0; k < m.evalStep.size(); ++k) {
                while (j < s.step.size() && s.step[j] < m.evalStep[k])
                    ++j;
                if (j < s.step.size() && s.step[j] == m.evalStep[k])
                    s.evalLoss[j] = m.evalLoss[k];
            }
            // Peak over ranks per step, aligned with the metric steps.
            std::map<double, double> peakAt;
            for (const auto& rank : memory.value())
                for (int i = 0; i < rank.step.size(); ++i)
                    peakAt[rank.step[i]] = std::max(peakAt[rank.step[i]], rank.peak.value(i));
            s.peakBytes.reserve(s.step.size());
            for (double step : s.step) {
                auto it = peakAt.find(step);
                s.peakBytes.append(it == peakAt.end() ? 0.0 : it->second);
            }
            // Events (sample completions, checkpoints...) as the run wrote them.
            if (auto events = m_store->events(id))
                for (const jobs::EventRow& row : events.value())
                    s.events.push_back(eventFromRow(row));
            out.push_back(std::move(s));
        }
        Q_EMIT seriesLoaded(ticket, out);
    }

    void importRunDirectory(const QString& directory)
    {
        if (!writable())
            return;
        const QString dir = QDir(directory).absolutePath();
        QFile spec(dir + "/run.json");
        if (!spec.open(QIODevice::ReadOnly)) {
            Q_EMIT errorOccurred(tr("%1: no run.json, so this is not a run folder; pick the "
                                    "folder given to --out when the run started")
                                     .arg(directory));
            return;
        }
        const QByteArray specJson = spec.readAll();
        jobs::NewRun nr;
        try {
            const auto j = nlohmann::json::parse(specJson.toStdString());
            nr.name = QString::fromStdString(j.value("name", std::string()));
        } catch (const std::exception& e) {
            Q_EMIT errorOccurred(tr("%1/run.json is not valid JSON (%2)")
                                     .arg(directory, QString::fromUtf8(e.what())));
            return;
        }
        if (nr.name.isEmpty())
            nr.name = QFileInfo(dir).fileName();
        nr.specJson = specJson;
        nr.runDir = dir;
        nr.status = jobs::RunStatus::Running;
        auto id = m_store->createRun(nr);
        if (!id) {
            Q_EMIT errorOccurred(id.error());
            return;
        }
        jobs::Ingestor ingestor(*m_store);
        auto stats = ingestor.ingestRunDir(id.value(), dir);
        if (!stats) {
            Q_EMIT errorOccurred(tr("Importing %1: %2").arg(directory, stats.error()));
            return;
        }
        if (!stats->status)
            (void)jobs::settleVanishedRun(*m_store, id.value(), dir);
        Q_EMIT runImported(id.value());
    }

    void launch(const jobs::LaunchRequest& request, const LaunchTarget& target)
    {
        if (!writable())
            return;
        if (request.resume && target.kind == "local") {
            // A resume continues the run recorded for this folder (see resumeRun).
            auto known = m_store->findRunByDir(QString(), QDir(request.runDir).absolutePath());
            if (known && known.value() != 0)
                dropWatcher(known.value());
        }
        jobs::Result<qint64> id = jobs::fail(tr("unknown launch target '%1'").arg(target.kind));
        if (target.kind == "local") {
            jobs::LocalLauncher launcher(*m_store);
            id = launcher.start(request);
        } else if (target.kind == "ssh") {
            auto host = jobs::SshHost::parse(target.sshHost);
            if (!host) {
                Q_EMIT errorOccurred(tr("Host '%1': %2").arg(target.sshHost, host.error()));
                return;
            }
            jobs::SshLauncher launcher(*m_store);
            id = launcher.start({host.value()}, request);
        } else if (target.kind == "slurm") {
            jobs::SlurmOptions options;
            options.via = target.sshHost;
            options.partition = target.partition;
            jobs::SlurmLauncher launcher(*m_store);
            id = launcher.submit(request, options);
        }
        if (!id) {
            Q_EMIT errorOccurred(tr("Could not start the run: %1").arg(id.error()));
            return;
        }
        auto run = m_store->run(id.value());
        if (!run) {
            Q_EMIT errorOccurred(run.error());
            return;
        }
        watch(id.value());
        Q_EMIT launched(id.value(), run->runDir, remoteHostOf(run.value()).has_value());
    }

    // The run to change, or nothing after saying why (a read-only store, an unknown id).
    std::optional<jobs::RunRecord> writableRun(qint64 runId)
    {
        if (!writable())
            return std::nullopt;
        auto run = m_store->run(runId);
        if (!run) {
            Q_EMIT errorOccurred(run.error());
            return std::nullopt;
        }
        return std::move(run.value());
    }

    void stopRun(qint64 runId)
    {
        const std::optional<jobs::RunRecord> run = writableRun(runId);
        if (!run)
            return;
        jobs::Status status;
        if (run->target == "ssh")
            status = jobs::SshLauncher(*m_store).stop(runId);
        else if (run->target == "slurm")
            status = jobs::SlurmLauncher(*m_store).cancel(runId);
        else
            status = jobs::LocalLauncher(*m_store).stop(runId);
        if (!status) {
            Q_EMIT errorOccurred(tr("Could not stop run %1: %2").arg(runId).arg(status.error()));
            return;
        }
        Q_EMIT stopped(runId);
    }

    void followRun(qint64 runId, quint64 ticket)
    {
        unfollow();
        if (!ready())
            return;
        auto run = m_store->run(runId);
        if (!run) {
            Q_EMIT errorOccurred(tr("Cannot follow run %1: %2").arg(runId).arg(run.error()));
            return;
        }
        m_follow = Follow {};
        m_follow.runId = runId;
        m_follow.ticket = ticket;
        m_follow.logHost = remoteHostOf(run.value());
        // Rank 0's log: from the file for a local run, over SSH for a remote one.
        m_logTail = std::make_unique<jobs::LogTail>(
            QString::fromStdString(protocol::RunDir(run->runDir.toStdString()).rankLog(0)),
            m_follow.logHost);
        connect(m_logTail.get(), &jobs::LogTail::lines, this, &StoreWorker::emitLog);
        if (!jobs::isTerminal(run->status) && !m_store->isReadOnly())
            watch(runId);
        if (!m_followTimer) {
            m_followTimer = new QTimer(this);
            m_followTimer->setInterval(kFollowMs);
            connect(m_followTimer, &QTimer::timeout, this, [this] { pushFollow(); });
        }
        m_followTimer->start();
        pushFollow();
    }

    void unfollow()
    {
        if (m_followTimer)
            m_followTimer->stop();
        m_logTail.reset(); // a fetch in flight is killed: its lines belong to the old run
        m_follow = Follow {};
    }

    void renameRun(qint64 runId, const QString& name)
    {
        if (!writable())
            return;
        if (auto s = m_store->renameRun(runId, name); !s)
            Q_EMIT errorOccurred(tr("Could not rename run %1: %2").arg(runId).arg(s.error()));
        else
            Q_EMIT runChanged(runId);
    }

    void setNotes(qint64 runId, const QString& notes)
    {
        if (!writable())
            return;
        if (auto s = m_store->setNotes(runId, notes); !s)
            Q_EMIT errorOccurred(tr("Could not save the notes: %1").arg(s.error()));
        else
            Q_EMIT runChanged(runId);
    }

    void deleteRun(qint64 runId, bool removeFolder)
    {
        const std::optional<jobs::RunRecord> run = writableRun(runId);
        if (!run)
            return;
        if (!jobs::isTerminal(run->status)) {
            Q_EMIT errorOccurred(tr("Run %1 (%2) is still %3: stop it on the Monitor page "
                                    "before deleting it.")
                                     .arg(runId)
                                     .arg(run->name, jobs::toString(run->status)));
            return;
        }
        dropWatcher(runId);
        QString note;
        if (removeFolder && !run->runDir.isEmpty()) {
            if (run->target != "local")
                note
                    = tr(" Its folder %1 is on %2 and was left there.").arg(run->runDir, run->host);
            else if (QDir(run->runDir).exists() && !QDir(run->runDir).removeRecursively())
                note = tr(" Its folder %1 could not be removed completely.").arg(run->runDir);
        }
        if (auto s = m_store->deleteRun(runId); !s) {
            Q_EMIT errorOccurred(tr("Could not delete run %1: %2").arg(runId).arg(s.error()));
            return;
        }
        Q_EMIT runDeleted(runId, note);
    }

    void resumeRun(qint64 runId, qint64 moreSteps)
    {
        if (!writable())
            return;
        auto run = m_store->run(runId);
        if (!run) {
            Q_EMIT resumed(runId, 0, run.error());
            return;
        }
        if (moreSteps > 0) {
            // "Continue for N more steps": the same run, its step count raised, from its latest
            // complete checkpoint.
            auto spec = nlohmann::json::parse(run->specJson.toStdString(), nullptr, false);
            if (!spec.is_object() || !spec.value("steps", int64_t(0))) {
                Q_EMIT resumed(runId, 0,
                    tr("run %1 was not given a step count, so it cannot be continued by steps")
                        .arg(runId));
                return;
            }
            if (run->target == "local"
                && !protocol::latestCompleteCheckpoint(run->runDir.toStdString())) {
                Q_EMIT resumed(runId, 0,
                    tr("run %1 has no complete checkpoint in %2 to continue from (give it a "
                       "checkpoint interval next time)")
                        .arg(runId)
                        .arg(run->runDir));
                return;
            }
            spec["steps"] = spec.value("steps", int64_t(0)) + moreSteps;
            run->specJson = QByteArray::fromStdString(spec.dump());
        }
        auto request = resumeRequest(run.value());
        if (!request) {
            Q_EMIT resumed(runId, 0, request.error());
            return;
        }
        dropWatcher(runId);
        jobs::Result<qint64> id = jobs::fail(tr("unknown target '%1'").arg(run->target));
        if (run->target == "local") {
            id = jobs::LocalLauncher(*m_store).start(request.value());
        } else if (run->target == "ssh") {
            id = jobs::SshLauncher(*m_store).start(
                jobs::SshLauncher::hostsOf(run.value()), request.value());
        } else if (run->target == "slurm") {
            id = jobs::SlurmLauncher(*m_store).submit(
                request.value(), jobs::SlurmLauncher::optionsOf(run.value()));
        }
        if (!id) {
            Q_EMIT resumed(runId, 0, id.error());
            return;
        }
        watch(id.value());
        Q_EMIT resumed(runId, id.value(), QString());
    }

Q_SIGNALS:
    void runFollowed(quint64 ticket, const shard::widgets::FollowUpdate& update);
    void resumed(qint64 runId, qint64 newRunId, const QString& error);
    void runDeleted(qint64 runId, const QString& note);
    void runError(qint64 runId, const QString& message);
    void opened(const QString& path, bool readOnly, const QString& warning);
    void openFailed(const QString& message);
    void runsListed(const QVector<shard::jobs::RunRecord>& runs);
    void seriesLoaded(quint64 ticket, const std::vector<shard::widgets::RunSeries>& runs);
    void runImported(qint64 runId);
    void launched(qint64 runId, const QString& runDir, bool remote);
    void runChanged(qint64 runId);
    void stopped(qint64 runId);
    void errorOccurred(const QString& message);

private:
    bool ready()
    {
        if (m_store)
            return true;
        Q_EMIT errorOccurred(tr("The run store is not open."));
        return false;
    }
    bool writable()
    {
        if (!ready())
            return false;
        if (!m_store->isReadOnly())
            return true;
        Q_EMIT errorOccurred(tr("The run store is open read-only (%1); close the other program "
                                "that holds it, or check the disk, then restart the studio.")
                                 .arg(m_store->path()));
        return false;
    }
    void watch(qint64 runId)
    {
        if (m_watchers.contains(runId))
            return;
        auto run = m_store->run(runId);
        if (!run)
            return;
        // Local, SSH or Slurm: the jobs library picks the watcher for the target.
        auto watcher
            = jobs::watchRun(*m_store, run.value(), jobs::SshOptions::fromEnvironment(), this);
        if (!watcher) {
            Q_EMIT errorOccurred(tr("Cannot follow run %1: %2").arg(runId).arg(watcher.error()));
            return;
        }
        jobs::RunWatcher* w = watcher.value().release();
        m_watchers.insert(runId, w);
        connect(w, &jobs::RunWatcher::pointsAdded, this, [this](qint64 id) { changed(id); });
        connect(w, &jobs::RunWatcher::statusChanged, this, [this](qint64 id) { changed(id); });
        connect(
            w, &jobs::RunWatcher::errorOccurred, this, [this](qint64 id, const QString& message) {
                Q_EMIT runError(id, message);
                Q_EMIT errorOccurred(message);
            });
        connect(w, &jobs::RunWatcher::finished, this, [this, w](qint64 id) {
            m_watchers.remove(id);
            changed(id);
            w->deleteLater();
        });
    }
    // Before a resume: the run continues in the same record, and a watcher still on its previous
    // process must not settle it when that process is found gone.
    void dropWatcher(qint64 runId)
    {
        if (jobs::RunWatcher* old = m_watchers.take(runId)) {
            old->disconnect(this);
            delete old;
        }
    }
    void changed(qint64 runId)
    {
        Q_EMIT runChanged(runId);
        if (runId == m_follow.runId)
            pushFollow();
    }

    // The host whose run directory holds the files of a run that is not on this machine.
    static std::optional<jobs::SshHost> remoteHostOf(const jobs::RunRecord& run)
    {
        if (run.target == "ssh") {
            const QList<jobs::SshHost> hosts = jobs::SshLauncher::hostsOf(run);
            return hosts.isEmpty() ? std::nullopt : std::optional<jobs::SshHost>(hosts.front());
        }
        const QString via
            = run.target == "slurm" ? jobs::SlurmLauncher::optionsOf(run).via : QString();
        auto host = jobs::SshHost::parse(via);
        return !via.isEmpty() && host ? std::optional<jobs::SshHost>(host.value()) : std::nullopt;
    }

    // The same run again, in its directory and with its worker, from its latest checkpoint.
    static jobs::Result<jobs::LaunchRequest> resumeRequest(const jobs::RunRecord& run)
    {
        auto resumed = jobs::resumeRequest(run.specJson, run.name, run.runDir);
        if (!resumed)
            return jobs::fail(resumed.error());
        jobs::LaunchRequest r = std::move(resumed).value();
        const auto info = nlohmann::json::parse(run.launchInfo.toStdString(), nullptr, false);
        if (info.is_object() && info.contains("worker") && run.target != "local")
            r.workerProgram = QString::fromStdString(info.value("worker", "shard-worker"));
        return r;
    }

    // What the store has of the followed run that the page has not seen yet.
    void pushFollow()
    {
        if (m_follow.runId == 0 || !m_store)
            return;
        const qint64 id = m_follow.runId;
        auto run = m_store->run(id);
        if (!run) {
            if (!m_follow.reportedError)
                Q_EMIT errorOccurred(tr("Run %1: %2").arg(id).arg(run.error()));
            m_follow.reportedError = true;
            return;
        }
        FollowUpdate u;
        u.generation = m_follow.ticket;
        if (run->specJson != m_follow.specJson) {
            m_follow.specJson = run->specJson;
            u.spec = nlohmann::json::parse(run->specJson.toStdString(), nullptr, false);
            if (!u.spec.is_object())
                u.spec = nlohmann::json::object();
            if (!u.spec.contains("name"))
                u.spec["name"] = run->name.toStdString();
            if (!u.spec.contains("steps") && run->totalSteps > 0)
                u.spec["steps"] = run->totalSteps;
            u.specChanged = true;
        }
        // Events first: the store holds a run's points before the event that ends it, so
        // metrics read after the events hold every point of a run those events end.
        auto events = m_store->events(id, m_follow.afterEventId);
        auto metrics = m_store->metricSeries(id, m_follow.afterStep);
        auto memory = m_store->memorySeries(id, m_follow.afterStep);
        if (!metrics || !memory || !events) {
            if (!m_follow.reportedError)
                Q_EMIT errorOccurred(tr("Run %1: %2")
                                         .arg(id)
                                         .arg(!metrics     ? metrics.error()
                                                 : !memory ? memory.error()
                                                           : events.error()));
            m_follow.reportedError = true;
            return;
        }
        std::map<qint64, std::vector<protocol::RankMemory>> memoryAt;
        for (const jobs::MemorySeries& rank : memory.value()) {
            for (int i = 0; i < rank.step.size(); ++i) {
                protocol::RankMemory m;
                m.rank = rank.rank;
                m.shardedParamBytes = qint64(rank.shardedParams.value(i));
                m.gatheredParamBytes = qint64(rank.gatheredParams.value(i));
                m.gradBytes = qint64(rank.grads.value(i));
                m.optimizerBytes = qint64(rank.optimizer.value(i));
                m.activationBytes = qint64(rank.activations.value(i));
                m.otherBytes = qint64(rank.other.value(i));
                m.currentBytes = qint64(rank.current.value(i));
                m.peakBytes = qint64(rank.peak.value(i));
                memoryAt[qint64(rank.step[i])].push_back(m);
            }
        }
        const jobs::MetricSeries& m = metrics.value();
        std::map<qint64, double> evalAt;
        for (int i = 0; i < m.evalStep.size(); ++i)
            evalAt[qint64(m.evalStep[i])] = m.evalLoss[i];
        for (int i = 0; i < m.size(); ++i) {
            protocol::MetricRecord r;
            r.step = qint64(m.step[i]);
            r.tokens = qint64(m.tokens.value(i));
            r.loss = m.loss.value(i);
            r.lr = m.lr.value(i);
            r.gradNorm = m.gradNorm.value(i);
            r.tokensPerSec = m.tokensPerSec.value(i);
            r.stepTimeSec = m.stepTime.value(i);
            r.wallTimeSec = m.wallTime.value(i);
            r.commBytes = qint64(m.commBytes.value(i));
            if (auto it = evalAt.find(r.step); it != evalAt.end())
                r.evalLoss = it->second;
            if (auto it = memoryAt.find(r.step); it != memoryAt.end())
                r.memory = it->second;
            m_follow.afterStep = std::max<qint64>(m_follow.afterStep, r.step);
            u.metrics.push_back(std::move(r));
        }
        for (const jobs::EventRow& row : events.value()) {
            protocol::EventRecord e = eventFromRow(row);
            if (e.kind == "checkpoint")
                ++m_follow.checkpoints;
            m_follow.afterEventId = std::max(m_follow.afterEventId, row.id);
            u.events.push_back(std::move(e));
        }
        FollowUpdate::StoreState st;
        st.runId = id;
        st.status = jobs::toString(run->status);
        st.message = run->message;
        st.where
            = (m_follow.logHost ? m_follow.logHost->toString() + ':' : QString()) + run->runDir;
        st.ended = jobs::isTerminal(run->status);
        st.resumable = st.ended && m_follow.checkpoints > 0 && !m_store->isReadOnly();
        const bool stateChanged = !m_follow.lastState || m_follow.lastState->status != st.status
            || m_follow.lastState->message != st.message
            || m_follow.lastState->resumable != st.resumable;
        if (stateChanged)
            m_follow.lastState = st;
        u.store = st;
        if (u.specChanged || !u.metrics.empty() || !u.events.empty() || stateChanged)
            Q_EMIT runFollowed(m_follow.ticket, u);
        // The log tail: while the run lives, and once more when it has ended.
        if (!m_follow.logDone && m_logTail && (++m_follow.ticks % 2 == 1 || st.ended)) {
            if (st.ended)
                m_follow.logDone = true;
            m_logTail->fetch();
        }
    }

    void emitLog(const QStringList& lines)
    {
        if (lines.isEmpty())
            return;
        FollowUpdate u;
        u.generation = m_follow.ticket;
        u.logLines = lines;
        Q_EMIT runFollowed(m_follow.ticket, u);
    }

    static constexpr int kFollowMs = 1000;

    struct Follow {
        qint64 runId = 0;
        quint64 ticket = 0;
        QByteArray specJson;
        qint64 afterStep = -1;
        qint64 afterEventId = 0;
        int checkpoints = 0;
        std::optional<FollowUpdate::StoreState> lastState;
        std::optional<jobs::SshHost> logHost;
        quint64 ticks = 0;
        bool logDone = false;
        bool reportedError = false;
    };

    std::unique_ptr<jobs::RunStore> m_store;
    Follow m_follow;
    QTimer* m_followTimer = nullptr;
    std::unique_ptr<jobs::LogTail> m_logTail; // rank 0's log of the followed run
    QHash<qint64, jobs::RunWatcher*> m_watchers;
};

StoreService::StoreService(const QString& path, QObject* parent)
    : QObject(parent)
    , m_path(path)
{
    qRegisterMetaType<QVector<shard::jobs::RunRecord>>();
    qRegisterMetaType<std::vector<shard::widgets::RunSeries>>();
    m_worker = new StoreWorker;
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &StoreWorker::opened, this, &StoreService::opened);
    connect(m_worker, &StoreWorker::openFailed, this, &StoreService::openFailed);
    connect(m_worker, &StoreWorker::runsListed, this, &StoreService::runsListed);
    connect(m_worker, &StoreWorker::seriesLoaded, this, &StoreService::seriesLoaded);
    connect(m_worker, &StoreWorker::runImported, this, &StoreService::runImported);
    connect(m_worker, &StoreWorker::launched, this, &StoreService::launched);
    connect(m_worker, &StoreWorker::runChanged, this, &StoreService::runChanged);
    connect(m_worker, &StoreWorker::stopped, this, &StoreService::stopped);
    connect(m_worker, &StoreWorker::errorOccurred, this, &StoreService::errorOccurred);
    connect(m_worker, &StoreWorker::runFollowed, this, &StoreService::runFollowed);
    connect(m_worker, &StoreWorker::resumed, this, &StoreService::resumed);
    connect(m_worker, &StoreWorker::runDeleted, this, &StoreService::runDeleted);
    connect(m_worker, &StoreWorker::runError, this, &StoreService::runError);
    m_thread.setObjectName("run-store");
    m_thread.start();
    QMetaObject::invokeMethod(m_worker, [w = m_worker, path] { w->open(path); });
}

StoreService::~StoreService()
{
    m_thread.quit();
    m_thread.wait();
}

void StoreService::listRuns(const QString& filter)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, filter] { w->listRuns(filter); });
}

void StoreService::loadSeries(const QVector<qint64>& runIds, quint64 ticket)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runIds, ticket] { w->loadSeries(runIds, ticket); });
}

void StoreService::importRunDirectory(const QString& directory)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, directory] { w->importRunDirectory(directory); });
}

void StoreService::launch(const jobs::LaunchRequest& request, const LaunchTarget& target)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, request, target] { w->launch(request, target); });
}

void StoreService::stopRun(qint64 runId)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId] { w->stopRun(runId); });
}

void StoreService::followRun(qint64 runId, quint64 ticket)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runId, ticket] { w->followRun(runId, ticket); });
}

void StoreService::unfollow()
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker] { w->unfollow(); });
}

void StoreService::resumeRun(qint64 runId)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId] { w->resumeRun(runId, 0); });
}

void StoreService::continueRun(qint64 runId, qint64 moreSteps)
{
    QMetaObject::invokeMethod(m_worker,
        [w = m_worker, runId, moreSteps] { w->resumeRun(runId, std::max<qint64>(1, moreSteps)); });
}

void StoreService::renameRun(qint64 runId, const QString& name)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId, name] { w->renameRun(runId, name); });
}

void StoreService::setNotes(qint64 runId, const QString& notes)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runId, notes] { w->setNotes(runId, notes); });
}

void StoreService::deleteRun(qint64 runId, bool removeFolder)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runId, removeFolder] { w->deleteRun(runId, removeFolder); });
}

} // namespace shard::widgets

#include "store_service.moc"
