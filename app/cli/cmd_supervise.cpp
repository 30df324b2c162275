// `shard supervise-command RUNDIR` (hidden): the process that runs a command run's command and
// writes its run folder (jobs/command_run.h). `shard run --command` and the studio start it
// detached; it is not meant to be typed.
#include "command.h"
#include "jobs/command_run.h"

namespace shard::cli {
namespace {

const CommandRegistration kRegistration([](CLI::App& app) {
    auto dir = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("supervise-command",
        "run a command run's command and write its run folder (started by `shard run "
        "--command`)");
    cmd->group(""); // hidden from --help
    cmd->add_option("rundir", *dir, "the run folder holding command.json")->required();
    cmd->callback([dir] { exitCode() = jobs::superviseCommand(QString::fromStdString(*dir)); });
});

} // namespace
} // namespace shard::cli
