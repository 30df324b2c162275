// Tensor parallelism's building block (engine/core/model/tensor_parallel.h) on Gloo through real
// processes started by `shard-worker launch`: one transformer block split over 1, 2 and 4 ranks
// equals the whole block in fp64 (output, input gradient, every weight's gradient) for Llama
// with grouped-query attention, q/k/v/o biases and Qwen3's q/k norms; the root split by vocabulary
// (embedding, head and cross entropy, untied and tied, over one and several loss chunks) equals the
// whole root (the embedding bit for bit); a size that does not divide the heads is refused with
// the numbers and the sizes that would.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "process_runner.h"

using namespace shard::testing;

int main()
{
    for (int world : {1, 2, 4}) {
        const std::string dir = makeTempDir("tp" + std::to_string(world));
        auto p = spawnProcess({workerPath(), "launch", "--nproc-per-node", std::to_string(world),
            "--run-dir", dir, "--", "dist-selftest", "--mode", "tp-block"});
        const bool finished = p.wait(180);
        SHARD_EXPECT(finished, "tp-block at " + std::to_string(world) + " ranks timed out");
        const auto report = lastSelftestReport(p.out);
        SHARD_EXPECT(p.exitCode() == 0 && report.value("failures", -1) == 0,
            "tp-block at " + std::to_string(world) + " ranks: " + p.out + p.err);
        SHARD_EXPECT(report.contains("tp_cases") && report["tp_cases"].size() == 5,
            "three block shapes and two vocabulary-parallel roots were tried: " + report.dump());
        for (const auto& c : report.value("tp_cases", nlohmann::json::array()))
            SHARD_EXPECT(c.contains("rel_error") && c["rel_error"].get<double>() < 1e-10,
                "split over " + std::to_string(world) + " ranks: " + c.dump());
        std::printf("tp-block at %d ranks: worst relative difference %.3g\n", world,
            report.value("tp_rel_error", -1.0));
    }
    if (g_failures == 0) {
        std::printf("tst_tensor_parallel: all passed\n");
        removeTempDirs();
    }
    return g_failures == 0 ? 0 : 1;
}
