// The collectives the sharded engine needs (docs/ARCHITECTURE.md, "The engine's strategy seam"),
// behind one interface with a Gloo (CPU) and an NCCL (GPU) backend, plus a per-kind count of the
// bytes this rank sends.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shard::protocol {
struct DeviceMesh;
} // namespace shard::protocol

namespace shard::dist {

enum class Collective { AllGather = 0, ReduceScatter, AllReduce, Broadcast, Barrier };
inline constexpr int kCollectiveCount = 5;
const char* collectiveName(Collective kind);

// Bytes this rank put on the wire, by collective kind, as the backend's algorithm sends them
// (see trafficBytes()). Calls count every collective issued.
struct CommStats {
    std::array<int64_t, kCollectiveCount> bytesSent {};
    std::array<int64_t, kCollectiveCount> calls {};

    int64_t bytes(Collective kind) const { return bytesSent[static_cast<size_t>(kind)]; }
    int64_t totalBytes() const;
};

// An issued collective. wait() blocks until the output tensor holds the result (and, for
// composite operations such as Gloo's reduce-scatter, finishes the local part); errors of the
// collective are rethrown here. Waiting twice is harmless.
class Work {
public:
    virtual ~Work() = default;
    virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// A Work that is already complete (world size 1, empty tensors).
WorkPtr completedWork();

// All members of a communicator must issue the same collectives in the same order. Tensors
// are contiguous, on the backend's device (CPU for Gloo, CUDA for NCCL), and must stay alive
// and untouched until wait() returns. Supported dtypes: float32, float64, bfloat16, float16,
// int32, int64, uint8 (bf16 and fp16 travel as bytes on Gloo where Gloo lacks them).
class Communicator {
public:
    virtual ~Communicator() = default;

    int rank() const { return m_rank; }
    int worldSize() const { return m_worldSize; }
    virtual std::string backend() const = 0;

    // output (W*C elements, flat) receives every rank's input (C elements) in rank order:
    // slot r = output[r*C, (r+1)*C). input may be this rank's own slot of output.
    virtual WorkPtr allGather(const at::Tensor& output, const at::Tensor& input) = 0;
    // input (W*C elements) is summed across ranks; output (C elements) receives slot `rank()`
    // of the sum. Divide by worldSize() yourself for an average (Gloo has no AVG). Where
    // sumsIntoWiderOutput(), a float32 output may take a bfloat16 or float16 input.
    virtual WorkPtr reduceScatter(const at::Tensor& output, const at::Tensor& input) = 0;
    // Whether reduceScatter takes a float32 output for a bfloat16 or float16 input: the input
    // travels in its own dtype and the received slots are summed in float32, in rank order. The
    // result is bit for bit the float32 reduce of the widened input (widening is exact) at half
    // its bytes on the wire. Gloo sums on the host and can; NCCL reduces in the buffers' dtype.
    virtual bool sumsIntoWiderOutput() const { return false; }
    // In-place sum across ranks.
    virtual WorkPtr allReduce(const at::Tensor& tensor) = 0;
    // In-place: every rank receives root's tensor (root is a rank of this communicator).
    virtual WorkPtr broadcast(const at::Tensor& tensor, int root) = 0;
    // Returns when every member has reached it.
    virtual void barrier() = 0;

    // A communicator over `ranks` (ranks of this communicator, ascending, no duplicates).
    // Collective: every member of this communicator must call it with the same list, in the
    // same order relative to other newGroup calls. Members get the group (their rank in it is
    // their index in `ranks`); the others get nullptr.
    virtual std::shared_ptr<Communicator> newGroup(const std::vector<int>& ranks) = 0;

    const CommStats& stats() const { return m_stats; }
    void resetStats() { m_stats = CommStats {}; }

protected:
    Communicator(int rank, int worldSize)
        : m_rank(rank)
        , m_worldSize(worldSize)
    {
    }
    void count(Collective kind, int64_t bytes);

private:
    int m_rank;
    int m_worldSize;
    CommStats m_stats;
};

// Bytes one rank sends for one collective of `bytes` (the size of the full buffer: the gathered
// output, the reduce-scatter input, the all-reduced or broadcast tensor) over W ranks, for the
// ring/pairwise algorithms both backends use:
//   all-gather      (W-1) * bytes / W      (ring: pass W-1 slots on)
//   reduce-scatter  (W-1) * bytes / W      (Gloo: all-to-all of W-1 slots; NCCL: ring)
//   all-reduce      2 * (W-1) * bytes / W  (ring reduce-scatter + all-gather of ceil-sized slots)
//   broadcast       Gloo: binomial tree, bytes x binomialBroadcastSends(rank, root, W) (the root
//                   sends ceil(log2 W) copies, leaves none; the sum over ranks is (W-1) x bytes);
//                   NCCL ring: every rank but the last in the ring forwards bytes
//   barrier         0 (a few header bytes, not counted)
// For all-reduce the slot is ceil(numel/W) elements, so the exact count is
// 2 * (W-1) * ceil(numel/W) * elementSize.
int64_t trafficBytes(const std::string& backend, Collective kind, int64_t numel,
    int64_t elementSize, int worldSize, int rank, int root);

// How many times `rank` sends the whole tensor in Gloo's binomial-tree broadcast from `root`.
int binomialBroadcastSends(int rank, int root, int worldSize);

// Shard groups of G consecutive ranks and replicate groups of the ranks with the same index in
// their shard group (hybrid sharding). Collective over `world`.
struct HybridGroups {
    std::shared_ptr<Communicator> shard;     // ranks [g*G, (g+1)*G) containing this rank
    std::shared_ptr<Communicator> replicate; // ranks {i, i+G, i+2G, ...}, i = rank % G
};
HybridGroups makeHybridGroups(Communicator& world, int shardGroupSize);

// This rank's group along each dimension of `mesh` that has more than one rank (nullptr along
// the others), every group made by every rank in the mesh's order. Collective over `world`,
// whose size must be the mesh's. Along the pipeline: the whole group; point to point (a
// broadcast from the sender in a group of two), one group per direction and kind of each link
// between neighbouring stages, so that each group carries one sender's tensors in one order; and,
// beyond two stages, the first and last stage (a tied embedding's gradient). With `wrap`
// (interleaved schedules) the last stage's next is the first.
struct MeshGroups {
    std::shared_ptr<Communicator> dpReplicate;
    std::shared_ptr<Communicator> dpShard;
    std::shared_ptr<Communicator> tp;
    std::shared_ptr<Communicator> pp;
    std::shared_ptr<Communicator> actOut;  // activations to the next stage (this rank sends)
    std::shared_ptr<Communicator> actIn;   // activations from the previous stage
    std::shared_ptr<Communicator> gradOut; // their gradients to the previous stage
    std::shared_ptr<Communicator> gradIn;  // gradients from the next stage
    std::shared_ptr<Communicator> ppEnds;  // first and last stage (pp > 2; pp 2: the pp group)
};
MeshGroups makeMeshGroups(Communicator& world, const protocol::DeviceMesh& mesh, bool wrap = false);

struct RankEnv;
// The communicator for this process: "gloo" (CPU) or "nccl" (GPU, when built with NCCL).
// World size 1 needs no store and no network. Throws std::runtime_error with the cause
// (rendezvous timeout, busy port, backend not built).
std::shared_ptr<Communicator> createCommunicator(const std::string& backend, const RankEnv& env);

} // namespace shard::dist
