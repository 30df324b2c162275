// A command as a run (command_run.h).
#include "jobs/command_run.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <set>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QCoreApplication>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QProcessEnvironment>
#include <QRegularExpression>
#include <QSaveFile>
#include <QStandardPaths>
#include <nlohmann/json.hpp>

#include "jobs/launch_request.h"
#include "jobs/local_launcher.h"
#include "jobs/local_process.h"
#include "jobs/run_store.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"
#include "protocol/records.h"
#include "protocol/run_dir.h"
#include "tbio/event_reader.h"
#include "tbio/known_tags.h"
#include "tbio/log_lines.h"

namespace shard::jobs {

namespace {

constexpr const char* kCommandFile = "command.json";

QString commandFile(const QString& runDir)
{
    return runDir + QLatin1Char('/') + QLatin1String(kCommandFile);
}

} // namespace

QByteArray CommandSpec::toJson() const
{
    nlohmann::json env = nlohmann::json::array();
    for (const QString& kv : this->env)
        env.push_back(kv.toStdString());
    const nlohmann::json j = {{"kind", "command"}, {"command", command.toStdString()},
        {"workdir", workdir.toStdString()}, {"logdir", logdir.toStdString()}, {"env", env},
        {"grace_ms", graceMs}};
    return QByteArray::fromStdString(j.dump(2) + "\n");
}

CommandSpec CommandSpec::fromJson(const QByteArray& json)
{
    const auto j = nlohmann::json::parse(json.toStdString(), nullptr, false);
    if (!j.is_object() || j.value("kind", std::string()) != "command")
        throw std::runtime_error("not a command run's spec (command.json with \"kind\": "
                                 "\"command\")");
    CommandSpec s;
    if (!j.contains("command") || !j["command"].is_string()
        || j["command"].get<std::string>().empty())
        throw std::runtime_error("command.json has no \"command\" to run");
    s.command = QString::fromStdString(j["command"].get<std::string>());
    s.workdir = QString::fromStdString(j.value("workdir", std::string()));
    s.logdir = QString::fromStdString(j.value("logdir", std::string()));
    if (j.contains("env") && j["env"].is_array())
        for (const auto& e : j["env"])
            if (e.is_string())
                s.env << QString::fromStdString(e.get<std::string>());
    s.graceMs = j.value("grace_ms", 10000);
    return s;
}

bool isCommandSpec(const QByteArray& specJson)
{
    const auto j = nlohmann::json::parse(specJson.toStdString(), nullptr, false);
    return j.is_object() && j.value("kind", std::string()) == "command";
}

QString findShardCli()
{
    return findProjectProgram(
        QStringLiteral("shard"), "SHARD_CLI", {QStringLiteral("/.."), QStringLiteral("/../app")});
}

namespace {

Status checkCommand(const CommandSpec& spec)
{
    if (spec.command.trimmed().isEmpty())
        return fail(QStringLiteral("give the command to run: --command 'torchrun ... train.py'"));
    for (const QString& kv : spec.env)
        if (kv.indexOf('=') <= 0)
            return fail(QStringLiteral("--env '%1' is not KEY=VALUE").arg(kv));
    return {};
}

Result<qint64> startLocal(RunStore& store, const CommandRunRequest& request)
{
    CommandSpec spec = request.spec;
    if (auto s = checkCommand(spec); !s)
        return fail(s.error());
    const QString name = request.name.isEmpty() ? QStringLiteral("command") : request.name;
    QString runDir = request.runDir;
    if (runDir.isEmpty())
        runDir = LocalLauncher::defaultRunsRoot() + QLatin1Char('/') + newRunDirName(name);
    runDir = QDir(runDir).absolutePath();
    const protocol::RunDir files(runDir.toStdString());
    const bool hasRun = QFileInfo::exists(QString::fromStdString(files.eventsFile()))
        || QFileInfo::exists(QString::fromStdString(files.metricsFile()));
    if (request.resume && !QFileInfo::exists(commandFile(runDir)))
        return fail(
            QStringLiteral("%1 holds no command run (command.json) to run again").arg(runDir));
    if (!request.resume && hasRun)
        return fail(QStringLiteral("run directory %1 already holds a run; choose another run name "
                                   "or folder, or --resume to run its command again there")
                        .arg(runDir));
    if (spec.workdir.isEmpty())
        spec.workdir = runDir;
    spec.workdir = QDir(spec.workdir).absolutePath();
    if (!QFileInfo(spec.workdir).isDir() && spec.workdir != runDir)
        return fail(QStringLiteral("--workdir %1: no such folder").arg(spec.workdir));
    // A relative log folder is the command's: inside its working folder. It may not exist yet.
    if (!spec.logdir.isEmpty())
        spec.logdir = QDir(spec.workdir).absoluteFilePath(spec.logdir);
    if (!QDir().mkpath(runDir + QStringLiteral("/logs")))
        return fail(QStringLiteral("cannot create the run directory %1 (check permissions and "
                                   "free space)")
                        .arg(runDir));
    QSaveFile f(commandFile(runDir));
    if (!f.open(QIODevice::WriteOnly) || f.write(spec.toJson()) < 0 || !f.commit())
        return fail(QStringLiteral("cannot write %1: %2").arg(f.fileName(), f.errorString()));
    const QString supervisor = request.supervisor.isEmpty()
        ? findShardCli()
        : QFileInfo(request.supervisor).absoluteFilePath();
    if (supervisor.isEmpty() || !QFileInfo(supervisor).isExecutable())
        return fail(QStringLiteral("the shard program, which watches a command run, was not found: "
                                   "install it, put it on PATH or set $SHARD_CLI"));
    NewRun nr;
    nr.name = name;
    nr.specJson = spec.toJson();
    nr.target = TargetKind::Local;
    nr.runDir = runDir;
    auto id = request.resume ? store.reopenOrCreateRun(nr) : store.createRun(nr);
    if (!id)
        return id;
    const QString log = runDir + QStringLiteral("/logs/launcher.out");
    auto spawned = LocalProcess::spawnDetached(
        supervisor, {QStringLiteral("supervise-command"), runDir}, runDir, log);
    if (!spawned) {
        (void)store.setStatus(*id, RunStatus::Failed, spawned.error());
        return fail(spawned.error());
    }
    const nlohmann::json info = {{"start_time", spawned->startTime}, {"log", log.toStdString()},
        {"supervisor", supervisor.toStdString()}};
    if (auto s = store.setProcess(*id, spawned->pid, QByteArray::fromStdString(info.dump())); !s)
        return fail(s.error());
    if (auto s = store.setStatus(*id, RunStatus::Running); !s)
        return fail(s.error());
    return id;
}

// A shell on the target: an SSH host, or where Slurm jobs are submitted.
using TargetShell = std::function<Result<SshResult>(const QString&, const QByteArray&)>;

// The folders of a command run on its target, absolute there.
struct TargetDirs {
    QString runDir;
    CommandSpec spec; // its working folder and log folder absolute
};

// On the target: the supervisor found, the run folder made (refused when it holds a run, unless
// the command runs again there), the working folder checked; both made absolute there (a
// relative path is the home folder's), and command.json written.
Result<TargetDirs> prepareOnTarget(const TargetShell& shell, const QString& where,
    const CommandRunRequest& request, const QString& runDir, const QString& supervisor)
{
    const QString script
        = QStringLiteral(
            "s=%1; command -v \"$s\" >/dev/null 2>&1 || { echo NOSHARD; exit 0; }; "
            "d=%2; r=%3; if [ \"$r\" = 0 ] && { [ -e \"$d/events.jsonl\" ] || "
            "[ -e \"$d/metrics.jsonl\" ]; }; then echo EXISTS; exit 0; fi; "
            "if [ \"$r\" = 1 ] && [ ! -e \"$d/command.json\" ]; then echo NOCOMMAND; exit 0; fi; "
            "mkdir -p -- \"$d/logs\" && cd -- \"$d\" && echo \"DIR=$(pwd)\" || exit 1; "
            "w=%4; if [ -n \"$w\" ]; then cd 2>/dev/null; if cd -- \"$w\" 2>/dev/null; then "
            "echo \"WORK=$(pwd)\"; else echo NOWORK; fi; fi")
              .arg(SshClient::shellQuote(supervisor), SshClient::shellQuote(runDir))
              .arg(request.resume ? 1 : 0)
              .arg(SshClient::shellQuote(request.spec.workdir));
    auto r = shell(script, {});
    if (!r)
        return fail(r.error());
    auto value = [&](const char* key) {
        for (const QByteArray& line : r->out.split('\n'))
            if (line.startsWith(key))
                return QString::fromUtf8(line.mid(qstrlen(key))).trimmed();
        return QString();
    };
    if (r->out.contains("NOSHARD"))
        return fail(QStringLiteral("the shard program, which watches a command run, is not "
                                   "installed on %1 ('%2' is not on the PATH of a "
                                   "non-interactive shell there); install it there or name it "
                                   "with --supervisor /path/to/shard")
                        .arg(where, supervisor));
    if (r->out.contains("EXISTS"))
        return fail(QStringLiteral("run directory %1 on %2 already holds a run; choose another "
                                   "run name or folder, or --resume to run its command again "
                                   "there")
                        .arg(runDir, where));
    if (r->out.contains("NOCOMMAND"))
        return fail(QStringLiteral("%1 on %2 holds no command run (command.json) to run again")
                        .arg(runDir, where));
    TargetDirs dirs;
    dirs.runDir = value("DIR=");
    if (dirs.runDir.isEmpty())
        return fail(QStringLiteral("cannot create the run directory %1 on %2: %3")
                        .arg(runDir, where, QString::fromLocal8Bit(r->err).trimmed()));
    if (r->out.contains("NOWORK"))
        return fail(
            QStringLiteral("--workdir %1: no such folder on %2").arg(request.spec.workdir, where));
    dirs.spec = request.spec;
    dirs.spec.workdir = request.spec.workdir.isEmpty() ? dirs.runDir : value("WORK=");
    if (!dirs.spec.logdir.isEmpty() && !dirs.spec.logdir.startsWith(QLatin1Char('/')))
        dirs.spec.logdir = QDir::cleanPath(dirs.spec.workdir + QLatin1Char('/') + dirs.spec.logdir);
    const QString file = commandFile(dirs.runDir);
    auto written
        = shell(QStringLiteral("cat > %1").arg(SshClient::shellQuote(file)), dirs.spec.toJson());
    if (!written || written->exitCode != 0)
        return fail(QStringLiteral("cannot write %1 on %2%3")
                        .arg(file, where,
                            written ? ": " + QString::fromLocal8Bit(written->err).trimmed()
                                    : ": " + written.error()));
    return dirs;
}

// A run folder named on a remote target: relative to the home folder there.
QString remoteRunDir(const CommandRunRequest& request, const QString& name)
{
    const QString runDir = SshClient::homeRelative(request.runDir);
    return runDir.isEmpty() ? QStringLiteral("shard-runs/") + newRunDirName(name) : runDir;
}

QString startScript(const QString& supervisor, const QString& absDir)
{
    // Detached from the SSH session as an engine run's launcher is (SshLauncher::nodeScript):
    // its own session, SIGHUP ignored, no stdin, output to a file.
    return QStringLiteral("cd -- %1 || exit 1; setsid nohup %2 supervise-command %1 > "
                          "logs/launcher.out 2>&1 < /dev/null & echo \"PID=$!\"")
        .arg(SshClient::shellQuote(absDir), SshClient::shellQuote(supervisor));
}

Result<qint64> startOnSsh(
    RunStore& store, const CommandRunRequest& request, const SshOptions& sshOptions)
{
    if (auto s = checkCommand(request.spec); !s)
        return fail(s.error());
    const QStringList& hosts = request.target.hosts;
    if (hosts.size() != 1)
        return fail(QStringLiteral("a command runs on one SSH host (%1 given): its own launcher "
                                   "reaches the other nodes (torchrun --nnodes, deepspeed "
                                   "--hostfile), or submit it through Slurm with srun")
                        .arg(hosts.size()));
    auto host = SshHost::parse(hosts.front());
    if (!host)
        return fail(QStringLiteral("Host '%1': %2").arg(hosts.front(), host.error()));
    const SshClient ssh(sshOptions);
    const QString where = host->toString();
    const QString name = request.name.isEmpty() ? QStringLiteral("command") : request.name;
    const QString supervisor
        = request.supervisor.isEmpty() ? QStringLiteral("shard") : request.supervisor;
    const TargetShell shell
        = [&](const QString& script, const QByteArray& in) { return ssh.run(*host, script, in); };
    auto dirs = prepareOnTarget(shell, where, request, remoteRunDir(request, name), supervisor);
    if (!dirs)
        return fail(dirs.error());
    NewRun nr;
    nr.name = name;
    nr.specJson = dirs->spec.toJson();
    nr.target = TargetKind::Ssh;
    nr.host = where;
    nr.runDir = dirs->runDir;
    auto id = request.resume ? store.reopenOrCreateRun(nr) : store.createRun(nr);
    if (!id)
        return id;
    auto started = ssh.run(*host, startScript(supervisor, dirs->runDir), {});
    qint64 pid = 0;
    if (started)
        for (const QByteArray& line : started->out.split('\n'))
            if (line.startsWith("PID="))
                pid = line.mid(4).trimmed().toLongLong();
    if (!started || started->exitCode != 0 || pid <= 0) {
        const QString why
            = QStringLiteral("starting the command's supervisor on %1 failed: %2")
                  .arg(where,
                      started ? QString::fromLocal8Bit(started->err).trimmed() : started.error());
        (void)store.setStatus(*id, RunStatus::Failed, why);
        return fail(why);
    }
    // The launch info an engine run over SSH has: SshLauncher stops and watches it the same way.
    const nlohmann::json info = {{"nodes",
                                     nlohmann::json::array({{{"host", where.toStdString()},
                                         {"pid", pid}, {"run_dir", dirs->runDir.toStdString()}}})},
        {"supervisor", supervisor.toStdString()}};
    if (auto s = store.setProcess(*id, pid, QByteArray::fromStdString(info.dump())); !s)
        return fail(s.error());
    if (auto s = store.setStatus(*id, RunStatus::Running); !s)
        return fail(s.error());
    return id;
}

Result<qint64> startOnSlurm(
    RunStore& store, const CommandRunRequest& request, const SshOptions& sshOptions)
{
    if (auto s = checkCommand(request.spec); !s)
        return fail(s.error());
    const SlurmOptions& o = request.target.slurm;
    if (o.nodes < 1)
        return fail(QStringLiteral("Slurm: --nodes must be at least 1"));
    SlurmLauncher slurm(&store, {}, SshClient(sshOptions));
    if (auto s = slurm.available(o); !s)
        return fail(s.error());
    const bool here = o.via.isEmpty();
    const QString where = here ? QStringLiteral("this machine") : o.via;
    const QString name = request.name.isEmpty() ? QStringLiteral("command") : request.name;
    QString supervisor = request.supervisor;
    if (supervisor.isEmpty())
        supervisor = here ? findShardCli() : QStringLiteral("shard");
    if (supervisor.isEmpty())
        return fail(QStringLiteral("the shard program, which watches a command run, was not found: "
                                   "install it, put it on PATH or set $SHARD_CLI"));
    CommandRunRequest req = request;
    QString runDir;
    if (here) {
        // Paths on this machine are this process's, as for a local command run.
        runDir = QDir(request.runDir.isEmpty()
                ? LocalLauncher::defaultRunsRoot() + QLatin1Char('/') + newRunDirName(name)
                : request.runDir)
                     .absolutePath();
        if (!req.spec.workdir.isEmpty())
            req.spec.workdir = QDir(req.spec.workdir).absolutePath();
        supervisor = QFileInfo(supervisor).absoluteFilePath();
    } else {
        runDir = remoteRunDir(request, name);
    }
    const TargetShell shell
        = [&](const QString& script, const QByteArray& in) { return slurm.shell(o, script, in); };
    auto dirs = prepareOnTarget(shell, where, req, runDir, supervisor);
    if (!dirs)
        return fail(dirs.error());
    QString given = request.sbatchScript;
    if (given.isEmpty() && request.resume) {
        // Run again as it was submitted: its job.sbatch, edits included.
        auto kept = shell(QStringLiteral("cat %1").arg(
                              SshClient::shellQuote(dirs->runDir + QStringLiteral("/job.sbatch"))),
            {});
        if (kept && kept->exitCode == 0
            && checkEditedSbatch(QString::fromUtf8(kept->out), dirs->runDir))
            given = QString::fromUtf8(kept->out);
    }
    auto script = given.isEmpty() ? commandSbatchScript(name, o, supervisor, dirs->runDir,
                      request.masterPort > 0 ? request.masterPort : pickMasterPort())
                                  : Result<QString>(given);
    if (!script)
        return fail(script.error());
    if (auto s = checkEditedSbatch(*script, dirs->runDir); !s)
        return fail(s.error());
    const QString scriptPath = dirs->runDir + QStringLiteral("/job.sbatch");
    auto written = shell(
        QStringLiteral("cat > %1").arg(SshClient::shellQuote(scriptPath)), script->toUtf8());
    if (!written || written->exitCode != 0)
        return fail(QStringLiteral("cannot write %1 on %2").arg(scriptPath, where));
    NewRun nr;
    nr.name = name;
    nr.specJson = dirs->spec.toJson();
    nr.target = TargetKind::Slurm;
    nr.host = o.via;
    nr.runDir = dirs->runDir;
    auto id = request.resume ? store.reopenOrCreateRun(nr) : store.createRun(nr);
    if (!id)
        return id;
    auto jobId = slurm.sbatch(o, dirs->runDir, scriptPath);
    if (!jobId) {
        (void)store.setStatus(*id, RunStatus::Failed, jobId.error());
        return fail(jobId.error());
    }
    if (auto s = store.setJobId(*id, *jobId); !s)
        return fail(s.error());
    if (auto s = store.setProcess(*id, 0,
            SlurmLauncher::launchInfo(o, scriptPath, {{QStringLiteral("supervisor"), supervisor}}));
        !s)
        return fail(s.error());
    return id;
}

} // namespace

Result<qint64> startCommandRun(
    RunStore& store, const CommandRunRequest& request, const SshOptions& sshOptions)
{
    switch (request.target.kind) {
    case TargetKind::Local:
        return startLocal(store, request);
    case TargetKind::Ssh:
        return startOnSsh(store, request, sshOptions);
    case TargetKind::Slurm:
        return startOnSlurm(store, request, sshOptions);
    case TargetKind::Import:
        break;
    }
    return fail(QStringLiteral("a command runs on this machine, an SSH host or through Slurm, "
                               "not on target '%1'")
                    .arg(toString(request.target.kind)));
}

Result<QString> commandSbatchScript(const QString& name, const SlurmOptions& options,
    const QString& supervisor, const QString& runDir, int masterPort)
{
    auto header = SlurmLauncher::sbatchHeader(name, options, {}, runDir);
    if (!header)
        return fail(header.error());
    QStringList lines = header.value();
    lines << QStringLiteral("# For the command's rendezvous (torchrun --rdzv_endpoint "
                            "$MASTER_ADDR:$MASTER_PORT, deepspeed --master_addr):")
          << QStringLiteral("MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
                            "head -n 1)")
          << QStringLiteral("export MASTER_ADDR MASTER_PORT=%1").arg(masterPort)
          << QStringLiteral("# The supervisor runs command.json's command in its folder and "
                            "environment, records its output")
          << QStringLiteral("# and metric lines, and stops it when the job is cancelled.")
          << QStringLiteral("exec %1 supervise-command %2")
                 .arg(SshClient::shellQuote(supervisor), SshClient::shellQuote(runDir));
    return lines.join(QLatin1Char('\n')) + QLatin1Char('\n');
}

Status checkEditedSbatch(const QString& script, const QString& runDir)
{
    // The supervisor's line, with the folder as commandSbatchScript writes it or unquoted.
    static const QRegularExpression line(
        QStringLiteral("^\\s*(exec\\s+)?\\S+\\s+supervise-command\\s+(.+?)\\s*$"),
        QRegularExpression::MultilineOption);
    bool found = false;
    for (auto it = line.globalMatch(script); it.hasNext();) {
        const auto m = it.next();
        found = true;
        const QString dir = m.captured(2);
        if (dir == runDir || dir == SshClient::shellQuote(runDir)
            || dir == QLatin1Char('"') + runDir + QLatin1Char('"'))
            return {};
    }
    if (!found)
        return fail(QStringLiteral("the batch script no longer runs `shard supervise-command %1`, "
                                   "which runs the command and records it: keep that line (or "
                                   "go back to the written script)")
                        .arg(SshClient::shellQuote(runDir)));
    return fail(QStringLiteral("the batch script runs the supervisor on another folder than the "
                               "run's (%1): the run name or folder changed since it was edited; "
                               "edit it again or go back to the written script")
                    .arg(runDir));
}

Result<QString> commandRunSbatch(const CommandRunRequest& request)
{
    if (!request.sbatchScript.isEmpty())
        return request.sbatchScript;
    QString supervisor = request.supervisor;
    if (supervisor.isEmpty() && request.target.slurm.via.isEmpty())
        supervisor = findShardCli();
    return commandSbatchScript(request.name, request.target.slurm,
        supervisor.isEmpty() ? QStringLiteral("shard") : supervisor,
        request.runDir.isEmpty() ? QStringLiteral("<run folder>") : request.runDir,
        request.masterPort > 0 ? request.masterPort : 29500);
}

Result<QString> describeCommandRun(const CommandRunRequest& request)
{
    if (auto s = checkCommand(request.spec); !s)
        return fail(s.error());
    const CommandSpec& spec = request.spec;
    const QString runDir
        = request.runDir.isEmpty() ? QStringLiteral("<run folder>") : request.runDir;
    // What the supervisor runs, as a shell reads it.
    QString body = QStringLiteral("cd %1\n").arg(spec.workdir.isEmpty() ? runDir : spec.workdir);
    if (!spec.env.isEmpty())
        body += QStringLiteral("env %1 \\\n    ").arg(spec.env.join(QLatin1Char(' ')));
    body += spec.command + QLatin1Char('\n');
    QString text;
    const TargetKind kind = request.target.kind;
    if (kind == TargetKind::Slurm) {
        const SlurmOptions& o = request.target.slurm;
        auto script = commandRunSbatch(request);
        if (!script)
            return fail(script.error());
        if (!request.sbatchScript.isEmpty() && !request.runDir.isEmpty())
            if (auto s = checkEditedSbatch(request.sbatchScript, request.runDir); !s)
                return fail(s.error());
        text = QObject::tr("# A command run through Slurm: submitted with sbatch %1as "
                           "%2/job.sbatch (below%3); its batch step runs `shard "
                           "supervise-command`, which runs, records and on scancel stops:\n")
                   .arg(o.via.isEmpty() ? QString() : QObject::tr("on %1 ").arg(o.via), runDir,
                       request.sbatchScript.isEmpty() ? QString() : QObject::tr(", as edited"))
            + body + QStringLiteral("\n") + script.value() + QStringLiteral("\n");
    } else {
        const QString where = kind == TargetKind::Ssh
            ? QObject::tr("on %1 over SSH").arg(request.target.hosts.value(0))
            : QObject::tr("on this machine");
        text = QObject::tr("# A command run %1: `shard supervise-command` runs it detached in its "
                           "own process group, records it, and stops the group on Stop:\n")
                   .arg(where)
            + body;
    }
    text += QObject::tr("# run folder: %1 (command.json, logs/stdout.log, logs/stderr.log)\n")
                .arg(runDir);
    return text;
}

Result<CommandRunRequest> commandRerunRequest(const RunRecord& run)
{
    CommandRunRequest again;
    again.name = run.name;
    again.runDir = run.runDir;
    again.resume = true;
    again.target = LaunchTarget::of(run);
    if (again.target.kind == TargetKind::Ssh)
        again.target.hosts = again.target.hosts.mid(0, 1);
    try {
        again.spec = CommandSpec::fromJson(run.specJson);
    } catch (const std::exception& e) {
        return fail(QObject::tr("run %1: %2").arg(run.id).arg(QString::fromUtf8(e.what())));
    }
    const auto info = nlohmann::json::parse(run.launchInfo.toStdString(), nullptr, false);
    if (info.is_object() && info.contains("supervisor") && info["supervisor"].is_string())
        again.supervisor = QString::fromStdString(info["supervisor"].get<std::string>());
    return again;
}

std::optional<LauncherFailure> parseLauncherFailure(const QByteArray& stderrText)
{
    const QString s = QString::fromUtf8(stderrText);
    // torchrun (torch.distributed.elastic): the ChildFailedError table.
    const int root = s.lastIndexOf(QLatin1String("Root Cause (first observed failure)"));
    if (root >= 0) {
        LauncherFailure f;
        f.source = QStringLiteral("torchrun");
        static const QRegularExpression entryRe(
            QStringLiteral("\\brank\\s*:\\s*(\\d+)[^\\n]*\\n\\s*exitcode\\s*:\\s*(-?\\d+)"));
        const auto rootEntry = entryRe.match(s, root);
        if (rootEntry.hasMatch()) {
            f.rank = rootEntry.captured(1).toInt();
            f.exitCode = rootEntry.captured(2).toInt();
            f.failures.append({f.rank, f.exitCode});
        }
        // The "Failures:" table above the root cause lists the others.
        const int table = s.lastIndexOf(QLatin1String("Failures:"), root);
        for (auto it
             = entryRe.globalMatch(s.mid(table >= 0 ? table : root, root - std::max(table, 0)));
             table >= 0 && it.hasNext();) {
            const auto m = it.next();
            const QPair<int, int> entry {m.captured(1).toInt(), m.captured(2).toInt()};
            if (!f.failures.contains(entry))
                f.failures.append(entry);
        }
        return f;
    }
    // deepspeed's launcher: "... exits with return code = N".
    static const QRegularExpression dsRe(QStringLiteral("exits with return code = (-?\\d+)"));
    const auto ds = dsRe.match(s);
    if (ds.hasMatch()) {
        LauncherFailure f;
        f.source = QStringLiteral("deepspeed");
        f.exitCode = ds.captured(1).toInt();
        static const QRegularExpression rankRe(QStringLiteral("local_rank[=: ]+(\\d+)"));
        const auto rank = rankRe.match(s);
        if (rank.hasMatch())
            f.rank = rank.captured(1).toInt();
        return f;
    }
    return std::nullopt;
}

// --- The supervisor --------------------------------------------------------------------------

namespace {

volatile std::sig_atomic_t g_stopRequested = 0;

void onStopSignal(int)
{
    g_stopRequested = 1;
}

// Appends whole lines with write(2), as the engine's record files are written.
class AppendFile {
public:
    explicit AppendFile(const QString& path)
    {
        m_fd = ::open(
            path.toLocal8Bit().constData(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    ~AppendFile()
    {
        if (m_fd >= 0)
            ::close(m_fd);
    }
    void write(const char* data, size_t n)
    {
        while (m_fd >= 0 && n > 0) {
            const ssize_t w = ::write(m_fd, data, n);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return; // a full disk loses output, never the run
            }
            data += w;
            n -= static_cast<size_t>(w);
        }
    }
    void line(const std::string& s)
    {
        const std::string l = s + "\n";
        write(l.data(), l.size());
    }

private:
    int m_fd = -1;
};

double secondsSince(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The last step in an earlier metrics.jsonl (a relaunch numbers Hugging Face lines on from it).
int64_t lastRecordedStep(const QString& metricsFile)
{
    QFile f(metricsFile);
    int64_t last = 0;
    if (!f.open(QIODevice::ReadOnly))
        return 0;
    while (!f.atEnd()) {
        const auto j = nlohmann::json::parse(f.readLine().toStdString(), nullptr, false);
        if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
            last = std::max<int64_t>(last, j["step"].get<int64_t>());
    }
    return last;
}

// nvidia-smi, sampled while the command runs on a machine with NVIDIA GPUs: each GPU's memory
// in use (every process on it) becomes a per-GPU memory record (rank = the GPU's index, as the
// CUDA figures of an engine rank), current and peak since the previous record. Every
// $SHARD_GPU_SAMPLE_MS (default 5000) milliseconds.
class GpuSampler {
public:
    GpuSampler()
        : m_program(QStandardPaths::findExecutable(QStringLiteral("nvidia-smi")))
    {
        bool ok = false;
        const int ms = qEnvironmentVariableIntValue("SHARD_GPU_SAMPLE_MS", &ok);
        if (ok && ms > 0)
            m_intervalMs = ms;
    }
    bool available() const { return !m_program.isEmpty() && !m_broken; }
    // Samples when the interval has passed; returns a note to record once when nvidia-smi
    // fails (after three failures in a row it is not asked again).
    std::optional<std::string> poll()
    {
        if (!available() || (m_sampled && secondsSince(m_last) * 1000 < m_intervalMs))
            return std::nullopt;
        m_sampled = true;
        m_last = std::chrono::steady_clock::now();
        QProcess p;
        p.start(m_program,
            {QStringLiteral("--query-gpu=index,memory.used"),
                QStringLiteral("--format=csv,noheader,nounits")});
        const bool done = p.waitForFinished(5000);
        if (!done) {
            p.kill();
            p.waitForFinished(1000);
        }
        if (!done || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
            if (++m_failures < 3)
                return std::nullopt;
            m_broken = true;
            return "nvidia-smi failed three times in a row ("
                + QString::fromLocal8Bit(p.readAllStandardError()).trimmed().toStdString()
                + "); the GPUs' memory is not sampled for this run";
        }
        m_failures = 0;
        for (const QByteArray& line : p.readAllStandardOutput().split('\n')) {
            const QList<QByteArray> f = line.split(',');
            bool okIndex = false, okUsed = false;
            const int index = f.value(0).trimmed().toInt(&okIndex);
            const double usedMiB = f.value(1).trimmed().toDouble(&okUsed);
            if (f.size() < 2 || !okIndex || !okUsed || index < 0)
                continue; // "[N/A]" on a GPU that does not report it
            Gpu& g = m_gpus[index];
            g.current = static_cast<int64_t>(usedMiB * 1024 * 1024);
            g.peak = std::max(g.peak, g.current);
        }
        return std::nullopt;
    }
    // The GPUs' records since the previous call (empty before the first sample).
    std::vector<protocol::RankMemory> take()
    {
        std::vector<protocol::RankMemory> out;
        for (auto& [index, g] : m_gpus) {
            protocol::RankMemory m;
            m.rank = index;
            m.cuda = true;
            m.currentBytes = g.current;
            m.peakBytes = std::max(g.peak, g.current);
            m.cudaReservedBytes = g.current;
            m.cudaReservedPeakBytes = m.peakBytes;
            out.push_back(m);
            g.peak = g.current;
        }
        return out;
    }

private:
    struct Gpu {
        int64_t current = 0;
        int64_t peak = 0;
    };
    QString m_program;
    int m_intervalMs = 5000;
    bool m_sampled = false;
    bool m_broken = false;
    int m_failures = 0;
    std::chrono::steady_clock::time_point m_last {};
    std::map<int, Gpu> m_gpus;
};

// Metric lines of the command's output, merged by step into the engine's metric records.
class MetricLines {
public:
    MetricLines(AppendFile& out, int64_t firstStep, std::chrono::steady_clock::time_point t0)
        : m_out(out)
        , m_hfStep(firstStep)
        , m_t0(t0)
    {
    }
    // Stdout lines without a step are not stored (a log folder gives the real steps).
    void ignoreSteplessLines() { m_stepless = false; }
    // Records written from now on carry the GPUs' memory.
    void sampleGpus(GpuSampler* gpus) { m_gpus = gpus; }
    void line(const std::string& text)
    {
        auto parsed = tbio::parseLogLine(text);
        if (!parsed || parsed->kind == tbio::LogLine::Kind::HuggingFaceSummary)
            return;
        if (!parsed->step && !m_stepless)
            return;
        int64_t step = 0;
        if (parsed->step) {
            step = *parsed->step;
        } else {
            // Hugging Face prints no step: each training line is the next logged step, an
            // evaluation line belongs to the step before it.
            if (parsed->kind == tbio::LogLine::Kind::HuggingFaceTrain)
                ++m_hfStep;
            step = std::max<int64_t>(m_hfStep, 1);
        }
        for (const auto& [tag, value] : parsed->values)
            this->value(step, tag, value);
    }
    // One scalar of a step (a log line's, or an event file's).
    void value(int64_t step, const std::string& tag, double value)
    {
        Pending& p = m_steps[step];
        p.rec.step = step;
        p.rec.wallTimeSec = secondsSince(m_t0);
        {
            if (const auto known = tbio::knownTag(tag)) {
                switch (known->metric) {
                case tbio::StoreMetric::Loss:
                    p.rec.loss = value;
                    p.hasLoss = true;
                    break;
                case tbio::StoreMetric::EvalLoss:
                    p.rec.evalLoss = value;
                    break;
                case tbio::StoreMetric::LearningRate:
                    p.rec.lr = value;
                    break;
                case tbio::StoreMetric::GradNorm:
                    p.rec.gradNorm = value;
                    break;
                case tbio::StoreMetric::TokensPerSec:
                    p.rec.tokensPerSec = value;
                    break;
                case tbio::StoreMetric::Tokens:
                    p.rec.tokens = static_cast<int64_t>(value);
                    break;
                case tbio::StoreMetric::StepTime:
                    p.rec.stepTimeSec = value;
                    break;
                }
            }
            // Every value is also kept under its name (the store files names without "eval/"
            // under "train/").
            const std::string name = tag.rfind("train/", 0) == 0 ? tag.substr(6) : tag;
            p.rec.scalars[name] = value;
        }
        p.dirty = true;
    }
    // Records written so far (a step written again counts again).
    int64_t written() const { return m_written; }
    // Writes the steps that changed (a step written again replaces the earlier record).
    void flush()
    {
        for (auto it = m_steps.begin(); it != m_steps.end();) {
            Pending& p = it->second;
            if (p.dirty && p.hasLoss) {
                if (m_gpus)
                    if (auto memory = m_gpus->take(); !memory.empty())
                        p.rec.memory = std::move(memory);
                m_out.line(protocol::toJson(p.rec).dump());
                p.dirty = false;
                ++m_written;
            }
            // Keep the last few steps for a late evaluation line; drop older ones.
            if (!m_steps.empty() && it->first + 8 < m_steps.rbegin()->first && !p.dirty)
                it = m_steps.erase(it);
            else
                ++it;
        }
    }

private:
    struct Pending {
        protocol::MetricRecord rec;
        bool hasLoss = false;
        bool dirty = false;
    };
    AppendFile& m_out;
    GpuSampler* m_gpus = nullptr;
    bool m_stepless = true;
    int64_t m_hfStep;
    int64_t m_written = 0;
    std::chrono::steady_clock::time_point m_t0;
    std::map<int64_t, Pending> m_steps;
};

// The event files of a TensorBoard log folder, read on from where the last poll stopped.
class LogdirFollower {
public:
    LogdirFollower(QString dir, MetricLines& metrics)
        : m_dir(std::move(dir))
        , m_metrics(metrics)
    {
    }
    // Whether an event file has been seen under the folder.
    bool sawEventFile() const { return m_sawEventFile; }
    // Reads what the files gained; returns notes to record once (a file that is not an event
    // file, a broken frame).
    QStringList poll()
    {
        QStringList notes;
        if (m_dir.isEmpty() || !QFileInfo(m_dir).isDir())
            return notes;
        QDirIterator it(m_dir, QDir::Files, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const QString path = it.next();
            if (!tbio::isEventFileName(QFileInfo(path).fileName().toStdString()))
                continue;
            m_sawEventFile = true;
            const std::string key = path.toStdString();
            if (m_refused.count(key))
                continue;
            const int64_t offset = m_offsets[key];
            if (QFileInfo(path).size() <= offset)
                continue;
            try {
                const tbio::EventFileScan scan = tbio::readEventFile(key, offset);
                for (const tbio::ScalarPoint& p : scan.scalars)
                    m_metrics.value(p.step, p.tag, p.value);
                m_offsets[key] = scan.endOffset;
                if (!scan.error.empty()) {
                    notes << QString::fromStdString(scan.error);
                    m_refused.insert(key);
                }
            } catch (const std::exception& e) {
                notes << QString::fromUtf8(e.what());
                m_refused.insert(key);
            }
        }
        return notes;
    }

private:
    QString m_dir;
    MetricLines& m_metrics;
    std::map<std::string, int64_t> m_offsets;
    std::set<std::string> m_refused;
    bool m_sawEventFile = false;
};

// Splits a stream into lines for `onLine` (a line longer than 1 MiB is cut there).
struct LineSplitter {
    std::string buffer;
    template<class F> void feed(const char* data, size_t n, F&& onLine)
    {
        buffer.append(data, n);
        size_t start = 0;
        for (size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1)
            onLine(buffer.substr(start, nl - start));
        buffer.erase(0, start);
        if (buffer.size() > (1u << 20)) {
            onLine(buffer);
            buffer.clear();
        }
    }
    template<class F> void finish(F&& onLine)
    {
        if (!buffer.empty())
            onLine(buffer);
        buffer.clear();
    }
};

} // namespace

int superviseCommand(const QString& runDirArg)
{
    const QString runDir = QDir(runDirArg).absolutePath();
    const protocol::RunDir files(runDir.toStdString());
    AppendFile events(QString::fromStdString(files.eventsFile()));
    const auto t0 = std::chrono::steady_clock::now();
    auto event = [&](const std::string& kind, const std::string& message, nlohmann::json data) {
        protocol::EventRecord e;
        e.kind = kind;
        e.wallTimeSec = secondsSince(t0);
        e.message = message;
        e.data = std::move(data);
        events.line(protocol::toJson(e).dump());
    };
    CommandSpec spec;
    {
        QFile f(commandFile(runDir));
        if (!f.open(QIODevice::ReadOnly)) {
            event("finish", "cannot read " + commandFile(runDir).toStdString(),
                {{"reason", "failed"}});
            return 2;
        }
        try {
            spec = CommandSpec::fromJson(f.readAll());
        } catch (const std::exception& e) {
            event("finish", commandFile(runDir).toStdString() + ": " + e.what(),
                {{"reason", "failed"}});
            return 2;
        }
    }
    {
        QFile pid(QString::fromStdString(files.pidFile()));
        if (pid.open(QIODevice::WriteOnly | QIODevice::Truncate))
            pid.write(QByteArray::number(qint64(::getpid())) + '\n');
    }
    const int64_t firstStep = lastRecordedStep(QString::fromStdString(files.metricsFile()));
    AppendFile metricsFile(QString::fromStdString(files.metricsFile()));
    AppendFile stdoutLog(runDir + QStringLiteral("/logs/stdout.log"));
    AppendFile stderrLog(runDir + QStringLiteral("/logs/stderr.log"));
    AppendFile rankLog(runDir + QStringLiteral("/logs/rank-0.log"));
    MetricLines metrics(metricsFile, firstStep, t0);
    LogdirFollower logdir(spec.logdir, metrics);
    if (!spec.logdir.isEmpty())
        metrics.ignoreSteplessLines();
    auto followLogdir = [&] {
        for (const QString& note : logdir.poll())
            event("warning", note.toStdString(), {{"logdir", spec.logdir.toStdString()}});
    };
    auto lastLogdirPoll = std::chrono::steady_clock::now();
    // A command that logs nothing the studio reads, or a --logdir that never fills: said once,
    // after $SHARD_SILENT_WARN_SEC (default 120) seconds, on the Monitor as a warning.
    const int silentSec = [] {
        bool ok = false;
        const int s = qEnvironmentVariableIntValue("SHARD_SILENT_WARN_SEC", &ok);
        return ok && s > 0 ? s : 120;
    }();
    const auto silentCheckAt = std::chrono::steady_clock::now() + std::chrono::seconds(silentSec);
    bool silentChecked = false;
    auto warnIfSilent = [&] {
        if (silentChecked || std::chrono::steady_clock::now() < silentCheckAt)
            return;
        silentChecked = true;
        const std::string after = " after " + std::to_string(silentSec) + " s";
        if (!spec.logdir.isEmpty() && !logdir.sawEventFile())
            event("warning",
                "no TensorBoard event file has appeared in " + spec.logdir.toStdString() + after
                    + ": check --logdir (the folder the command's SummaryWriter or report_to="
                      "\"tensorboard\" writes into, relative to the working folder); until one "
                      "does, only the output's lines with a step are read",
                {{"logdir", spec.logdir.toStdString()}, {"after_sec", silentSec}});
        if (metrics.written() == 0)
            event("warning",
                "no metric has been read from the command" + after
                    + ": the studio reads Hugging Face Trainer's {'loss': ...} lines and "
                      "torchtitan's step lines from its output, and the event files under "
                      "--logdir; the run has no points until one appears",
                {{"after_sec", silentSec}});
    };
    GpuSampler gpus;
    if (gpus.available())
        metrics.sampleGpus(&gpus);
    auto sampleGpus = [&] {
        if (auto note = gpus.poll())
            event("warning", *note, {{"program", "nvidia-smi"}});
    };

    struct sigaction sa { };
    sa.sa_handler = onStopSignal;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGTERM, SIGINT, SIGHUP})
        ::sigaction(sig, &sa, nullptr);

    int outPipe[2], errPipe[2];
    if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0) {
        event("finish", std::string("cannot create pipes: ") + std::strerror(errno),
            {{"reason", "failed"}});
        return 2;
    }
    const QByteArray workdir = QFile::encodeName(spec.workdir.isEmpty() ? runDir : spec.workdir);
    const QByteArray command = spec.command.toLocal8Bit();
    QList<QByteArray> envPairs;
    for (const QString& kv : spec.env)
        envPairs << kv.toLocal8Bit();
    const pid_t child = ::fork();
    if (child < 0) {
        event("finish", std::string("cannot start the command: ") + std::strerror(errno),
            {{"reason", "failed"}});
        return 2;
    }
    if (child == 0) {
        // The command stays in the supervisor's process group: a stop reaches every process it
        // starts, and a KILL of the group (LocalProcess::terminate) leaves none behind.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        ::signal(SIGTERM, SIG_DFL);
        ::signal(SIGINT, SIG_DFL);
        ::signal(SIGHUP, SIG_DFL);
        ::dup2(outPipe[1], STDOUT_FILENO);
        ::dup2(errPipe[1], STDERR_FILENO);
        const int devnull = ::open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            ::dup2(devnull, STDIN_FILENO);
        if (::chdir(workdir.constData()) != 0) {
            const std::string m = "shard: cannot enter the working folder " + workdir.toStdString()
                + ": " + std::strerror(errno) + "\n";
            (void)!::write(STDERR_FILENO, m.data(), m.size());
            ::_exit(127);
        }
        for (const QByteArray& kv : envPairs) {
            const int eq = kv.indexOf('=');
            ::setenv(kv.left(eq).constData(), kv.mid(eq + 1).constData(), 1);
        }
        ::execl("/bin/sh", "sh", "-c", command.constData(), static_cast<char*>(nullptr));
        ::_exit(127);
    }
    ::close(outPipe[1]);
    ::close(errPipe[1]);
    event("start", "command started: " + spec.command.toStdString(),
        {{"command", spec.command.toStdString()}, {"workdir", workdir.toStdString()},
            {"pid", child}});

    QByteArray stderrTail; // the end of stderr, for the launcher's failure report
    std::string lastStderrLine;
    LineSplitter outLines, errLines;
    auto onLine = [&](const std::string& l) { metrics.line(l); };
    int fds[2] = {outPipe[0], errPipe[0]};
    bool exited = false, stopping = false, finishWritten = false;
    int status = 0;
    auto stopDeadline = std::chrono::steady_clock::time_point::max();
    std::chrono::steady_clock::time_point drainUntil {};
    while (true) {
        pollfd p[2];
        int n = 0;
        for (int fd : fds)
            if (fd >= 0)
                p[n++] = {fd, POLLIN, 0};
        if (n == 0 && exited)
            break;
        if (n > 0)
            ::poll(p, static_cast<nfds_t>(n), 250);
        else
            ::usleep(100 * 1000);
        for (int i = 0; i < n; ++i) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[65536];
            const ssize_t got = ::read(p[i].fd, buf, sizeof buf);
            if (got <= 0) {
                if (got < 0 && (errno == EINTR || errno == EAGAIN))
                    continue;
                for (int& fd : fds)
                    if (fd == p[i].fd) {
                        ::close(fd);
                        fd = -1;
                    }
                continue;
            }
            const size_t len = static_cast<size_t>(got);
            rankLog.write(buf, len);
            if (p[i].fd == outPipe[0]) {
                stdoutLog.write(buf, len);
                outLines.feed(buf, len, onLine);
            } else {
                stderrLog.write(buf, len);
                stderrTail.append(buf, static_cast<qsizetype>(len));
                if (stderrTail.size() > (256 << 10))
                    stderrTail = stderrTail.right(128 << 10);
                errLines.feed(buf, len, [&](const std::string& l) {
                    if (!l.empty())
                        lastStderrLine = l;
                    metrics.line(l);
                });
            }
        }
        if (std::chrono::steady_clock::now() - lastLogdirPoll > std::chrono::seconds(1)) {
            followLogdir();
            lastLogdirPoll = std::chrono::steady_clock::now();
        }
        sampleGpus();
        metrics.flush();
        if (!exited)
            warnIfSilent();
        if (!exited) {
            const pid_t w = ::waitpid(child, &status, WNOHANG);
            if (w == child) {
                exited = true;
                // Output a background process still holds open is read for a moment more.
                drainUntil = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            }
        } else if (std::chrono::steady_clock::now() > drainUntil) {
            break;
        }
        if (g_stopRequested && !stopping && !exited) {
            stopping = true;
            ::signal(SIGTERM, SIG_IGN); // the group's TERM is for the command
            ::killpg(::getpgrp(), SIGTERM);
            stopDeadline = std::chrono::steady_clock::now()
                + std::chrono::milliseconds(std::max(500, spec.graceMs - 1000));
        }
        if (stopping && !exited && std::chrono::steady_clock::now() > stopDeadline) {
            metrics.flush();
            event("finish",
                "stopped on request; the command did not exit after TERM, so it was "
                "killed",
                {{"reason", "stopped"}, {"signal", SIGKILL}});
            finishWritten = true;
            ::killpg(::getpgrp(), SIGKILL); // this process too
        }
    }
    outLines.finish(onLine);
    errLines.finish(onLine);
    followLogdir();
    metrics.flush();
    for (int fd : fds)
        if (fd >= 0)
            ::close(fd);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status)
        : WIFSIGNALED(status)          ? 128 + WTERMSIG(status)
                                       : 1;
    if (!finishWritten) {
        nlohmann::json data = {{"exit_code", code}};
        std::string message;
        if (WIFSIGNALED(status))
            data["signal"] = WTERMSIG(status);
        if (stopping || g_stopRequested) {
            data["reason"] = "stopped";
            message = "stopped on request (the command exited with status " + std::to_string(code)
                + ")";
        } else if (code == 0) {
            data["reason"] = "completed";
            message = "the command exited with status 0";
        } else {
            data["reason"] = "failed";
            message = "the command exited with status " + std::to_string(code);
            if (const auto f = parseLauncherFailure(stderrTail)) {
                data["launcher"] = f->source.toStdString();
                data["rank_exit_code"] = f->exitCode;
                nlohmann::json all = nlohmann::json::array();
                std::string ranks;
                for (const auto& [r, c] : f->failures) {
                    all.push_back({{"rank", r}, {"exit_code", c}});
                    ranks += (ranks.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r)
                        + " exit code " + std::to_string(c);
                }
                data["failures"] = all;
                if (f->rank >= 0) {
                    data["rank"] = f->rank;
                    message += ": " + ranks + " (" + f->source.toStdString()
                        + "'s report; it saw rank " + std::to_string(f->rank) + " fail first)";
                } else {
                    message += ": a rank exited with code " + std::to_string(f->exitCode) + " ("
                        + f->source.toStdString() + "'s report)";
                }
            } else if (code == 127) {
                message += " (command not found, or its folder could not be entered"
                    + (lastStderrLine.empty() ? std::string() : ": " + lastStderrLine) + ")";
            } else if (!lastStderrLine.empty()) {
                message += "; its last error line: " + lastStderrLine.substr(0, 300);
            }
        }
        event("finish", message, data);
    }
    return code;
}

} // namespace shard::jobs
