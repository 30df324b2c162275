// Local launch, re-attach and stop (see local_launcher.h).
#include "jobs/local_launcher.h"

#include <algorithm>

#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <nlohmann/json.hpp>

#include "jobs/ingestor.h"
#include "jobs/local_process.h"
#include "jobs/local_run_watcher.h"
#include "protocol/run_dir.h"

namespace shard::jobs {

QString findProjectProgram(
    const QString& name, const char* envVar, const QStringList& buildTreeDirs)
{
    if (name.contains('/'))
        return QFileInfo(name).isExecutable() ? QFileInfo(name).absoluteFilePath() : QString();
    const QString env = envVar ? qEnvironmentVariable(envVar) : QString();
    if (!env.isEmpty())
        return QFileInfo(env).isExecutable() ? QFileInfo(env).absoluteFilePath() : QString();
    if (QCoreApplication::instance()) {
        const QString appDir = QCoreApplication::applicationDirPath();
        for (const QString& rel : QStringList {QString()} + buildTreeDirs) {
            const QString candidate = QDir::cleanPath(appDir + rel + QLatin1Char('/') + name);
            if (QFileInfo(candidate).isExecutable() && QFileInfo(candidate).isFile())
                return candidate;
        }
    }
    return QStandardPaths::findExecutable(name);
}

QString LocalLauncher::findWorker(const QString& requested)
{
    // $SHARD_WORKER stands for the default name only: a program asked for by name is that one.
    return findProjectProgram(requested,
        requested == QLatin1String("shard-worker") ? "SHARD_WORKER" : nullptr,
        {QStringLiteral("/../engine/worker"), QStringLiteral("/../../engine/worker")});
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
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    const QString worker = findWorker(request.workerProgram);
    if (worker.isEmpty())
        return fail(QStringLiteral("shard-worker not found ('%1'): build it (cmake --build "
                                   "--preset release --target shard-worker), install it, or set "
                                   "$SHARD_WORKER / --worker")
                        .arg(request.workerProgram));
    const QString name = request.name.isEmpty() ? QStringLiteral("run") : request.name;
    QString runDir = request.runDir;
    if (runDir.isEmpty())
        runDir = defaultRunsRoot() + QLatin1Char('/') + newRunDirName(name);
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
    nr.target = TargetKind::Local;
    nr.runDir = runDir;
    auto id = req.resume ? m_store->reopenOrCreateRun(nr) : m_store->createRun(nr);
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
        (void)m_store->setStatus(*id, RunStatus::Failed, spawned.error());
        return fail(spawned.error());
    }
    const nlohmann::json info = {{"start_time", spawned->startTime}, {"log", log.toStdString()},
        {"worker", worker.toStdString()}};
    if (auto s = m_store->setProcess(*id, spawned->pid, QByteArray::fromStdString(info.dump())); !s)
        return fail(s.error());
    if (auto s = m_store->setStatus(*id, RunStatus::Running); !s)
        return fail(s.error());
    return id;
}

namespace {

// Quoted for a POSIX shell only where it needs it, so a plain command line reads plainly.
QString readableQuote(const QString& s)
{
    static const QRegularExpression safe("^[A-Za-z0-9_./:=+@%-]+$");
    return !s.isEmpty() && safe.match(s).hasMatch() ? s : SshClient::shellQuote(s);
}

} // namespace

Result<QString> LocalLauncher::describe(const LaunchRequest& request) const
{
    // What start() spawns.
    const QString found = findWorker(request.workerProgram);
    QStringList quoted = {readableQuote(found.isEmpty() ? request.workerProgram : found)};
    for (const QString& a :
        workerLaunchArgs(request, request.runDir, request.runDir, 1, 0, {}, request.masterPort))
        quoted << readableQuote(a);
    return QObject::tr("# Runs on this machine, detached (it outlives the studio):\n")
        + quoted.join(' ') + launchSpecSection(request);
}

Result<HostCheck> LocalLauncher::checkHost(const QString& workerProgram) const
{
    const QString worker = findWorker(workerProgram);
    if (worker.isEmpty())
        return fail(QObject::tr("%1 is not installed on this machine (set SHARD_WORKER or put it "
                                "on PATH)")
                        .arg(workerProgram));
    QProcess p;
    p.start(worker, {QStringLiteral("--version")});
    if (!p.waitForFinished(30000) || p.exitCode() != 0)
        return fail(QObject::tr("%1 --version failed: %2")
                        .arg(worker, QString::fromUtf8(p.readAllStandardError()).trimmed()));
    HostCheck check;
    check.answer = QString::fromUtf8(p.readAllStandardOutput()).section('\n', 0, 0).trimmed();
    check.gpus = localGpus();
    return check;
}

Result<std::unique_ptr<RunWatcher>> LocalLauncher::watch(const RunRecord& run, QObject* parent)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    auto w = std::make_unique<LocalRunWatcher>(*m_store, run.id, run.runDir, parent);
    w->setProcess(run.pid, startTimeOf(run));
    w->start(250);
    return std::unique_ptr<RunWatcher>(std::move(w));
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
            if (r.target != TargetKind::Local)
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

namespace {

// A run folder without a pid file (a worker started by hand) counts as live until its finish
// event, unless nothing has written to it for this long.
constexpr int kStaleFolderSec = 60;

bool folderIsStale(const protocol::RunDir& files)
{
    QDateTime lastWrite;
    for (const std::string& f : {files.metricsFile(), files.eventsFile(), files.specFile()})
        lastWrite = std::max(lastWrite, QFileInfo(QString::fromStdString(f)).lastModified());
    return !lastWrite.isValid() || lastWrite.secsTo(QDateTime::currentDateTime()) > kStaleFolderSec;
}

} // namespace

Result<qint64> LocalLauncher::attach(const QString& directory)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    if (directory.isEmpty())
        return fail(QStringLiteral("Enter or choose a run folder first."));
    const QString dir = QDir(directory).absolutePath();
    if (!QFileInfo(dir).isDir())
        return fail(QStringLiteral("%1: no such folder; open the folder a run writes (it holds "
                                   "run.json)")
                        .arg(directory));
    const protocol::RunDir files(dir.toStdString());
    const QString pidPath = QString::fromStdString(files.pidFile());
    const std::optional<bool> launcherAlive = LocalProcess::pidFileAlive(pidPath);
    auto known = m_store->findRunByDir(QString(), dir);
    if (!known)
        return fail(known.error());
    qint64 id = known.value();
    if (id != 0 && m_store->isReadOnly())
        return id;
    if (id == 0) {
        if (m_store->isReadOnly())
            return fail(QStringLiteral("%1 is not in the run store, and the store is open "
                                       "read-only, so it cannot be recorded")
                            .arg(directory));
        // run.json once rank 0 wrote it; before that the launch spec; a launch still starting
        // has only its pid file (the spec is taken from run.json when it appears).
        // Any of these makes a folder a run's, as SshLauncher::attach reads a remote one.
        const std::string runFiles[] = {files.eventsFile(), files.metricsFile(), files.pidFile()};
        QFile spec(QString::fromStdString(files.specFile()));
        QFile launchSpec(QString::fromStdString(files.launchSpecFile()));
        QByteArray specJson;
        if (spec.open(QIODevice::ReadOnly))
            specJson = spec.readAll();
        else if (launchSpec.open(QIODevice::ReadOnly))
            specJson = launchSpec.readAll();
        else if (std::none_of(std::begin(runFiles), std::end(runFiles), [](const std::string& f) {
                     return QFileInfo::exists(QString::fromStdString(f));
                 }))
            return fail(QStringLiteral("%1: no run.json, events.jsonl or launcher.pid, so this is "
                                       "not a run folder; pick the folder given to --out when the "
                                       "run started")
                            .arg(directory));
        else
            specJson = "{}";
        NewRun nr;
        try {
            const auto j = nlohmann::json::parse(specJson.toStdString());
            if (!j.is_object())
                return fail(QStringLiteral("%1/run.json must hold a JSON object").arg(directory));
            nr.name = QString::fromStdString(j.value("name", std::string()));
        } catch (const std::exception& e) {
            return fail(QStringLiteral("%1/run.json is not valid JSON (%2)")
                            .arg(directory, QString::fromUtf8(e.what())));
        }
        if (nr.name.isEmpty())
            nr.name = QFileInfo(dir).fileName();
        nr.specJson = specJson;
        nr.runDir = dir;
        nr.status = RunStatus::Running;
        auto created = m_store->createRun(nr);
        if (!created)
            return fail(created.error());
        id = created.value();
        // The launcher named by its pid file, so that its end is noticed like any other.
        if (launcherAlive.value_or(false)) {
            QFile pidFile(pidPath);
            const qint64 pid
                = pidFile.open(QIODevice::ReadOnly) ? pidFile.readAll().trimmed().toLongLong() : 0;
            const nlohmann::json info = {{"start_time", LocalProcess::startTime(pid)}};
            (void)m_store->setProcess(id, pid, QByteArray::fromStdString(info.dump()));
        }
    }
    if (auto stats = Ingestor(*m_store).ingestRunDir(id, dir); !stats)
        return fail(QStringLiteral("Importing %1: %2").arg(directory, stats.error()));
    auto run = m_store->run(id);
    if (!run)
        return fail(run.error());
    if (isTerminal(run->status))
        return id;
    // Still marked live: is it? Its recorded launcher decides; without one, its pid file (a
    // folder attached while a launch was starting), then how recently it was written.
    bool vanished = false;
    if (run->pid <= 0 && run->status == RunStatus::Queued) {
        vanished = false; // its launch is still starting
    } else if (run->pid > 0) {
        vanished = !LocalProcess::isAlive(run->pid, startTimeOf(*run));
    } else {
        vanished = launcherAlive == false || (!launcherAlive && folderIsStale(files));
    }
    if (vanished)
        if (auto s = settleVanishedRun(*m_store, id, dir); !s)
            return fail(s.error());
    return id;
}

Status LocalLauncher::stop(qint64 runId, int graceMs)
{
    if (auto s = requireStore(m_store); !s)
        return s;
    auto run = m_store->run(runId);
    if (!run)
        return fail(run.error());
    if (run->target != TargetKind::Local)
        return fail(QStringLiteral("run %1 is not a local run (target %2)")
                        .arg(runId)
                        .arg(toString(run->target)));
    if (isTerminal(run->status))
        return fail(
            QStringLiteral("run %1 has already ended (%2)").arg(runId).arg(toString(run->status)));
    const qint64 start = startTimeOf(*run);
    if (!LocalProcess::terminate(run->pid, start, graceMs))
        return fail(QStringLiteral("run %1: launcher pid %2 did not exit after TERM and KILL")
                        .arg(runId)
                        .arg(run->pid));
    Ingestor ingestor(*m_store);
    if (auto s = ingestor.ingestRunDir(runId, run->runDir); !s)
        return fail(s.error());
    return markStoppedOnRequest(*m_store, runId);
}

} // namespace shard::jobs
