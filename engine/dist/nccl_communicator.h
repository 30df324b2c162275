// Communicator on CUDA devices through nccl.h directly (no c10d::ProcessGroupNCCL, which
// Debian's CPU LibTorch lacks). The unique id travels through the same TCPStore as Gloo's
// rendezvous. Collectives run on a communication stream ordered after the compute stream;
// wait() makes the compute stream wait for them (no host block), as ProcessGroupNCCL does.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace shard::dist {

struct RankEnv;

class NcclCommunicator final : public Communicator {
public:
    // Selects CUDA device env.localRank, exchanges the unique id and creates the communicator.
    static std::shared_ptr<NcclCommunicator> create(const RankEnv& env);
    ~NcclCommunicator() override;

    std::string backend() const override { return "nccl"; }
    WorkPtr allGather(const at::Tensor& output, const at::Tensor& input) override;
    WorkPtr reduceScatter(const at::Tensor& output, const at::Tensor& input) override;
    WorkPtr allReduce(const at::Tensor& tensor) override;
    WorkPtr broadcast(const at::Tensor& tensor, int root) override;
    void barrier() override;
    std::shared_ptr<Communicator> newGroup(const std::vector<int>& ranks) override;

    struct State; // NCCL communicator, streams, device: defined in the .cpp (no CUDA in headers)

private:
    NcclCommunicator(int rank, int worldSize, std::shared_ptr<State> state);
    std::shared_ptr<State> m_state;
};

} // namespace shard::dist
