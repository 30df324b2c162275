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
    int64_t currentBytes = 0;     // allocator: live now
    int64_t peakBytes = 0;        // allocator: peak since the previous record
    int64_t frozenParamBytes = 0; // LoRA: the frozen base (compute dtype) this rank holds
    // Offload: this rank's state in host memory (masters, their gradients, AdamW state; with
    // params+optimizer the compute-dtype shards). Not part of the device categories above.
    int64_t offloadedBytes = 0;
    // A rank on a CUDA GPU: its caching allocator's figures (JSON "cuda": {"allocated",
    // "allocated_peak", "reserved", "reserved_peak", "alloc_retries", "ooms"}); then current and
    // peak above are the GPU's allocated bytes. Absent (all zero) for a CPU rank.
    bool cuda = false;
    int64_t cudaAllocatedBytes = 0;
    int64_t cudaAllocatedPeakBytes = 0; // since the previous record
    int64_t cudaReservedBytes = 0;
    int64_t cudaReservedPeakBytes = 0; // since the previous record (torchtitan's max_reserved)
    int64_t cudaAllocRetries = 0;      // whole run
    int64_t cudaOoms = 0;              // whole run
};

struct MetricRecord {
    int64_t step = 0;
    int64_t tokens = 0; // tokens seen so far (global)
    double loss = 0.0;  // on this step's batch, before this step's update
    // Absent (not written, stored as NULL, not plotted) where the run does not log them: a
    // command run whose engine prints no learning rate, gradient norm or throughput.
    std::optional<double> lr;
    std::optional<double> gradNorm;
    std::optional<double> tokensPerSec;
    double stepTimeSec = 0.0;
    double wallTimeSec = 0.0; // since the run started
    std::optional<double> evalLoss;
    int64_t commBytes = 0; // bytes this rank sent in the step
    // Rank 0's reads of tensor values to the host since the previous record (on a GPU each one
    // waits for the device); -1: not counted (not written).
    int64_t hostReads = -1;
    // Rank 0's process CPU seconds (user + system, every thread) when the record was written:
    // differences between records give CPU-seconds per step. Negative: not written.
    double cpuTimeSec = -1.0;
    std::vector<RankMemory> memory;
    // Further named scalars of the step (JSON "scalars": {"rewards/margins": 0.4, ...}), e.g. a
    // preference objective's rewards; empty for supervised runs (not written).
    std::map<std::string, double> scalars;
};

struct EventRecord {
    std::string kind; // start, checkpoint, eval, sample, warning, error, finish
    double wallTimeSec = 0.0;
    int64_t step = -1; // -1: unknown, not written
    std::string message;
    nlohmann::json data
        = nlohmann::json::object(); // e.g. {"reason":"completed"}, {"rank":1,"signal":9}
};

// A "sample" event (kind "sample"): a completion the model wrote during training, greedy from a
// prompt of the run's sample prompts file, in data {"prompt", "completion"}.
inline constexpr const char* kSampleEventKind = "sample";
struct SampleEvent {
    int64_t step = 0;
    std::string prompt;
    std::string completion;
};

// The records `shard-worker generate` streams on stdout, one JSON object per line: "model" once
// loaded, a "token" per generated token, then "summary". The pieces of the token records plus
// the summary's tail join to the summary's text.
struct GenModelRecord {
    std::string model; // the folder or checkpoint loaded
    int64_t params = 0;
    std::string dtype;  // fp32, bf16
    std::string device; // cpu, cuda:0
    double loadSec = 0.0;
};

struct GenTokenRecord {
    int64_t index = 0; // 0-based among the generated tokens
    int32_t id = 0;
    std::string text; // the text this token releases (may be empty)
};

struct GenSummaryRecord {
    int64_t tokens = 0; // generated (stop token excluded)
    int64_t promptTokens = 0;
    double prefillSec = 0.0;
    double decodeSec = 0.0;
    double prefillTokensPerSec = 0.0;
    double decodeTokensPerSec = 0.0;
    std::string stopReason; // eos, max_tokens, stop_string, context
    std::string text;       // the whole generated text
    std::string tail;       // text no token record carried (held back until the end)
};

nlohmann::json toJson(const GenModelRecord& r);
nlohmann::json toJson(const GenTokenRecord& r);
nlohmann::json toJson(const GenSummaryRecord& r);
GenModelRecord genModelFromJson(const nlohmann::json& j);
GenTokenRecord genTokenFromJson(const nlohmann::json& j);
GenSummaryRecord genSummaryFromJson(const nlohmann::json& j);

// The sample event as an event record, and back (nullopt when `e` is not a sample event).
EventRecord toEvent(const SampleEvent& s, double wallTimeSec);
std::optional<SampleEvent> sampleFromEvent(const EventRecord& e);

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
