// Multi-node launch over OpenSSH (see ssh_launcher.h). Every value placed in a remote command
// line goes through SshClient::shellQuote.
#include "jobs/ssh_launcher.h"

#include <QFileInfo>

#include <nlohmann/json.hpp>

#include "jobs/ingestor.h"
#include "jobs/remote_run_watcher.h"

namespace shard::jobs {

namespace {

using Q = SshClient;

QString lineValue(const QByteArray& out, const char* key)
{
    for (const QByteArray& line : out.split('\n'))
        if (line.startsWith(key))
            return QString::fromUtf8(line.mid(static_cast<int>(qstrlen(key)))).trimmed();
    return {};
}

// Stops one node: TERM, wait up to graceMs while it is still the process started for this run
// directory, then KILL its process group.
QString stopScript(qint64 pid, const QString& nodeRunDir, int graceMs)
{
    return QStringLiteral(
        "p=%1; d=%2; "
        "alive() { kill -0 \"$p\" 2>/dev/null && tr '\\000' '\\n' < /proc/$p/cmdline 2>/dev/null "
        "| grep -qxF -- \"$d\"; }; "
        "alive || exit 0; kill -TERM \"$p\"; i=0; "
        "while [ $i -lt %3 ]; do alive || exit 0; sleep 0.1; i=$((i+1)); done; "
        "kill -KILL -- \"-$p\" 2>/dev/null; kill -KILL \"$p\" 2>/dev/null; exit 0")
        .arg(pid)
        .arg(Q::shellQuote(nodeRunDir))
        .arg(std::max(1, graceMs / 100));
}

} // namespace

QList<RemoteNode> SshLauncher::nodesOf(const RunRecord& run)
{
    QList<RemoteNode> nodes;
    auto j = nlohmann::json::parse(run.launchInfo.constData(),
        run.launchInfo.constData() + run.launchInfo.size(), nullptr, false);
    if (!j.is_object() || !j.contains("nodes") || !j["nodes"].is_array())
        return nodes;
    for (const auto& n : j["nodes"]) {
        auto host = SshHost::parse(QString::fromStdString(n.value("host", "")));
        if (!host)
            continue;
        RemoteNode node;
        node.host = *host;
        node.pid = n.value("pid", qint64(0));
        node.runDir = QString::fromStdString(n.value("run_dir", ""));
        nodes.push_back(node);
    }
    return nodes;
}

QList<SshHost> SshLauncher::hostsOf(const RunRecord& run)
{
    QList<SshHost> hosts;
    for (const RemoteNode& node : nodesOf(run))
        hosts << node.host;
    if (hosts.isEmpty())
        for (const QString& h : run.host.split(',', Qt::SkipEmptyParts))
            if (auto host = SshHost::parse(h))
                hosts << *host;
    return hosts;
}

Result<protocol::RunSpec> SshLauncher::copyInputs(const QString& absDir, protocol::RunSpec spec)
{
    const QList<SshHost>& hosts = m_hosts;
    const QString inputs = absDir + QStringLiteral("/inputs");
    // Each local path goes to inputs/<its name> on every host; the spec names the copy.
    auto copy = [&](std::string& field) -> Status {
        if (field.empty())
            return {};
        const QString path = QString::fromStdString(field);
        for (const SshHost& host : hosts)
            if (auto s = m_ssh.upload(host, path, inputs); !s)
                return fail(s.error());
        field = (inputs + '/' + QFileInfo(path).fileName()).toStdString();
        return {};
    };
    for (std::string* field :
        {&spec.model, &spec.tokenizer, &spec.evalData, &spec.samplePrompts, &spec.loraInit})
        if (auto s = copy(*field); !s)
            return fail(s.error());
    for (std::string& d : spec.data)
        if (auto s = copy(d); !s)
            return fail(s.error());
    return spec;
}

QString SshLauncher::nodeScript(const LaunchRequest& req, const QString& absDir, int nnodes,
    int nodeRank, const QString& masterAddr, int port)
{
    // One run directory for every node: the launcher names its per-node files (pid, log) by
    // node rank, and node 0's records are the run's.
    const QString nodeDir = absDir;
    const QStringList args
        = workerLaunchArgs(req, absDir, nodeDir, nnodes, nodeRank, masterAddr, port);
    QString env;
    for (const QString& kv : req.env)
        if (kv.indexOf('=') > 0)
            env += QStringLiteral("export %1; ").arg(Q::shellQuote(kv));
    // Fully detached from the SSH session: its own session (setsid, no controlling terminal),
    // SIGHUP ignored (nohup), no stdin, output to a file. The session's end, or the death of the
    // CLI that opened it, reaches nothing of the run. Its stdin is the launch spec.
    return QStringLiteral(
        "w=%1; command -v \"$w\" >/dev/null 2>&1 || { echo \"shard-worker not found: $w\" "
        ">&2; exit 127; }; mkdir -p -- %2/logs %3/logs || exit 1; cd -- %2 || exit 1; "
        "cat > launch-spec.json || exit 1; "
        "%4 setsid nohup \"$w\" %5 > %6 2>&1 < /dev/null & echo \"PID=$!\"")
        .arg(Q::shellQuote(req.workerProgram), Q::shellQuote(absDir), Q::shellQuote(nodeDir), env,
            Q::shellJoin(args),
            Q::shellQuote(nodeDir + QStringLiteral("/logs/launcher-node-%1.out").arg(nodeRank)));
}

Result<qint64> SshLauncher::start(const LaunchRequest& request)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    const QList<SshHost>& hosts = m_hosts;
    if (hosts.isEmpty())
        return fail(QStringLiteral("no SSH host given (--host [user@]host[:port])"));
    const QString name = request.name.isEmpty() ? QStringLiteral("run") : request.name;
    QString runDir = request.runDir;
    runDir = SshClient::homeRelative(runDir);
    if (runDir.isEmpty())
        runDir = QStringLiteral("shard-runs/") + newRunDirName(name);
    LaunchRequest req = request;

    // Node 0: make the directory, refuse one that holds a run (unless resuming it), learn its
    // absolute path.
    const SshHost& first = hosts.front();
    auto prep = m_ssh.run(first,
        QStringLiteral("d=%1; if [ %2 = 0 ] && { [ -e \"$d/metrics.jsonl\" ] || [ -e "
                       "\"$d/events.jsonl\" ]; }; then echo EXISTS; exit 0; fi; mkdir -p -- "
                       "\"$d/logs\" && cd -- \"$d\" && echo \"DIR=$(pwd)\"")
            .arg(Q::shellQuote(runDir))
            .arg(req.resume ? 1 : 0));
    if (!prep)
        return fail(prep.error());
    if (prep->out.contains("EXISTS"))
        return fail(QStringLiteral("%1:%2 already holds a run; choose another run name or "
                                   "folder, or attach to that run to follow it")
                        .arg(first.toString(), runDir));
    const QString absDir = lineValue(prep->out, "DIR=");
    if (prep->exitCode != 0 || absDir.isEmpty())
        return fail(
            QStringLiteral("cannot create the run directory %1 on %2: %3")
                .arg(runDir, first.toString(), QString::fromLocal8Bit(prep->err).trimmed()));

    if (req.copyInputs) {
        auto copied = copyInputs(absDir, req.spec);
        if (!copied)
            return fail(copied.error());
        req.spec = *copied;
    }

    QString masterAddr = req.masterAddr;
    if (masterAddr.isEmpty() && hosts.size() > 1) {
        auto resolved = m_ssh.resolveHostName(first);
        if (!resolved)
            return fail(resolved.error());
        masterAddr = *resolved;
    }
    const int port
        = req.masterPort > 0 ? req.masterPort : (hosts.size() > 1 ? pickMasterPort() : 0);

    QStringList hostNames;
    for (const auto& h : hosts)
        hostNames << h.toString();
    NewRun nr;
    nr.name = name;
    nr.specJson = recordedSpecJson(req.spec);
    nr.target = TargetKind::Ssh;
    nr.host = hostNames.join(',');
    nr.runDir = absDir;
    auto id = req.resume ? m_store->reopenOrCreateRun(nr) : m_store->createRun(nr);
    if (!id)
        return id;

    nlohmann::json nodes = nlohmann::json::array();
    QList<RemoteNode> started;
    auto abort = [&](const QString& why) -> Result<qint64> {
        for (const RemoteNode& n : started)
            (void)m_ssh.run(n.host, stopScript(n.pid, n.runDir, 2000));
        (void)m_store->setStatus(*id, RunStatus::Failed, why);
        return fail(why);
    };
    const QByteArray spec = launchSpecJson(req.spec, absDir);
    for (int i = 0; i < hosts.size(); ++i) {
        const SshHost& host = hosts[i];
        const QString nodeDir = absDir;
        const QString script
            = nodeScript(req, absDir, static_cast<int>(hosts.size()), i, masterAddr, port);
        auto r = m_ssh.run(host, script, spec);
        if (!r)
            return abort(r.error());
        if (r->exitCode == 127)
            return abort(QStringLiteral("shard-worker is not installed on %1 ('%2' is not on the "
                                        "PATH of a non-interactive shell there); install it or "
                                        "pass --worker /path/to/shard-worker")
                             .arg(host.toString(), req.workerProgram));
        const qint64 pid = lineValue(r->out, "PID=").toLongLong();
        if (r->exitCode != 0 || pid <= 0)
            return abort(QStringLiteral("starting the launcher on %1 failed (exit %2): %3")
                             .arg(host.toString())
                             .arg(r->exitCode)
                             .arg(QString::fromLocal8Bit(r->err).trimmed()));
        started.push_back({host, pid, nodeDir});
        nodes.push_back({{"host", host.toString().toStdString()}, {"pid", pid},
            {"run_dir", nodeDir.toStdString()}});
    }
    const nlohmann::json info = {{"nodes", nodes}, {"master_addr", masterAddr.toStdString()},
        {"master_port", port}, {"worker", req.workerProgram.toStdString()}};
    if (auto s
        = m_store->setProcess(*id, started.front().pid, QByteArray::fromStdString(info.dump()));
        !s)
        return fail(s.error());
    if (auto s = m_store->setStatus(*id, RunStatus::Running); !s)
        return fail(s.error());
    return id;
}

Status SshLauncher::stop(qint64 runId, int graceMs)
{
    if (auto s = requireStore(m_store); !s)
        return s;
    auto run = m_store->run(runId);
    if (!run)
        return fail(run.error());
    if (run->target != TargetKind::Ssh)
        return fail(QStringLiteral("run %1 is not an SSH run (target %2)")
                        .arg(runId)
                        .arg(toString(run->target)));
    const QList<RemoteNode> nodes = nodesOf(*run);
    if (nodes.isEmpty())
        return fail(QStringLiteral("run %1 has no recorded remote launcher (attached run?); stop "
                                   "it where it was started")
                        .arg(runId));
    QString errors;
    for (const RemoteNode& n : nodes) {
        auto r = m_ssh.run(n.host, stopScript(n.pid, n.runDir, graceMs), {}, graceMs + 30000);
        if (!r)
            errors += (errors.isEmpty() ? "" : "; ") + r.error();
    }
    auto caught
        = RemoteRunWatcher::catchUp(*m_store, runId, m_ssh, nodes.front().host, run->runDir);
    if (!caught && !errors.contains(caught.error())) // an unreachable host: say it once
        errors += (errors.isEmpty() ? "" : "; ") + caught.error();
    if (!errors.isEmpty())
        return fail(errors);
    return markStoppedOnRequest(*m_store, runId);
}

Result<HostCheck> SshLauncher::checkHost(
    const SshClient& ssh, const SshHost& host, const QString& workerProgram)
{
    auto r = ssh.run(host,
        QStringLiteral("w=%1; command -v \"$w\" >/dev/null 2>&1 || exit 127; \"$w\" --version "
                       "|| exit $?; echo @@gpus; %2")
            .arg(Q::shellQuote(workerProgram), gpuQueryScript()),
        {}, 30000);
    if (!r)
        return fail(r.error());
    if (r->exitCode == 127)
        return fail(QStringLiteral("shard-worker is not installed on %1 ('%2' is not on the PATH "
                                   "of a non-interactive shell there)")
                        .arg(host.toString(), workerProgram));
    if (r->exitCode != 0)
        return fail(QStringLiteral("%1 --version failed on %2: %3")
                        .arg(workerProgram, host.toString(),
                            QString::fromLocal8Bit(r->err).trimmed().section('\n', -1)));
    const QByteArray marker = "@@gpus\n"; // between the version line and the GPU list
    const int gpusAt = r->out.indexOf(marker);
    HostCheck check;
    check.answer = QString::fromUtf8(r->out.left(gpusAt < 0 ? r->out.size() : gpusAt))
                       .trimmed()
                       .section('\n', 0, 0);
    if (gpusAt >= 0)
        check.gpus = parseGpuList(r->out.mid(gpusAt + marker.size()));
    return check;
}

Result<QString> SshLauncher::describe(const LaunchRequest& request) const
{
    const int nnodes = int(m_hosts.size());
    QString text;
    for (int node = 0; node < nnodes; ++node) {
        const QString host = m_hosts[node].toString();
        text += QObject::tr("# Runs on %1 over SSH, detached (it outlives the connection); this "
                            "script, with the launch spec below on its stdin:\n")
                    .arg(host);
        if (node == 0)
            text += request.copyInputs
                ? QObject::tr("# First the model folder and data files are copied to "
                              "%1/inputs/ there, and the spec names the copies.\n")
                      .arg(request.runDir)
                : QObject::tr("# The model folder and data files must be on %1 at these "
                              "paths.\n")
                      .arg(host);
        text += nodeScript(request, request.runDir, nnodes, node,
                    nnodes > 1 && request.masterAddr.isEmpty() ? m_hosts[0].host
                                                               : request.masterAddr,
                    request.masterPort)
            + '\n';
    }
    return text.chopped(1) + launchSpecSection(request);
}

Result<HostCheck> SshLauncher::checkHost(const QString& workerProgram) const
{
    if (m_hosts.isEmpty())
        return fail(QObject::tr("no SSH host given"));
    return checkHost(m_ssh, m_hosts.front(), workerProgram);
}

Result<qint64> SshLauncher::attach(const QString& runDir)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    if (m_hosts.isEmpty())
        return fail(QStringLiteral("no SSH host given (HOST:RUNDIR)"));
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
                = RemoteRunWatcher::catchUp(*m_store, known.value(), m_ssh, m_hosts[0], runDir);
            if (!caught)
                return fail(caught.error());
            return known.value();
        }
    }
    return attachOn(m_hosts.front(), runDir);
}

std::optional<SshHost> SshLauncher::fileHost(const RunRecord& run) const
{
    const QList<RemoteNode> nodes = nodesOf(run);
    if (!nodes.isEmpty())
        return nodes.front().host;
    return m_hosts.isEmpty() ? std::nullopt : std::optional<SshHost>(m_hosts.front());
}

Result<std::unique_ptr<RunWatcher>> SshLauncher::watch(const RunRecord& run, QObject* parent)
{
    if (auto s = requireStore(m_store); !s)
        return fail(s.error());
    const std::optional<SshHost> host = fileHost(run);
    if (!host)
        return fail(QObject::tr("run %1 has no SSH host recorded").arg(run.id));
    auto w = std::make_unique<RemoteRunWatcher>(
        *m_store, run.id, *host, run.runDir, m_ssh.options(), parent);
    w->setProcess(run.pid);
    w->start();
    return std::unique_ptr<RunWatcher>(std::move(w));
}

Result<qint64> SshLauncher::attachOn(const SshHost& host, const QString& runDir)
{
    auto r = m_ssh.run(host,
        QStringLiteral(
            "d=%1; cd -- \"$d\" 2>/dev/null || { echo NODIR; exit 0; }; "
            "for f in events.jsonl metrics.jsonl launcher.pid run.json launch-spec.json; "
            "do [ -e \"$f\" ] && break; f=; done; [ -n \"$f\" ] || { echo NORUN; exit 0; }; "
            "echo \"DIR=$(pwd)\"; echo \"PID=$(cat launcher.pid 2>/dev/null)\"; echo SPEC; "
            "cat run.json 2>/dev/null || cat launch-spec.json 2>/dev/null")
            .arg(Q::shellQuote(SshClient::homeRelative(runDir))));
    if (!r)
        return fail(r.error());
    if (r->out.startsWith("NODIR"))
        return fail(QStringLiteral("%1 has no run directory %2").arg(host.toString(), runDir));
    // A folder with none of a run's files (a typo, a parent folder) would be followed forever.
    if (r->out.startsWith("NORUN"))
        return fail(QStringLiteral("%1:%2 is not a run directory (no events.jsonl, metrics.jsonl, "
                                   "launcher.pid or run.json in it); give the folder `shard run` "
                                   "printed")
                        .arg(host.toString(), runDir));
    const QString absDir = lineValue(r->out, "DIR=");
    const qint64 pid = lineValue(r->out, "PID=").toLongLong();
    const int specAt = r->out.indexOf("SPEC\n");
    const QByteArray spec = specAt >= 0 ? r->out.mid(specAt + 5).trimmed() : QByteArray();

    auto existing = m_store->findRunByDir(host.toString(), absDir);
    if (!existing)
        return fail(existing.error());
    qint64 id = *existing;
    if (id == 0) {
        NewRun nr;
        nr.name = absDir.section('/', -1);
        nr.specJson = spec.startsWith('{') ? spec : QByteArray("{}");
        nr.target = TargetKind::Ssh;
        nr.host = host.toString();
        nr.runDir = absDir;
        nr.status = RunStatus::Running;
        auto created = m_store->createRun(nr);
        if (!created)
            return created;
        id = *created;
        if (pid > 0) {
            const nlohmann::json info = {{"nodes",
                nlohmann::json::array({{{"host", host.toString().toStdString()}, {"pid", pid},
                    {"run_dir", absDir.toStdString()}}})}};
            (void)m_store->setProcess(id, pid, QByteArray::fromStdString(info.dump()));
        }
    }
    auto caught = RemoteRunWatcher::catchUp(*m_store, id, m_ssh, host, absDir);
    if (!caught)
        return fail(caught.error());
    return id;
}

} // namespace shard::jobs
