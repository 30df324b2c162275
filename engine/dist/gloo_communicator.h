// Communicator on CPU over c10d::ProcessGroupGloo + c10d::TCPStore, with the workarounds for
// LibTorch 1.13's Gloo (no flat all-gather, no reduce-scatter, no AVG, no bf16): list-form
// all-gather into views of the flat output, reduce-scatter as all-to-all + local sum (same
// traffic as a ring reduce-scatter), bf16 as bytes, results handed to Gloo through
// variable_data() so autograd's version counters are not bumped from Gloo's threads.
#pragma once

#include <memory>

#include <c10/util/intrusive_ptr.h>

#include "dist/backend_communicator.h"

namespace c10d {
class Store;
class ProcessGroupGloo;
} // namespace c10d

namespace shard::dist {

struct RankEnv;

class GlooCommunicator final : public BackendCommunicator {
public:
    // Rendezvous through a TCPStore on env.masterAddr:env.masterPort (rank 0 serves it).
    static std::shared_ptr<GlooCommunicator> create(const RankEnv& env);
    ~GlooCommunicator() override;
    void barrier() override;
    // The received slots are summed on the host, so they can be summed into float32.
    bool sumsIntoWiderOutput() const override { return true; }

private:
    struct Shared;
    WorkPtr issue(
        Collective kind, const at::Tensor& output, const at::Tensor& input, int root) override;
    std::shared_ptr<Communicator> makeGroup(const std::vector<int>& ranks, int myIndex) override;
    // The collectives without counting (composite operations count once, as a whole).
    WorkPtr issueAllGather(const at::Tensor& output, const at::Tensor& input);
    WorkPtr issueReduceScatter(const at::Tensor& output, const at::Tensor& input);
    WorkPtr issueAllReduce(const at::Tensor& tensor);
    GlooCommunicator(int rank, int worldSize, std::shared_ptr<Shared> shared,
        c10::intrusive_ptr<c10d::ProcessGroupGloo> group);

    std::shared_ptr<Shared> m_shared; // store, device, timeouts, group counter
    c10::intrusive_ptr<c10d::ProcessGroupGloo> m_group;
    int m_groupCounter = 0;
    int m_p2pTag = 0; // the next all-gather's point-to-point tag
    std::string m_prefix;
};

} // namespace shard::dist
