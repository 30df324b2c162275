// Other engines' configs in and out of the planner: a DeepSpeed JSON config, an accelerate
// config (FSDP or DeepSpeed) and a torchtitan TOML are read into a PlanInput, with what "auto"
// resolved to and what the planner does not model said; any plan is written back as each of
// them, plus a torchrun / deepspeed / accelerate command line and an sbatch script. DeepSpeed
// gets its own accounting (planDeepSpeed): its documented partitioning of fp32 master weights,
// AdamW state and 16-bit gradients, its buckets and prefetch knobs, and the model's activations.
// No Qt, no Torch (docs/ARCHITECTURE.md, "Other engines' configs").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/planner.h"

namespace shard::plan {

enum class EngineConfigKind { DeepSpeed, Accelerate, Torchtitan };
std::string toString(EngineConfigKind k); // "deepspeed", "accelerate", "torchtitan"

// What a config alone does not say: the model, the device, the GPUs, the sequence length, and
// the values a Hugging Face Trainer fills into DeepSpeed's "auto" (its command line). `given`
// marks the values the user set: a config value that contradicts one of them is an error.
struct ConfigContext {
    PlanInput base;
    bool gpusGiven = false;          // base.gpusPerNode and base.nodes
    bool microBatchGiven = false;    // base.microBatch
    bool gradAccumGiven = false;     // base.gradAccum
    bool precisionGiven = false;     // base.precision
    bool checkpointingGiven = false; // base.checkpointing
    bool modelGiven = true;          // base.model (torchtitan may name its own)
};

// DeepSpeed's settings that change memory, as resolved (DeepSpeed's defaults where absent).
struct DeepSpeedSettings {
    int stage = 0;
    bool offloadOptimizer = false; // offload_optimizer.device == cpu
    bool offloadParams = false;    // offload_param.device == cpu (stage 3)
    bool pinMemory = false;
    bool overlapComm = false; // DeepSpeed: true under stage 3, false under 1 and 2
    bool contiguousGradients = true;
    double reduceBucketSize = 5e8;          // elements
    double allgatherBucketSize = 5e8;       // elements (stages 1 and 2)
    double prefetchBucketSize = 5e7;        // elements (stage 3)
    double maxLiveParameters = 1e9;         // elements (stage 3)
    double paramPersistenceThreshold = 1e5; // elements (stage 3)
    double subGroupSize = 1e9;              // elements (stage 3)
    int64_t micsShardSize = -1;             // MiCS: ranks one copy of the state is split over
    double gradientClipping = 0;
};

struct ImportedConfig {
    EngineConfigKind kind = EngineConfigKind::DeepSpeed;
    std::string path;
    PlanInput input;
    // (key, "value (from where)") for every "auto" or derived value.
    std::vector<std::pair<std::string, std::string>> resolved;
    // "key = value: why it is not counted" for keys read and left out of the plan.
    std::vector<std::string> notModelled;
    // Keys the reader does not know (the engine may ignore or refuse them), and similar.
    std::vector<std::string> warnings;
    DeepSpeedSettings deepspeed; // kind DeepSpeed, or accelerate's DEEPSPEED
    bool usesDeepSpeed = false;  // plan with planDeepSpeed
};

// Each throws std::runtime_error "PATH: what is wrong; how to fix it".
ImportedConfig readDeepSpeedConfig(const std::string& path, const ConfigContext& ctx);
ImportedConfig readAccelerateConfig(const std::string& path, const ConfigContext& ctx);
ImportedConfig readTorchtitanConfig(const std::string& path, const ConfigContext& ctx);
ImportedConfig readEngineConfig(
    EngineConfigKind kind, const std::string& path, const ConfigContext& ctx);
// A torchtitan TOML as JSON (tables as objects), for an imported run's spec; nullopt when the
// file is no torchtitan config (none of its [job], [model], [training], [parallelism] tables).
// Throws std::runtime_error "PATH: not valid TOML at line L, column C: ..." for broken TOML.
std::optional<nlohmann::json> torchtitanConfigJson(const std::string& path);
// The same from text (`path` names it in messages).
ImportedConfig parseDeepSpeedConfig(
    const std::string& text, const std::string& path, const ConfigContext& ctx);

// DeepSpeed's accounting of one GPU for `in` (full fine-tuning): model states as DeepSpeed
// partitions them (16-bit parameters, fp32 master, AdamW m and v, 16-bit gradient partition and
// fp32 gradients per sub group), the stage-3 gathered parameters bounded by its prefetch and
// live-parameter knobs, its reduce / all-gather buckets (4.5x under overlap_comm in stages 1-2,
// as its documentation says), offloaded state in host memory, and the model's activations and
// logits (the ZeRO-paper accounting's, which is the model's rather than this engine's).
PlanResult planDeepSpeed(const PlanInput& in, const DeepSpeedSettings& ds);

// DeepSpeed's own estimator of model states (estimate_zero2_model_states_mem_needs for stages 1
// and 2, estimate_zero3_model_states_mem_needs for 3, with its 1.5 host buffer factor and
// zero_init); stage 0 is the ZeRO paper's 16 bytes a parameter. No activations.
struct DeepSpeedEstimate {
    int64_t gpuBytes = 0;
    int64_t cpuBytesPerNode = 0;
    int64_t largestLayerParams = 0;
};
DeepSpeedEstimate deepSpeedEstimator(const PlanInput& in, const DeepSpeedSettings& ds);

// Settings DeepSpeed would use for a plan (for the report and the export): the stage, MiCS
// group and offload of `in`, the Hugging Face Trainer's "auto" bucket sizes.
DeepSpeedSettings deepSpeedSettingsFor(const PlanInput& in);
// The layout of `in` (stage, MiCS group, offload) with the buckets and stage-3 knobs of `knobs`
// (an imported config's, planned under another strategy).
DeepSpeedSettings deepSpeedSettingsFor(const PlanInput& in, const DeepSpeedSettings& knobs);
// Largest micro-batch <= limit that fits under DeepSpeed's accounting (0 when 1 does not).
int64_t largestMicroBatchDeepSpeed(
    const PlanInput& in, const DeepSpeedSettings& ds, int64_t limit = 65536);

enum class Launcher { Torchrun, DeepSpeed, Accelerate };
std::string toString(Launcher l); // "torchrun", "deepspeed", "accelerate"
Launcher parseLauncher(const std::string& s);

// A file (or command) written from a plan; `notExpressed` lists what the target cannot say
// (also written into the text as comments where the format has them).
struct ExportedConfig {
    std::string text;
    std::vector<std::string> notExpressed;
};
ExportedConfig writeDeepSpeedConfig(const PlanInput& in);
ExportedConfig writeAccelerateConfig(const PlanInput& in);
ExportedConfig writeTorchtitanConfig(const PlanInput& in);
// `script` is the training script (or torchtitan's module); `configPath` the exported config.
ExportedConfig writeLaunchCommand(const PlanInput& in, Launcher launcher, const std::string& script,
    const std::string& configPath);
// An sbatch script in the shape of a multi-node `srun torchrun` (or deepspeed) job, with the
// NCCL environment such jobs set.
ExportedConfig writeSbatchScript(const PlanInput& in, Launcher launcher, const std::string& script,
    const std::string& configPath);

// Any of the above by name, as `shard plan --export` and the Plan page's "Export for…" name
// them: deepspeed, accelerate, torchtitan (configs), torchrun, deepspeed-launch,
// accelerate-launch (commands), sbatch, sbatch-deepspeed (Slurm scripts). An empty configPath
// names ds_config.json / accelerate.yaml where the command needs one. Throws listing the names.
ExportedConfig exportFor(const PlanInput& in, const std::string& kind,
    const std::string& script = "train.py", const std::string& configPath = {});

} // namespace shard::plan
