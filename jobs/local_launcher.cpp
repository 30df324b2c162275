// Local launch, re-attach and stop (see local_launcher.h).
#include "jobs/local_launcher.h"

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>
#include <nlohmann/json.hpp>

#include "jobs/ingestor.h"
#include "jobs/local_process.h"
#include "jobs/local_run_watcher.h"

namespace shard::jobs {

QString LocalLauncher::findWorker(const QString& requested)
{
    if (requested.contains('/'))
        return QFileInfo(requested).isExecutable() ? QFileInfo(requested).absoluteFilePath()
                                                   : QString();
    const QString env = qEnvironmentVariable("SHARD_WORKER");
    if (!env.isEmpty() && requested == QLatin1String("shard-worker"))
        return QFileInfo(env).isExecutable() ? QFileInfo(env).absoluteFilePath() : QString();
    if (QCoreApplication::instance()) {
        const QString appDir = QCoreApplication::applicationDirPath();
        for (const QString& rel : {QStringLiteral("/"), QStringLiteral("/../engine/worker/"),
                 QStringLiteral("/../../engine/worker/")}) {
            const QString candidate = QDir::cleanPath(appDir + rel + requested);
            if (QFileInfo(candidate).isExecutable() && QFileInfo(candidate).isFile())
                return candidate;
        }
    }
    return QStandardPaths::findExecutable(requested);
}

QString LocalLauncher::defaultRunsRoot()
{
    const QString env = qEnvironmentVariable("SHARD_RUNS_DIR");
    if (!env.isEmpty())
        return env;
    QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    if (dir.isEmpty())
        dir = QDir::homePath() + QStringLiteral("/.local/share/shard-studio");
    return dir + QStringLiteral("/runs");
}

qint64 LocalLauncher::startTimeOf(const RunRecord& run)
{
    auto j = nlohmann::json::parse(run.launchInfo.constData(),
        run.launchInfo.constData() + run.launchInfo.size(), nullptr, false);
    if (j.is_object())
        if (auto it = j.find("start_time"); it != j.end() && it->is_number_integer())
            return it->get<qint64>();
    return 0;
}

Result<qint64> LocalLauncher::start(const LaunchRequest& request)
{
    const QString worker = findWorker(request.workerProgram);
    if (worker.isEmpty())
        return fail(QStringLiteral("shard-worker not found ('%1'): build it (cmake --build "
                                   "--preset release --target shard-worker), install it, or set "
                                   "$SHARD_WORKER / --worker")
                        .arg(request.workerProgram));
    const QString name = request.name.isEmpty() ? QStringLiteral("run") : request.name;
    QString runDir = request.runDir;
    if (runDir.isEmpty())
        runDir = defaultRunsRoot() + QLatin1Char('/') + safeDirName(name) + QLatin1Char('-')
            + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz"));
    runDir = QDir(runDir).absolutePath();
    if (!request.resume
        && (QFileInfo::exists(runDir + QStringLiteral("/metrics.jsonl"))
            || QFileInfo::exists(runDir + QStringLiteral("/events.jsonl"))))
        return fail(QStringLiteral("run directory %1 already holds a run; choose another run "
                                   "name or folder, or attach to that run to follow it")
                        .arg(runDir));
    if (!QDir().mkpath(runDir + QStringLiteral("/logs")))
        return fail(QStringLiteral("cannot create the run directory %1 (check permissions and "
                                   "free space)")
                        .arg(runDir));
    const LaunchRequest& req = request;
    QFile spec(runDir + QStringLiteral("/launch-spec.json"));
    if (!spec.open(QIODevice::WriteOnly) || spec.write(launchSpecJson(req.spec, runDir)) < 0)
        return fail(QStringLiteral("cannot write %1: %2").arg(spec.fileName(), spec.errorString()));
    spec.close();

    NewRun nr;
    nr.name = name;
    nr.specJson = recordedSpecJson(req.spec);
    nr.target = QStringLiteral("local");
    nr.runDir = runDir;
    auto id = req.resume ? m_store.reopenOrCreateRun(nr) : m_store.createRun(nr);
    if (!id)
        return id;

    const QStringList args = workerLaunchArgs(req, runDir, runDir, 1, 0, QString(), req.masterPort);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    for (const QString& kv : req.env) {
        const int eq = kv.indexOf('=');
        if (eq > 0)
            env.insert(kv.left(eq), kv.mid(eq + 1));
    }
    const QString log = runDir + QStringLiteral("/logs/launcher.out");
    auto spawned = LocalProcess::spawnDetached(worker, args, runDir, log, env);
    if (!spawned) {
        (void)m_store.setStatus(*id, RunStatus::Failed, spawned.error());
        return fail(spawned.error());
    }
    const nlohmann::json info = {{"start_time", spawned->startTime}, {"log", log.toStdString()},
        {"worker", worker.toStdString()}};
    if (auto s = m_store.setProcess(*id, spawned->pid, QByteArray::fromStdString(info.dump())); !s)
        return fail(s.error());
    if (auto s = m_store.setStatus(*id, RunStatus::Running); !s)
        return fail(s.error());
    return id;
}

Result<QVector<qint64>> LocalLauncher::reconcile(RunStore& store)
{
    QVector<qint64> alive;
    for (RunStatus st : {RunStatus::Running, RunStatus::Queued}) {
        RunQuery q;
        q.status = st;
        auto runs = store.listRuns(q);
        if (!runs)
            return fail(runs.error());
        for (const RunRecord& r : *runs) {
            if (r.target != QLatin1String("local"))
                continue;
            if (r.pid > 0 && LocalProcess::isAlive(r.pid, startTimeOf(r))) {
                alive.push_back(r.id);
                continue;
            }
            if (r.pid <= 0 && st == RunStatus::Queued)
                continue; // never started: nothing vanished
            if (auto s = settleVanishedRun(store, r.id, r.runDir); !s)
                return fail(s.error());
        }
    }
    return alive;
}

Status LocalLauncher::stop(qint64 runId, int graceMs)
{
    auto run = m_store.run(runId);
    if (!run)
        return fail(run.error());
    if (run->target != QLatin1String("local"))
        return fail(
            QStringLiteral("run %1 is not a local run (target %2)").arg(runId).arg(run->target));
    if (isTerminal(run->status))
        return fail(
            QStringLiteral("run %1 has already ended (%2)").arg(runId).arg(toString(run->status)));
    const qint64 start = startTimeOf(*run);
    if (!LocalProcess::terminate(run->pid, start, graceMs))
        return fail(QStringLiteral("run %1: launcher pid %2 did not exit after TERM and KILL")
                        .arg(runId)
                        .arg(run->pid));
    Ingestor ingestor(m_store);
    if (auto s = ingestor.ingestRunDir(runId, run->runDir); !s)
        return fail(s.error());
    return markStoppedOnRequest(m_store, runId);
}

} // namespace shard::jobs
