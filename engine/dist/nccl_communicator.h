// Communicator on CUDA devices through nccl.h directly (no c10d::ProcessGroupNCCL, which
// Debian's CPU LibTorch lacks). The unique id travels through the same TCPStore as Gloo's
// rendezvous. Collectives run on a communication stream ordered after the compute stream;
// wait() makes the compute stream wait for them (no host block), as ProcessGroupNCCL does.
#pragma once

#include <memory>

#include "dist/backend_communicator.h"

namespace shard::dist {

struct RankEnv;

class NcclCommunicator final : public BackendCommunicator {
public:
    // Selects CUDA device env.localRank, exchanges the unique id and creates the communicator.
    static std::shared_ptr<NcclCommunicator> create(const RankEnv& env);
    ~NcclCommunicator() override;
    void barrier() override;

    struct State; // NCCL communicator, streams, device: defined in the .cpp (no CUDA in headers)

private:
    WorkPtr issue(
        Collective kind, const at::Tensor& output, const at::Tensor& input, int root) override;
    std::shared_ptr<Communicator> makeGroup(const std::vector<int>& ranks, int myIndex) override;
    NcclCommunicator(int rank, int worldSize, std::shared_ptr<State> state);
    std::shared_ptr<State> m_state;
};

} // namespace shard::dist
