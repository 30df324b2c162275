// Where a rank's piece of each parameter lies (docs/ARCHITECTURE.md): every parameter is split on
// dim 0 into `count` chunks of ceil(d0 / count) rows; chunk i covers rows [i*c, min((i+1)*c, d0))
// and is padded at its tail to c rows. A full copy (DDP, single process) is the one chunk of
// count 1. Pure index math, no Torch, so resharding between any two layouts can be tested on its
// own.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "protocol/device_mesh.h"

namespace shard::ckpt {

// Rows [begin, end) of the global tensor, held in a buffer of `padded` rows (the tail
// padded - (end - begin) rows are zero).
struct RowRange {
    int64_t begin = 0;
    int64_t end = 0;
    int64_t padded = 0;
    int64_t rows() const { return end - begin; }
    int64_t padding() const { return padded - rows(); }
    bool operator==(const RowRange& o) const
    {
        return begin == o.begin && end == o.end && padded == o.padded;
    }
};

// How one rank holds state under a strategy: chunk `index` of `count` (count 1 = full copy), and
// which replica of that chunk it is (replica 0 of every chunk writes it to a checkpoint).
struct ShardPlacement {
    int index = 0;
    int count = 1;
    int replica = 0;
    int replicas = 1;
};

// The strategies a checkpoint knows: single, ddp, zero1, zero2, zero3, hybrid.
bool isKnownStrategy(const std::string& strategy);

// The placement of `rank` of `worldSize` under `strategy` (hybrid: shard groups of `shardGroup`
// consecutive ranks, replicated across groups). Throws naming the bad argument.
ShardPlacement placementFor(
    const std::string& strategy, int rank, int worldSize, int shardGroup = 0);

// Chunk `index` of `count` of a tensor with `dim0` rows.
RowRange chunkRows(int64_t dim0, int index, int count);

// Tensor parallel, as checkpoints see it (engine::tp::Split): a tensor whole on every rank of a
// TP group, or split into equal parts along dim 0 (Rows) or dim 1 (Columns), part r on TP rank
// r. A checkpoint stores whole-tensor rows only, so that any layout reads it: a Rows part's
// data-parallel chunk is a row range of the whole tensor (offset by the part's first row), and
// TP rank 0 stores a Whole or Columns tensor's chunk (Columns: after gathering the columns of
// its rows over the group).
enum class TpSplit { Whole, Rows, Columns };
struct TpPlacement {
    int rank = 0;
    int size = 1;
};

// The data-parallel and tensor-parallel placement of `rank` of `worldSize` ranks in TP groups
// of `tp` consecutive ranks (the world / tp data-parallel ranks placed by placementFor). With
// `pp` pipeline stages of worldSize / pp consecutive ranks each (the mesh's outermost
// dimension), the placement within the rank's stage (protocol::DeviceMesh's coordinates).
std::pair<ShardPlacement, TpPlacement> placementWithTp(
    const std::string& strategy, int rank, int worldSize, int shardGroup, int tp, int pp = 1);
// The mesh placementWithTp places ranks by ("single" as ddp: every rank a replica), after
// checking the strategy and that tp x pp divides the world; and a rank's placement in it.
protocol::DeviceMesh checkpointMesh(
    const std::string& strategy, int worldSize, int shardGroup, int tp, int pp);
std::pair<ShardPlacement, TpPlacement> placementIn(const protocol::DeviceMesh& mesh, int rank);
// The rows of the whole tensor (of `dim0` rows) a rank's buffer covers: its data-parallel chunk
// of the whole, or of its Rows part, shifted to the part's rows.
RowRange heldRows(int64_t dim0, const ShardPlacement& dp, TpSplit split, const TpPlacement& tp);
// Whether the rank stores those rows in a checkpoint: replica 0 of each non-empty chunk, and
// of a tensor not split by rows only TP rank 0.
bool storesRows(
    const ShardPlacement& dp, TpSplit split, const TpPlacement& tp, const RowRange& rows);

// One piece of a read plan: rows [srcRow, srcRow + rows) of a stored chunk (relative to the
// chunk's first row) go to rows [dstRow, dstRow + rows) of the output buffer.
struct RowCopy {
    size_t chunk = 0; // index into the `stored` list given to planRowCopies
    int64_t srcRow = 0;
    int64_t dstRow = 0;
    int64_t rows = 0;
};

// How to fill `want` (rows of the global tensor, relative output row 0 = want.begin) from
// `stored` chunks (which may overlap, e.g. replicas; each row is taken once, from the first chunk
// that holds it). Throws when a wanted row is in no stored chunk.
std::vector<RowCopy> planRowCopies(const std::vector<RowRange>& stored, const RowRange& want);

} // namespace shard::ckpt
