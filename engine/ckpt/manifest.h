// The manifest of a sharded checkpoint (<run>/checkpoints/step-<n>/manifest.json), written by
// rank 0: which rank file holds which dim-0 rows of every tensor, plus everything needed to check
// that a checkpoint belongs to a run (model config hash, data spec, run id) and to continue it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/shard_layout.h"
#include "protocol/checkpoint_discovery.h"

namespace shard::ckpt {

inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFormat = "shard-ckpt";
inline constexpr const char* kManifestFile = protocol::kCheckpointManifestFile;
inline constexpr const char* kDoneFile = protocol::kCheckpointDoneFile;

// The state kinds saved per tensor: fp32 parameter, AdamW first and second moments.
inline constexpr const char* kParam = "param";
inline constexpr const char* kExpAvg = "exp_avg";
inline constexpr const char* kExpAvgSq = "exp_avg_sq";
const std::vector<std::string>& stateKinds();

// Rows of one tensor stored in one rank's file (key tensorKey(kind, name) for every kind).
struct ChunkEntry {
    int rank = 0;
    RowRange rows; // rows [begin, end) of the global tensor; the saving rank padded to `padded`
};

struct TensorEntry {
    std::string name;           // Hugging Face parameter name
    std::vector<int64_t> shape; // global shape
    bool decay = true;          // AdamW weight decay applies
    std::vector<ChunkEntry> chunks;
    int64_t numel() const;
};

struct Manifest {
    int version = kManifestVersion;
    std::string runId;
    int64_t step = 0;
    int worldSize = 1;
    std::string strategy = "single";
    int shardGroup = 0;
    int tensorParallel = 1;   // ranks of a TP group (chunks are whole-tensor rows either way)
    int pipelineParallel = 1; // stages (a tensor's chunks are in its stage's ranks' files)
    nlohmann::json modelConfig = nlohmann::json::object(); // HF config.json of the model trained
    std::string modelConfigHash;                           // configHash(modelConfig)
    std::string modelSource;                               // the model folder the run started from
    std::string tokenizerSource; // folder with the tokenizer files ("" = modelSource)
    nlohmann::json data = nlohmann::json::object();       // data spec (files, seq len, seed...)
    nlohmann::json trainState = nlohmann::json::object(); // step, data position, tokens seen...
    std::string createdUtc;
    std::vector<std::string> rankFiles; // index = rank of the saving run
    std::vector<TensorEntry> tensors;   // state-dict order

    const TensorEntry* find(const std::string& name) const;
};

nlohmann::json toJson(const Manifest& m);
// `where` names the file in errors.
Manifest manifestFromJson(const nlohmann::json& j, const std::string& where);
Manifest readManifest(const std::string& path);

// A stable hash of a JSON value (FNV-1a 64 of its canonical dump), as "fnv1a64:<16 hex>".
std::string configHash(const nlohmann::json& config);
std::string rankFileName(int rank);
std::string tensorKey(const std::string& kind, const std::string& name);

// One tensor of the model: name, global shape, decay flag.
struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;
    bool decay = true;
    TpSplit split = TpSplit::Whole; // how a tensor-parallel run holds it
    int stage = 0;                  // the pipeline stage that stores it
};

// The chunk table of tensors saved by `strategy` at `worldSize` (replica 0 of every chunk stores
// it; empty chunks are not stored).
// With tensor parallel `tp`, each tensor's chunks are the rows its TensorSpec::split has ranks
// store (storesRows); with `pp` pipeline stages, only its TensorSpec::stage's ranks store it.
std::vector<TensorEntry> layoutTensors(const std::vector<TensorSpec>& tensors,
    const std::string& strategy, int worldSize, int shardGroup, int tp = 1, int pp = 1);

// The rows rank `rank` holds of a tensor with `dim0` rows under `placement`.
inline RowRange rowsOf(int64_t dim0, const ShardPlacement& p)
{
    return chunkRows(dim0, p.index, p.count);
}

// Human-readable differences between two JSON objects ("num_hidden_layers: 2 in the checkpoint,
// 4 in this run"), at most `max` of them.
std::vector<std::string> jsonDifferences(
    const nlohmann::json& checkpoint, const nlohmann::json& current, size_t max = 6);

} // namespace shard::ckpt
