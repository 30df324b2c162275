// SshLauncher: starts one `shard-worker launch` per host over OpenSSH (rendezvous on the first
// host), detached on the remote side so it survives the connection; the remote run directory is
// the source of truth. Also remote stop and attach to a run started elsewhere.
#pragma once

#include <QList>

#include "jobs/host_check.h"
#include "jobs/launch_request.h"
#include "jobs/launcher.h"
#include "jobs/run_store.h"
#include "jobs/ssh_client.h"

namespace shard::jobs {

struct RemoteNode {
    SshHost host;
    qint64 pid = 0;
    QString runDir; // the node launcher's --run-dir (node 0: the run directory)
};

class SshLauncher : public Launcher {
public:
    // A launcher for runs on `hosts` (node 0 first); `store` may be null for describe() and
    // checkHost().
    SshLauncher(RunStore* store, QList<SshHost> hosts, SshClient ssh = SshClient())
        : m_store(store)
        , m_hosts(std::move(hosts))
        , m_ssh(std::move(ssh))
    {
    }

    TargetKind kind() const override { return TargetKind::Ssh; }
    const QList<SshHost>& hosts() const { return m_hosts; }

    // Run directory on the hosts: request.runDir (absolute, or relative to the remote home),
    // default shard-runs/<name>-<time>. Returns the run id; the run is `running`.
    Result<qint64> start(const LaunchRequest& request) override;

    // TERM to every node launcher, KILL to its session after graceMs; then reads the rest.
    Status stop(qint64 runId, int graceMs = 10000) override;

    // The script start() runs on each host (its stdin is the launch spec), and the spec.
    Result<QString> describe(const LaunchRequest& request) const override;

    // Records (or finds) a run whose directory lives on the first host, reading its run.json
    // and launcher.pid, and ingests what is there; with several hosts, a run recorded under all
    // of them is caught up from node 0. Returns the run id.
    Result<qint64> attach(const QString& runDir) override;

    // The run's node 0, else the first host.
    std::optional<SshHost> fileHost(const RunRecord& run) const override;
    // A RemoteRunWatcher on the run folder on its node 0.
    Result<std::unique_ptr<RunWatcher>> watch(
        const RunRecord& run, QObject* parent = nullptr) override;

    // For a Hosts page's "test connection": connects (BatchMode) to the first host, runs
    // `<worker> --version` and lists the host's GPUs (nvidia-smi). Returns the version line and
    // the GPUs, or the one-line reason (unreachable, auth refused, host key, shard-worker not
    // installed). Blocking: call it off the UI thread.
    Result<HostCheck> checkHost(const QString& workerProgram = "shard-worker") const override;
    // The same with a given client and host (the Hosts page's Test, which has no run store).
    static Result<HostCheck> checkHost(
        const SshClient& ssh, const SshHost& host, const QString& workerProgram = "shard-worker");

    // The shell script that starts node `nodeRank`'s launcher on its host, detached, reading the
    // launch spec from its stdin: exactly what start() runs there (the Launch page shows it).
    static QString nodeScript(const LaunchRequest& request, const QString& absDir, int nnodes,
        int nodeRank, const QString& masterAddr, int port);

    // The nodes recorded for an SSH run.
    static QList<RemoteNode> nodesOf(const RunRecord& run);
    // The run's hosts, node 0 first: its recorded launchers', else the hosts it was recorded at.
    static QList<SshHost> hostsOf(const RunRecord& run);

    const SshClient& ssh() const { return m_ssh; }

private:
    // request.copyInputs: the spec's model, tokenizer, eval and data files copied to
    // <run>/inputs/ on every host; returns the spec naming the copies.
    Result<protocol::RunSpec> copyInputs(const QString& absDir, protocol::RunSpec spec);
    // attach() for one host's folder.
    Result<qint64> attachOn(const SshHost& host, const QString& runDir);

    RunStore* m_store;
    QList<SshHost> m_hosts;
    SshClient m_ssh;
};

} // namespace shard::jobs
