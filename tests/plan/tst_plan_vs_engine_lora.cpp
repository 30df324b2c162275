// The planner's LoRA / QLoRA model states against the real engine: tiny-15m, fp32, 2 steps, at 1
// rank and under ddp, zero2 and zero3 at 2 ranks (Gloo over loopback). The engine reports each
// rank's frozen base (frozen_params: compute-dtype rows, NF4 packed bytes and absmax), the
// adapters' fp32 masters (sharded_params) and their AdamW state (optimizer) in metrics.jsonl; the
// plan of the same settings must give the same bytes (frozen_base + quantized_base, adapter AdamW
// and masters = half the AdamW bytes) within 1%.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/planner.h"
#include "run_memory.h"
#include "run_outputs.h"

using namespace shard::testing;

namespace {

constexpr int kSeq = 128;
constexpr int kGlobalRows = 4;
const char* const kTargets = "q,k,v,o,gate";
constexpr int kRank = 4;

struct Measured {
    int64_t frozen = -1, masters = -1, optimizer = -1; // max over ranks, last step
    int64_t peak = -1;                                 // max over ranks and steps (printed only)
    int ranks = 0;
};

Measured train(
    const std::string& dir, const std::string& method, const std::string& strategy, int ranks)
{
    const std::string out = dir + "/" + method + "-" + strategy + "-" + std::to_string(ranks);
    std::vector<std::string> args {"train", "--model", dir + "/model", "--data",
        dir + "/data.jsonl", "--steps", "2", "--seq-len", std::to_string(kSeq), "--micro-batch",
        std::to_string(kGlobalRows / ranks), "--strategy", strategy, "--threads", "1",
        "--no-shuffle", "--log-every", "1", "--seed", "3", "--precision", "fp32", "--method",
        method, "--lora-rank", std::to_string(kRank), "--lora-targets", kTargets, "--out", out};
    trainWithWorker(method + " " + strategy + " train", ranks, args, out, 120);
    const RunMemory run = readRunMemory(out);
    Measured m;
    m.peak = run.peak;
    m.frozen = run.maxOfLast("frozen_params");
    m.masters = run.maxOfLast("sharded_params");
    m.optimizer = run.maxOfLast("optimizer");
    m.ranks = run.ranks();
    return m;
}

bool near(double measured, double planned)
{
    return planned > 0 && std::fabs(measured / planned - 1.0) <= 0.01;
}

Measured compare(
    const std::string& dir, const std::string& method, const std::string& strategy, int ranks)
{
    const Measured m = train(dir, method, strategy, ranks);
    SHARD_EXPECT(m.ranks == ranks, "memory records for every rank");
    shard::plan::PlanInput in;
    in.model = shard::plan::loadHfConfig(dir + "/model");
    in.strategy = shard::plan::parseStrategy(strategy);
    in.gpusPerNode = ranks;
    in.microBatch = kGlobalRows / ranks;
    in.seqLen = kSeq;
    in.precision = shard::plan::Precision::Fp32;
    in.device = shard::plan::DeviceSpec::cpu(int64_t(24) << 30);
    in.method = shard::plan::parseMethod(method);
    in.loraRank = kRank;
    in.loraTargets = kTargets;
    const shard::plan::PlanResult plan = shard::plan::plan(in);
    const shard::plan::MemoryBreakdown& p = plan.perDevice;
    const double frozen = static_cast<double>(p.frozenBase + p.quantizedBase);
    const double opt = static_cast<double>(p.adapterOptimizer);
    std::printf("%s %s at %d rank(s): frozen %lld measured / %.0f planned, adapter AdamW %lld / "
                "%.0f, adapter masters %lld / %.0f\n",
        method.c_str(), strategy.c_str(), ranks, static_cast<long long>(m.frozen), frozen,
        static_cast<long long>(m.optimizer), opt, static_cast<long long>(m.masters), opt / 2);
    // The peak: the activation coefficients are full fine-tuning's, less what only a frozen
    // weight's gradient would need (ACCOUNTING.md); under zero3 only the root is gathered at
    // the head's backward. Within the 5% the planner promises on the CPU (the zero3 peaks also
    // move by about 1.5% from run to run with Gloo's buffers).
    const double ratio = static_cast<double>(m.peak) / static_cast<double>(p.total());
    std::printf("  peak %lld measured / %lld planned (%.3f, %s)\n", static_cast<long long>(m.peak),
        static_cast<long long>(p.total()), ratio, plan.peakPhase.c_str());
    const std::string what = method + " " + strategy + " at " + std::to_string(ranks);
    // zero3 over 2 ranks peaks at the last block's forward, which moves most from run to run:
    // LoRA's measured 110.7-113.4 MB over six runs of one build (2.4 %), so 5 % plus that.
    const bool movingPeak = strategy == "zero3" && ranks > 1;
    const double upper = movingPeak ? 1.075 : 1.05;
    SHARD_EXPECT(ratio >= 0.95 && ratio <= upper,
        what + ": peak within 5% of the plan (7.5% for zero3 over 2 ranks)");
    SHARD_EXPECT(near(m.frozen, frozen), what + ": frozen base within 1%");
    SHARD_EXPECT(near(m.optimizer, opt), what + ": adapter AdamW within 1%");
    SHARD_EXPECT(near(m.masters, opt / 2), what + ": adapter masters within 1%");
    return m;
}

} // namespace

int main()
{
    const std::string dir = makeTempDir("plan-vs-engine-lora");
    SHARD_EXPECT(makeFullLengthRunInputs(dir, "tiny-15m", kSeq), "init-model");
    // QLoRA keeps its projections as NF4 and dequantises one block's at a time (freed after the
    // block's forward, refilled before its backward), so its peak is below LoRA's by most of
    // what quantising saved: (4 - nf4) bytes per projection weight at fp32, less one block's
    // copies. Were every block's copies kept until backward, QLoRA's peak would be above LoRA's.
    const shard::plan::ModelSpec spec = shard::plan::loadHfConfig(dir + "/model");
    const double q = static_cast<double>(shard::plan::quantizedParameterCount(spec));
    const double saved = (4.0 - (0.5 + 4.0 / 64.0)) * q;
    for (const auto& [strategy, ranks] :
        {std::pair<const char*, int> {"zero3", 1}, {"ddp", 2}, {"zero2", 2}, {"zero3", 2}}) {
        const Measured lora = compare(dir, "lora", strategy, ranks);
        const Measured qlora = compare(dir, "qlora", strategy, ranks);
        const double below = static_cast<double>(lora.peak - qlora.peak);
        std::printf("  qlora peak below lora's by %.0f bytes (quantising saved %.0f)\n", below,
            saved / (std::string(strategy) == "zero3" ? ranks : 1));
        SHARD_EXPECT(lora.peak > 0 && qlora.peak > 0, "peaks measured");
        SHARD_EXPECT(below >= 0.5 * saved / (std::string(strategy) == "zero3" ? ranks : 1),
            std::string(strategy) + " at " + std::to_string(ranks)
                + ": QLoRA's peak is below LoRA's by at least half of what NF4 saved");
    }
    if (g_failures == 0)
        removeTempDirs();
    return g_failures == 0 ? 0 : 1;
}
