// The planner's per-rank prediction for a CPU run, as one JSON object per strategy, so that the
// benchmark can print it next to what the engine measured (bench/dist/run_bench.sh).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/planner.h"

int main(int argc, char** argv)
{
    if (argc < 7 || argc > 9) {
        std::fprintf(stderr,
            "usage: plan_predict MODEL_DIR RANKS MICRO_BATCH SEQ_LEN PRECISION CHECKPOINTING "
            "[GRAD_ACCUM [SHARD_GROUP]]\n");
        return 2;
    }
    try {
        shard::plan::PlanInput in;
        in.model = shard::plan::loadHfConfig(argv[1]);
        in.gpusPerNode = std::atoi(argv[2]);
        in.nodes = 1;
        in.microBatch = std::atoi(argv[3]);
        in.seqLen = std::atoi(argv[4]);
        in.precision = shard::plan::parsePrecision(argv[5]);
        in.checkpointing = shard::plan::parseCheckpointing(argv[6]);
        in.device = shard::plan::DeviceSpec::cpu(24LL << 30);
        if (argc > 7)
            in.gradAccum = std::atoi(argv[7]);
        if (argc > 8 && std::atoi(argv[8]) > 0) {
            in.strategy = shard::plan::Strategy::Hybrid; // hybrid is listed only with a group
            in.shardGroup = std::atoi(argv[8]);
        }
        for (const auto& r : shard::plan::planAllStrategies(in)) {
            nlohmann::json j = shard::plan::toJson(r.perDevice);
            j["strategy"] = shard::plan::toString(r.input.strategy);
            j["ranks"] = r.worldSize;
            j["peak_phase"] = r.peakPhase;
            j["model_states"] = r.perDevice.modelStates();
            j["bytes_sent_per_step"] = r.bytesSentPerDevicePerStep;
            std::printf("%s\n", j.dump().c_str());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "plan_predict: %s\n", e.what());
        return 1;
    }
    return 0;
}
