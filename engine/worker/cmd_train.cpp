// `shard-worker train ...`: one rank of a fine-tuning run (flags, or a JSON run spec with
// --config; flags given explicitly override the spec's values).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "core/train/trainer.h"
#include "launch/rank_heartbeat.h"
#include "protocol/run_dir.h"
#include "protocol/run_spec.h"
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
    protocol::RunSpec flags;
    std::string data;
    bool noShuffle = false;
    bool packing = false;
    bool skipBadLines = false;
    bool trainOnPrompt = false;
    bool allowBatchChange = false;
    bool loraRslora = false;
    CLI::Option* nprocOption = nullptr;
    std::vector<std::pair<CLI::Option*, std::function<void(protocol::RunSpec&)>>> overrides;
};

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

int envCount(const char* name)
{
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : 0;
}

// Under `shard-worker launch` the launcher's rank count is the run's: run.json records it and
// the hybrid group is checked against it. An explicit --nproc-per-node that disagrees is refused
// (the launcher, not this flag, decides how many ranks start).
void takeLauncherRankCount(protocol::RunSpec& spec, bool explicitFlag)
{
    const int local = envCount("LOCAL_WORLD_SIZE");
    const int world = envCount("WORLD_SIZE");
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
    protocol::RunSpec spec;
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
    }
    for (auto& [opt, apply] : a.overrides)
        if (opt->count() > 0)
            apply(spec);
    startHeartbeat(spec);
    takeLauncherRankCount(spec, a.nprocOption->count() > 0);
#ifdef SHARD_HAVE_FSDP
    fsdp::registerStrategies();
#endif
    engine::TrainerOptions options;
#if __has_include("ckpt/train_checkpointer.h")
    options.checkpoints = ckpt::makeTrainCheckpointer(spec, spec.model);
#else
    if (spec.checkpointEvery > 0 || !spec.resume.empty())
        throw std::runtime_error(
            "this build lacks checkpoints (shard_ckpt); drop --checkpoint-every "
            "and --resume");
#endif
    engine::Trainer trainer(spec, options);
    try {
        trainer.run();
    } catch (const protocol::RunDirWriteError& e) {
        // Its own exit status, so the launcher (and a script) can tell a full disk apart.
        std::fprintf(stderr, "shard-worker: error: %s\n", e.what());
        exitCode() = protocol::kWriteFailedExitCode;
    }
}

template<typename T>
CLI::Option* bindOption(CLI::App* cmd, TrainArgs& a, const std::string& name,
    T protocol::RunSpec::*field, const std::string& help)
{
    auto* opt = cmd->add_option(name, a.flags.*field, help);
    a.overrides.push_back({opt, [&a, field](protocol::RunSpec& s) { s.*field = a.flags.*field; }});
    return opt;
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto args = std::make_shared<TrainArgs>();
    TrainArgs& a = *args;
    auto* cmd = app.add_subcommand("train", "Fine-tune a model (one rank of a run)");
    cmd->add_option("--config", a.config, "JSON run spec (run.json); flags override its values");
    bindOption(cmd, a, "--model", &protocol::RunSpec::model, "Hugging Face model folder");
    auto* data = cmd->add_option("--data", a.data, "Training data (JSONL)");
    a.overrides.push_back({data, [&a](protocol::RunSpec& s) { s.data = {a.data}; }});
    bindOption(cmd, a, "--out", &protocol::RunSpec::outDir, "Run directory");
    bindOption(cmd, a, "--steps", &protocol::RunSpec::steps, "Optimizer steps");
    bindOption(
        cmd, a, "--epochs", &protocol::RunSpec::epochs, "Epochs (when --steps is not given)");
    bindOption(
        cmd, a, "--micro-batch", &protocol::RunSpec::microBatch, "Rows per rank per micro-step");
    bindOption(cmd, a, "--seq-len", &protocol::RunSpec::seqLen, "Sequence length");
    bindOption(cmd, a, "--lr", &protocol::RunSpec::lr, "Peak learning rate");
    bindOption(cmd, a, "--seed", &protocol::RunSpec::seed, "Seed (data order, init)");
    auto* noShuffle = cmd->add_flag("--no-shuffle", a.noShuffle, "Keep the file order");
    a.overrides.push_back({noShuffle, [](protocol::RunSpec& s) { s.shuffle = false; }});
    auto* packing = cmd->add_flag("--packing", a.packing, "Pack several records per row");
    a.overrides.push_back({packing, [](protocol::RunSpec& s) { s.packing = true; }});
    auto* skip = cmd->add_flag("--skip-bad-lines", a.skipBadLines, "Skip (and count) bad lines");
    a.overrides.push_back({skip, [](protocol::RunSpec& s) { s.skipBadLines = true; }});
    auto* prompt = cmd->add_flag("--train-on-prompt", a.trainOnPrompt,
        "Also train on prompt tokens of instruction and chat data");
    a.overrides.push_back({prompt, [](protocol::RunSpec& s) { s.trainOnPrompt = true; }});
    bindOption(cmd, a, "--data-format", &protocol::RunSpec::dataFormat,
        "auto, text, alpaca, chat or tokenized");
    bindOption(cmd, a, "--chat-template", &protocol::RunSpec::chatTemplate,
        "Chat data: llama3, chatml (qwen) or llama2, or a template file (.jinja / "
        "tokenizer_config.json) of one of them (default: the tokenizer's)");
    bindOption(cmd, a, "--tokenizer", &protocol::RunSpec::tokenizer,
        "Folder with tokenizer.json (default: the model folder)");
    bindOption(cmd, a, "--precision", &protocol::RunSpec::precision, "fp32 or bf16-mixed");
    bindOption(cmd, a, "--checkpointing", &protocol::RunSpec::checkpointing,
        "Activation checkpointing: none or full");
    bindOption(
        cmd, a, "--grad-accum", &protocol::RunSpec::gradAccum, "Gradient accumulation steps");
    bindOption(cmd, a, "--method", &protocol::RunSpec::method,
        "full (every weight), lora (low-rank adapters on a frozen base) or qlora (adapters on "
        "an NF4 base)");
    bindOption(cmd, a, "--lora-rank", &protocol::RunSpec::loraRank, "LoRA rank r (default 8)");
    bindOption(cmd, a, "--lora-alpha", &protocol::RunSpec::loraAlpha,
        "LoRA alpha: the adapter term is scaled by alpha / r (default 16)");
    bindOption(cmd, a, "--lora-dropout", &protocol::RunSpec::loraDropout,
        "Dropout on the adapter's input (default 0)");
    bindOption(cmd, a, "--lora-targets", &protocol::RunSpec::loraTargets,
        "Adapted projections, any of q,k,v,o,gate,up,down (default q,k,v,o)");
    auto* rslora = cmd->add_flag("--lora-rslora", a.loraRslora, "Scale by alpha / sqrt(r)");
    a.overrides.push_back({rslora, [](protocol::RunSpec& s) { s.loraRslora = true; }});
    bindOption(cmd, a, "--lora-init", &protocol::RunSpec::loraInit,
        "Continue training a PEFT adapter folder (adapter_config.json, "
        "adapter_model.safetensors)");
    bindOption(cmd, a, "--warmup", &protocol::RunSpec::warmup, "Warmup steps");
    bindOption(cmd, a, "--schedule", &protocol::RunSpec::schedule, "constant, linear or cosine");
    bindOption(cmd, a, "--min-lr-ratio", &protocol::RunSpec::minLrRatio, "Floor of the decay");
    bindOption(cmd, a, "--clip", &protocol::RunSpec::clip, "Global gradient-norm clip (0 = off)");
    bindOption(cmd, a, "--weight-decay", &protocol::RunSpec::weightDecay, "AdamW weight decay");
    bindOption(cmd, a, "--beta1", &protocol::RunSpec::beta1, "AdamW beta1");
    bindOption(cmd, a, "--beta2", &protocol::RunSpec::beta2, "AdamW beta2");
    bindOption(cmd, a, "--eval-data", &protocol::RunSpec::evalData, "Held-out data (JSONL)");
    bindOption(cmd, a, "--eval-fraction", &protocol::RunSpec::evalFraction,
        "Hold out this fraction of --data");
    bindOption(cmd, a, "--eval-every", &protocol::RunSpec::evalEvery, "Evaluate every N steps");
    bindOption(cmd, a, "--sample-every", &protocol::RunSpec::sampleEvery,
        "Write greedy sample completions every N steps and at the end (0 = none)");
    bindOption(cmd, a, "--sample-prompts", &protocol::RunSpec::samplePrompts,
        "Prompts of the samples (one per line)");
    bindOption(cmd, a, "--sample-max-tokens", &protocol::RunSpec::sampleMaxTokens,
        "Tokens per sample completion (default 32)");
    bindOption(cmd, a, "--log-every", &protocol::RunSpec::logEvery, "Metric record every N steps");
    bindOption(
        cmd, a, "--strategy", &protocol::RunSpec::strategy, "ddp, zero1, zero2, zero3, hybrid");
    bindOption(cmd, a, "--shard-group", &protocol::RunSpec::shardGroup, "Hybrid shard-group size");
    bindOption(cmd, a, "--threads", &protocol::RunSpec::threads, "Intra-op threads (0 = auto)");
    bindOption(cmd, a, "--hang-timeout", &protocol::RunSpec::hangTimeoutSec,
        "Seconds without progress before the launcher calls a rank hung (0 = off; default 300; "
        "$SHARD_HANG_TIMEOUT_S wins)");
    bindOption(cmd, a, "--name", &protocol::RunSpec::name, "Run name");
    bindOption(cmd, a, "--nodes", &protocol::RunSpec::nodes, "Nodes in the run");
    a.nprocOption = bindOption(cmd, a, "--nproc-per-node", &protocol::RunSpec::procsPerNode,
        "Ranks per node (under a launcher: its count; a different value is refused)");
    bindOption(cmd, a, "--checkpoint-every", &protocol::RunSpec::checkpointEvery,
        "Save a sharded checkpoint every N steps and at the end (0 = none)");
    bindOption(cmd, a, "--keep-checkpoints", &protocol::RunSpec::keepCheckpoints,
        "Complete checkpoints kept (0 = all)");
    auto* resume = cmd->add_option("--resume", a.flags.resume,
        "Continue from a checkpoint: auto (the run's newest complete one; the default when no "
        "value is given), a checkpoint folder or a run folder");
    resume->expected(0, 1);
    a.overrides.push_back({resume, [&a](protocol::RunSpec& s) {
                               s.resume = a.flags.resume.empty() ? "auto" : a.flags.resume;
                           }});
    auto* batchChange = cmd->add_flag("--allow-batch-change", a.allowBatchChange,
        "On a resume at another rank count, accept a new global batch when the checkpoint's "
        "cannot be kept");
    a.overrides.push_back({batchChange, [](protocol::RunSpec& s) { s.allowBatchChange = true; }});
    cmd->callback([args] { train(*args); });
});

} // namespace

} // namespace shard::worker
