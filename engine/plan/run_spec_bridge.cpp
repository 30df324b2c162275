// Plan <-> run spec (see run_spec_bridge.h).
#include "plan/run_spec_bridge.h"

#include <numeric>
#include <utility>

#include <stdexcept>

namespace shard::plan {

std::string specDeviceName(DeviceKind kind)
{
    return kind == DeviceKind::Gpu ? "cuda" : "cpu";
}

DeviceKind deviceKindOf(const std::string& specDevice)
{
    if (specDevice == "cuda")
        return DeviceKind::Gpu;
    if (specDevice == "cpu")
        return DeviceKind::Cpu;
    throw std::runtime_error("unknown device '" + specDevice + "' (use cpu or cuda"
        + (specDevice == "auto" ? std::string("; auto is decided where the run starts") : "")
        + ")");
}

DeviceSpec defaultDeviceFor(const protocol::RunSpec& spec, int64_t hostMemoryBytes)
{
    return spec.device == "auto" || deviceKindOf(spec.device) == DeviceKind::Gpu
        ? DeviceSpec::gpu(80)
        : DeviceSpec::cpu(hostMemoryBytes);
}

PlanInput planInputFromSpec(const protocol::RunSpec& spec, const DeviceSpec& device)
{
    if (spec.device != "auto" && deviceKindOf(spec.device) != device.kind)
        throw std::runtime_error("the run spec's device is " + spec.device + " but the plan's is "
            + toString(device.kind));
    PlanInput in;
    in.model = resolveModel(spec.model);
    applyRunFieldsOf(spec, in);
    in.gpusPerNode = spec.procsPerNode;
    in.nodes = spec.nodes;
    in.device = device;
    return in;
}

void applyRunFieldsOf(const protocol::RunSpec& spec, PlanInput& in)
{
    in.strategy = parseStrategy(spec.strategy);
    in.shardGroup = in.strategy == Strategy::Hybrid ? spec.shardGroup : 0;
    in.precision = parsePrecision(spec.precision);
    in.checkpointing = parseCheckpointing(spec.checkpointing);
    in.offload = parseOffload(spec.offload);
    in.bf16Reduce = spec.reduceDtype == "bf16";
    in.microBatch = spec.microBatch;
    in.seqLen = spec.seqLen;
    in.gradAccum = spec.gradAccum;
    in.objective = spec.objective;
    in.reference = spec.resolvedReference();
    // The run's layout: a tensor / pipeline run is planned as the engine trains it.
    in.tp = std::max(1, spec.tensorParallel);
    in.pp = std::max(1, spec.pipelineParallel);
    in.virtualStages = in.pp > 1 ? std::max(1, spec.virtualStages) : 1;
    in.sequenceParallel = in.tp > 1 && spec.sequenceParallel;
    applyLoraFieldsOf(spec, in);
}

void applyLoraFieldsOf(const protocol::RunSpec& spec, PlanInput& in)
{
    in.method = parseMethod(spec.method);
    in.loraRank = spec.loraRank;
    in.loraAlpha = spec.loraAlpha;
    in.loraDropout = spec.loraDropout;
    in.loraTargets = spec.loraTargets;
    in.loraRslora = spec.loraRslora;
    in.qloraDoubleQuant = spec.qloraDoubleQuant;
}

void applyPlanToSpec(const PlanInput& in, const std::string& modelSource, protocol::RunSpec& spec)
{
    spec.model = modelSource;
    spec.device = specDeviceName(in.device.kind);
    spec.procsPerNode = static_cast<int>(in.gpusPerNode);
    spec.nodes = static_cast<int>(in.nodes);
    spec.strategy = toString(in.strategy);
    spec.shardGroup = in.strategy == Strategy::Hybrid ? static_cast<int>(in.shardGroup) : 0;
    spec.tensorParallel = static_cast<int>(in.tp);
    spec.pipelineParallel = static_cast<int>(in.pp);
    spec.virtualStages = in.pp > 1 ? static_cast<int>(in.virtualStages) : 1;
    spec.sequenceParallel = in.tp > 1 && in.sequenceParallel;
    spec.precision = toString(in.precision);
    spec.checkpointing = toString(in.checkpointing);
    spec.offload = toString(in.offload);
    spec.reduceDtype = in.bf16Reduce ? "bf16" : "fp32";
    spec.microBatch = in.microBatch;
    spec.seqLen = in.seqLen;
    spec.gradAccum = in.gradAccum;
    spec.objective = in.objective;
    spec.method = toString(in.method);
    spec.loraRank = in.loraRank;
    spec.loraAlpha = in.loraAlpha;
    spec.loraDropout = in.loraDropout;
    spec.loraTargets = in.loraTargets;
    spec.loraRslora = in.loraRslora;
    spec.qloraDoubleQuant = in.qloraDoubleQuant;
}

std::string whyNotSplitBlocks(const ModelSpec& model, int64_t size)
{
    if (size < 1)
        return "tensor parallel size " + std::to_string(size) + " must be 1 or more";
    const auto fails = [&](int64_t n, const char* what) -> std::string {
        if (n % size == 0)
            return {};
        return "tensor parallel size " + std::to_string(size) + " does not divide the model's "
            + std::to_string(n) + " " + what + "; sizes that divide the heads, the key/value "
            + "heads and the intermediate size: "
            + protocol::divisorList(
                std::gcd(std::gcd(model.numHeads, model.numKvHeads), model.intermediateSize));
    };
    for (const auto& [n, what] : {std::pair {model.numHeads, "attention heads"},
             std::pair {model.numKvHeads, "key/value heads"},
             std::pair {model.intermediateSize, "intermediate size (MLP width)"}})
        if (std::string why = fails(n, what); !why.empty())
            return why;
    return {};
}

namespace {

// Why QLoRA's NF4 base cannot split over `t` tensor-parallel ranks: a row-parallel part (o's and
// down's inputs over t) must hold whole quantisation blocks of 64 inputs, as every rank keeps
// the bytes and scales of its part of the whole weight's quantisation. "" when it can.
std::string whyNoNf4Split(const ModelSpec& model, int64_t t)
{
    for (const auto& [inputs, name] :
        {std::pair {model.qDim(), "o_proj"}, std::pair {model.intermediateSize, "down_proj"}}) {
        if ((inputs / t) % kNf4Block == 0)
            continue;
        std::string fits;
        for (int64_t d = 2; d <= inputs / kNf4Block; ++d)
            if (model.qDim() % (d * kNf4Block) == 0 && model.intermediateSize % (d * kNf4Block) == 0
                && whyNotSplitBlocks(model, d).empty())
                fits += (fits.empty() ? "" : ", ") + std::to_string(d);
        return "--tensor-parallel " + std::to_string(t) + " with --method qlora gives each rank "
            + std::to_string(inputs / t) + " of " + name + "'s " + std::to_string(inputs)
            + " inputs, and NF4 quantises whole blocks of " + std::to_string(kNf4Block)
            + " inputs; use "
            + (fits.empty() ? std::string("--tensor-parallel 1")
                            : "--tensor-parallel " + fits + " (or 1)")
            + ", or --method lora";
    }
    return {};
}

} // namespace

std::string whyNoPipeline(
    int64_t pp, int64_t v, int64_t microBatches, int64_t layers, const PipelineWords& w)
{
    const auto n = [](int64_t x) { return std::to_string(x); };
    if (v < 1)
        return "chunks per pipeline stage (virtual stages) must be 1 or more (got " + n(v) + ")";
    if (pp <= 1)
        return v > 1 ? w.chunks(v) + " interleaves pipeline stages, and this run has one; use "
                + w.stages(2) + " or more, or " + w.chunks(1)
                     : std::string();
    if (pp > layers)
        return w.stages(pp) + " for " + n(layers) + " layers: each stage needs a layer; use "
            + w.stages(layers) + " or less";
    if (pp * v > layers)
        return w.stages(pp) + " x " + w.chunks(v) + " = " + n(pp * v)
            + " virtual stages need a layer each and the model has " + n(layers) + "; use "
            + w.chunks(std::max<int64_t>(1, layers / pp)) + " or less";
    if (v > 1 && microBatches % pp != 0)
        return "interleaved 1F1B (" + w.chunks(v) + ") runs the micro-batches in groups of the "
            + n(pp) + " stages, and " + w.microBatches(microBatches) + " is not a multiple of "
            + n(pp) + "; use " + w.microBatches(std::max<int64_t>(pp, microBatches / pp * pp))
            + " or " + n((microBatches / pp + 1) * pp);
    return {};
}

std::string pipelineParallelRefusal(const protocol::RunSpec& spec, const ModelSpec& model)
{
    const auto flag = [](const char* name) {
        return [name](int64_t x) { return std::string(name) + " " + std::to_string(x); };
    };
    const PipelineWords words {
        flag("--pipeline-parallel"), flag("--virtual-stages"), flag("--grad-accum")};
    return whyNoPipeline(
        spec.pipelineParallel, spec.virtualStages, spec.gradAccum, model.numLayers, words);
}

bool splitsVocabulary(const ModelSpec& model, int64_t tp)
{
    return tp > 1 && model.vocabSize % tp == 0;
}

std::string whyNoSequenceParallel(const ModelSpec& model, int64_t t, int64_t seqLen)
{
    if (t <= 1)
        return "--sequence-parallel splits the residual stream over the tensor-parallel ranks, "
               "and this run has none; use --tensor-parallel 2 or more, or drop "
               "--sequence-parallel";
    if (!splitsVocabulary(model, t))
        return "--sequence-parallel needs the vocabulary split over the tensor-parallel ranks, "
               "and --tensor-parallel "
            + std::to_string(t) + " does not divide the model's vocabulary of "
            + std::to_string(model.vocabSize) + "; use --tensor-parallel with one of "
            + protocol::divisorList(std::gcd(std::gcd(model.numHeads, model.numKvHeads),
                std::gcd(model.intermediateSize, model.vocabSize)))
            + ", or drop --sequence-parallel";
    if (seqLen % t != 0)
        return "--sequence-parallel splits each sequence of --seq-len " + std::to_string(seqLen)
            + " over the " + std::to_string(t) + " tensor-parallel ranks, and " + std::to_string(t)
            + " does not divide it; use --seq-len "
            + std::to_string(std::max<int64_t>(t, seqLen / t * t)) + " or "
            + std::to_string((seqLen / t + 1) * t);
    return {};
}

std::string tensorParallelRefusal(const protocol::RunSpec& spec, const ModelSpec& model)
{
    const int64_t t = spec.tensorParallel;
    if (t <= 1)
        return spec.sequenceParallel ? whyNoSequenceParallel(model, t, spec.seqLen) : std::string();
    if (const std::string why = whyNotSplitBlocks(model, t); !why.empty())
        return why + "; use --tensor-parallel with one of them";
    if (spec.sequenceParallel)
        if (const std::string why = whyNoSequenceParallel(model, t, spec.seqLen); !why.empty())
            return why;
    return spec.method == "qlora" ? whyNoNf4Split(model, t) : std::string();
}

} // namespace shard::plan
