// The per-rank environment: launcher variables, srun's SLURM_* variables, and bad values.
#include <cstdio>
#include <stdexcept>
#include <string>

#include "dist/communicator.h"
#include "dist/rank_env.h"

using shard::dist::RankEnv;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what)
{
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

void expectThrows(const std::map<std::string, std::string>& env, const std::string& needle)
{
    try {
        RankEnv::fromEnvironment(env);
        expect(false, "expected an error containing '" + needle + "'");
    } catch (const std::runtime_error& e) {
        expect(std::string(e.what()).find(needle) != std::string::npos,
            "error '" + std::string(e.what()) + "' should contain '" + needle + "'");
    }
}

} // namespace

int main()
{
    auto single = RankEnv::fromEnvironment(std::map<std::string, std::string> {});
    expect(single.rank == 0 && single.worldSize == 1 && single.source == "single",
        "no variables: one process");

    auto launched = RankEnv::fromEnvironment({{"RANK", "5"}, {"WORLD_SIZE", "8"},
        {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}, {"NODE_RANK", "1"},
        {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29501"}, {"SHARD_RDZV_TIMEOUT_S", "7.5"}});
    expect(launched.rank == 5 && launched.worldSize == 8 && launched.localRank == 1
            && launched.localWorldSize == 4 && launched.nodeRank == 1,
        "launcher variables");
    expect(launched.masterAddr == "10.1.2.3" && launched.masterPort == 29501, "master");
    expect(launched.rdzvTimeoutSec == 7.5, "rendezvous timeout");

    auto slurm = RankEnv::fromEnvironment({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"},
        {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"}, {"SLURM_NNODES", "2"}, {"MASTER_ADDR", "n1"},
        {"MASTER_PORT", "4000"}});
    expect(slurm.source == "slurm" && slurm.rank == 3 && slurm.worldSize == 4
            && slurm.localRank == 1 && slurm.localWorldSize == 2 && slurm.nodeRank == 1,
        "srun variables");

    expectThrows({{"RANK", "0"}}, "WORLD_SIZE is not set");
    expectThrows({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}, "RANK 2 is outside");
    expectThrows({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x' is not an integer");
    expectThrows({{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_PORT is not set");
    expectThrows({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}, "MASTER_PORT 0");
    expectThrows({{"SHARD_RDZV_TIMEOUT_S", "-1"}}, "SHARD_RDZV_TIMEOUT_S");

    // Traffic formulas, hand-computed.
    using shard::dist::Collective;
    using shard::dist::trafficBytes;
    expect(trafficBytes("gloo", Collective::AllGather, 1200, 4, 4, 0, 0) == 3600,
        "all-gather sends 3/4 of 4800 bytes");
    expect(trafficBytes("gloo", Collective::ReduceScatter, 1200, 2, 2, 1, 0) == 1200,
        "reduce-scatter sends 1/2 of 2400 bytes");
    expect(trafficBytes("gloo", Collective::AllReduce, 1001, 4, 4, 2, 0) == 2 * 3 * 251 * 4,
        "all-reduce of 1001 floats at 4 ranks: 2 x 3 slots of 251");
    expect(trafficBytes("gloo", Collective::Broadcast, 100, 4, 4, 0, 0) == 800, "root sends 2");
    expect(trafficBytes("gloo", Collective::Broadcast, 100, 4, 4, 1, 0) == 400, "rank 1 sends 1");
    expect(trafficBytes("gloo", Collective::Broadcast, 100, 4, 4, 3, 0) == 0, "leaf sends 0");
    expect(trafficBytes("gloo", Collective::Broadcast, 100, 4, 8, 5, 5) == 3 * 400,
        "root of 8 sends 3 copies");
    expect(trafficBytes("gloo", Collective::AllGather, 100, 4, 1, 0, 0) == 0, "one rank: none");
    int sum = 0;
    for (int r = 0; r < 7; ++r)
        sum += shard::dist::binomialBroadcastSends(r, 3, 7);
    expect(sum == 6, "a broadcast to 7 ranks makes 6 copies in all");

    if (failures == 0)
        std::printf("tst_rank_env: all passed\n");
    return failures == 0 ? 0 : 1;
}
