// Dim-0 chunk arithmetic shared by the checkpoint writer, reader and resharder.
#include "shard_layout.h"

#include <algorithm>
#include <stdexcept>

#include "protocol/device_mesh.h"

namespace shard::ckpt {

bool isKnownStrategy(const std::string& s)
{
    return s == "single" || protocol::isStrategyName(s);
}

ShardPlacement placementFor(const std::string& strategy, int rank, int worldSize, int shardGroup)
{
    return placementWithTp(strategy, rank, worldSize, shardGroup, 1, 1).first;
}

RowRange chunkRows(int64_t dim0, int index, int count)
{
    if (dim0 < 0 || count < 1 || index < 0 || index >= count)
        throw std::runtime_error("bad chunk: " + std::to_string(index) + " of "
            + std::to_string(count) + " for " + std::to_string(dim0) + " rows");
    const int64_t c = (dim0 + count - 1) / count;
    RowRange r;
    r.begin = std::min<int64_t>(static_cast<int64_t>(index) * c, dim0);
    r.end = std::min<int64_t>(r.begin + c, dim0);
    r.padded = c;
    return r;
}

std::pair<ShardPlacement, TpPlacement> placementWithTp(
    const std::string& strategy, int rank, int worldSize, int shardGroup, int tp, int pp)
{
    if (worldSize >= 1 && (rank < 0 || rank >= worldSize))
        throw std::runtime_error(
            "rank " + std::to_string(rank) + " is outside world size " + std::to_string(worldSize));
    return placementIn(checkpointMesh(strategy, worldSize, shardGroup, tp, pp), rank);
}

protocol::DeviceMesh checkpointMesh(
    const std::string& strategy, int worldSize, int shardGroup, int tp, int pp)
{
    if (worldSize < 1)
        throw std::runtime_error(
            "world size must be at least 1 (got " + std::to_string(worldSize) + ")");
    if (!isKnownStrategy(strategy))
        throw std::runtime_error("unknown strategy '" + strategy
            + "' (checkpoints know single, ddp, zero1, zero2, zero3, hybrid)");
    if (tp < 1 || pp < 1 || worldSize % (static_cast<int64_t>(tp) * pp) != 0)
        throw std::runtime_error("tensor parallel " + std::to_string(tp) + " x pipeline parallel "
            + std::to_string(pp) + " does not divide the world size " + std::to_string(worldSize));
    // The mesh owns placement: the shard is the rank's dp_shard coordinate, the replica its
    // dp_replicate one ("single" holds everything, as ddp's replicas do), within its pipeline
    // stage; the TP rank its tp coordinate.
    const protocol::Strategy s
        = strategy == "single" ? protocol::Strategy::Ddp : protocol::parseStrategyName(strategy);
    return protocol::DeviceMesh::of({s, shardGroup, 1, worldSize, tp, pp});
}

std::pair<ShardPlacement, TpPlacement> placementIn(const protocol::DeviceMesh& mesh, int rank)
{
    const protocol::MeshCoords c = mesh.coords(rank);
    ShardPlacement p;
    p.index = static_cast<int>(c.dpShard);
    p.count = static_cast<int>(mesh.dpShard);
    p.replica = static_cast<int>(c.dpReplicate);
    p.replicas = static_cast<int>(mesh.dpReplicate);
    return {p, {static_cast<int>(c.tp), static_cast<int>(mesh.tp)}};
}

RowRange heldRows(int64_t dim0, const ShardPlacement& dp, TpSplit split, const TpPlacement& tp)
{
    if (split != TpSplit::Rows || tp.size <= 1)
        return chunkRows(dim0, dp.index, dp.count);
    if (dim0 % tp.size != 0)
        throw std::runtime_error("tensor parallel size " + std::to_string(tp.size)
            + " does not divide " + std::to_string(dim0) + " rows");
    const int64_t part = dim0 / tp.size;
    RowRange r = chunkRows(part, dp.index, dp.count);
    r.begin += tp.rank * part;
    r.end += tp.rank * part;
    return r;
}

bool storesRows(
    const ShardPlacement& dp, TpSplit split, const TpPlacement& tp, const RowRange& rows)
{
    return dp.replica == 0 && rows.rows() > 0 && (split == TpSplit::Rows || tp.rank == 0);
}

std::vector<RowCopy> planRowCopies(const std::vector<RowRange>& stored, const RowRange& want)
{
    std::vector<RowCopy> out;
    int64_t row = want.begin;
    while (row < want.end) {
        // The stored chunk holding `row` that reaches furthest (fewest copies).
        size_t best = stored.size();
        for (size_t i = 0; i < stored.size(); ++i) {
            const RowRange& s = stored[i];
            if (s.begin <= row && row < s.end
                && (best == stored.size() || s.end > stored[best].end))
                best = i;
        }
        if (best == stored.size())
            throw std::runtime_error("row " + std::to_string(row)
                + " is held by no stored chunk (the checkpoint does not cover rows ["
                + std::to_string(want.begin) + ", " + std::to_string(want.end) + "))");
        const RowRange& s = stored[best];
        const int64_t n = std::min(want.end, s.end) - row;
        out.push_back({best, row - s.begin, row - want.begin, n});
        row += n;
    }
    return out;
}

} // namespace shard::ckpt
