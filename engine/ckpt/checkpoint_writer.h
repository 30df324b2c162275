// Saving a sharded checkpoint: every rank writes its own shard file (its rows of each fp32
// parameter and of AdamW's m and v, its RNG state and per-rank state); rank 0 writes the manifest
// and publishes the directory atomically (checkpoint_store.h). A write error on any rank (a full
// disk, say) throws on every rank with the cause, removes the partial temporary directory and
// leaves the previous checkpoints intact.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ckpt/manifest.h"

namespace shard::ckpt {

// What one rank holds of one parameter: buffers of rowsOf(shape[0], placement).padded rows whose
// first rows() rows are real (the tail is padding). expAvg / expAvgSq undefined = zero (no
// optimizer step yet).
struct LocalTensor {
    std::string name;
    std::vector<int64_t> shape; // global shape
    bool decay = true;
    at::Tensor param;
    at::Tensor expAvg;
    at::Tensor expAvgSq;
    // Tensor parallel: how the run splits it (the buffers hold heldRows(): a Columns tensor's
    // are already gathered to whole rows over the TP group).
    TpSplit split = TpSplit::Whole;
};

// Identical on every rank, except `rank`, `rankState` and `rng`.
struct SaveRequest {
    std::string checkpointsDir; // <run>/checkpoints
    int64_t step = 0;
    std::string runId;
    std::string strategy = "single";
    int rank = 0;
    int worldSize = 1;
    int shardGroup = 0;
    int tensorParallel = 1;   // TP group size (consecutive ranks)
    int pipelineParallel = 1; // stages of worldSize / pipelineParallel consecutive ranks
    // Pipeline parallel: every trained tensor of the model with its storing stage (rank 0 does
    // not hold them all); empty: the tensors rank 0 saves are all of them.
    std::vector<TensorSpec> layout;
    nlohmann::json modelConfig = nlohmann::json::object();
    std::string modelSource;
    std::string tokenizerSource;
    nlohmann::json data = nlohmann::json::object();
    nlohmann::json trainState = nlohmann::json::object(); // rank 0's copy is the one saved
    nlohmann::json rankState = nlohmann::json::object();  // this rank's own state
    at::Tensor rng;                                       // this rank's generator state (uint8)
    int keep = 2;                                         // complete checkpoints kept (0 = all)

    // Collective AND over all ranks (also a barrier); empty = a single process.
    std::function<bool(bool)> agree;
    // Called on every rank at each phase ("temp-created", "shard-written", "manifest-written",
    // "renamed" (step-<n> in place, no DONE yet), "published" (DONE written)); lets a test stop a
    // writer at a chosen point.
    std::function<void(const std::string&)> onPhase;
};

struct SaveResult {
    std::string dir;                 // the published step-<n> directory
    int64_t bytesWritten = 0;        // this rank's shard file
    std::vector<std::string> pruned; // rank 0: checkpoints removed by keep-last-K
    double seconds = 0.0;
};

// Throws std::runtime_error("checkpoint step-<n>: <cause>; previous checkpoints are intact").
SaveResult saveCheckpoint(const SaveRequest& request, const std::vector<LocalTensor>& tensors);

} // namespace shard::ckpt
