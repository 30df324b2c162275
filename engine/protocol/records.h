// Metric and event records of the run directory (docs/ARCHITECTURE.md): one JSON object per line,
// schema version "v":1. Written by the engine (rank 0), read by the jobs library.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shard::protocol {

inline constexpr int kSchemaVersion = 1;

// Bytes one rank holds, by category (the engine's own accounting) plus the counting allocator.
struct RankMemory {
    int rank = 0;
    int64_t shardedParamBytes = 0;
    int64_t gatheredParamBytes = 0;
    int64_t gradBytes = 0;
    int64_t optimizerBytes = 0;
    int64_t activationBytes = 0;
    int64_t otherBytes = 0;
    int64_t currentBytes = 0; // allocator: live now
    int64_t peakBytes = 0;    // allocator: peak since the previous record
};

struct MetricRecord {
    int64_t step = 0;
    int64_t tokens = 0; // tokens seen so far (global)
    double loss = 0.0;  // on this step's batch, before this step's update
    double lr = 0.0;
    double gradNorm = 0.0;
    double tokensPerSec = 0.0;
    double stepTimeSec = 0.0;
    double wallTimeSec = 0.0; // since the run started
    std::optional<double> evalLoss;
    int64_t commBytes = 0; // bytes this rank sent in the step
    std::vector<RankMemory> memory;
};

struct EventRecord {
    std::string kind; // start, checkpoint, eval, warning, error, finish
    double wallTimeSec = 0.0;
    int64_t step = -1; // -1: unknown, not written
    std::string message;
    nlohmann::json data
        = nlohmann::json::object(); // e.g. {"reason":"completed"}, {"rank":1,"signal":9}
};

nlohmann::json toJson(const RankMemory& m);
nlohmann::json toJson(const MetricRecord& r);
nlohmann::json toJson(const EventRecord& e);
RankMemory rankMemoryFromJson(const nlohmann::json& j);
// Throw std::runtime_error with the missing/invalid field named.
MetricRecord metricFromJson(const nlohmann::json& j);
EventRecord eventFromJson(const nlohmann::json& j);

// One JSON line, no trailing newline.
std::string encodeLine(const nlohmann::json& j);

} // namespace shard::protocol
