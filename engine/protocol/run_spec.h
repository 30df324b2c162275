// The full resolved specification of a run (<run>/run.json): model, strategy, hyper-parameters,
// data and seed. Shared by the worker (which trains it) and the launchers (which start it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/parallel_dims.h"

namespace shard::protocol {

struct RunSpec {
    std::string name;
    std::string model;     // HF folder (engine) or preset name (planning)
    std::string tokenizer; // folder with tokenizer.json; empty = the model folder
    std::vector<std::string> data;
    std::string dataFormat = "auto"; // auto, text, alpaca, chat, tokenized
    std::string evalData;            // file; or evalFraction > 0
    double evalFraction = 0.0;
    int64_t evalEvery = 0;
    int64_t sampleEvery = 0;      // greedy sample completions every N steps (0 = none)
    std::string samplePrompts;    // their prompts: one per line
    int64_t sampleMaxTokens = 32; // tokens per completion
    bool packing = false;
    bool shuffle = true;
    bool skipBadLines = false;
    bool trainOnPrompt = false;
    std::string chatTemplate; // llama3, chatml, llama2 or a template file; empty: the tokenizer's
    std::string outDir;

    std::string strategy = "zero3"; // ddp, zero1, zero2, zero3, hybrid
    int shardGroup = 0;             // hybrid
    // Ranks that split each block's weights (core/model/tensor_parallel.h); the strategy runs
    // over the world / tensor_parallel data-parallel ranks.
    int tensorParallel = 1;
    // Pipeline stages of contiguous layers (docs/ARCHITECTURE.md, "Pipeline parallel"; 1F1B over
    // the micro-batches of --grad-accum); the strategy runs inside each stage.
    int pipelineParallel = 1;
    // Model chunks per pipeline stage (Megatron's virtual pipeline stages): more than 1 runs the
    // interleaved 1F1B schedule, chunk c of stage s holding virtual stage c x stages + s.
    int virtualStages = 1;
    // Sequence parallel (Megatron-LM's --sequence-parallel): with tensor parallel, the residual
    // stream, the norms and what a block saves are split along the sequence over the group.
    bool sequenceParallel = false;
    int nodes = 1;
    int procsPerNode = 1;
    // auto (CUDA when LibTorch sees a GPU, else the CPU), cuda or cpu; run.json records the
    // device the run resolved it to (cuda or cpu).
    std::string device = "auto";
    std::string precision = "fp32";     // fp32, bf16-mixed, bf16, fp16-mixed
    std::string checkpointing = "none"; // none, full
    std::string offload = "none";       // none, optimizer, params+optimizer
    // The gradients' reduce-scatter / all-reduce dtype (FSDP2's reduce_dtype): fp32, or bf16
    // under bf16-mixed (half the bytes sent, bf16 sums).
    std::string reduceDtype = "fp32";

    // Parameter-efficient fine-tuning (engine/core/model/lora.h): full, lora or qlora.
    std::string method = "full";
    int64_t loraRank = 8;
    double loraAlpha = 16.0;
    double loraDropout = 0.0;
    std::string loraTargets = "q,k,v,o"; // any of q,k,v,o,gate,up,down
    bool loraRslora = false;             // scale alpha / sqrt(r) instead of alpha / r
    std::string loraInit;                // a PEFT adapter folder to continue training
    bool qloraDoubleQuant = true;        // QLoRA: the NF4 absmax double-quantised (bitsandbytes')

    // What the run optimizes (engine/core/train/preference.h): sft (next-token loss on the
    // labelled tokens), dpo or orpo (preference pairs: prompt, chosen, rejected). Independent of
    // `method`, which says which weights train (full, lora, qlora).
    std::string objective = "sft";
    std::string dpoLoss = "sigmoid"; // sigmoid (DPO), ipo
    double dpoBeta = 0.1;            // DPO's beta (IPO's tau)
    double dpoLabelSmoothing = 0.0;  // cDPO's epsilon, in [0, 0.5); sigmoid only
    double orpoLambda = 0.1;         // ORPO's weight of the odds-ratio term
    // DPO: the weight of the chosen answers' next-token loss added to DPO's (TRL's rpo_alpha,
    // "RPO"); 0 = plain DPO. Keeps the chosen answers likely where pairs differ in few tokens.
    double dpoNllWeight = 0.0;
    // DPO's reference log-probabilities: live (a forward of the reference each step; with LoRA
    // the base with its adapters off) or precomputed (one pass over the data before training,
    // kept in memory); auto: live with LoRA/QLoRA, precomputed with full fine-tuning.
    std::string reference = "auto";

    int64_t steps = 0;
    int64_t epochs = 0;
    int64_t microBatch = 1;
    int64_t seqLen = 128;
    int64_t gradAccum = 1;
    double lr = 1e-3;
    double minLrRatio = 0.0;
    std::string schedule = "cosine"; // constant, linear, cosine
    int64_t warmup = 0;
    // The steps the schedule spans, warm-up and decay (0, 0: the run's first and last). "Continue
    // for N more steps" keeps a finished schedule (schedule_steps = the old total: the learning
    // rate stays at its end value after it) or restarts warm-up and decay at the checkpoint
    // (schedule_start); with neither, the decay stretches over the new total.
    int64_t scheduleStart = 0;
    int64_t scheduleSteps = 0;
    double weightDecay = 0.0;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double clip = 1.0; // 0 disables
    uint64_t seed = 0;
    int64_t logEvery = 1;
    // TensorBoard event files beside metrics.jsonl (rank 0), Hugging Face Trainer's tag names.
    bool tensorboard = true;
    int64_t checkpointEvery = 0;
    int64_t keepCheckpoints = 2;
    std::string resume; // "", "auto" or a checkpoint path
    // A resume at another rank count may change the global batch (else it is kept or refused).
    bool allowBatchChange = false;
    int threads = 0; // intra-op threads per rank; 0 = cores / local ranks
    // A rank without progress this long is hung (the launcher stops the run); 0 = off.
    // $SHARD_HANG_TIMEOUT_S (set by `launch --hang-timeout`) overrides it.
    double hangTimeoutSec = 300.0;
    // Restarts in place (`launch --max-restarts`): a rank that dies or hangs stops every rank,
    // which start again from the latest complete checkpoint, up to this many times; 0 = off.
    int maxRestarts = 0;

    int worldSize() const { return nodes * procsPerNode; }
    bool usesLora() const { return method == "lora" || method == "qlora"; }
    // Trained on preference pairs (dpo, orpo): two sequences per record.
    bool usesPreferencePairs() const { return objective == "dpo" || objective == "orpo"; }
    // DPO's reference resolved: "live" or "precomputed" ("" without DPO).
    std::string resolvedReference() const
    {
        if (objective != "dpo")
            return {};
        if (reference != "auto")
            return reference;
        return usesLora() ? "live" : "precomputed";
    }
    // The sharding fields, typed; throws std::runtime_error on an unknown strategy name.
    ParallelDims parallelDims() const
    {
        return {parseStrategyName(strategy), shardGroup, nodes, procsPerNode, tensorParallel,
            pipelineParallel};
    }
};

// What this version of the engine trains, so that a UI offers exactly that and the worker
// refuses the rest with the same words: devices ("auto", "cpu", "cuda"; cuda needs a CUDA build
// of shard-worker and a GPU where the run starts), precisions ("fp32", "bf16-mixed") and offload
// ("none", "optimizer", "params+optimizer"; on a GPU, for full fine-tuning). validate() accepts
// more (bf16, fp16-mixed) because a spec also describes plans.
const std::vector<std::string>& trainableDevices();
const std::vector<std::string>& trainablePrecisions();
const std::vector<std::string>& trainableOffloads();
// Offload moves state from GPU memory to host memory, so it is refused on CPU ranks; tests set
// SHARD_OFFLOAD_ON_CPU=1 to run the offload path there, with host-to-host copies standing in for
// the device-to-host and host-to-device ones.
inline constexpr const char* kOffloadOnCpuEnv = "SHARD_OFFLOAD_ON_CPU";
bool offloadOnCpuForTests();
// The gradient reduce dtypes, "fp32" and "bf16"; there is a choice under bf16-mixed only (fp32
// reduces in fp32, pure 16-bit precisions in their own dtype).
const std::vector<std::string>& reduceDtypes();
bool hasReduceDtypeChoice(const std::string& precision);
// The training objectives ("sft", "dpo", "orpo") and DPO's losses ("sigmoid", "ipo").
const std::vector<std::string>& objectiveNames();
const std::vector<std::string>& dpoLossNames();
// The --lora-targets vocabulary: q, k, v, o, gate, up, down.
const std::vector<std::string>& loraTargetNames();

nlohmann::json toJson(const RunSpec& s);
// Unknown keys are an error (a typo in a config must not be silently ignored).
RunSpec runSpecFromJson(const nlohmann::json& j);
// Throws std::runtime_error describing the first invalid field and how to fix it.
void validate(const RunSpec& s);
// Why DPO's live reference cannot run with these settings, and what to use instead; empty when
// it can. Full fine-tuning's live reference is a frozen copy of the model, which the engine
// places over data-parallel ranks only: refused under tensor or pipeline parallel. validate,
// `shard plan` and the studio's reference choice ask this one rule.
std::string liveReferenceRefusal(const RunSpec& s);

// The value of `flag` in a worker command line ("--flag V" or "--flag=V"; the last one wins), or
// nullopt when it is not there.
std::optional<std::string> flagValue(const std::vector<std::string>& args, const std::string& flag);

} // namespace shard::protocol
