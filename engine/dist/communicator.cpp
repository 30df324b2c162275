// Backend-independent parts of the Communicator: statistics, the traffic formulas, hybrid
// groups, and the backend factory.
#include "dist/communicator.h"
#include "protocol/device_mesh.h"

#include <algorithm>
#include <stdexcept>

#ifdef SHARD_HAVE_GLOO
#include "dist/gloo_communicator.h"
#endif
#include "dist/rank_env.h"
#ifdef SHARD_HAVE_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace shard::dist {

namespace {

class DoneWork final : public Work {
public:
    void wait() override { }
};

} // namespace

int binomialBroadcastSends(int rank, int root, int worldSize)
{
    // Gloo's broadcast is a binomial tree over virtual ranks v = rank - root (mod W): in round
    // k every v < 2^k that already has the data sends it to v + 2^k (if that exists).
    const int v = (rank - root + worldSize) % worldSize;
    int sends = 0;
    for (int step = 1; step < worldSize; step *= 2)
        if (v < step && v + step < worldSize)
            ++sends;
    return sends;
}

const char* collectiveName(Collective kind)
{
    switch (kind) {
    case Collective::AllGather:
        return "all_gather";
    case Collective::ReduceScatter:
        return "reduce_scatter";
    case Collective::AllReduce:
        return "all_reduce";
    case Collective::Broadcast:
        return "broadcast";
    case Collective::Barrier:
        return "barrier";
    }
    return "unknown";
}

int64_t CommStats::totalBytes() const
{
    int64_t total = 0;
    for (int64_t b : bytesSent)
        total += b;
    return total;
}

WorkPtr completedWork()
{
    static WorkPtr done = std::make_shared<DoneWork>();
    return done;
}

void Communicator::count(Collective kind, int64_t bytes)
{
    m_stats.bytesSent[static_cast<size_t>(kind)] += bytes;
    m_stats.calls[static_cast<size_t>(kind)] += 1;
}

int64_t trafficBytes(const std::string& backend, Collective kind, int64_t numel,
    int64_t elementSize, int worldSize, int rank, int root)
{
    const int64_t w = worldSize;
    if (w <= 1 || numel == 0)
        return 0;
    const int64_t bytes = numel * elementSize;
    switch (kind) {
    case Collective::AllGather:
    case Collective::ReduceScatter:
        return (w - 1) * (bytes / w);
    case Collective::AllReduce: {
        const int64_t slot = (numel + w - 1) / w;
        return 2 * (w - 1) * slot * elementSize;
    }
    case Collective::Broadcast:
        if (backend == "nccl")
            return rank == (root + worldSize - 1) % worldSize ? 0 : bytes;
        return binomialBroadcastSends(rank, root, worldSize) * bytes;
    case Collective::Barrier:
        return 0;
    }
    return 0;
}

HybridGroups makeHybridGroups(Communicator& world, int shardGroupSize)
{
    const int w = world.worldSize();
    if (shardGroupSize < 1 || w % shardGroupSize != 0)
        throw std::invalid_argument("hybrid: shard group size " + std::to_string(shardGroupSize)
            + " does not divide the world size " + std::to_string(w)
            + "; pick --shard-group from the divisors of the rank count");
    // The mesh's groups along dp_shard and dp_replicate, every one made by every rank (a new
    // group is collective over the world), this rank's kept.
    const auto mesh = protocol::DeviceMesh::of({protocol::Strategy::Hybrid, shardGroupSize, 1, w});
    HybridGroups groups;
    for (const auto& [dim, slot] : {std::pair {protocol::MeshDim::DpShard, &groups.shard},
             std::pair {protocol::MeshDim::DpReplicate, &groups.replicate}})
        for (const std::vector<int64_t>& members : mesh.groups(dim)) {
            const std::vector<int> ranks(members.begin(), members.end());
            if (auto c = world.newGroup(ranks))
                *slot = c;
        }
    return groups;
}

MeshGroups makeMeshGroups(Communicator& world, const protocol::DeviceMesh& mesh, bool wrap)
{
    if (mesh.worldSize() != world.worldSize())
        throw std::invalid_argument("the mesh " + mesh.describe() + " has "
            + std::to_string(mesh.worldSize()) + " ranks, the run "
            + std::to_string(world.worldSize()));
    MeshGroups groups;
    for (const auto& [dim, slot] : {std::pair {protocol::MeshDim::DpReplicate, &groups.dpReplicate},
             std::pair {protocol::MeshDim::DpShard, &groups.dpShard},
             std::pair {protocol::MeshDim::Tp, &groups.tp}}) {
        if (mesh.size(dim) < 2)
            continue;
        for (const std::vector<int64_t>& members : mesh.groups(dim)) {
            const std::vector<int> ranks(members.begin(), members.end());
            if (auto c = world.newGroup(ranks))
                *slot = c;
        }
    }
    if (mesh.pp < 2)
        return groups;
    for (const std::vector<int64_t>& members : mesh.groups(protocol::MeshDim::Pp)) {
        const std::vector<int> ranks(members.begin(), members.end());
        if (auto c = world.newGroup(ranks))
            groups.pp = c;
        const size_t links = wrap ? ranks.size() : ranks.size() - 1;
        for (size_t s = 0; s < links; ++s) {
            const int from = ranks[s], to = ranks[(s + 1) % ranks.size()];
            const std::vector<int> pair = {std::min(from, to), std::max(from, to)};
            auto act = world.newGroup(pair);
            auto grad = world.newGroup(pair);
            if (world.rank() == from) {
                groups.actOut = act;
                groups.gradIn = grad;
            } else if (world.rank() == to) {
                groups.actIn = act;
                groups.gradOut = grad;
            }
        }
        if (ranks.size() > 2)
            if (auto c = world.newGroup({ranks.front(), ranks.back()}))
                groups.ppEnds = c;
    }
    if (mesh.pp == 2)
        groups.ppEnds = groups.pp;
    return groups;
}

std::shared_ptr<Communicator> createCommunicator(const std::string& backend, const RankEnv& env)
{
    if (backend == "gloo") {
#ifdef SHARD_HAVE_GLOO
        return GlooCommunicator::create(env);
#else
        throw std::runtime_error("this shard-worker was built without Gloo (its LibTorch had no "
                                 "Gloo headers at configure time); use --backend nccl on CUDA "
                                 "devices, or rebuild against a LibTorch with Gloo");
#endif
    }
    if (backend == "nccl") {
#ifdef SHARD_HAVE_NCCL
        return NcclCommunicator::create(env);
#else
        throw std::runtime_error("this shard-worker was built without NCCL (CUDA/NCCL not found "
                                 "at configure time); use --backend gloo or rebuild with CUDA");
#endif
    }
    throw std::runtime_error(
        "unknown communication backend '" + backend + "' (supported: gloo, nccl)");
}

} // namespace shard::dist
