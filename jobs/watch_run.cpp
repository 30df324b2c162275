// Watcher selection by run target (see watch_run.h).
#include "jobs/watch_run.h"

#include "jobs/local_launcher.h"
#include "jobs/local_run_watcher.h"
#include "jobs/remote_run_watcher.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"

namespace shard::jobs {

Result<std::unique_ptr<RunWatcher>> watchRun(
    RunStore& store, const RunRecord& run, const SshOptions& sshOptions, QObject* parent)
{
    if (run.target == QLatin1String("local")) {
        auto w = std::make_unique<LocalRunWatcher>(store, run.id, run.runDir, parent);
        w->setProcess(run.pid, LocalLauncher::startTimeOf(run));
        w->start(250);
        return std::unique_ptr<RunWatcher>(std::move(w));
    }
    if (run.target == QLatin1String("ssh")) {
        const auto nodes = SshLauncher::nodesOf(run);
        auto host = nodes.isEmpty() ? SshHost::parse(run.host.section(',', 0, 0))
                                    : Result<SshHost>(nodes.front().host);
        if (!host)
            return fail(QStringLiteral("run %1: %2").arg(run.id).arg(host.error()));
        auto w = std::make_unique<RemoteRunWatcher>(
            store, run.id, *host, run.runDir, sshOptions, parent);
        w->setProcess(run.pid);
        w->start();
        return std::unique_ptr<RunWatcher>(std::move(w));
    }
    if (run.target == QLatin1String("slurm")) {
        auto w = std::make_unique<SlurmRunWatcher>(store, run.id, sshOptions, parent);
        w->start(2000);
        return std::unique_ptr<RunWatcher>(std::move(w));
    }
    return fail(QStringLiteral("run %1 has an unknown target '%2'").arg(run.id).arg(run.target));
}

} // namespace shard::jobs
