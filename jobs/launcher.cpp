// What every Launcher shares (resume, log tails) and the choice of one by target (see launcher.h).
#include "jobs/launcher.h"
#include "jobs/run_import.h"

#include <QFile>

#include <nlohmann/json.hpp>

#include "jobs/local_launcher.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"
#include "protocol/checkpoint_discovery.h"
#include "protocol/run_dir.h"

namespace shard::jobs {

Status requireStore(const RunStore* store)
{
    if (store)
        return {};
    return fail(QStringLiteral("no run store is open"));
}

QString launchSpecSection(const LaunchRequest& request)
{
    return "\n\n# " + request.runDir + "/launch-spec.json\n"
        + QString::fromUtf8(launchSpecJson(request.spec, request.runDir));
}

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
        return std::unique_ptr<Launcher>(std::make_unique<LocalLauncher>(store));
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
        return std::unique_ptr<Launcher>(
            std::make_unique<SshLauncher>(store, hosts, SshClient(sshOptions)));
    }
    case TargetKind::Slurm:
        return std::unique_ptr<Launcher>(
            std::make_unique<SlurmLauncher>(store, target.slurm, SshClient(sshOptions)));
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
