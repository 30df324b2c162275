// `shard-worker train ...`: one rank of a fine-tuning run (flags, or a JSON run spec with
// --config; flags given explicitly override the spec's values).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "core/train/trainer.h"
#include "dist/rank_env.h"
#include "launch/rank_heartbeat.h"
#include "protocol/adapter_shape.h"
#include "protocol/run_dir.h"
#include "protocol/run_spec.h"
#include "protocol/train_flags.h"
#ifdef SHARD_HAVE_FSDP
#include "fsdp/register_strategies.h"
#endif
#if __has_include("ckpt/train_checkpointer.h")
#include "ckpt/train_checkpointer.h"
#endif

namespace shard::worker {

namespace {

struct TrainArgs {
    std::string config;
    std::deque<std::string> values; // one per protocol::trainFlags() entry (stable addresses)
    CLI::Option* nprocOption = nullptr;
    std::vector<std::pair<CLI::Option*, std::function<void(protocol::RunSpec&)>>> overrides;
    std::vector<std::string> overrideKeys; // the run-spec key of each override ("lora_rank")
};

// Set by SIGUSR1: the run is preempted (Slurm's --signal=USR1@N before a time limit, the
// launcher forwarding it, or a person); the trainer checkpoints at its next logged step and
// stops (TrainerOptions::preemptRequest).
std::atomic<bool> g_preempt {false};

void installPreemptHandler()
{
    struct sigaction sa { };
    sa.sa_handler = [](int) { g_preempt.store(true); };
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR1, &sa, nullptr);
}

// The heartbeat to the launcher (when there is one), from set-up on; the timeout is
// $SHARD_HANG_TIMEOUT_S (`launch --hang-timeout`) or the spec's.
void startHeartbeat(const protocol::RunSpec& spec)
{
    double timeout = spec.hangTimeoutSec;
    if (const char* v = std::getenv(launch::kHangTimeoutEnv); v && *v) {
        char* end = nullptr;
        timeout = std::strtod(v, &end);
        if (*end != '\0' || !(timeout >= 0))
            throw std::runtime_error(std::string(launch::kHangTimeoutEnv) + "='" + v
                + "' is not a number of seconds (0 = off)");
    }
    launch::RankHeartbeat::start(timeout);
    launch::RankHeartbeat::report(0, launch::RankPhase::Setup);
}

// Under `shard-worker launch` the launcher's rank count is the run's: run.json records it and
// the hybrid group is checked against it. An explicit --nproc-per-node that disagrees is refused
// (the launcher, not this flag, decides how many ranks start).
void takeLauncherRankCount(protocol::RunSpec& spec, bool explicitFlag)
{
    // The same rank identity the trainer reads (a launcher's RANK..., or srun's SLURM_*).
    const dist::RankEnv env = dist::RankEnv::fromEnvironment();
    if (env.source == "single")
        return;
    const int local = env.localWorldSize;
    const int world = env.worldSize;
    if (local < 1 || world < local || world % local != 0)
        return;
    if (explicitFlag && spec.procsPerNode != local)
        throw std::runtime_error("train --nproc-per-node " + std::to_string(spec.procsPerNode)
            + " but the launcher started " + std::to_string(local)
            + " ranks on this node; give the rank count once, to the launcher (`shard run "
              "--nproc N`, or `shard-worker launch --nproc-per-node N -- train ...`)");
    spec.procsPerNode = local;
    spec.nodes = world / local;
}

void train(TrainArgs& a)
{
    installPreemptHandler(); // first: a SIGUSR1 during set-up is not this rank's death
    protocol::RunSpec spec;
    std::set<std::string> userSet; // the spec's keys given (--lora-init keeps the others' shape)
    if (!a.config.empty()) {
        std::ifstream in(a.config);
        if (!in)
            throw std::runtime_error(a.config + ": cannot open the run spec");
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const std::exception& e) {
            throw std::runtime_error(a.config + ": not valid JSON (" + e.what() + ")");
        }
        try {
            spec = protocol::runSpecFromJson(j);
        } catch (const std::exception& e) {
            throw std::runtime_error(a.config + ": " + e.what());
        }
        if (j.is_object())
            for (const auto& [key, value] : j.items())
                userSet.insert(key);
    }
    for (size_t i = 0; i < a.overrides.size(); ++i)
        if (a.overrides[i].first->count() > 0) {
            a.overrides[i].second(spec);
            userSet.insert(a.overrideKeys[i]);
        }
    protocol::adoptAdapterShape(spec, userSet);
    startHeartbeat(spec);
    takeLauncherRankCount(spec, a.nprocOption->count() > 0);
#ifdef SHARD_HAVE_FSDP
    fsdp::registerStrategies();
#endif
    engine::TrainerOptions options;
    options.preemptRequest = &g_preempt;
#if __has_include("ckpt/train_checkpointer.h")
    options.checkpoints = ckpt::makeTrainCheckpointer(spec, spec.model);
#else
    if (spec.checkpointEvery > 0 || !spec.resume.empty())
        throw std::runtime_error(
            "this build lacks checkpoints (shard_ckpt); drop --checkpoint-every "
            "and --resume");
#endif
    // A set-up error (device, memory limit, data, ...) reaches the launcher's error event too.
    std::unique_ptr<engine::Trainer> made;
    try {
        made = std::make_unique<engine::Trainer>(spec, options);
    } catch (const std::exception& e) {
        launch::RankHeartbeat::reportError(e.what());
        throw;
    }
    engine::Trainer& trainer = *made;
    try {
        const engine::TrainResult result = trainer.run();
        if (result.preemptedAt > 0) {
            // Its own exit status: the launcher and a batch script tell a preemption (continue
            // from the checkpoint) from a failure.
            made.reset();
            std::fflush(nullptr);
            std::exit(protocol::kPreemptedExitCode);
        }
    } catch (const protocol::RunDirWriteError& e) {
        launch::RankHeartbeat::reportError(e.what());
        // Its own exit status, so the launcher (and a script) can tell a full disk apart. Out
        // at once: tearing the trainer down first would let the peers, whose connections to
        // this rank close meanwhile, exit first, and the launcher's stop end this rank by
        // SIGTERM before it tells why (every record was written, or failed, synchronously).
        std::fprintf(stderr, "shard-worker: error: %s\n", e.what());
        std::fflush(nullptr);
        std::_Exit(protocol::kWriteFailedExitCode);
    } catch (const engine::OutOfMemory& e) {
        // Out at once, as above: the strategy's collectives in flight are not waited for.
        launch::RankHeartbeat::reportError(e.what());
        std::fprintf(stderr, "shard-worker: error: %s\n", e.what());
        std::fflush(nullptr);
        std::_Exit(1);
    } catch (const std::exception& e) {
        launch::RankHeartbeat::reportError(e.what());
        throw;
    }
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto args = std::make_shared<TrainArgs>();
    TrainArgs& a = *args;
    auto* cmd = app.add_subcommand("train", "Fine-tune a model (one rank of a run)");
    cmd->add_option("--config", a.config, "JSON run spec (run.json); flags override its values");
    // The flags and the fields they set are listed once, in protocol::trainFlags().
    for (const protocol::TrainFlag& flag : protocol::trainFlags()) {
        std::string& value = a.values.emplace_back();
        CLI::Option* opt = nullptr;
        if (flag.kind == protocol::TrainFlag::Kind::Switch) {
            opt = cmd->add_flag(flag.name, flag.help);
        } else {
            opt = cmd->add_option(flag.name, value, flag.help);
            if (flag.kind == protocol::TrainFlag::Kind::OptionalValue)
                opt->expected(0, 1);
        }
        if (std::string(flag.name) == "--nproc-per-node")
            a.nprocOption = opt;
        a.overrides.push_back(
            {opt, [apply = flag.apply, &value](protocol::RunSpec& s) { apply(s, value); }});
        a.overrideKeys.push_back(protocol::flagKey(flag.name));
    }
    cmd->callback([args] {
        try {
            train(*args);
        } catch (const std::exception& e) {
            // Also a refusal before set-up (a bad flag or spec): the launcher names it (every
            // rank refuses alike, so it prints the reason once instead of "see rank-1.log").
            launch::RankHeartbeat::reportError(e.what());
            throw;
        }
    });
});

} // namespace

} // namespace shard::worker
