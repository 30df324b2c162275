// `shard stop RUN`: stop a run wherever it runs (TERM to the launcher, KILL after a grace
// period; scancel for Slurm), then ingest what it wrote last.
#include <cstdio>

#include "command.h"
#include "run_follow.h"

namespace shard::cli {
namespace {

struct StopOptions {
    std::string store;
    std::string run;
    double graceSec = 10.0;
    std::string sshConfig;
};

int stopCommand(const StopOptions& o)
{
    if (!o.sshConfig.empty())
        qputenv("SHARD_SSH_CONFIG", QByteArray::fromStdString(o.sshConfig));
    jobs::RunStore store = openStore(o.store);
    const jobs::RunRecord run = findRun(store, o.run);
    if (jobs::isTerminal(run.status)) {
        std::printf("run %lld has already ended (%s)\n", static_cast<long long>(run.id),
            qPrintable(jobs::toString(run.status)));
        return 0;
    }
    const int graceMs = static_cast<int>(o.graceSec * 1000);
    auto launcher = jobs::launcherOf(store, run);
    const jobs::Status s = launcher ? launcher.value()->stop(run.id, graceMs)
                                    : jobs::Status(jobs::fail(launcher.error()));
    if (!s)
        throw std::runtime_error(QStringLiteral("cannot stop run %1 ('%2'): %3")
                                     .arg(run.id)
                                     .arg(run.name, s.error())
                                     .toStdString());
    printSummary(*store.run(run.id));
    return 0;
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto o = std::make_shared<StopOptions>();
    auto* cmd = app.add_subcommand("stop", "stop a run (local, SSH or Slurm)");
    cmd->add_option("run", o->run, "run id or name")->required();
    cmd->add_option("--store", o->store, "run store");
    cmd->add_option("--grace", o->graceSec, "seconds between TERM and KILL (default 10)");
    cmd->add_option("--ssh-config", o->sshConfig, "ssh config file (-F)");
    cmd->callback([o] { exitCode() = stopCommand(*o); });
});

} // namespace
} // namespace shard::cli
