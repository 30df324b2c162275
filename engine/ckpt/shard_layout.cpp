// Dim-0 chunk arithmetic shared by the checkpoint writer, reader and resharder.
#include "shard_layout.h"

#include <algorithm>
#include <stdexcept>

#include "protocol/parallel_dims.h"

namespace shard::ckpt {

bool isKnownStrategy(const std::string& s)
{
    return s == "single" || protocol::isStrategyName(s);
}

ShardPlacement placementFor(const std::string& strategy, int rank, int worldSize, int shardGroup)
{
    if (worldSize < 1)
        throw std::runtime_error(
            "world size must be at least 1 (got " + std::to_string(worldSize) + ")");
    if (rank < 0 || rank >= worldSize)
        throw std::runtime_error(
            "rank " + std::to_string(rank) + " is outside world size " + std::to_string(worldSize));
    ShardPlacement p;
    if (strategy == "single" || strategy == "ddp") {
        p.replica = rank;
        p.replicas = worldSize;
        return p;
    }
    if (strategy == "zero1" || strategy == "zero2" || strategy == "zero3") {
        p.index = rank;
        p.count = worldSize;
        return p;
    }
    if (strategy == "hybrid") {
        if (shardGroup < 1 || worldSize % shardGroup != 0)
            throw std::runtime_error("hybrid shard group " + std::to_string(shardGroup)
                + " must be at least 1 and divide the world size " + std::to_string(worldSize));
        p.index = rank % shardGroup;
        p.count = shardGroup;
        p.replica = rank / shardGroup;
        p.replicas = worldSize / shardGroup;
        return p;
    }
    throw std::runtime_error("unknown strategy '" + strategy
        + "' (checkpoints know single, ddp, zero1, zero2, zero3, hybrid)");
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
