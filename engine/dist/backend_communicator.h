// What the Gloo and NCCL communicators share: the argument checks of every collective (defined,
// on the backend's device, contiguous, matching dtypes and sizes, a root and group ranks in
// range) and the traffic count. A backend supplies the transport of a checked collective.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>

#include "dist/communicator.h"

namespace shard::dist {

class BackendCommunicator : public Communicator {
public:
    std::string backend() const final { return m_backend; }
    WorkPtr allGather(const at::Tensor& output, const at::Tensor& input) final;
    WorkPtr reduceScatter(const at::Tensor& output, const at::Tensor& input) final;
    WorkPtr allReduce(const at::Tensor& tensor) final;
    WorkPtr broadcast(const at::Tensor& tensor, int root) final;
    std::shared_ptr<Communicator> newGroup(const std::vector<int>& ranks) final;

protected:
    // backend: "gloo" or "nccl" (as trafficBytes() takes it); device: where its tensors live.
    BackendCommunicator(int rank, int worldSize, std::string backend, c10::DeviceType device);

    // Issues a checked all-gather, reduce-scatter, all-reduce or broadcast. The in-place ones
    // (all-reduce, broadcast) pass their tensor as both output and input; root is broadcast's
    // (0 for the others). The backend counts what it sends with countTraffic().
    virtual WorkPtr issue(
        Collective kind, const at::Tensor& output, const at::Tensor& input, int root)
        = 0;
    // The group over `ranks` (checked: ascending, unique, in range); myIndex is this rank's
    // index in it, -1 when it is not a member (the backend returns nullptr then, after taking
    // part in whatever its group creation needs from every rank).
    virtual std::shared_ptr<Communicator> makeGroup(const std::vector<int>& ranks, int myIndex) = 0;

    // Counts one collective of `kind` with trafficBytes() over the full buffer (the larger of
    // output and input).
    void countTraffic(Collective kind, const at::Tensor& output, const at::Tensor& input, int root);

private:
    void checkTensor(const at::Tensor& t, const char* op, const char* name) const;

    std::string m_backend;
    c10::DeviceType m_device;
};

} // namespace shard::dist
