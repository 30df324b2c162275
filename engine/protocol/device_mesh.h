// Where everything of a run lives: the device mesh of its ranks, (pp, dp_replicate, dp_shard,
// tp), in torchtitan's order (pp outermost, then dp_replicate, dp_shard, tp innermost, so a
// tensor-parallel group is consecutive ranks and stays inside a node). One owner of placement:
// each rank's coordinates, the ranks it shares a process group with along a dimension, which
// shard of a sharded parameter it holds and which replica it is (checkpoints), its pipeline
// stage's layer range. Built from the run's ParallelDims (strategy, shard group, nodes, ranks
// per node) and its tensor / pipeline degrees. No LibTorch (docs/ARCHITECTURE.md, "Placement").
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "protocol/parallel_dims.h"

namespace shard::protocol {

enum class MeshDim { Pp, DpReplicate, DpShard, Tp };

// "pp", "dp_replicate", "dp_shard", "tp" (torchtitan's names).
std::string meshDimName(MeshDim dim);

struct MeshCoords {
    int64_t pp = 0;
    int64_t dpReplicate = 0;
    int64_t dpShard = 0;
    int64_t tp = 0;
    bool operator==(const MeshCoords& o) const
    {
        return pp == o.pp && dpReplicate == o.dpReplicate && dpShard == o.dpShard && tp == o.tp;
    }
};

struct DeviceMesh {
    int64_t pp = 1;
    int64_t dpReplicate = 1;
    int64_t dpShard = 1;
    int64_t tp = 1;

    // The mesh of `dims` with its tensor degree dims.tp and pipeline degree dims.pp: the ranks
    // left for data parallelism are replicated (ddp), sharded (zero1/2/3) or both (hybrid:
    // dp_shard is the shard group). Throws std::runtime_error naming the degree that does not
    // divide and the ones that would.
    static DeviceMesh of(const ParallelDims& dims);

    int64_t worldSize() const { return pp * dpReplicate * dpShard * tp; }
    int64_t size(MeshDim dim) const;
    // Data-parallel ranks: one copy of a pipeline stage's tensor-parallel slice each.
    int64_t dataParallel() const { return dpReplicate * dpShard; }

    // Which of the dataParallel() copies `rank` trains: dp_replicate × dp_shard + dp_shard, the
    // same for every tensor-parallel and pipeline rank of that copy.
    int64_t dataParallelIndex(int64_t rank) const;
    // The rows [begin, end) of a global micro-batch of `rows` rows that `rank` computes: its
    // copy's contiguous share (ranks of one copy, along tp and pp, compute the same rows).
    std::pair<int64_t, int64_t> dataRows(int64_t rank, int64_t rows) const;

    // Throws std::runtime_error for a rank outside the mesh.
    MeshCoords coords(int64_t rank) const;
    int64_t coord(MeshDim dim, int64_t rank) const;
    int64_t rankOf(const MeshCoords& c) const;
    // The ranks that differ from `rank` only along `dim`, by their coordinate there (the process
    // group of `dim` that `rank` belongs to).
    std::vector<int64_t> groupOf(MeshDim dim, int64_t rank) const;
    // Every group along `dim`, in the order of their first rank.
    std::vector<std::vector<int64_t>> groups(MeshDim dim) const;

    // Throws std::runtime_error when a tensor-parallel group would straddle node boundaries
    // part-way (tp must divide the ranks of a node, or be a multiple of them: its collectives
    // run every layer). Pipeline stages' layers are the model's to cut (plan::balancedStages).
    void validate(int64_t ranksPerNode, const std::string& ranks = "ranks") const;

    // "pp 2 x dp_replicate 8 x dp_shard 1 x tp 4".
    std::string describe() const;
};

} // namespace shard::protocol
