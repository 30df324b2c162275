// `shard-worker launch`: start this node's ranks like torchrun and supervise them. The flags are
// protocol::launchFlags() and are read by protocol::LaunchArgs::fromArgv, the inverse of the
// toArgv() the studio and `shard run` build this command with.
#include <deque>
#include <memory>
#include <thread>

#include "command.h"
#include "launch/launch_options.h"
#include "launch/launcher.h"
#include "protocol/launch_args.h"

namespace shard::worker {
namespace {

struct LaunchCli {
    std::deque<std::string> values; // one per launch flag
    std::vector<std::pair<const protocol::LaunchFlag*, CLI::Option*>> options;
    std::vector<std::string> worker;
};

CommandRegistration registration([](CLI::App& app) {
    auto* cmd = app.add_subcommand("launch",
        "Start N ranks of a worker command on this node (like torchrun): launch "
        "--nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] -- train "
        "...");
    auto cli = std::make_shared<LaunchCli>();
    for (const protocol::LaunchFlag& flag : protocol::launchFlags())
        cli->options.push_back(
            {&flag, cmd->add_option(flag.name, cli->values.emplace_back(), flag.help)});
    cmd->add_option("worker", cli->worker, "the worker command, after '--'");
    cmd->callback([cli] {
        // The flags as given, read back by the one parser of this command line.
        std::vector<std::string> argv;
        for (size_t i = 0; i < cli->options.size(); ++i)
            if (cli->options[i].second->count() > 0) {
                argv.push_back(cli->options[i].first->name);
                argv.push_back(cli->values[i]);
            }
        argv.push_back("--");
        argv.insert(argv.end(), cli->worker.begin(), cli->worker.end());
        const auto request = protocol::LaunchArgs::fromArgv(argv);
        auto options = launch::resolveLaunchOptions(request, launch::currentEnvironment());
        if (options.cpuRanks)
            launch::checkCpuRanks(options.nprocPerNode,
                static_cast<int>(std::thread::hardware_concurrency()),
                launch::availableHostBytes());
        exitCode() = launch::Launcher(options).run();
    });
});

} // namespace
} // namespace shard::worker
