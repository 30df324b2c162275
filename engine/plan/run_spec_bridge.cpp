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

// What tensor and pipeline parallel do not split yet, refused for `flag` ("--tensor-parallel 2")
// with the fix and `off`, the flag's value that turns the layout off.
std::string notSplitYet(const protocol::RunSpec& spec, const std::string& flag,
    const std::string& off, const std::string& qloraFix)
{
    const auto refuse = [&](const std::string& what, const std::string& fix) {
        return flag + " with " + what + " is not trained by this engine yet; " + fix + ", or "
            + off;
    };
    if (spec.method == "qlora")
        return refuse("--method qlora", qloraFix);
    if (spec.sampleEvery > 0)
        return refuse("samples during training (--sample-every)", "use --sample-every 0");
    if (spec.offload != "none")
        return refuse("--offload " + spec.offload, "use --offload none");
    if (spec.usesPreferencePairs())
        return refuse("--objective " + spec.objective, "train with --objective sft");
    return {};
}

} // namespace

std::string pipelineParallelRefusal(const protocol::RunSpec& spec, const ModelSpec& model)
{
    const int64_t pp = spec.pipelineParallel;
    const int64_t v = spec.virtualStages;
    if (v < 1)
        return "--virtual-stages must be 1 or more (got " + std::to_string(v) + ")";
    if (pp <= 1)
        return v > 1 ? "--virtual-stages " + std::to_string(v)
                + " interleaves pipeline stages, and this run has one; use --pipeline-parallel 2 "
                  "or more, or --virtual-stages 1"
                     : std::string();
    const std::string flag = "--pipeline-parallel " + std::to_string(pp);
    if (pp > model.numLayers)
        return flag + " needs at least one layer per stage and the model has "
            + std::to_string(model.numLayers) + "; use --pipeline-parallel "
            + std::to_string(model.numLayers) + " or less";
    if (pp * v > model.numLayers)
        return flag + " x --virtual-stages " + std::to_string(v) + " = " + std::to_string(pp * v)
            + " virtual stages need a layer each and the model has "
            + std::to_string(model.numLayers) + "; use --virtual-stages "
            + std::to_string(std::max<int64_t>(1, model.numLayers / pp)) + " or less";
    if (v > 1 && spec.gradAccum % pp != 0)
        return "interleaved 1F1B (--virtual-stages " + std::to_string(v)
            + ") runs the micro-batches in groups of the " + std::to_string(pp)
            + " stages, and --grad-accum " + std::to_string(spec.gradAccum)
            + " is not a multiple of " + std::to_string(pp) + "; use --grad-accum "
            + std::to_string(std::max<int64_t>(pp, spec.gradAccum / pp * pp)) + " or "
            + std::to_string((spec.gradAccum / pp + 1) * pp);
    return notSplitYet(spec, flag, "--pipeline-parallel 1", "use --method lora");
}

std::string tensorParallelRefusal(const protocol::RunSpec& spec, const ModelSpec& model)
{
    if (spec.tensorParallel <= 1)
        return {};
    if (const std::string why = whyNotSplitBlocks(model, spec.tensorParallel); !why.empty())
        return why + "; use --tensor-parallel with one of them";
    return notSplitYet(spec, "--tensor-parallel " + std::to_string(spec.tensorParallel),
        "--tensor-parallel 1", "use --method lora (its base is split like any weight)");
}

} // namespace shard::plan
