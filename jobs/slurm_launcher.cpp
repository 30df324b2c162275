// Slurm submission and tracking (see slurm_launcher.h).
#include "jobs/slurm_launcher.h"

#include <QProcess>
#include <QRegularExpression>
#include <QThread>
#include <QTimer>
#include <nlohmann/json.hpp>

#include "jobs/ingestor.h"
#include "jobs/local_launcher.h"
#include "jobs/local_run_watcher.h"
#include "jobs/remote_run_watcher.h"
#include "jobs/ssh_launcher.h"
#include "protocol/run_dir.h"

namespace shard::jobs {

namespace {

using Q = SshClient;

const char* const kNodeRank = "@SHARD_NODE_RANK@";

bool sbatchValue(const QString& v)
{
    return QRegularExpression(QStringLiteral("^[A-Za-z0-9:_.,+=-]+$")).match(v).hasMatch();
}

QString clientEnvPrefix(const SlurmOptions& o)
{
    QString s;
    for (const QString& kv : o.clientEnv)
        if (kv.indexOf('=') > 0)
            s += QStringLiteral("export %1; ").arg(Q::shellQuote(kv));
    return s;
}

} // namespace

bool SlurmJobState::ended() const
{
    return !state.isEmpty() && state != QLatin1String("PENDING")
        && state != QLatin1String("RUNNING") && state != QLatin1String("CONFIGURING")
        && state != QLatin1String("COMPLETING") && state != QLatin1String("SUSPENDED")
        && state != QLatin1String("REQUEUED") && state != QLatin1String("RESIZING");
}

RunStatus SlurmJobState::runStatus() const
{
    if (state.isEmpty() || state == QLatin1String("PENDING") || state == QLatin1String("REQUEUED"))
        return RunStatus::Queued;
    if (!ended())
        return RunStatus::Running;
    if (state == QLatin1String("COMPLETED"))
        return RunStatus::Finished;
    if (state.startsWith(QLatin1String("CANCELLED")))
        return RunStatus::Stopped;
    return RunStatus::Failed; // FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE
}

Result<SlurmOptions> SlurmLauncher::fitToRun(
    const LaunchRequest& request, const SlurmOptions& given)
{
    if (given.nodes < 1)
        return fail(QStringLiteral("Slurm: --nodes must be at least 1"));
    // The job the run needs: the spec's nodes, and on GPUs (device cuda) a GPU for each rank of a
    // node, each rank then taking its own by LOCAL_RANK; options given explicitly must agree.
    SlurmOptions o = given;
    const protocol::RunSpec& spec = request.spec;
    if (o.nodes == 1)
        o.nodes = spec.nodes;
    else if (spec.nodes != 1 && spec.nodes != o.nodes)
        return fail(QStringLiteral("Slurm: --nodes %1 but the run spec has %2 nodes; give one of "
                                   "them")
                        .arg(o.nodes)
                        .arg(spec.nodes));
    if (spec.device == "cuda") {
        if (o.gpusPerNode == 0)
            o.gpusPerNode = spec.procsPerNode;
        else if (o.gpusPerNode < spec.procsPerNode)
            return fail(QStringLiteral("Slurm: %1 ranks per node on CUDA need %1 GPUs per node, "
                                       "but --gpus-per-node is %2")
                            .arg(spec.procsPerNode)
                            .arg(o.gpusPerNode));
    }
    return o;
}

Result<QStringList> SlurmLauncher::sbatchHeader(const QString& name, const SlurmOptions& o,
    const QStringList& env, const QString& runDir, const QStringList& directives)
{
    for (const auto& [what, value] : {std::pair {"time", o.time},
             std::pair {"partition", o.partition}, std::pair {"account", o.account}})
        if (!value.isEmpty() && !sbatchValue(value))
            return fail(QStringLiteral("Slurm: %1 '%2' has characters sbatch does not accept")
                            .arg(what, value));
    if (!o.time.isEmpty()
        && !QRegularExpression(QString::fromLatin1(kSlurmTimePattern)).match(o.time).hasMatch())
        return fail(QStringLiteral("Slurm: time limit '%1' is not one sbatch reads; give minutes, "
                                   "MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. 02:00:00)")
                        .arg(o.time));
    const QString jobName = safeDirName(name.isEmpty() ? QStringLiteral("shard") : name);
    QStringList lines {QStringLiteral("#!/bin/bash"),
        QStringLiteral("# Written by Shard Studio for the run directory %1").arg(runDir),
        QStringLiteral("#SBATCH --job-name=%1").arg(jobName),
        QStringLiteral("#SBATCH --nodes=%1").arg(o.nodes),
        QStringLiteral("#SBATCH --ntasks-per-node=1")};
    if (o.gpusPerNode > 0)
        lines << QStringLiteral("#SBATCH --gpus-per-node=%1").arg(o.gpusPerNode);
    if (o.cpusPerTask > 0)
        lines << QStringLiteral("#SBATCH --cpus-per-task=%1").arg(o.cpusPerTask);
    if (!o.time.isEmpty())
        lines << QStringLiteral("#SBATCH --time=%1").arg(o.time);
    if (!o.partition.isEmpty())
        lines << QStringLiteral("#SBATCH --partition=%1").arg(o.partition);
    if (!o.account.isEmpty())
        lines << QStringLiteral("#SBATCH --account=%1").arg(o.account);
    for (const QString& d : directives)
        lines << QStringLiteral("#SBATCH ") + d;
    lines << QStringLiteral("set -eu");
    for (const QString& kv : o.env + env) {
        const int eq = kv.indexOf('=');
        if (eq <= 0
            || !QRegularExpression(QStringLiteral("^[A-Za-z_][A-Za-z0-9_]*$"))
                    .match(kv.left(eq))
                    .hasMatch())
            return fail(QStringLiteral("environment entry '%1' is not KEY=VALUE").arg(kv));
        lines << QStringLiteral("export %1=%2").arg(kv.left(eq), Q::shellQuote(kv.mid(eq + 1)));
    }
    return lines;
}

Result<QString> SlurmLauncher::sbatchScript(
    const LaunchRequest& request, const SlurmOptions& given, const QString& runDir)
{
    auto fitted = fitToRun(request, given);
    if (!fitted)
        return fail(fitted.error());
    const SlurmOptions& o = fitted.value();
    if (o.preemptSignalSec < 0)
        return fail(QStringLiteral("Slurm: the preemption signal's lead must be 0 (none) or a "
                                   "number of seconds (got %1)")
                        .arg(o.preemptSignalSec));
    // Requeueable (a preemption, a node failure or the script below brings the same job back),
    // its output appended across restarts, and SIGUSR1 to the launchers before the time limit.
    QStringList directives {QStringLiteral("--requeue"), QStringLiteral("--open-mode=append")};
    if (o.preemptSignalSec > 0)
        directives << QStringLiteral("--signal=USR1@%1").arg(o.preemptSignalSec);
    auto header = sbatchHeader(request.name, o, request.env, runDir, directives);
    if (!header)
        return fail(header.error());
    QStringList lines = header.value();
    const int port = request.masterPort > 0 ? request.masterPort : pickMasterPort();
    if (o.nodes > 1) {
        lines << QStringLiteral("MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | "
                                "head -n 1)");
        QStringList args = workerLaunchArgs(
            request, runDir, runDir, o.nodes, 0, QStringLiteral("@SHARD_MASTER_ADDR@"), port);
        args[args.indexOf(QStringLiteral("--node-rank")) + 1] = kNodeRank;
        lines << QStringLiteral("export MASTER_ADDR");
        lines << QStringLiteral("# One launcher per node; its node rank is SLURM_NODEID.");
        lines << QStringLiteral("rc=0");
        lines << QStringLiteral(
            "srun --kill-on-bad-exit=1 bash -c 'a=(); for x in \"$@\"; do "
            "x=${x//%1/$SLURM_NODEID}; x=${x//@SHARD_MASTER_ADDR@/$MASTER_ADDR}; "
            "a+=(\"$x\"); done; exec \"${a[@]}\"' shard-node %2 %3 || rc=$?")
                     .arg(kNodeRank, Q::shellQuote(request.workerProgram), Q::shellJoin(args));
    } else {
        lines << QStringLiteral("rc=0");
        lines << QStringLiteral("srun --kill-on-bad-exit=1 %1 %2 || rc=$?")
                     .arg(Q::shellQuote(request.workerProgram),
                         Q::shellJoin(
                             workerLaunchArgs(request, runDir, runDir, 1, 0, QString(), 0)));
    }
    lines << QStringLiteral("# %1: the ranks wrote a checkpoint on SIGUSR1 (preemption, the time "
                            "limit near): the same job")
                 .arg(protocol::kPreemptedExitCode)
          << QStringLiteral("# goes back to the queue and its launcher continues from that "
                            "checkpoint.")
          << QStringLiteral("if [ \"$rc\" -eq %1 ]; then").arg(protocol::kPreemptedExitCode)
          << QStringLiteral("    echo \"shard: preempted; requeueing job $SLURM_JOB_ID\"")
          << QStringLiteral("    scontrol requeue \"$SLURM_JOB_ID\"") << QStringLiteral("fi")
          << QStringLiteral("exit \"$rc\"");
    return lines.join('\n') + '\n';
}

Result<SshResult> SlurmLauncher::shell(
    const SlurmOptions& o, const QString& script, const QByteArray& stdinData) const
{
    const QString full = clientEnvPrefix(o) + script;
    if (!o.via.isEmpty()) {
        auto host = SshHost::parse(o.via);
        if (!host)
            return fail(host.error());
        return m_ssh.run(*host, full, stdinData);
    }
    QProcess p;
    p.start(QStringLiteral("/bin/sh"), {QStringLiteral("-c"), full});
    if (!p.waitForStarted(5000))
        return fail(QStringLiteral("cannot run /bin/sh: %1").arg(p.errorString()));
    p.write(stdinData);
    p.closeWriteChannel();
    if (!p.waitForFinished(60000)) {
        p.kill();
        p.waitForFinished(2000);
        return fail(QStringLiteral("Slurm command did not answer within 60 s: %1").arg(script));
    }
    SshResult r;
    r.exitCode = p.exitCode();
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

SlurmOptions SlurmLauncher::optionsOf(const RunRecord& run)
{
    SlurmOptions o;
    auto j = nlohmann::json::parse(run.launchInfo.constData(),
        run.launchInfo.constData() + run.launchInfo.size(), nullptr, false);
    if (!j.is_object())
        return o;
    o.via = QString::fromStdString(j.value("via", ""));
    o.nodes = j.value("nodes", 1);
    o.gpusPerNode = j.value("gpus_per_node", 0);
    o.cpusPerTask = j.value("cpus_per_task", 0);
    o.time = QString::fromStdString(j.value("time", ""));
    o.partition = QString::fromStdString(j.value("partition", ""));
    o.account = QString::fromStdString(j.value("account", ""));
    o.preemptSignalSec = j.value("preempt_signal_sec", o.preemptSignalSec);
    for (const auto& kv : j.value("client_env", nlohmann::json::array()))
        if (kv.is_string())
            o.clientEnv << QString::fromStdString(kv.get<std::string>());
    return o;
}

Status SlurmLauncher::available(const SlurmOptions& o) const
{
    const QString where = o.via.isEmpty() ? QStringLiteral("this machine") : o.via;
    auto check = shell(o,
        QStringLiteral("command -v sbatch >/dev/null 2>&1 || exit 127; sinfo -h "
                       "-o %P >/dev/null"));
    if (!check)
        return fail(check.error());
    if (check->exitCode == 127)
        return fail(QStringLiteral("Slurm is not available on %1 (sbatch not found); install the "
                                   "Slurm client there or submit --via a login node")
                        .arg(where));
    if (check->exitCode != 0)
        return fail(
            QStringLiteral("Slurm is not available on %1: %2")
                .arg(where, QString::fromLocal8Bit(check->err).trimmed().section('\n', -1)));
    return {};
}

Result<qint64> SlurmLauncher::submit(const LaunchRequest& request, const SlurmOptions& given)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    auto fitted = fitToRun(request, given); // refused before anything is made on the cluster
    if (!fitted)
        return fail(fitted.error());
    const SlurmOptions& o = fitted.value();
    if (auto s = available(o); !s)
        return fail(s.error());
    const QString where = o.via.isEmpty() ? QStringLiteral("this machine") : o.via;
    const QString name = request.name.isEmpty() ? QStringLiteral("run") : request.name;
    QString runDir = request.runDir;
    if (runDir.isEmpty())
        runDir = (o.via.isEmpty() ? LocalLauncher::defaultRunsRoot() : QStringLiteral("shard-runs"))
            + '/' + newRunDirName(name);
    auto prep = shell(o,
        QStringLiteral("d=%1; if [ %2 = 0 ] && [ -e \"$d/metrics.jsonl\" ]; then echo EXISTS; "
                       "exit 0; fi; mkdir -p -- \"$d/logs\" && cd -- \"$d\" && "
                       "echo \"DIR=$(pwd)\"")
            .arg(Q::shellQuote(runDir))
            .arg(request.resume ? 1 : 0));
    if (!prep)
        return fail(prep.error());
    if (prep->out.contains("EXISTS"))
        return fail(QStringLiteral("%1 already holds a run; choose another run name or folder")
                        .arg(runDir));
    QString absDir;
    for (const QByteArray& line : prep->out.split('\n'))
        if (line.startsWith("DIR="))
            absDir = QString::fromUtf8(line.mid(4));
    if (absDir.isEmpty())
        return fail(QStringLiteral("cannot create the run directory %1 on %2: %3")
                        .arg(runDir, where, QString::fromLocal8Bit(prep->err).trimmed()));

    const LaunchRequest& req = request;
    auto script = sbatchScript(req, o, absDir);
    if (!script)
        return fail(script.error());
    const QByteArray spec = launchSpecJson(req.spec, absDir);
    const QString scriptPath = absDir + QStringLiteral("/job.sbatch");
    auto written
        = shell(o, QStringLiteral("cat > %1").arg(Q::shellQuote(scriptPath)), script->toUtf8());
    if (!written || written->exitCode != 0)
        return fail(QStringLiteral("cannot write %1 on %2").arg(scriptPath, where));
    {
        auto s = shell(
            o, QStringLiteral("cat > %1").arg(Q::shellQuote(absDir + "/launch-spec.json")), spec);
        if (!s || s->exitCode != 0)
            return fail(
                QStringLiteral("cannot write the run spec into %1 on %2").arg(absDir, where));
    }

    NewRun nr;
    nr.name = name;
    nr.specJson = recordedSpecJson(req.spec);
    nr.target = TargetKind::Slurm;
    nr.host = o.via;
    nr.runDir = absDir;
    auto id = req.resume ? m_store->reopenOrCreateRun(nr) : m_store->createRun(nr);
    if (!id)
        return id;
    auto jobId = sbatch(o, absDir, scriptPath);
    if (!jobId) {
        (void)m_store->setStatus(*id, RunStatus::Failed, jobId.error());
        return fail(jobId.error());
    }
    if (auto s = m_store->setJobId(*id, *jobId); !s)
        return fail(s.error());
    if (auto s = m_store->setProcess(
            *id, 0, launchInfo(o, scriptPath, {{"worker", request.workerProgram}}));
        !s)
        return fail(s.error());
    return id;
}

Result<QString> SlurmLauncher::sbatch(
    const SlurmOptions& o, const QString& absDir, const QString& scriptPath) const
{
    const QString where = o.via.isEmpty() ? QStringLiteral("this machine") : o.via;
    auto sub = shell(o,
        QStringLiteral("sbatch --parsable --chdir=%1 --output=%2 %3")
            .arg(Q::shellQuote(absDir),
                Q::shellQuote(absDir + QStringLiteral("/logs/slurm-%j.out")),
                Q::shellQuote(scriptPath)));
    if (!sub)
        return fail(sub.error());
    const QString jobId = QString::fromUtf8(sub->out).trimmed().section(';', 0, 0);
    if (sub->exitCode != 0 || jobId.isEmpty() || !jobId.front().isDigit()) {
        QString why = QString::fromLocal8Bit(sub->err).trimmed();
        why = why.section('\n', -1).remove(QStringLiteral("sbatch: error: "));
        return fail(QStringLiteral("job rejected by Slurm on %1: %2").arg(where, why));
    }
    return jobId;
}

QByteArray SlurmLauncher::launchInfo(
    const SlurmOptions& o, const QString& scriptPath, const QList<QPair<QString, QString>>& extra)
{
    nlohmann::json clientEnv = nlohmann::json::array();
    for (const QString& kv : o.clientEnv)
        clientEnv.push_back(kv.toStdString());
    // What a resume needs to submit the run again the same way.
    nlohmann::json info = {{"via", o.via.toStdString()}, {"client_env", clientEnv},
        {"script", scriptPath.toStdString()}, {"nodes", o.nodes}, {"gpus_per_node", o.gpusPerNode},
        {"cpus_per_task", o.cpusPerTask}, {"time", o.time.toStdString()},
        {"partition", o.partition.toStdString()}, {"account", o.account.toStdString()},
        {"preempt_signal_sec", o.preemptSignalSec}};
    for (const auto& [key, value] : extra)
        info[key.toStdString()] = value.toStdString();
    return QByteArray::fromStdString(info.dump());
}

Result<SlurmJobState> SlurmLauncher::jobState(const QString& jobId, const SlurmOptions& o) const
{
    const QString id = Q::shellQuote(jobId);
    // squeue knows live jobs; scontrol remembers ended ones for MinJobAge; sacct needs a
    // database, which small clusters may not run.
    auto r = shell(o,
        QStringLiteral("s=$(squeue -h -j %1 -o %T 2>/dev/null | head -n 1); "
                       "[ -n \"$s\" ] || s=$(scontrol show job %1 2>/dev/null | "
                       "sed -n 's/.*JobState=\\([A-Z_]*\\).*/\\1/p' | head -n 1); "
                       "[ -n \"$s\" ] || s=$(sacct -n -X -P -j %1 -o State "
                       "2>/dev/null | head -n 1); echo \"STATE=$s\"")
            .arg(id));
    if (!r)
        return fail(r.error());
    SlurmJobState st;
    for (const QByteArray& line : r->out.split('\n'))
        if (line.startsWith("STATE="))
            st.state = QString::fromUtf8(line.mid(6)).trimmed().section(' ', 0, 0);
    return st;
}

Result<RunStatus> SlurmLauncher::poll(qint64 runId, bool* jobAlive)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    if (jobAlive)
        *jobAlive = false;
    auto run = m_store->run(runId);
    if (!run)
        return fail(run.error());
    const SlurmOptions o = optionsOf(*run);
    // Read what the run folder holds (locally, or from the via host).
    auto ingest = [&]() -> Status {
        if (o.via.isEmpty()) {
            auto read = Ingestor(*m_store).ingestRunDir(runId, run->runDir);
            return read ? Status {} : Status {fail(read.error())};
        }
        auto host = SshHost::parse(o.via);
        if (!host)
            return {};
        auto read = RemoteRunWatcher::catchUp(*m_store, runId, m_ssh, *host, run->runDir);
        return read ? Status {} : Status {fail(read.error())};
    };
    if (isTerminal(run->status)) {
        // Ended by its events (a preemption's checkpoint, the stop a requeue sends), but Slurm
        // may bring the same job back: followed while Slurm has it.
        if (run->jobId.isEmpty())
            return run->status;
        auto st = jobState(run->jobId, o);
        if (!st || st->state.isEmpty() || st->ended())
            return run->status;
        if (jobAlive)
            *jobAlive = true;
        if (auto s = ingest(); !s)
            return fail(s.error());
        auto now = m_store->run(runId);
        if (!now)
            return fail(now.error());
        if (isTerminal(now->status)
            && (st->state == QLatin1String("PENDING") || st->state.startsWith("REQUEUE"))) {
            const QString msg = QStringLiteral("Slurm requeued job %1; the run continues from "
                                               "its latest checkpoint when the job starts again")
                                    .arg(run->jobId);
            if (auto s = m_store->setStatus(runId, RunStatus::Queued, msg); !s)
                return fail(s.error());
            return RunStatus::Queued;
        }
        return now->status;
    }
    auto st = jobState(run->jobId, o);
    if (!st)
        return fail(st.error());
    if (!st->ended()) {
        if (jobAlive)
            *jobAlive = true;
        const RunStatus now = st->state.isEmpty() ? run->status : st->runStatus();
        if (now != run->status)
            if (auto s = m_store->setStatus(runId, now); !s)
                return fail(s.error());
        return now;
    }
    // Ended: read everything it wrote; its own finish event wins over Slurm's summary.
    if (auto s = ingest(); !s)
        return fail(s.error());
    auto after = m_store->run(runId);
    if (after && isTerminal(after->status))
        return after->status;
    const RunStatus status
        = st->runStatus() == RunStatus::Finished ? RunStatus::Interrupted : st->runStatus();
    const QString msg = QStringLiteral("Slurm job %1 ended %2").arg(run->jobId, st->state);
    if (auto s = m_store->setStatus(runId, status, msg); !s)
        return fail(s.error());
    return status;
}

Status SlurmLauncher::cancel(qint64 runId)
{
    if (auto s = requireStore(m_store); !s)
        return s;
    auto run = m_store->run(runId);
    if (!run)
        return fail(run.error());
    if (run->target != TargetKind::Slurm || run->jobId.isEmpty())
        return fail(QStringLiteral("run %1 is not a Slurm job").arg(runId));
    const SlurmOptions o = optionsOf(*run);
    auto r = shell(o, QStringLiteral("scancel %1").arg(Q::shellQuote(run->jobId)));
    if (!r)
        return fail(r.error());
    if (r->exitCode != 0)
        return fail(QStringLiteral("scancel %1 failed: %2")
                        .arg(run->jobId, QString::fromLocal8Bit(r->err).trimmed()));
    for (int i = 0; i < 100; ++i) {
        auto st = jobState(run->jobId, o);
        if (st && (st->ended() || st->state.isEmpty()))
            break;
        QThread::msleep(100);
    }
    auto status = poll(runId);
    if (!status)
        return fail(status.error());
    if (!isTerminal(*status))
        return m_store->setStatus(runId, RunStatus::Stopped, QStringLiteral("cancelled"));
    return {};
}

Result<QString> SlurmLauncher::describe(const LaunchRequest& request) const
{
    auto script = sbatchScript(request, m_slurm, request.runDir);
    if (!script)
        return fail(script.error());
    return QObject::tr("# Submitted with sbatch %1as %2/job.sbatch:\n")
               .arg(m_slurm.via.isEmpty() ? QString() : QObject::tr("on %1 ").arg(m_slurm.via),
                   request.runDir)
        + script.value() + launchSpecSection(request);
}

Result<HostCheck> SlurmLauncher::checkHost(const QString& workerProgram) const
{
    if (m_slurm.via.isEmpty())
        return LocalLauncher(nullptr).checkHost(workerProgram);
    auto host = SshHost::parse(m_slurm.via);
    if (!host)
        return fail(host.error());
    return SshLauncher::checkHost(m_ssh, host.value(), workerProgram);
}

Result<qint64> SlurmLauncher::attach(const QString& runDir)
{
    // A Slurm run is recorded when it is submitted; its watcher catches up through sacct and the
    // folder on the login node.
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    auto known = m_store->findRunByDir(m_slurm.via, runDir);
    if (!known)
        return fail(known.error());
    if (known.value() == 0)
        return fail(QObject::tr("%1 is not the folder of a Slurm run in this store; attach to a "
                                "job's folder as HOST:RUNDIR on its login node")
                        .arg(runDir));
    return known.value();
}

std::optional<SshHost> SlurmLauncher::fileHost(const RunRecord& run) const
{
    const QString via = optionsOf(run).via;
    auto host = SshHost::parse(via);
    return !via.isEmpty() && host ? std::optional<SshHost>(host.value()) : std::nullopt;
}

Result<std::unique_ptr<RunWatcher>> SlurmLauncher::watch(const RunRecord& run, QObject* parent)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    auto w = std::make_unique<SlurmRunWatcher>(*m_store, run.id, m_ssh.options(), parent);
    w->start(2000);
    return std::unique_ptr<RunWatcher>(std::move(w));
}

SlurmRunWatcher::SlurmRunWatcher(
    RunStore& store, qint64 runId, SshOptions sshOptions, QObject* parent)
    : RunWatcher(parent)
    , m_store(store)
    , m_runId(runId)
    , m_sshOptions(std::move(sshOptions))
{
}

SlurmRunWatcher::~SlurmRunWatcher()
{
    stop();
}

void SlurmRunWatcher::start(int pollMs)
{
    auto run = m_store.run(m_runId);
    if (!run) {
        Q_EMIT errorOccurred(m_runId, run.error());
        return;
    }
    m_pollMs = pollMs;
    startInner(*run);
    m_timer = new QTimer(this);
    connect(m_timer, &QTimer::timeout, this, [this] { pollJob(); });
    m_timer->start(pollMs);
    pollJob();
}

void SlurmRunWatcher::startInner(const RunRecord& run)
{
    if (m_inner) {
        stopInner();
        m_inner->deleteLater();
        m_inner = nullptr;
    }
    m_innerEnded = false;
    const SlurmOptions o = SlurmLauncher::optionsOf(run);
    if (o.via.isEmpty()) {
        auto* w = new LocalRunWatcher(m_store, m_runId, run.runDir, this);
        w->start(qMax(100, m_pollMs / 4));
        m_inner = w;
    } else if (auto host = SshHost::parse(o.via)) {
        auto* w = new RemoteRunWatcher(m_store, m_runId, *host, run.runDir, m_sshOptions, this);
        w->start();
        m_inner = w;
    }
    if (m_inner) {
        connect(m_inner, &RunWatcher::pointsAdded, this, &RunWatcher::pointsAdded);
        connect(m_inner, &RunWatcher::eventsAdded, this, &RunWatcher::eventsAdded);
        connect(m_inner, &RunWatcher::errorOccurred, this, &RunWatcher::errorOccurred);
        connect(m_inner, &RunWatcher::statusChanged, this, &RunWatcher::statusChanged);
        // It ends at the run's first ending; a job Slurm requeues needs a new one (pollJob).
        connect(m_inner, &RunWatcher::finished, this, [this] { m_innerEnded = true; });
    }
}

void SlurmRunWatcher::stopInner()
{
    if (auto* l = qobject_cast<LocalRunWatcher*>(m_inner))
        l->stop();
    if (auto* r = qobject_cast<RemoteRunWatcher*>(m_inner))
        r->stop();
}

void SlurmRunWatcher::stop()
{
    if (m_timer)
        m_timer->stop();
    stopInner();
}

void SlurmRunWatcher::pollJob()
{
    if (m_done)
        return;
    SlurmLauncher launcher(&m_store, {}, SshClient(m_sshOptions));
    auto before = m_store.run(m_runId);
    bool jobAlive = false;
    auto status = launcher.poll(m_runId, &jobAlive);
    if (!status) {
        Q_EMIT errorOccurred(m_runId, status.error());
        return;
    }
    if (before && before->status != *status) {
        auto run = m_store.run(m_runId);
        Q_EMIT statusChanged(m_runId, *status, run ? run->message : QString());
        if (isTerminal(before->status)) { // requeued: what the restarted job wrote so far
            Q_EMIT eventsAdded(m_runId);
            Q_EMIT pointsAdded(m_runId, run ? run->lastStep : 0);
        }
    }
    // A job Slurm brought back (requeued) writes into the same folder: read it again.
    if (!isTerminal(*status) && m_innerEnded)
        if (auto run = m_store.run(m_runId))
            startInner(*run);
    if (isTerminal(*status) && !jobAlive) {
        m_done = true;
        // The job has ended but the tail streams may not have delivered the last lines yet: read
        // the rest once, synchronously, before the inner watcher goes away.
        if (m_timer)
            m_timer->stop();
        Result<IngestStats> drained = IngestStats {};
        if (auto* l = qobject_cast<LocalRunWatcher*>(m_inner)) {
            drained = l->poll();
        } else if (auto* r = qobject_cast<RemoteRunWatcher*>(m_inner)) {
            r->stop();
            drained = r->drain();
        }
        if (!drained)
            Q_EMIT errorOccurred(m_runId, drained.error());
        stop();
        before = m_store.run(m_runId);
        Q_EMIT pointsAdded(m_runId, before ? before->lastStep : 0);
        Q_EMIT finished(m_runId, *status);
    }
}

} // namespace shard::jobs
