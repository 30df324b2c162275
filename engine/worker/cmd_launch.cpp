// `shard-worker launch`: start this node's ranks like torchrun and supervise them.
#include <memory>

#include "command.h"
#include "launch/launch_options.h"
#include "launch/launcher.h"

namespace shard::worker {
namespace {

CommandRegistration registration([](CLI::App& app) {
    auto* cmd = app.add_subcommand("launch",
        "Start N ranks of a worker command on this node (like torchrun): launch "
        "--nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] -- train "
        "...");
    auto request = std::make_shared<launch::LaunchRequest>();
    auto nproc = std::make_shared<int>(1);
    auto nnodes = std::make_shared<int>(1);
    auto nodeRank = std::make_shared<int>(0);
    auto masterAddr = std::make_shared<std::string>();
    auto masterPort = std::make_shared<int>(0);
    auto runDir = std::make_shared<std::string>();
    auto* optNproc = cmd->add_option("--nproc-per-node", *nproc, "ranks on this node");
    auto* optNnodes = cmd->add_option("--nnodes", *nnodes, "number of nodes (default 1)");
    auto* optNodeRank = cmd->add_option("--node-rank", *nodeRank, "this node's index 0..M-1");
    auto* optAddr
        = cmd->add_option("--master-addr", *masterAddr, "node 0's address (default 127.0.0.1)");
    auto* optPort = cmd->add_option("--master-port", *masterPort,
        "rendezvous port on node 0; 0 picks a free port (single node only)");
    auto* optRunDir = cmd->add_option(
        "--run-dir", *runDir, "run directory for logs/ and events.jsonl (default: worker's --out)");
    cmd->add_option("--rdzv-timeout", request->rdzvTimeoutSec,
        "seconds to wait for all nodes / ranks to join (default 60)");
    cmd->add_option("--grace-period", request->gracePeriodSec,
        "seconds between SIGTERM and SIGKILL when stopping ranks (default 5)");
    auto hang = std::make_shared<double>(0.0);
    auto* optHang = cmd->add_option("--hang-timeout", *hang,
        "seconds without a heartbeat after which a rank counts as hung and the run is stopped "
        "(5x as long for a rank that beats but makes no progress; 4x during set-up, the first "
        "step and checkpoint writes; 0 = off; default: $SHARD_HANG_TIMEOUT_S, else the run "
        "spec's hang_timeout_sec, 300)");
    auto collective = std::make_shared<double>(0.0);
    auto* optCollective = cmd->add_option("--collective-timeout", *collective,
        "seconds one collective may wait for the other ranks (default: "
        "$SHARD_COLLECTIVE_TIMEOUT_S, else 1800)");
    cmd->add_option("worker", request->workerArgs, "the worker command, after '--'");
    cmd->callback([=] {
        if (optNproc->count())
            request->nprocPerNode = *nproc;
        if (optNnodes->count())
            request->nnodes = *nnodes;
        if (optNodeRank->count())
            request->nodeRank = *nodeRank;
        if (optAddr->count())
            request->masterAddr = *masterAddr;
        if (optPort->count())
            request->masterPort = *masterPort;
        if (optRunDir->count())
            request->runDir = *runDir;
        if (optHang->count())
            request->hangTimeoutSec = *hang;
        if (optCollective->count())
            request->collectiveTimeoutSec = *collective;
        auto options = launch::resolveLaunchOptions(*request, launch::currentEnvironment());
        exitCode() = launch::Launcher(options).run();
    });
});

} // namespace
} // namespace shard::worker
