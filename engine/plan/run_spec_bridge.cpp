// Plan <-> run spec (see run_spec_bridge.h).
#include "plan/run_spec_bridge.h"

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

} // namespace shard::plan
