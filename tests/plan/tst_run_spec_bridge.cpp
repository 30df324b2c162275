// The plan <-> run spec bridge and the sharding vocabulary: every field both describe survives a
// round trip either way, a spec's device decides the plan's, and the hybrid checks say the same
// thing in a plan and in a spec.
#include <cstdio>

#include "check.h"
#include "plan/run_spec_bridge.h"
#include "protocol/parallel_dims.h"

namespace protocol = shard::protocol;
using namespace shard::plan;

namespace {

PlanInput gpuPlan()
{
    PlanInput in;
    in.model = *findPreset("llama-3-8b");
    in.strategy = Strategy::Hybrid;
    in.shardGroup = 4;
    in.precision = Precision::Bf16Mixed;
    in.checkpointing = Checkpointing::Full;
    in.offload = Offload::Optimizer;
    in.microBatch = 3;
    in.seqLen = 4096;
    in.gradAccum = 5;
    in.gpusPerNode = 8;
    in.nodes = 2;
    in.device = DeviceSpec::gpu(80);
    return in;
}

void testPlanToSpecAndBack()
{
    protocol::RunSpec spec;
    spec.name = "kept";
    spec.lr = 1.5e-4;
    spec.data = {"/data/train.jsonl"};
    const PlanInput in = gpuPlan();
    applyPlanToSpec(in, "llama-3-8b", spec);
    CHECK_EQ(spec.model, std::string("llama-3-8b"));
    CHECK_EQ(spec.device, std::string("cuda"));
    CHECK_EQ(spec.procsPerNode, 8);
    CHECK_EQ(spec.nodes, 2);
    CHECK_EQ(spec.strategy, std::string("hybrid"));
    CHECK_EQ(spec.shardGroup, 4);
    CHECK_EQ(spec.precision, std::string("bf16-mixed"));
    CHECK_EQ(spec.checkpointing, std::string("full"));
    CHECK_EQ(spec.offload, std::string("optimizer"));
    CHECK_EQ(spec.microBatch, int64_t(3));
    CHECK_EQ(spec.seqLen, int64_t(4096));
    CHECK_EQ(spec.gradAccum, int64_t(5));
    // What a plan does not decide stays.
    CHECK_EQ(spec.name, std::string("kept"));
    CHECK_EQ(spec.lr, 1.5e-4);
    CHECK_EQ(spec.data.size(), size_t(1));

    const PlanInput back = planInputFromSpec(spec, DeviceSpec::gpu(80));
    CHECK_EQ(back.model.name, in.model.name);
    CHECK(back.strategy == in.strategy);
    CHECK_EQ(back.shardGroup, in.shardGroup);
    CHECK(back.precision == in.precision);
    CHECK(back.checkpointing == in.checkpointing);
    CHECK(back.offload == in.offload);
    CHECK_EQ(back.microBatch, in.microBatch);
    CHECK_EQ(back.seqLen, in.seqLen);
    CHECK_EQ(back.gradAccum, in.gradAccum);
    CHECK_EQ(back.gpusPerNode, in.gpusPerNode);
    CHECK_EQ(back.nodes, in.nodes);
    CHECK_EQ(plan(back).perDevice.total(), plan(in).perDevice.total());

    // A tensor / pipeline layout goes to the spec and back, so the Launch page's fit check
    // plans the run's layout (the engine accounting of its fullest stage), not data parallelism.
    PlanInput layout = in;
    layout.strategy = Strategy::Zero3;
    layout.shardGroup = 0;
    layout.tp = 2;
    layout.pp = 2;
    layout.virtualStages = 2;
    layout.gradAccum = 4;
    layout.sequenceParallel = true;
    protocol::RunSpec spec3d;
    applyPlanToSpec(layout, "llama-3-8b", spec3d);
    const PlanInput back3d = planInputFromSpec(spec3d, DeviceSpec::gpu(80));
    CHECK_EQ(back3d.tp, int64_t(2));
    CHECK_EQ(back3d.pp, int64_t(2));
    CHECK_EQ(back3d.virtualStages, int64_t(2));
    CHECK(back3d.sequenceParallel);
    const PlanResult r3d = plan(back3d);
    CHECK_EQ(r3d.perDevice.total(), plan(layout).perDevice.total());
    CHECK(r3d.peakPhase.find("pipeline stage") != std::string::npos);
    PlanInput flat = back3d;
    flat.tp = flat.pp = flat.virtualStages = 1;
    flat.sequenceParallel = false;
    CHECK(r3d.perDevice.total() < plan(flat).perDevice.total());
}

void testDevices()
{
    protocol::RunSpec spec;
    spec.model = "tiny-1m";
    spec.device = "cpu";
    CHECK(defaultDeviceFor(spec, int64_t(16) << 30).kind == DeviceKind::Cpu);
    CHECK_EQ(defaultDeviceFor(spec, int64_t(16) << 30).memoryBytes, int64_t(16) << 30);
    CHECK_THROWS_WITH(planInputFromSpec(spec, DeviceSpec::gpu(80)), "device is cpu");
    spec.device = "cuda";
    CHECK(defaultDeviceFor(spec, 0).kind == DeviceKind::Gpu);
    spec.device = "tpu";
    CHECK_THROWS_WITH(deviceKindOf(spec.device), "unknown device 'tpu'");
    // A non-hybrid spec's shard group is not carried into the plan.
    spec.device = "cpu";
    spec.strategy = "zero2";
    spec.shardGroup = 3;
    CHECK_EQ(planInputFromSpec(spec, DeviceSpec::cpu(int64_t(8) << 30)).shardGroup, int64_t(0));
}

void testParallelDims()
{
    using protocol::ParallelDims;
    using protocol::Strategy;
    CHECK_EQ(protocol::strategyNames().size(), protocol::allStrategies().size());
    for (Strategy s : protocol::allStrategies())
        CHECK(protocol::parseStrategyName(protocol::strategyName(s)) == s);
    CHECK_THROWS_WITH(protocol::parseStrategyName("zero4"),
        "unknown strategy 'zero4' (use one of: ddp, zero1, zero2, zero3, hybrid)");
    const ParallelDims hybrid {Strategy::Hybrid, 4, 2, 8};
    CHECK_EQ(hybrid.worldSize(), int64_t(16));
    CHECK_EQ(hybrid.shardDegree(), int64_t(4));
    CHECK_EQ(hybrid.replicas(), int64_t(4));
    CHECK(hybrid.shardsParameters());
    const ParallelDims ddp {Strategy::Ddp, 0, 1, 4};
    CHECK_EQ(ddp.shardDegree(), int64_t(1));
    CHECK_EQ(ddp.replicas(), int64_t(4));
    CHECK(!ddp.shardsParameters());
    CHECK_EQ((ParallelDims {Strategy::Zero2, 0, 2, 4}.shardDegree()), int64_t(8));
    CHECK_THROWS_WITH((ParallelDims {Strategy::Hybrid, 3, 1, 8}.validate("GPUs")),
        "hybrid shard group 3 does not divide the 8 GPUs; use a divisor of 8 (1, 2, 4, 8)");
    CHECK_THROWS_WITH((ParallelDims {Strategy::Hybrid, 0, 1, 6}.validate()),
        "hybrid needs a shard group size (--shard-group G), a divisor of the 6 ranks");
    // The run spec and the planner check through the same code.
    protocol::RunSpec spec;
    spec.model = "m";
    spec.data = {"d"};
    spec.steps = 1;
    spec.strategy = "hybrid";
    spec.shardGroup = 3;
    spec.procsPerNode = 8;
    CHECK_THROWS_WITH(
        protocol::validate(spec), "run spec: hybrid shard group 3 does not divide the 8 ranks");
}

} // namespace

int main()
{
    testPlanToSpecAndBack();
    testDevices();
    testParallelDims();
    return shard::plan::test::finish("tst_run_spec_bridge");
}
