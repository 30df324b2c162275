// `shard attach HOST:RUNDIR | RUNDIR | RUN`: (re-)attach to a run through its launcher: a run
// directory started anywhere, remote or on this machine (recorded in the store on first
// attach), or a run already in the store. Ingests what
// was missed (from the stored offsets, so nothing twice) and follows it.
#include <cstdio>

#include <QFileInfo>

#include "command.h"
#include "run_follow.h"
#include "terminal_text.h"

namespace shard::cli {
namespace {

struct AttachOptions {
    std::string store;
    std::string target;
    std::string sshConfig;
    bool noFollow = false;
};

int attachCommand(const AttachOptions& o)
{
    if (!o.sshConfig.empty())
        qputenv("SHARD_SSH_CONFIG", QByteArray::fromStdString(o.sshConfig));
    jobs::RunStore store = openStore(o.store);
    const QString target = QString::fromStdString(o.target);
    // A folder is attached where it is (recorded on first attach); a recorded run through the
    // launcher it was started with (a local one is settled first when its launcher vanished).
    // HOST:RUNDIR, unless it names a folder here.
    const std::optional<jobs::RemotePath> split
        = QFileInfo::exists(target) ? std::nullopt : jobs::splitRemotePath(target);
    const bool remote = split.has_value();
    const QString host = remote ? split->host : QString();
    QString dir = remote ? split->path : QString();
    auto launcher = [&]() -> jobs::Result<std::unique_ptr<jobs::Launcher>> {
        if (remote)
            return jobs::makeLauncher(jobs::LaunchTarget::ssh({host}), &store);
        if (!store.findRun(target) && QFileInfo(target).isDir()) {
            dir = target; // a run folder on this machine, not a run's id or name
            return jobs::makeLauncher(jobs::LaunchTarget {}, &store);
        }
        const jobs::RunRecord run = findRun(store, o.target);
        dir = run.runDir;
        return jobs::launcherOf(store, run);
    }();
    if (!launcher)
        throw std::runtime_error(launcher.error().toStdString());
    auto attached = launcher.value()->attach(dir);
    if (!attached)
        throw std::runtime_error(attached.error().toStdString());
    const qint64 id = attached.value();
    auto run = store.run(id);
    std::printf("attached to run %lld '%s' (%s): %lld points so far\n", static_cast<long long>(id),
        terminalText(run->name).constData(), qPrintable(jobs::toString(run->status)),
        static_cast<long long>(store.metricCount(id).valueOr(0)));
    if (o.noFollow || jobs::isTerminal(run->status)) {
        printSummary(*store.run(id));
        return exitCodeFor(store.run(id)->status);
    }
    const jobs::RunRecord final = followRun(store, id);
    if (jobs::isTerminal(final.status))
        printSummary(final);
    return exitCodeFor(final.status);
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto o = std::make_shared<AttachOptions>();
    auto* cmd = app.add_subcommand(
        "attach", "attach to a run: HOST:RUNDIR (remote), RUNDIR (this machine) or a run id");
    cmd->add_option(
           "target", o->target, "[user@]host[:port]:RUNDIR, a run folder here, or a run id or name")
        ->required();
    cmd->add_option("--store", o->store, "run store");
    cmd->add_option("--ssh-config", o->sshConfig, "ssh config file (-F)");
    cmd->add_flag("--no-follow", o->noFollow, "ingest what is there and return");
    cmd->callback([o] { exitCode() = attachCommand(*o); });
});

} // namespace
} // namespace shard::cli
