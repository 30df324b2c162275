// The one mapping between a plan and a run spec: every field both describe (model or preset,
// device, GPUs per node, nodes, strategy, shard group, precision, checkpointing, offload,
// micro-batch, sequence length, gradient accumulation, method and the LoRA rank, alpha, dropout,
// targets, rsLoRA and QLoRA's double quantisation) carried both ways. Used by the Plan page,
// the Launch page, the Monitor's prediction and `shard plan --spec`.
#pragma once

#include <functional>
#include <string>

#include "plan/planner.h"
#include "protocol/run_spec.h"

namespace shard::plan {

// The plan of a run spec. spec.model is a preset name or a model folder (its config.json is
// read: call it off a UI thread). `device` gives the capacity; its kind must be spec.device's
// (cuda = GPU; auto takes either, as the node decides), else std::runtime_error. Throws what
// resolveModel and the name parsers throw.
PlanInput planInputFromSpec(const protocol::RunSpec& spec, const DeviceSpec& device);

// Every field of a spec that shapes the plan except the model, the device and the rank counts
// (strategy, shard group, precision, checkpointing, offload, reduce dtype, batch shape, the
// tensor / pipeline layout and the LoRA fields) into `in`: planInputFromSpec's, and the
// engine's for its own memory checks.
void applyRunFieldsOf(const protocol::RunSpec& spec, PlanInput& in);

// The method and LoRA fields of a spec (method, rank, alpha, dropout, targets, rsLoRA, double
// quantisation) into `in`: the part of planInputFromSpec the pages' LoRA fields use.
void applyLoraFieldsOf(const protocol::RunSpec& spec, PlanInput& in);

// The device a spec runs on with the planner's defaults for its capacity: an 80 GiB GPU for
// cuda and auto (a GPU where the node has one; run.json then records what it resolved to),
// `hostMemoryBytes` of RAM shared by the node's ranks for cpu.
DeviceSpec defaultDeviceFor(const protocol::RunSpec& spec, int64_t hostMemoryBytes);

// Writes every field the plan decides into `spec`, leaving the rest (name, data, optimiser,
// schedule...) as they are. `modelSource` is what the plan's model came from: a preset name or
// a folder; it becomes spec.model.
void applyPlanToSpec(const PlanInput& in, const std::string& modelSource, protocol::RunSpec& spec);

// Why `size` tensor-parallel ranks cannot split `model`'s blocks ("" when they can): the heads,
// the key/value heads and the intermediate size must divide by it. The message names the
// numbers and the sizes that would.
std::string whyNotSplitBlocks(const ModelSpec& model, int64_t size);

// Whether `tp` tensor-parallel ranks split the embedding and the LM head by vocabulary
// (core/model/tensor_parallel.h): tp > 1 and it divides the vocabulary. Else both stay whole.
bool splitsVocabulary(const ModelSpec& model, int64_t tp);

// Why sequence parallel cannot run at `tp` ranks ("" when it can; tp must be 2 or more): it
// needs the vocabulary split (splitsVocabulary) and a sequence length tp divides. Names the
// numbers and the values that would (in the run's flags).
std::string whyNoSequenceParallel(const ModelSpec& model, int64_t tp, int64_t seqLen);

// Why the engine cannot train `spec` at its tensor_parallel on `model` ("" when it can, and
// always at tensor_parallel 1): the blocks must split (whyNotSplitBlocks), sequence parallel
// must be possible (whyNoSequenceParallel), and QLoRA's row-parallel parts must hold whole NF4
// blocks. Names the flag to change. The worker refuses with it, and the pages do not offer what
// it refuses.
std::string tensorParallelRefusal(const protocol::RunSpec& spec, const ModelSpec& model);

// How a pipeline refusal names its numbers: a run's flags ("--pipeline-parallel 2") or the
// planner's words ("2 pipeline stages").
struct PipelineWords {
    std::function<std::string(int64_t)> stages, chunks, microBatches;
};

// Why `pp` stages of `v` chunks each (interleaved 1F1B when v > 1) over `microBatches`
// micro-batches cannot run a model of `layers` layers ("" when they can; always at pp 1 and v
// 1): each (virtual) stage needs a layer, and interleaving needs two stages or more and the
// micro-batches a multiple of the stages. Names the values that would do. The engine
// (pipelineParallelRefusal) and the planner (plan::validate) refuse with it.
std::string whyNoPipeline(
    int64_t pp, int64_t v, int64_t microBatches, int64_t layers, const PipelineWords& words);

// Why the engine cannot train `spec` at its pipeline_parallel on `model` ("" when it can, and
// always at pipeline_parallel 1): every (virtual) stage needs a layer, and interleaving needs
// the micro-batches in groups of the stages (whyNoPipeline). Names the flag to change.
std::string pipelineParallelRefusal(const protocol::RunSpec& spec, const ModelSpec& model);

// The run spec's device name for a planner device kind and back: "cuda" <-> Gpu, "cpu" <-> Cpu.
std::string specDeviceName(DeviceKind kind);
DeviceKind deviceKindOf(const std::string& specDevice);

} // namespace shard::plan
