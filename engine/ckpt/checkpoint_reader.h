// Reading a complete sharded checkpoint, and resharding: the rows any rank of any strategy and
// world size needs are copied from the memory-mapped shard files of the saving ranks, touching
// only those byte ranges (never the whole model unless asked for a full tensor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include "ckpt/manifest.h"

namespace shard::engine {
class SafetensorsFile;
}

namespace shard::ckpt {

// What a run resuming from a checkpoint expects; empty fields are not checked.
struct ResumeExpectation {
    nlohmann::json modelConfig;      // HF config of the model being trained
    nlohmann::json data;             // data spec of this run
    std::string runId;               // the run being continued
    std::vector<TensorSpec> tensors; // the model's parameters
};

class CheckpointReader {
public:
    // Validates everything before returning: DONE marker, manifest, every rank file present,
    // belonging to this checkpoint (run id and step in its metadata) and holding every chunk the
    // manifest lists with the right shape and dtype. Errors name the checkpoint and what is wrong.
    explicit CheckpointReader(const std::string& dir);
    ~CheckpointReader();

    const std::string& dir() const { return m_dir; }
    const Manifest& manifest() const { return m_manifest; }

    // Rows `want` of tensor `name` (state `kind`: kParam, kExpAvg, kExpAvgSq) as a new fp32
    // tensor of want.padded rows whose padding rows are zero.
    at::Tensor readRows(
        const std::string& kind, const std::string& name, const RowRange& want) const;
    // Copies rows `want` into dst (want.padded rows, any dtype; converted), zeroing the padding.
    void readRowsInto(const std::string& kind, const std::string& name, const RowRange& want,
        at::Tensor& dst) const;
    at::Tensor readFull(const std::string& kind, const std::string& name) const;
    // The piece rank r holds under a placement (resharding to another world size / strategy).
    at::Tensor readShard(
        const std::string& kind, const std::string& name, const ShardPlacement& placement) const;

    // Per-rank state saved by rank `rank` of the saving run (its metadata and RNG state).
    nlohmann::json rankState(int rank) const;
    at::Tensor rngState(int rank) const; // undefined when none was saved

    // Bytes copied out of the shard files so far (tests check that resharding reads only what a
    // rank needs).
    int64_t bytesRead() const { return m_bytesRead; }

    // Throws naming every difference found (model config fields, data spec fields, run id,
    // missing / extra / differently shaped tensors).
    void checkCompatible(const ResumeExpectation& expect) const;

private:
    const TensorEntry& entry(const std::string& name) const;
    std::string m_dir;
    Manifest m_manifest;
    std::vector<std::unique_ptr<engine::SafetensorsFile>> m_files; // index = saving rank
    mutable int64_t m_bytesRead = 0;
};

} // namespace shard::ckpt
