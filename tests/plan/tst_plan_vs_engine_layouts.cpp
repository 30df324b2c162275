// The planner's engine accounting against the real engine on tensor and pipeline layouts
// (tiny-15m, fp32, seq 128, Gloo over loopback, 2 steps): each rank's counting-allocator peak
// and, for full fine-tuning, its model states (sharded params + optimizer) from metrics.jsonl,
// against `shard::plan::plan` for the same settings: the fullest stage's planned total within 5%
// of the fullest rank's peak (on LibTorch 1.13 and 2.6), the states within 1%. Tensor parallel with
// and without sequence parallel and recomputation, 1F1B and interleaved pipelines, TP x PP and each
// with zero3 data parallelism, LoRA and QLoRA on a TP slice, QLoRA on a pipeline stage.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "plan/planner.h"
#include "run_memory.h"
#include "run_outputs.h"

using namespace shard::testing;

namespace {

constexpr int kSeq = 128;

struct Layout {
    const char* name;
    int ranks, microBatch, gradAccum, tp, pp, virtualStages;
    bool sequenceParallel, checkpointing;
    const char* method; // full, lora or qlora (on all seven projections)
    bool adapters() const { return std::string(method) != "full"; }
};

RunMemory train(const std::string& dir, const Layout& l)
{
    std::vector<std::string> args {"train", "--model", dir + "/model", "--data",
        dir + "/data.jsonl", "--steps", "2", "--seq-len", std::to_string(kSeq), "--micro-batch",
        std::to_string(l.microBatch), "--grad-accum", std::to_string(l.gradAccum), "--strategy",
        "zero3", "--threads", "1", "--no-shuffle", "--log-every", "1", "--seed", "3",
        "--tensor-parallel", std::to_string(l.tp), "--pipeline-parallel", std::to_string(l.pp),
        "--virtual-stages", std::to_string(l.virtualStages), "--out", dir + "/" + l.name};
    if (l.sequenceParallel)
        args.push_back("--sequence-parallel");
    if (l.checkpointing)
        args.insert(args.end(), {"--checkpointing", "full"});
    if (l.adapters())
        args.insert(args.end(), {"--method", l.method, "--lora-targets", "q,k,v,o,gate,up,down"});
    trainWithWorker(l.name, l.ranks, args, dir + "/" + l.name, 240);
    return readRunMemory(dir + "/" + l.name);
}

void compare(const std::string& dir, const Layout& l)
{
    const RunMemory run = train(dir, l);
    const double peak = static_cast<double>(run.peak);
    const double measuredStates
        = static_cast<double>(run.maxSumOfLast("sharded_params", "optimizer"));
    SHARD_EXPECT(run.ranks() == l.ranks, std::string(l.name) + ": memory records for every rank");
    shard::plan::PlanInput in;
    in.model = shard::plan::loadHfConfig(dir + "/model");
    in.strategy = shard::plan::Strategy::Zero3;
    in.gpusPerNode = l.ranks;
    in.nodes = 1;
    in.tp = l.tp;
    in.pp = l.pp;
    in.virtualStages = l.virtualStages;
    in.sequenceParallel = l.sequenceParallel;
    in.microBatch = l.microBatch;
    in.gradAccum = l.gradAccum;
    in.seqLen = kSeq;
    in.precision = shard::plan::Precision::Fp32;
    in.checkpointing
        = l.checkpointing ? shard::plan::Checkpointing::Full : shard::plan::Checkpointing::None;
    if (l.adapters()) {
        in.method = std::string(l.method) == "qlora" ? shard::plan::Method::Qlora
                                                     : shard::plan::Method::Lora;
        in.loraTargets = "q,k,v,o,gate,up,down";
    }
    in.device = shard::plan::DeviceSpec::cpu(int64_t(24) << 30);
    const shard::plan::PlanResult r = shard::plan::plan(in);
    const double total = static_cast<double>(r.perDevice.total());
    const double states = static_cast<double>(r.perDevice.shardedParams + r.perDevice.optimizer);
    std::printf("%-22s peak %lld measured / %.0f planned (%.4f, %s); states %lld / %.0f; "
                "activations %lld / %lld, logits %lld\n",
        l.name, static_cast<long long>(run.peak), total, peak / total, r.peakPhase.c_str(),
        static_cast<long long>(measuredStates), states,
        static_cast<long long>(run.maxOfLast("activations")),
        static_cast<long long>(r.perDevice.activations),
        static_cast<long long>(r.perDevice.logits));
    SHARD_EXPECT(std::fabs(peak / total - 1.0) <= 0.05,
        std::string(l.name) + ": peak per rank within 5% of the plan");
    if (!l.adapters())
        SHARD_EXPECT(states > 0 && std::fabs(measuredStates / states - 1.0) <= 0.01,
            std::string(l.name) + ": model states within 1% of the plan");
}

} // namespace

int main()
{
    const std::string dir = makeTempDir("plan-vs-engine-layouts");
    SHARD_EXPECT(makeFullLengthRunInputs(dir, "tiny-15m", kSeq), "init-model");
    // name, ranks, micro-batch, grad-accum, tp, pp, virtual stages, sp, checkpointing, method
    const std::vector<Layout> layouts {
        {"tp2", 2, 4, 1, 2, 1, 1, false, false, "full"},
        {"tp2-sp", 2, 4, 1, 2, 1, 1, true, false, "full"},
        {"tp2-sp-checkpointing", 2, 4, 1, 2, 1, 1, true, true, "full"},
        {"tp2-lora", 2, 4, 1, 2, 1, 1, false, false, "lora"},
        {"tp2-qlora", 2, 4, 1, 2, 1, 1, false, false, "qlora"},
        {"pp2-1f1b", 2, 2, 4, 1, 2, 1, false, false, "full"},
        {"pp2-interleaved", 2, 2, 4, 1, 2, 2, false, false, "full"},
        {"pp2-qlora", 2, 2, 4, 1, 2, 1, false, false, "qlora"},
        {"tp2-x-zero3-dp2", 4, 2, 1, 2, 1, 1, false, false, "full"},
        {"tp2-x-pp2", 4, 4, 2, 2, 2, 1, false, false, "full"},
        {"pp2-x-zero3-dp2", 4, 2, 2, 1, 2, 1, false, false, "full"},
    };
    for (const Layout& l : layouts)
        compare(dir, l);
    if (g_failures == 0)
        removeTempDirs();
    return g_failures == 0 ? 0 : 1;
}
