// The Launcher interface over LocalLauncher, SshLauncher and SlurmLauncher (see launcher.h).
#include "jobs/launcher.h"
#include "jobs/run_import.h"

#include <QFile>
#include <QProcess>
#include <QRegularExpression>

#include <nlohmann/json.hpp>

#include "jobs/local_launcher.h"
#include "jobs/local_run_watcher.h"
#include "jobs/remote_run_watcher.h"
#include "jobs/ssh_launcher.h"
#include "protocol/checkpoint_discovery.h"
#include "protocol/run_dir.h"

namespace shard::jobs {

namespace {

// Quoted for a POSIX shell only where it needs it, so a plain command line reads plainly.
QString readableQuote(const QString& s)
{
    static const QRegularExpression safe("^[A-Za-z0-9_./:=+@%-]+$");
    return !s.isEmpty() && safe.match(s).hasMatch() ? s : SshClient::shellQuote(s);
}

QString specSection(const LaunchRequest& request)
{
    return "\n\n# " + request.runDir + "/launch-spec.json\n"
        + QString::fromUtf8(launchSpecJson(request.spec, request.runDir));
}

Status needStore(RunStore* store)
{
    if (store)
        return {};
    return fail(QStringLiteral("no run store is open"));
}

class LocalTarget : public Launcher {
public:
    explicit LocalTarget(RunStore* store)
        : m_store(store)
    {
    }
    TargetKind kind() const override { return TargetKind::Local; }
    Result<qint64> start(const LaunchRequest& request) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        return LocalLauncher(*m_store).start(request);
    }
    Status stop(qint64 runId, int graceMs) override
    {
        if (auto s = needStore(m_store); !s)
            return s;
        return LocalLauncher(*m_store).stop(runId, graceMs);
    }
    Result<QString> describe(const LaunchRequest& request) const override
    {
        // What LocalLauncher::start spawns.
        const QString found = LocalLauncher::findWorker(request.workerProgram);
        QStringList quoted = {readableQuote(found.isEmpty() ? request.workerProgram : found)};
        for (const QString& a :
            workerLaunchArgs(request, request.runDir, request.runDir, 1, 0, {}, request.masterPort))
            quoted << readableQuote(a);
        return QObject::tr("# Runs on this machine, detached (it outlives the studio):\n")
            + quoted.join(' ') + specSection(request);
    }
    Result<HostCheck> checkHost(const QString& workerProgram) const override
    {
        const QString worker = LocalLauncher::findWorker(workerProgram);
        if (worker.isEmpty())
            return fail(QObject::tr("%1 is not installed on this machine (set SHARD_WORKER or "
                                    "put it on PATH)")
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
    Result<qint64> attach(const QString& runDir) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        return LocalLauncher(*m_store).attach(runDir);
    }
    std::optional<SshHost> fileHost(const RunRecord&) const override { return std::nullopt; }
    Result<std::unique_ptr<RunWatcher>> watch(const RunRecord& run, QObject* parent) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        auto w = std::make_unique<LocalRunWatcher>(*m_store, run.id, run.runDir, parent);
        w->setProcess(run.pid, LocalLauncher::startTimeOf(run));
        w->start(250);
        return std::unique_ptr<RunWatcher>(std::move(w));
    }

private:
    RunStore* m_store;
};

class SshTarget : public Launcher {
public:
    SshTarget(RunStore* store, QList<SshHost> hosts, SshOptions options)
        : m_store(store)
        , m_hosts(std::move(hosts))
        , m_options(std::move(options))
    {
    }
    TargetKind kind() const override { return TargetKind::Ssh; }
    Result<qint64> start(const LaunchRequest& request) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        return SshLauncher(*m_store, SshClient(m_options)).start(m_hosts, request);
    }
    Status stop(qint64 runId, int graceMs) override
    {
        if (auto s = needStore(m_store); !s)
            return s;
        return SshLauncher(*m_store, SshClient(m_options)).stop(runId, graceMs);
    }
    Result<QString> describe(const LaunchRequest& request) const override
    {
        // The script SshLauncher::start runs on each host (its stdin is the launch spec).
        const int nnodes = int(m_hosts.size());
        QString text;
        for (int node = 0; node < nnodes; ++node) {
            const QString host = m_hosts[node].toString();
            text += QObject::tr("# Runs on %1 over SSH, detached (it outlives the connection); "
                                "this script, with the launch spec below on its stdin:\n")
                        .arg(host);
            if (node == 0)
                text += request.copyInputs
                    ? QObject::tr("# First the model folder and data files are copied to "
                                  "%1/inputs/ there, and the spec names the copies.\n")
                          .arg(request.runDir)
                    : QObject::tr("# The model folder and data files must be on %1 at these "
                                  "paths.\n")
                          .arg(host);
            text += SshLauncher::nodeScript(request, request.runDir, nnodes, node,
                        nnodes > 1 && request.masterAddr.isEmpty() ? m_hosts[0].host
                                                                   : request.masterAddr,
                        request.masterPort)
                + '\n';
        }
        return text.chopped(1) + specSection(request);
    }
    Result<HostCheck> checkHost(const QString& workerProgram) const override
    {
        if (m_hosts.isEmpty())
            return fail(QObject::tr("no SSH host given"));
        return SshLauncher::checkHost(SshClient(m_options), m_hosts.front(), workerProgram);
    }
    Result<qint64> attach(const QString& runDir) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        const SshClient ssh(m_options);
        if (m_hosts.size() > 1) {
            // A run over several nodes is recorded under all of them; its files are on node 0.
            QStringList names;
            for (const SshHost& h : m_hosts)
                names << h.toString();
            auto known = m_store->findRunByDir(names.join(','), runDir);
            if (!known)
                return fail(known.error());
            if (known.value() != 0) {
                auto caught
                    = RemoteRunWatcher::catchUp(*m_store, known.value(), ssh, m_hosts[0], runDir);
                if (!caught)
                    return fail(caught.error());
                return known.value();
            }
        }
        return SshLauncher(*m_store, ssh).attach(m_hosts.front(), runDir);
    }
    std::optional<SshHost> fileHost(const RunRecord& run) const override
    {
        const QList<RemoteNode> nodes = SshLauncher::nodesOf(run);
        if (!nodes.isEmpty())
            return nodes.front().host;
        return m_hosts.isEmpty() ? std::nullopt : std::optional<SshHost>(m_hosts.front());
    }
    Result<std::unique_ptr<RunWatcher>> watch(const RunRecord& run, QObject* parent) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        const std::optional<SshHost> host = fileHost(run);
        if (!host)
            return fail(QObject::tr("run %1 has no SSH host recorded").arg(run.id));
        auto w = std::make_unique<RemoteRunWatcher>(
            *m_store, run.id, *host, run.runDir, m_options, parent);
        w->setProcess(run.pid);
        w->start();
        return std::unique_ptr<RunWatcher>(std::move(w));
    }

private:
    RunStore* m_store;
    QList<SshHost> m_hosts;
    SshOptions m_options;
};

class SlurmTarget : public Launcher {
public:
    SlurmTarget(RunStore* store, SlurmOptions slurm, SshOptions options)
        : m_store(store)
        , m_slurm(std::move(slurm))
        , m_options(std::move(options))
    {
    }
    TargetKind kind() const override { return TargetKind::Slurm; }
    Result<qint64> start(const LaunchRequest& request) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        return SlurmLauncher(*m_store, SshClient(m_options)).submit(request, m_slurm);
    }
    Status stop(qint64 runId, int) override
    {
        if (auto s = needStore(m_store); !s)
            return s;
        return SlurmLauncher(*m_store, SshClient(m_options)).cancel(runId);
    }
    Result<QString> describe(const LaunchRequest& request) const override
    {
        auto script = SlurmLauncher::sbatchScript(request, m_slurm, request.runDir);
        if (!script)
            return fail(script.error());
        return QObject::tr("# Submitted with sbatch %1as %2/job.sbatch:\n")
                   .arg(m_slurm.via.isEmpty() ? QString() : QObject::tr("on %1 ").arg(m_slurm.via),
                       request.runDir)
            + script.value() + specSection(request);
    }
    Result<HostCheck> checkHost(const QString& workerProgram) const override
    {
        if (m_slurm.via.isEmpty())
            return LocalTarget(nullptr).checkHost(workerProgram);
        auto host = SshHost::parse(m_slurm.via);
        if (!host)
            return fail(host.error());
        return SshLauncher::checkHost(SshClient(m_options), host.value(), workerProgram);
    }
    Result<qint64> attach(const QString& runDir) override
    {
        // A Slurm run is recorded when it is submitted; its watcher catches up through sacct and
        // the folder on the login node.
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        auto known = m_store->findRunByDir(m_slurm.via, runDir);
        if (!known)
            return fail(known.error());
        if (known.value() == 0)
            return fail(QObject::tr("%1 is not the folder of a Slurm run in this store; attach "
                                    "to a job's folder as HOST:RUNDIR on its login node")
                            .arg(runDir));
        return known.value();
    }
    std::optional<SshHost> fileHost(const RunRecord& run) const override
    {
        const QString via = SlurmLauncher::optionsOf(run).via;
        auto host = SshHost::parse(via);
        return !via.isEmpty() && host ? std::optional<SshHost>(host.value()) : std::nullopt;
    }
    Result<std::unique_ptr<RunWatcher>> watch(const RunRecord& run, QObject* parent) override
    {
        if (auto s = needStore(m_store); !s)
            return fail(s.error());
        auto w = std::make_unique<SlurmRunWatcher>(*m_store, run.id, m_options, parent);
        w->start(2000);
        return std::unique_ptr<RunWatcher>(std::move(w));
    }

private:
    RunStore* m_store;
    SlurmOptions m_slurm;
    SshOptions m_options;
};

} // namespace

LaunchTarget LaunchTarget::ssh(const QStringList& hosts)
{
    LaunchTarget t;
    t.kind = TargetKind::Ssh;
    t.hosts = hosts;
    return t;
}

LaunchTarget LaunchTarget::onSlurm(const SlurmOptions& options)
{
    LaunchTarget t;
    t.kind = TargetKind::Slurm;
    t.slurm = options;
    return t;
}

std::unique_ptr<LogTail> Launcher::logTail(const RunRecord& run, int rank) const
{
    return std::make_unique<LogTail>(
        QString::fromStdString(protocol::RunDir(run.runDir.toStdString()).rankLog(rank)),
        fileHost(run));
}

Result<qint64> Launcher::resume(
    const RunRecord& recorded, qint64 moreSteps, ContinueSchedule schedule)
{
    RunRecord run = recorded;
    // A local run's folder is the source of truth: its run.json as it is now (the user may have
    // raised or lowered its step count since the record was made).
    if (!fileHost(run)) {
        QFile spec(QString::fromStdString(protocol::RunDir(run.runDir.toStdString()).specFile()));
        if (spec.open(QIODevice::ReadOnly))
            if (const QByteArray json = spec.readAll().trimmed(); json.startsWith('{'))
                run.specJson = json;
    }
    if (moreSteps > 0) {
        // "Continue for N more steps": the same run, its step count raised, from its latest
        // complete checkpoint.
        auto spec = nlohmann::json::parse(run.specJson.toStdString(), nullptr, false);
        if (!spec.is_object() || !spec.value("steps", int64_t(0)))
            return fail(
                QObject::tr("run %1 was not given a step count, so it cannot be continued by steps")
                    .arg(run.id));
        if (!fileHost(run) && !protocol::latestCompleteCheckpoint(run.runDir.toStdString()))
            return fail(QObject::tr("run %1 has no complete checkpoint in %2 to continue from "
                                    "(give it a checkpoint interval next time)")
                            .arg(run.id)
                            .arg(run.runDir));
        const int64_t oldSteps = spec.value("steps", int64_t(0));
        spec["steps"] = oldSteps + moreSteps;
        switch (schedule) {
        case ContinueSchedule::Stretch:
            spec["schedule_steps"] = 0;
            break;
        case ContinueSchedule::Keep: // an earlier "keep" already holds the first schedule's end
            if (spec.value("schedule_steps", int64_t(0)) == 0)
                spec["schedule_steps"] = oldSteps;
            break;
        case ContinueSchedule::Restart: {
            // Where training picks up: the latest checkpoint here, else (remote) the old end.
            int64_t from = oldSteps;
            if (!fileHost(run))
                if (const auto latest
                    = protocol::latestCompleteCheckpoint(run.runDir.toStdString()))
                    from = latest->step;
            spec["schedule_start"] = from;
            spec["schedule_steps"] = 0;
            break;
        }
        }
        run.specJson = QByteArray::fromStdString(spec.dump());
    }
    auto request = resumeRequest(run.specJson, run.name, run.runDir);
    if (!request)
        return fail(request.error());
    // A remote run resumes with the worker it was started with there.
    const auto info = nlohmann::json::parse(run.launchInfo.toStdString(), nullptr, false);
    if (info.is_object() && info.contains("worker") && run.target != TargetKind::Local)
        request->workerProgram = QString::fromStdString(info.value("worker", "shard-worker"));
    return start(request.value());
}

Result<std::unique_ptr<Launcher>> makeLauncher(
    const LaunchTarget& target, RunStore* store, const SshOptions& sshOptions)
{
    switch (target.kind) {
    case TargetKind::Local:
        return std::unique_ptr<Launcher>(std::make_unique<LocalTarget>(store));
    case TargetKind::Ssh: {
        QList<SshHost> hosts;
        for (const QString& h : target.hosts) {
            auto host = SshHost::parse(h);
            if (!host)
                return fail(QObject::tr("Host '%1': %2").arg(h, host.error()));
            hosts << host.value();
        }
        if (hosts.isEmpty())
            return fail(QObject::tr("an SSH launch needs a host"));
        return std::unique_ptr<Launcher>(std::make_unique<SshTarget>(store, hosts, sshOptions));
    }
    case TargetKind::Slurm:
        return std::unique_ptr<Launcher>(
            std::make_unique<SlurmTarget>(store, target.slurm, sshOptions));
    case TargetKind::Import:
        return std::unique_ptr<Launcher>(std::make_unique<ImportTarget>(store));
    }
    return fail(QObject::tr("unknown launch target %1").arg(int(target.kind)));
}

LaunchTarget LaunchTarget::of(const RunRecord& run)
{
    LaunchTarget target;
    target.kind = run.target;
    if (run.target == TargetKind::Ssh) {
        for (const SshHost& h : SshLauncher::hostsOf(run))
            target.hosts << h.toString();
        if (target.hosts.isEmpty() && !run.host.isEmpty())
            target.hosts = run.host.split(',');
    } else if (run.target == TargetKind::Slurm) {
        target.slurm = SlurmLauncher::optionsOf(run);
    }
    return target;
}

Result<std::unique_ptr<Launcher>> launcherOf(
    RunStore& store, const RunRecord& run, const SshOptions& sshOptions)
{
    auto made = makeLauncher(LaunchTarget::of(run), &store, sshOptions);
    if (!made)
        return fail(QObject::tr("run %1: %2").arg(run.id).arg(made.error()));
    return made;
}

} // namespace shard::jobs
