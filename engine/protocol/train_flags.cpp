// The `train` flags and the spec fields they set (see train_flags.h).
#include "protocol/train_flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>

#include "protocol/adapter_shape.h"

namespace shard::protocol {

namespace {

using Kind = TrainFlag::Kind;

template<typename T> T parseNumber(const char* flag, const std::string& v)
{
    if constexpr (std::is_same_v<T, std::string>) {
        return v;
    } else if constexpr (std::is_floating_point_v<T>) {
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || std::isnan(d))
            throw std::runtime_error(std::string(flag) + ": '" + v + "' is not a number");
        return static_cast<T>(d);
    } else {
        char* end = nullptr;
        errno = 0;
        if constexpr (std::is_unsigned_v<T>) {
            // strtoull would take "-1" as 2^64 - 1: a sign is refused by name.
            if (!v.empty() && v[0] == '-')
                throw std::runtime_error(std::string(flag) + ": '" + v
                    + "' is negative; give a whole number from 0 to 18446744073709551615");
            const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || errno == ERANGE)
                throw std::runtime_error(std::string(flag) + ": '" + v
                    + "' is not a whole number from 0 to 18446744073709551615");
            return static_cast<T>(n);
        } else {
            const long long n = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || errno == ERANGE)
                throw std::runtime_error(std::string(flag) + ": '" + v + "' is not an integer");
            return static_cast<T>(n);
        }
    }
}

#define SHARD_FLAG(NAME, FIELD, HELP)                                                              \
    TrainFlag                                                                                      \
    {                                                                                              \
        NAME, HELP, Kind::Value, [](RunSpec& s, const std::string& v) {                            \
            s.FIELD = parseNumber<decltype(RunSpec::FIELD)>(NAME, v);                              \
        }                                                                                          \
    }
#define SHARD_SWITCH(NAME, FIELD, VALUE, HELP)                                                     \
    TrainFlag                                                                                      \
    {                                                                                              \
        NAME, HELP, Kind::Switch, [](RunSpec& s, const std::string&) { s.FIELD = VALUE; }          \
    }

} // namespace

const std::vector<TrainFlag>& trainFlags()
{
    static const std::vector<TrainFlag> flags = {
        SHARD_FLAG("--model", model, "Hugging Face model folder"),
        TrainFlag {"--data", "Training data (JSONL)", Kind::Value,
            [](RunSpec& s, const std::string& v) { s.data = {v}; }},
        SHARD_FLAG("--out", outDir, "Run directory"),
        SHARD_FLAG("--steps", steps, "Optimizer steps"),
        SHARD_FLAG("--epochs", epochs, "Epochs (when --steps is not given)"),
        SHARD_FLAG("--micro-batch", microBatch,
            "Rows per rank per micro-step (preference pairs with --objective dpo|orpo)"),
        SHARD_FLAG("--seq-len", seqLen, "Sequence length"),
        SHARD_FLAG("--lr", lr, "Peak learning rate"),
        SHARD_FLAG("--seed", seed, "Seed (data order, init)"),
        SHARD_SWITCH("--no-shuffle", shuffle, false, "Keep the file order"),
        SHARD_SWITCH("--packing", packing, true, "Pack several records per row"),
        SHARD_SWITCH("--skip-bad-lines", skipBadLines, true, "Skip (and count) bad lines"),
        SHARD_SWITCH("--train-on-prompt", trainOnPrompt, true,
            "Also train on prompt tokens of instruction and chat data"),
        SHARD_FLAG("--data-format", dataFormat,
            "auto, text, alpaca, chat, tokenized or preference (prompt, chosen, rejected)"),
        SHARD_FLAG("--chat-template", chatTemplate,
            "Chat data: llama3, chatml (qwen) or llama2, or a template file (.jinja / "
            "tokenizer_config.json) of one of them (default: the tokenizer's)"),
        SHARD_FLAG(
            "--tokenizer", tokenizer, "Folder with tokenizer.json (default: the model folder)"),
        SHARD_FLAG("--device", device,
            "auto (a CUDA GPU when this build and node have one, else the CPU), cuda or cpu; "
            "one rank per GPU, LOCAL_RANK picks it"),
        SHARD_FLAG("--precision", precision, "fp32 or bf16-mixed"),
        SHARD_FLAG("--checkpointing", checkpointing, "Activation checkpointing: none or full"),
        SHARD_FLAG("--reduce-dtype", reduceDtype,
            "Gradient reduce-scatter / all-reduce dtype: fp32 (default) or bf16 (bf16-mixed: "
            "half the bytes, summed in bf16)"),
        SHARD_FLAG("--offload", offload,
            "none, optimizer (fp32 masters, gradient shards and AdamW state in pinned host "
            "memory, AdamW on the CPU) or params+optimizer (also the parameter shards; zero3 and "
            "hybrid gather from host memory); GPU ranks, full fine-tuning"),
        SHARD_FLAG("--grad-accum", gradAccum, "Gradient accumulation steps"),
        SHARD_FLAG("--method", method,
            "full (every weight), lora (low-rank adapters on a frozen base) or qlora (adapters on "
            "an NF4 base)"),
        SHARD_FLAG("--objective", objective,
            "sft (next-token loss, default), dpo (direct preference optimization) or orpo "
            "(odds-ratio preference optimization, no reference model); dpo and orpo read "
            "preference pairs (prompt, chosen, rejected)"),
        SHARD_FLAG("--dpo-loss", dpoLoss, "DPO's loss: sigmoid (DPO, default) or ipo"),
        SHARD_FLAG("--dpo-beta", dpoBeta,
            "DPO's beta: how far the policy may move from the reference (default 0.1)"),
        SHARD_FLAG("--dpo-label-smoothing", dpoLabelSmoothing,
            "cDPO: the assumed fraction of flipped preference labels, in [0, 0.5) (default 0)"),
        SHARD_FLAG("--dpo-nll-weight", dpoNllWeight,
            "DPO: add this weight times the chosen answers' next-token loss (TRL's rpo_alpha; "
            "default 0)"),
        SHARD_FLAG(
            "--orpo-lambda", orpoLambda, "ORPO's weight of the odds-ratio term (default 0.1)"),
        SHARD_FLAG("--reference", reference,
            "DPO's reference log-probabilities: auto (default: live with lora/qlora, precomputed "
            "with full), live (each step: the base with its adapters off, or with full "
            "fine-tuning a frozen copy of the model sharded like it) or precomputed (one pass "
            "over the data before training)"),
        SHARD_FLAG("--lora-rank", loraRank, "LoRA rank r (default 8)"),
        SHARD_FLAG("--lora-alpha", loraAlpha,
            "LoRA alpha: the adapter term is scaled by alpha / r (default 16)"),
        SHARD_FLAG("--lora-dropout", loraDropout, "Dropout on the adapter's input (default 0)"),
        SHARD_FLAG("--lora-targets", loraTargets,
            "Adapted projections, any of q,k,v,o,gate,up,down (default q,k,v,o)"),
        SHARD_SWITCH("--lora-rslora", loraRslora, true, "Scale by alpha / sqrt(r)"),
        SHARD_SWITCH("--no-double-quant", qloraDoubleQuant, false,
            "QLoRA: keep the NF4 base's block scales in fp32 (default: double-quantised to 8 "
            "bits, as bitsandbytes' bnb_4bit_use_double_quant)"),
        SHARD_FLAG("--lora-init", loraInit,
            "Continue training a PEFT adapter folder (adapter_config.json, "
            "adapter_model.safetensors)"),
        SHARD_FLAG("--warmup", warmup, "Warmup steps"),
        SHARD_FLAG("--schedule", schedule, "constant, linear or cosine"),
        SHARD_FLAG("--min-lr-ratio", minLrRatio, "Floor of the decay"),
        SHARD_FLAG("--schedule-start", scheduleStart,
            "The step where warm-up and decay start (default 0; a continued run's checkpoint)"),
        SHARD_FLAG("--schedule-steps", scheduleSteps,
            "The step where the decay ends, the learning rate constant after it (default: the "
            "run's last)"),
        SHARD_FLAG("--clip", clip, "Global gradient-norm clip (0 = off)"),
        SHARD_FLAG("--weight-decay", weightDecay, "AdamW weight decay"),
        SHARD_FLAG("--beta1", beta1, "AdamW beta1"),
        SHARD_FLAG("--beta2", beta2, "AdamW beta2"),
        SHARD_FLAG("--eval-data", evalData, "Held-out data (JSONL)"),
        SHARD_FLAG("--eval-fraction", evalFraction, "Hold out this fraction of --data"),
        SHARD_FLAG("--eval-every", evalEvery, "Evaluate every N steps"),
        SHARD_FLAG("--sample-every", sampleEvery,
            "Write greedy sample completions every N steps and at the end (0 = none)"),
        SHARD_FLAG("--sample-prompts", samplePrompts, "Prompts of the samples (one per line)"),
        SHARD_FLAG(
            "--sample-max-tokens", sampleMaxTokens, "Tokens per sample completion (default 32)"),
        SHARD_FLAG("--log-every", logEvery, "Metric record every N steps"),
        SHARD_SWITCH("--no-tensorboard", tensorboard, false,
            "Write no TensorBoard event files beside metrics.jsonl"),
        SHARD_FLAG("--strategy", strategy, "ddp, zero1, zero2, zero3, hybrid"),
        SHARD_FLAG("--shard-group", shardGroup, "Hybrid shard-group size"),
        SHARD_FLAG("--tensor-parallel", tensorParallel,
            "Ranks that split each block's weights (Megatron style; consecutive ranks, inside a "
            "node); the strategy runs over ranks / N data-parallel copies (default 1)"),
        SHARD_FLAG("--pipeline-parallel", pipelineParallel,
            "Pipeline stages of contiguous layers, 1F1B over the --grad-accum micro-batches "
            "(default 1); ranks = data-parallel copies x tensor parallel x N"),
        SHARD_FLAG("--virtual-stages", virtualStages,
            "Model chunks per pipeline stage: more than 1 runs interleaved 1F1B (a smaller "
            "bubble; --grad-accum a multiple of --pipeline-parallel; default 1)"),
        SHARD_SWITCH("--sequence-parallel", sequenceParallel, true,
            "With --tensor-parallel: split the residual stream, the norms and the activations "
            "a block saves along the sequence over the group (--seq-len a multiple of it)"),
        SHARD_FLAG("--threads", threads, "Intra-op threads (0 = auto)"),
        SHARD_FLAG("--hang-timeout", hangTimeoutSec,
            "Seconds without progress before the launcher calls a rank hung (0 = off; default "
            "300; $SHARD_HANG_TIMEOUT_S wins)"),
        SHARD_FLAG("--name", name, "Run name"),
        SHARD_FLAG("--nodes", nodes, "Nodes in the run"),
        SHARD_FLAG("--nproc-per-node", procsPerNode,
            "Ranks per node (under a launcher: its count; a different value is refused)"),
        SHARD_FLAG("--max-restarts", maxRestarts,
            "Under `shard run` / `launch`: when a rank dies or hangs, restart every rank from the "
            "latest complete checkpoint, up to N times (0 = off)"),
        SHARD_FLAG("--checkpoint-every", checkpointEvery,
            "Save a sharded checkpoint every N steps and at the end (0 = none)"),
        SHARD_FLAG("--keep-checkpoints", keepCheckpoints, "Complete checkpoints kept (0 = all)"),
        TrainFlag {"--resume",
            "Continue from a checkpoint: auto (the run's newest complete one; the default when no "
            "value is given), a checkpoint folder or a run folder",
            Kind::OptionalValue,
            [](RunSpec& s, const std::string& v) { s.resume = v.empty() ? "auto" : v; }},
        SHARD_SWITCH("--allow-batch-change", allowBatchChange, true,
            "On a resume at another rank count, accept a new global batch when the checkpoint's "
            "cannot be kept"),
    };
    return flags;
}

#undef SHARD_FLAG
#undef SHARD_SWITCH

std::string flagKey(const std::string& flagName)
{
    std::string key = flagName.rfind("--", 0) == 0 ? flagName.substr(2) : flagName;
    std::replace(key.begin(), key.end(), '-', '_');
    return key;
}

void applyTrainFlags(RunSpec& spec, const std::vector<std::string>& args)
{
    std::set<std::string> given;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& word = args[i];
        const auto eq = word.find('=');
        const std::string name = word.substr(0, eq);
        const TrainFlag* flag = nullptr;
        for (const TrainFlag& f : trainFlags())
            if (name == f.name)
                flag = &f;
        if (!flag)
            throw std::runtime_error("unknown train flag '" + word
                + "' (check the spelling; see `shard-worker train --help`)");
        std::string value;
        if (eq != std::string::npos) {
            if (flag->kind == Kind::Switch)
                throw std::runtime_error(name + " takes no value (got '" + word + "')");
            value = word.substr(eq + 1);
        } else if (flag->kind == Kind::Value) {
            if (i + 1 >= args.size())
                throw std::runtime_error(name + " needs a value");
            value = args[++i];
        } else if (flag->kind == Kind::OptionalValue && i + 1 < args.size()
            && args[i + 1].rfind("--", 0) != 0) {
            value = args[++i];
        }
        flag->apply(spec, value);
        given.insert(flagKey(flag->name));
    }
    adoptAdapterShape(spec, given);
}

} // namespace shard::protocol
