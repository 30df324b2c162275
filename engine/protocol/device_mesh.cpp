// The device mesh of a run (see device_mesh.h).
#include "protocol/device_mesh.h"

#include <stdexcept>

namespace shard::protocol {

std::string meshDimName(MeshDim dim)
{
    switch (dim) {
    case MeshDim::Pp:
        return "pp";
    case MeshDim::DpReplicate:
        return "dp_replicate";
    case MeshDim::DpShard:
        return "dp_shard";
    case MeshDim::Tp:
        return "tp";
    }
    return "?";
}

DeviceMesh DeviceMesh::of(const ParallelDims& dims)
{
    const int64_t tp = dims.tp, pp = dims.pp;
    const int64_t world = dims.worldSize();
    if (world < 1)
        throw std::runtime_error(
            "a run needs at least one rank (got " + std::to_string(world) + ")");
    if (tp < 1 || pp < 1)
        throw std::runtime_error("tensor and pipeline degrees are at least 1 (got tp "
            + std::to_string(tp) + ", pp " + std::to_string(pp) + ")");
    if (world % (tp * pp) != 0)
        throw std::runtime_error("tp " + std::to_string(tp) + " x pp " + std::to_string(pp)
            + " does not divide the " + std::to_string(world) + " ranks; use degrees whose product "
            + "divides " + std::to_string(world) + " (" + divisorList(world) + ")");
    DeviceMesh m;
    m.tp = tp;
    m.pp = pp;
    const int64_t dp = world / (tp * pp);
    switch (dims.strategy) {
    case Strategy::Ddp:
        m.dpReplicate = dp;
        break;
    case Strategy::Hybrid: {
        const int64_t g = dims.shardGroup;
        if (g < 1 || dp % g != 0)
            throw std::runtime_error("hybrid shard group " + std::to_string(g)
                + " does not divide the " + std::to_string(dp) + " data-parallel ranks; use a "
                + "divisor of " + std::to_string(dp) + " (" + divisorList(dp) + ")");
        m.dpShard = g;
        m.dpReplicate = dp / g;
        break;
    }
    default:
        m.dpShard = dp;
    }
    return m;
}

int64_t DeviceMesh::size(MeshDim dim) const
{
    switch (dim) {
    case MeshDim::Pp:
        return pp;
    case MeshDim::DpReplicate:
        return dpReplicate;
    case MeshDim::DpShard:
        return dpShard;
    case MeshDim::Tp:
        return tp;
    }
    return 1;
}

int64_t DeviceMesh::dataParallelIndex(int64_t rank) const
{
    const MeshCoords c = coords(rank);
    return c.dpReplicate * dpShard + c.dpShard;
}

std::pair<int64_t, int64_t> DeviceMesh::dataRows(int64_t rank, int64_t rows) const
{
    const int64_t i = dataParallelIndex(rank), n = dataParallel();
    return {i * rows / n, (i + 1) * rows / n};
}

MeshCoords DeviceMesh::coords(int64_t rank) const
{
    if (rank < 0 || rank >= worldSize())
        throw std::runtime_error("rank " + std::to_string(rank) + " is outside the "
            + std::to_string(worldSize()) + " ranks of the mesh " + describe());
    MeshCoords c;
    c.tp = rank % tp;
    rank /= tp;
    c.dpShard = rank % dpShard;
    rank /= dpShard;
    c.dpReplicate = rank % dpReplicate;
    c.pp = rank / dpReplicate;
    return c;
}

int64_t DeviceMesh::coord(MeshDim dim, int64_t rank) const
{
    const MeshCoords c = coords(rank);
    switch (dim) {
    case MeshDim::Pp:
        return c.pp;
    case MeshDim::DpReplicate:
        return c.dpReplicate;
    case MeshDim::DpShard:
        return c.dpShard;
    case MeshDim::Tp:
        return c.tp;
    }
    return 0;
}

int64_t DeviceMesh::rankOf(const MeshCoords& c) const
{
    return ((c.pp * dpReplicate + c.dpReplicate) * dpShard + c.dpShard) * tp + c.tp;
}

std::vector<int64_t> DeviceMesh::groupOf(MeshDim dim, int64_t rank) const
{
    MeshCoords c = coords(rank);
    std::vector<int64_t> ranks;
    for (int64_t i = 0; i < size(dim); ++i) {
        switch (dim) {
        case MeshDim::Pp:
            c.pp = i;
            break;
        case MeshDim::DpReplicate:
            c.dpReplicate = i;
            break;
        case MeshDim::DpShard:
            c.dpShard = i;
            break;
        case MeshDim::Tp:
            c.tp = i;
            break;
        }
        ranks.push_back(rankOf(c));
    }
    return ranks;
}

std::vector<std::vector<int64_t>> DeviceMesh::groups(MeshDim dim) const
{
    std::vector<std::vector<int64_t>> all;
    for (int64_t r = 0; r < worldSize(); ++r)
        if (coord(dim, r) == 0)
            all.push_back(groupOf(dim, r));
    return all;
}

void DeviceMesh::validate(int64_t ranksPerNode, const std::string& ranks) const
{
    // A group inside a node, or whole nodes (allowed: the planner warns about the link); one
    // that straddles node boundaries part-way is refused.
    if (tp > 1 && ranksPerNode % tp != 0 && tp % ranksPerNode != 0)
        throw std::runtime_error("tensor parallel degree " + std::to_string(tp)
            + " does not divide the " + std::to_string(ranksPerNode) + " " + ranks
            + " of a node, so some of its groups would straddle node boundaries; use a divisor of "
            + std::to_string(ranksPerNode) + " (" + divisorList(ranksPerNode)
            + ") to keep each group inside a node, or a multiple of " + std::to_string(ranksPerNode)
            + " to span whole nodes");
}

std::string DeviceMesh::describe() const
{
    return "pp " + std::to_string(pp) + " x dp_replicate " + std::to_string(dpReplicate)
        + " x dp_shard " + std::to_string(dpShard) + " x tp " + std::to_string(tp);
}

} // namespace shard::protocol
