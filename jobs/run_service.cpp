// RunService: a QThread with a RunServiceWorker that owns the RunStore connection, the watchers
// and the follow; launches, stops and resumes run on a thread pool through the Launcher interface.
#include "jobs/run_service.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include <QDir>
#include <QFileInfo>
#include <QHash>
#include <QRegularExpression>
#include <QThreadPool>
#include <QTimer>

#include "jobs/command_run.h"
#include "jobs/ingestor.h"
#include "jobs/local_launcher.h"
#include "jobs/local_run_watcher.h"
#include "jobs/log_tail.h"
#include "jobs/run_import.h"
#include "protocol/checkpoint_discovery.h"

namespace shard::jobs {

class RunServiceWorker : public QObject {
    Q_OBJECT
public:
    ~RunServiceWorker() override
    {
        unfollow();
        m_pool.waitForDone();
        qDeleteAll(m_watchers);
    }

    void open(const QString& path)
    {
        QDir().mkpath(QFileInfo(path).absolutePath());
        QString warning;
        auto store = RunStore::openBestEffort(path, &warning);
        if (!store) {
            Q_EMIT openFailed(tr("Run store %1: %2").arg(path, store.error()));
            return;
        }
        m_store = std::make_unique<RunStore>(std::move(store.value()));
        m_pool.setMaxThreadCount(8);
        // Runs recorded by another process (`shard run`, another studio) are noticed without a
        // Refresh: the store's change counter, read every two seconds, says that one committed.
        m_changeCheck = new QTimer(this);
        m_changeCheck->setInterval(kChangeCheckMs);
        connect(m_changeCheck, &QTimer::timeout, this, [this] {
            auto version = m_store->changeCounter();
            if (!version)
                return;
            const bool changed = m_storeVersion && *m_storeVersion != version.value();
            m_storeVersion = version.value();
            if (changed)
                Q_EMIT storeChanged();
        });
        m_changeCheck->start();
        Q_EMIT opened(path, m_store->isReadOnly(), warning);
        // Runs this studio (or another) started and that are still alive are watched again.
        if (!m_store->isReadOnly()) {
            auto alive = LocalLauncher::reconcile(*m_store);
            if (alive)
                for (qint64 id : alive.value())
                    watch(id);
        }
    }

    void listRuns(const QString& filter)
    {
        if (!ready())
            return;
        RunQuery q;
        q.text = filter;
        q.includeSpec = true; // the Runs page reads a run's schedule when it is continued
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
            auto s = loadStoredSeries(*m_store, id);
            if (!s) {
                Q_EMIT errorOccurred(tr("Could not load run %1: %2").arg(id).arg(s.error()));
                continue;
            }
            out.push_back(std::move(s.value()));
        }
        Q_EMIT seriesLoaded(ticket, out);
    }

    void loadScalars(qint64 runId, const QString& tag, quint64 ticket)
    {
        if (!ready())
            return;
        auto tags = m_store->scalarTags(runId);
        const QStringList all = tags ? tags.value() : QStringList();
        // A preference run opens on its reward margin (then its accuracy), else the first tag.
        QString chosen = all.contains(tag) ? tag : QString();
        for (const char* preferred : {"train/rewards/margins", "train/rewards/accuracies"})
            if (chosen.isEmpty() && all.contains(QLatin1String(preferred)))
                chosen = QLatin1String(preferred);
        if (chosen.isEmpty())
            chosen = all.value(0);
        ScalarSeries series;
        if (!chosen.isEmpty())
            if (auto s = m_store->scalarSeries(runId, chosen); s)
                series = std::move(s.value());
        Q_EMIT scalarsLoaded(ticket, runId, all, chosen, series);
    }

    void attachRunDirectory(const QString& directory)
    {
        if (!ready())
            return;
        auto id = attach(directory);
        if (!id) {
            Q_EMIT runAttached(directory, 0, id.error());
            return;
        }
        if (!m_store->isReadOnly())
            if (auto run = m_store->run(id.value()); run && !isTerminal(run->status))
                watch(id.value());
        Q_EMIT runAttached(directory, id.value(), QString());
    }

    void importLogs(const QString& path, const QString& slurmJob)
    {
        if (!writable())
            return;
        if (slurmJob.isEmpty() && !isRemoteImportPath(path) && isEngineRunFolder(path)) {
            attachRunDirectory(path); // the engine's own run
            return;
        }
        offThread(
            [path, slurmJob](RunStore& store) -> Result<qint64> {
                auto report = importRuns(store, path);
                if (!report)
                    return fail(report.error());
                const qint64 id = report->runs.front().runId;
                if (slurmJob.isEmpty())
                    return id;
                if (report->runs.size() != 1)
                    return fail(tr("A Slurm job writes one run, and %1 holds %2: choose the "
                                   "folder of the job's run (its runs are imported)")
                                    .arg(path)
                                    .arg(report->runs.size()));
                if (auto s = followSlurmJob(store, id, slurmJob); !s)
                    return fail(tr("Imported %1 as run %2, not tied to Slurm job %3: %4")
                                    .arg(path)
                                    .arg(id)
                                    .arg(slurmJob, s.error()));
                return id;
            },
            [this, path](const Result<qint64>& id) {
                if (!id) {
                    Q_EMIT runAttached(path, 0, id.error());
                    return;
                }
                if (auto run = m_store->run(id.value()); run && !isTerminal(run->status))
                    watch(id.value()); // a run tied to a job that has not ended
                Q_EMIT runAttached(path, id.value(), QString());
            });
    }

    void launch(const LaunchRequest& request, const LaunchTarget& target)
    {
        if (!writable())
            return;
        if (request.resume && target.kind == TargetKind::Local) {
            // A resume continues the run recorded for this folder.
            auto known = m_store->findRunByDir(QString(), QDir(request.runDir).absolutePath());
            if (known && known.value() != 0)
                dropWatcher(known.value());
        }
        offThread(
            [request, target](RunStore& store) -> Result<qint64> {
                auto launcher = makeLauncher(target, &store);
                if (!launcher)
                    return fail(launcher.error());
                return launcher.value()->start(request);
            },
            [this](const Result<qint64>& id) { started(id, tr("Could not start the run: %1")); });
    }

    // After a start: watch the run and say where it runs, or why it did not start.
    void started(const Result<qint64>& id, const QString& failure)
    {
        if (!id) {
            Q_EMIT errorOccurred(failure.arg(id.error()));
            return;
        }
        auto run = m_store->run(id.value());
        if (!run) {
            Q_EMIT errorOccurred(run.error());
            return;
        }
        watch(id.value());
        auto launcher = launcherOf(*m_store, run.value());
        const bool remote = launcher && launcher.value()->fileHost(run.value());
        Q_EMIT launched(id.value(), run->runDir, remote);
    }

    void launchCommand(const CommandRunRequest& request)
    {
        if (!writable())
            return;
        if (request.resume) {
            const bool here = request.target.kind == TargetKind::Local
                || (request.target.kind == TargetKind::Slurm && request.target.slurm.via.isEmpty());
            auto known = m_store->findRunByDir(request.target.sshHost(),
                here ? QDir(request.runDir).absolutePath() : request.runDir);
            if (known && known.value() != 0)
                dropWatcher(known.value());
        }
        offThread(
            [request](
                RunStore& store) -> Result<qint64> { return startCommandRun(store, request); },
            [this](
                const Result<qint64>& id) { started(id, tr("Could not start the command: %1")); });
    }

    void stopRun(qint64 runId)
    {
        if (!writableRun(runId))
            return;
        offThread(
            [runId](RunStore& store) -> Result<qint64> {
                auto run = store.run(runId);
                if (!run)
                    return fail(run.error());
                auto launcher = launcherOf(store, run.value());
                if (!launcher)
                    return fail(launcher.error());
                if (auto s = launcher.value()->stop(runId); !s)
                    return fail(s.error());
                return runId;
            },
            [this, runId](const Result<qint64>& r) {
                if (!r) {
                    Q_EMIT errorOccurred(tr("Could not stop run %1: %2").arg(runId).arg(r.error()));
                    return;
                }
                changed(runId);
                Q_EMIT stopped(runId);
            });
    }

    void resumeRun(
        qint64 runId, qint64 moreSteps, ContinueSchedule schedule = ContinueSchedule::Stretch)
    {
        if (!writable())
            return;
        auto run = m_store->run(runId);
        if (!run) {
            Q_EMIT resumed(runId, 0, run.error());
            return;
        }
        // The run continues in the same record: a watcher still on its previous process must not
        // settle it when that process is found gone.
        dropWatcher(runId);
        const RunRecord record = run.value();
        offThread(
            [record, moreSteps, schedule](RunStore& store) -> Result<qint64> {
                if (isCommandSpec(record.specJson)) {
                    // A command run starts its command again, in its folder and record.
                    if (moreSteps > 0)
                        return fail(QObject::tr("run %1 runs a command, which has no step count to "
                                                "raise: resume it to run the command again")
                                        .arg(record.id));
                    auto again = commandRerunRequest(record);
                    if (!again)
                        return fail(again.error());
                    return startCommandRun(store, again.value());
                }
                auto launcher = launcherOf(store, record);
                if (!launcher)
                    return fail(launcher.error());
                return launcher.value()->resume(record, moreSteps, schedule);
            },
            [this, runId](const Result<qint64>& id) {
                if (!id) {
                    if (auto r = m_store->run(runId); r && !isTerminal(r->status))
                        watch(runId);
                    Q_EMIT resumed(runId, 0, id.error());
                    return;
                }
                watch(id.value());
                if (id.value() == m_follow.runId)
                    pushFollow();
                Q_EMIT resumed(runId, id.value(), QString());
            });
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
        auto launcher = launcherOf(*m_store, run.value());
        if (!launcher) {
            Q_EMIT errorOccurred(tr("Cannot follow run %1: %2").arg(runId).arg(launcher.error()));
            return;
        }
        const int requested = m_follow.requestedRank;
        m_follow = Follow {};
        m_follow.requestedRank = requested;
        m_follow.runId = runId;
        m_follow.ticket = ticket;
        m_follow.launcher = std::move(launcher).value();
        m_follow.logHost = m_follow.launcher->fileHost(run.value());
        // Another tool's run has no end the studio knows of (unless it is tied to its Slurm job):
        // its files are read again while the Monitor shows it, as TensorBoard reloads its runs.
        const bool imported = run->target == TargetKind::Import && run->jobId.isEmpty()
            && !m_watchers.contains(runId);
        if ((!isTerminal(run->status) || mayComeBack(run.value()) || imported)
            && !m_store->isReadOnly()) {
            watch(runId);
            m_follow.watchedWhileShown = imported;
        }
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
        if (m_follow.watchedWhileShown)
            dropWatcher(m_follow.runId);
        const int requested = m_follow.requestedRank;
        m_follow = Follow {};
        m_follow.requestedRank = requested;
    }

    void setLogRank(int rank)
    {
        m_follow.requestedRank = rank;
        if (m_follow.runId != 0)
            pushFollow();
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
        const std::optional<RunRecord> run = writableRun(runId);
        if (!run)
            return;
        if (!isTerminal(run->status)) {
            Q_EMIT errorOccurred(tr("Run %1 (%2) is still %3: stop it on the Monitor page "
                                    "before deleting it.")
                                     .arg(runId)
                                     .arg(run->name, toString(run->status)));
            return;
        }
        dropWatcher(runId);
        // The followed run goes: its follow stops here, not at an error about a missing id.
        if (m_follow.runId == runId)
            unfollow();
        QString note;
        if (removeFolder && !run->runDir.isEmpty()) {
            if (run->target != TargetKind::Local)
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

Q_SIGNALS:
    void runFollowed(quint64 ticket, const shard::jobs::FollowUpdate& update);
    void resumed(qint64 runId, qint64 newRunId, const QString& error);
    void runDeleted(qint64 runId, const QString& note);
    void runError(qint64 runId, const QString& message);
    void opened(const QString& path, bool readOnly, const QString& warning);
    void openFailed(const QString& message);
    void runsListed(const QVector<shard::jobs::RunRecord>& runs);
    void seriesLoaded(quint64 ticket, const std::vector<shard::jobs::RunSeries>& runs);
    void scalarsLoaded(quint64 ticket, qint64 runId, const QStringList& tags, const QString& tag,
        const shard::jobs::ScalarSeries& series);
    void runAttached(const QString& directory, qint64 runId, const QString& error);
    void launched(qint64 runId, const QString& runDir, bool remote);
    void runChanged(qint64 runId);
    void stopped(qint64 runId);
    void errorOccurred(const QString& message);
    void storeChanged();

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
    // The run to change, or nothing after saying why (a read-only store, an unknown id).
    std::optional<RunRecord> writableRun(qint64 runId)
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

    // Runs `work` on the pool with a store connection of its own (a launch over SSH may wait
    // for a host for many seconds), then `done` with its result back on the service thread.
    template<typename Work, typename Done> void offThread(Work work, Done done)
    {
        const QString path = m_store->path();
        m_pool.start([this, path, work = std::move(work), done = std::move(done)]() mutable {
            auto store = RunStore::open(path);
            Result<qint64> result
                = store ? work(store.value()) : Result<qint64>(fail(store.error()));
            QMetaObject::invokeMethod(
                this, [done = std::move(done), result]() mutable { done(result); },
                Qt::QueuedConnection);
        });
    }

    // A run folder the engine wrote (its run.json or metrics.jsonl), attached, not imported.
    static bool isEngineRunFolder(const QString& directory)
    {
        const QDir dir(directory);
        return dir.exists(QStringLiteral("run.json"))
            || dir.exists(QStringLiteral("metrics.jsonl"));
    }

    // The run recorded for `directory` on this machine, or a new record; a run a watcher
    // already ingests is left to it.
    Result<qint64> attach(const QString& directory)
    {
        if (!directory.isEmpty()) {
            auto known = m_store->findRunByDir(QString(), QDir(directory).absolutePath());
            if (known && known.value() != 0 && m_watchers.contains(known.value()))
                return known.value();
        }
        // A folder the engine did not write, holding another tool's TensorBoard files or
        // trainer_state.json, is imported.
        if (!directory.isEmpty() && !isEngineRunFolder(directory) && hasImportableFiles(directory))
            return ImportTarget(m_store.get()).attach(directory);
        return LocalLauncher(m_store.get()).attach(directory);
    }

    // A Slurm run that a preemption or a requeue's stop ended: Slurm may have started its job
    // again since (the watcher finds out from Slurm, and ends at once when it has not).
    static bool mayComeBack(const RunRecord& run)
    {
        return run.target == TargetKind::Slurm && !run.jobId.isEmpty()
            && (run.status == RunStatus::Interrupted || run.status == RunStatus::Stopped);
    }

    void watch(qint64 runId)
    {
        if (m_watchers.contains(runId))
            return;
        auto run = m_store->run(runId);
        if (!run)
            return;
        auto launcher = launcherOf(*m_store, run.value());
        auto watcher = launcher ? launcher.value()->watch(run.value(), this)
                                : Result<std::unique_ptr<RunWatcher>>(fail(launcher.error()));
        if (!watcher) {
            Q_EMIT errorOccurred(tr("Cannot follow run %1: %2").arg(runId).arg(watcher.error()));
            return;
        }
        RunWatcher* w = watcher.value().release();
        m_watchers.insert(runId, w);
        connect(w, &RunWatcher::pointsAdded, this, [this](qint64 id) { changed(id); });
        connect(w, &RunWatcher::statusChanged, this, [this](qint64 id) { changed(id); });
        connect(w, &RunWatcher::errorOccurred, this, [this](qint64 id, const QString& message) {
            Q_EMIT runError(id, message);
            Q_EMIT errorOccurred(message);
        });
        connect(w, &RunWatcher::finished, this, [this, w](qint64 id) {
            if (m_watchers.value(id) == w)
                m_watchers.remove(id);
            changed(id);
            w->deleteLater();
        });
    }
    void dropWatcher(qint64 runId)
    {
        if (RunWatcher* old = m_watchers.take(runId)) {
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

    // The ranks that have a log in a local run's folder.
    static QList<int> localLogRanks(const QString& runDir)
    {
        QList<int> ranks;
        static const QRegularExpression name(QStringLiteral("^rank-(\\d+)\\.log$"));
        const QDir logs(runDir + QStringLiteral("/logs"));
        for (const QString& f : logs.entryList({QStringLiteral("rank-*.log")}, QDir::Files))
            if (const auto m = name.match(f); m.hasMatch())
                ranks.append(m.captured(1).toInt());
        std::sort(ranks.begin(), ranks.end());
        return ranks;
    }

    // What the store has of the followed run that the follower has not been sent yet.
    void pushFollow()
    {
        if (m_follow.runId == 0 || !m_store)
            return;
        const qint64 id = m_follow.runId;
        auto run = m_store->run(id);
        auto points = run ? loadStoredSeries(*m_store, id, m_follow.afterStep,
                          m_follow.afterEventId, &m_follow.afterEventId)
                          : Result<RunSeries>(fail(run.error()));
        if (!points) {
            if (!m_follow.reportedError)
                Q_EMIT errorOccurred(tr("Run %1: %2").arg(id).arg(points.error()));
            m_follow.reportedError = true;
            return;
        }
        FollowUpdate u;
        u.generation = m_follow.ticket;
        if (run->specJson != m_follow.specJson) {
            m_follow.specJson = run->specJson;
            u.spec = points->config;
            if (!u.spec.contains("name"))
                u.spec["name"] = run->name.toStdString();
            if (!u.spec.contains("steps") && run->totalSteps > 0)
                u.spec["steps"] = run->totalSteps;
            u.specChanged = true;
        }
        if (!points->step.isEmpty())
            m_follow.afterStep = std::max<qint64>(m_follow.afterStep, qint64(points->step.back()));
        for (const protocol::EventRecord& e : points->events) {
            if (e.kind == "checkpoint")
                ++m_follow.checkpoints;
            if (e.kind == "error" && m_follow.failedRank < 0 && e.data.contains("rank")
                && e.data["rank"].is_number_integer())
                m_follow.failedRank = e.data["rank"].get<int>();
        }
        u.points = std::move(points).value();

        FollowUpdate::State st;
        st.runId = id;
        st.status = toString(run->status);
        st.message = run->message;
        st.where
            = (m_follow.logHost ? m_follow.logHost->toString() + ':' : QString()) + run->runDir;
        st.ended = isTerminal(run->status);
        // A local run's folder says whether a checkpoint has steps left (its step count may have
        // been raised since); for a remote one the recorded checkpoints do.
        st.resumable = st.ended && !m_store->isReadOnly()
            && (m_follow.logHost ? m_follow.checkpoints > 0
                                 : protocol::hasStepsLeftToResume(run->runDir.toStdString()));
        u.stateChanged = !m_follow.lastState || m_follow.lastState->status != st.status
            || m_follow.lastState->message != st.message
            || m_follow.lastState->resumable != st.resumable
            || m_follow.lastState->where != st.where;
        if (u.stateChanged)
            m_follow.lastState = st;
        u.state = st;

        // The log: the chosen rank's, or the failing rank's.
        if (!m_follow.logHost) {
            const QList<int> ranks = localLogRanks(run->runDir);
            if (ranks != m_follow.logRanks) {
                m_follow.logRanks = ranks;
                u.logRanks = ranks;
            }
        }
        const int rank = m_follow.requestedRank >= 0 ? m_follow.requestedRank
                                                     : std::max(0, m_follow.failedRank);
        if (rank != m_follow.shownRank || !m_logTail) {
            m_follow.shownRank = rank;
            m_follow.logDone = false;
            u.logReset = true;
            m_logTail = m_follow.launcher->logTail(run.value(), rank);
            connect(m_logTail.get(), &LogTail::lines, this, &RunServiceWorker::emitLog);
        }
        u.logRank = rank;
        if (u.specChanged || !u.points.step.isEmpty() || !u.points.events.empty() || u.stateChanged
            || u.logReset || !u.logRanks.isEmpty())
            Q_EMIT runFollowed(m_follow.ticket, u);
        // The log tail: while the run lives (once a second over SSH), and once more when it has
        // ended.
        if (!m_follow.logDone && (!m_follow.logHost || m_follow.ticks++ % 4 == 0 || st.ended)) {
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
        u.logRank = m_follow.shownRank;
        if (m_follow.lastState)
            u.state = *m_follow.lastState;
        Q_EMIT runFollowed(m_follow.ticket, u);
    }

    static constexpr int kFollowMs = 250;
    static constexpr int kChangeCheckMs = 2000;
    QTimer* m_changeCheck = nullptr;
    std::optional<qint64> m_storeVersion;

    struct Follow {
        qint64 runId = 0;
        quint64 ticket = 0;
        std::unique_ptr<Launcher> launcher;
        QByteArray specJson;
        qint64 afterStep = -1;
        qint64 afterEventId = 0;
        int checkpoints = 0;
        int requestedRank = RunService::kFailingRank;
        int failedRank = -1; // the first rank an error event names
        int shownRank = -2;  // whose log m_logTail reads
        QList<int> logRanks;
        std::optional<FollowUpdate::State> lastState;
        std::optional<SshHost> logHost; // where the files are, when not on this machine
        quint64 ticks = 0;
        bool logDone = false;
        bool reportedError = false;
        bool watchedWhileShown = false; // another tool's run: its files are read while it is shown
    };

    std::unique_ptr<RunStore> m_store;
    QThreadPool m_pool;
    Follow m_follow;
    QTimer* m_followTimer = nullptr;
    std::unique_ptr<LogTail> m_logTail;
    QHash<qint64, RunWatcher*> m_watchers;
};

RunService::RunService(const QString& path, QObject* parent)
    : QObject(parent)
    , m_path(path)
{
    qRegisterMetaType<QVector<shard::jobs::RunRecord>>();
    qRegisterMetaType<std::vector<shard::jobs::RunSeries>>();
    qRegisterMetaType<shard::jobs::FollowUpdate>();
    qRegisterMetaType<shard::jobs::ScalarSeries>();
    m_worker = new RunServiceWorker;
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &RunServiceWorker::opened, this, &RunService::opened);
    connect(m_worker, &RunServiceWorker::openFailed, this, &RunService::openFailed);
    connect(m_worker, &RunServiceWorker::runsListed, this, &RunService::runsListed);
    connect(m_worker, &RunServiceWorker::seriesLoaded, this, &RunService::seriesLoaded);
    connect(m_worker, &RunServiceWorker::scalarsLoaded, this, &RunService::scalarsLoaded);
    connect(m_worker, &RunServiceWorker::runAttached, this, &RunService::runAttached);
    connect(m_worker, &RunServiceWorker::launched, this, &RunService::launched);
    connect(m_worker, &RunServiceWorker::runChanged, this, &RunService::runChanged);
    connect(m_worker, &RunServiceWorker::stopped, this, &RunService::stopped);
    connect(m_worker, &RunServiceWorker::errorOccurred, this, &RunService::errorOccurred);
    connect(m_worker, &RunServiceWorker::runFollowed, this, &RunService::runFollowed);
    connect(m_worker, &RunServiceWorker::resumed, this, &RunService::resumed);
    connect(m_worker, &RunServiceWorker::runDeleted, this, &RunService::runDeleted);
    connect(m_worker, &RunServiceWorker::runError, this, &RunService::runError);
    connect(m_worker, &RunServiceWorker::storeChanged, this, &RunService::storeChanged);
    m_thread.setObjectName("run-service");
    m_thread.start();
    QMetaObject::invokeMethod(m_worker, [w = m_worker, path] { w->open(path); });
}

RunService::~RunService()
{
    m_thread.quit();
    m_thread.wait();
}

void RunService::listRuns(const QString& filter)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, filter] { w->listRuns(filter); });
}

void RunService::loadSeries(const QVector<qint64>& runIds, quint64 ticket)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runIds, ticket] { w->loadSeries(runIds, ticket); });
}

void RunService::loadScalars(qint64 runId, const QString& tag, quint64 ticket)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runId, tag, ticket] { w->loadScalars(runId, tag, ticket); });
}

void RunService::attachRunDirectory(const QString& directory)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, directory] { w->attachRunDirectory(directory); });
}

void RunService::importLogs(const QString& path, const QString& slurmJob)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, path, slurmJob] { w->importLogs(path, slurmJob); });
}

void RunService::launch(const LaunchRequest& request, const LaunchTarget& target)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, request, target] { w->launch(request, target); });
}

void RunService::launchCommand(const CommandRunRequest& request)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, request] { w->launchCommand(request); });
}

void RunService::stopRun(qint64 runId)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId] { w->stopRun(runId); });
}

void RunService::followRun(qint64 runId, quint64 ticket)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runId, ticket] { w->followRun(runId, ticket); });
}

void RunService::unfollow()
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker] { w->unfollow(); });
}

void RunService::setLogRank(int rank)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, rank] { w->setLogRank(rank); });
}

void RunService::resumeRun(qint64 runId)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId] { w->resumeRun(runId, 0); });
}

void RunService::continueRun(qint64 runId, qint64 moreSteps, ContinueSchedule schedule)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId, moreSteps, schedule] {
        w->resumeRun(runId, std::max<qint64>(1, moreSteps), schedule);
    });
}

void RunService::renameRun(qint64 runId, const QString& name)
{
    QMetaObject::invokeMethod(m_worker, [w = m_worker, runId, name] { w->renameRun(runId, name); });
}

void RunService::setNotes(qint64 runId, const QString& notes)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runId, notes] { w->setNotes(runId, notes); });
}

void RunService::deleteRun(qint64 runId, bool removeFolder)
{
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, runId, removeFolder] { w->deleteRun(runId, removeFolder); });
}

} // namespace shard::jobs

#include "run_service.moc"
