// The planner against the real engine: zero3 on tiny-15m at 1 and 2 ranks (Gloo over loopback,
// fp32, 2 steps). The engine reports each rank's memory in metrics.jsonl (counting allocator
// peak and its categories); `shard::plan::plan` for the same settings must predict the
// model-state bytes (sharded params + optimizer) within 5% and the peak within 10%, and the
// checkpoint the run writes at its end (its event's bytes over every rank's shard file) within 1%.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
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

struct Measured {
    int64_t peak = -1;   // max over ranks and steps
    int64_t states = -1; // max over ranks, last step
    int ranks = 0;
    int64_t checkpointBytes = -1; // the "checkpoint" event's bytes (every rank's shard file)
};

Measured train(const std::string& dir, int ranks)
{
    const std::string out = dir + "/zero3-" + std::to_string(ranks);
    std::vector<std::string> args {"train", "--model", dir + "/model", "--data",
        dir + "/data.jsonl", "--steps", "2", "--seq-len", std::to_string(kSeq), "--micro-batch",
        std::to_string(kGlobalRows / ranks), "--strategy", "zero3", "--threads", "1",
        "--no-shuffle", "--log-every", "1", "--seed", "3", "--checkpoint-every", "2", "--out", out};
    trainWithWorker("train at " + std::to_string(ranks), ranks, args, out, 120);
    const RunMemory run = readRunMemory(out);
    Measured m;
    m.peak = run.peak;
    m.states = run.maxSumOfLast("sharded_params", "optimizer");
    m.ranks = run.ranks();
    std::string line;
    std::ifstream events(out + "/events.jsonl");
    while (std::getline(events, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.value("kind", "") == "checkpoint")
            m.checkpointBytes = j["data"].value("bytes", int64_t(-1));
    }
    return m;
}

void compare(const std::string& dir, int ranks)
{
    const Measured m = train(dir, ranks);
    SHARD_EXPECT(m.ranks == ranks, "memory records for every rank");
    shard::plan::PlanInput in;
    in.model = shard::plan::loadHfConfig(dir + "/model");
    in.strategy = shard::plan::Strategy::Zero3;
    in.gpusPerNode = ranks;
    in.nodes = 1;
    in.microBatch = kGlobalRows / ranks;
    in.seqLen = kSeq;
    in.precision = shard::plan::Precision::Fp32;
    in.checkpointing = shard::plan::Checkpointing::None;
    in.device = shard::plan::DeviceSpec::cpu(int64_t(24) << 30);
    const shard::plan::PlanResult r = shard::plan::plan(in);
    const double states = static_cast<double>(r.perDevice.shardedParams + r.perDevice.optimizer);
    const double total = static_cast<double>(r.perDevice.total());
    std::printf("zero3 at %d rank(s): states %lld measured / %.0f planned (%.4f), peak %lld "
                "measured / %.0f planned (%.4f, %s)\n",
        ranks, static_cast<long long>(m.states), states, m.states / states,
        static_cast<long long>(m.peak), total, m.peak / total, r.peakPhase.c_str());
    SHARD_EXPECT(std::fabs(m.states / states - 1.0) <= 0.05,
        "model states within 5% at " + std::to_string(ranks) + " rank(s)");
    SHARD_EXPECT(std::fabs(m.peak / total - 1.0) <= 0.10,
        "peak within 10% at " + std::to_string(ranks) + " rank(s)");
    const double ckpt = static_cast<double>(r.checkpointBytes);
    std::printf("checkpoint at %d rank(s): %lld bytes written / %.0f planned (%.4f), %lld "
                "planned per rank\n",
        ranks, static_cast<long long>(m.checkpointBytes), ckpt, m.checkpointBytes / ckpt,
        static_cast<long long>(r.checkpointBytesPerRank));
    SHARD_EXPECT(std::fabs(m.checkpointBytes / ckpt - 1.0) <= 0.01,
        "checkpoint size within 1% at " + std::to_string(ranks) + " rank(s)");
    SHARD_EXPECT(r.checkpointBytesPerRank * ranks == r.checkpointBytes
            || std::llabs(r.checkpointBytesPerRank * ranks - r.checkpointBytes) <= ranks,
        "per rank = in all / ranks under zero3");
}

} // namespace

int main()
{
    const std::string dir = makeTempDir("plan-vs-engine");
    SHARD_EXPECT(makeFullLengthRunInputs(dir, "tiny-15m", kSeq), "init-model");
    compare(dir, 1);
    compare(dir, 2);
    if (g_failures == 0)
        removeTempDirs();
    return g_failures == 0 ? 0 : 1;
}
