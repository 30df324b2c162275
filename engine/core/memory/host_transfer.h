// Device-to-host copies that overlap the host's work (offload's gradient shards). On a GPU each
// copy runs on a side stream into pinned memory, after the compute stream's work so far, and
// wait() returns once every started copy has landed; the device tensors copied from are held
// until then, so the caching allocator cannot hand them out while a copy still reads them (no
// record_stream). On the CPU the copies are plain and finished when start() returns.
#pragma once

#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace shard::engine {

class HostTransfer {
public:
    explicit HostTransfer(c10::Device device);
    ~HostTransfer();
    HostTransfer(const HostTransfer&) = delete;
    HostTransfer& operator=(const HostTransfer&) = delete;

    // A host tensor (pinned when `src` is on a GPU) that holds src's values once wait() returned.
    at::Tensor start(const at::Tensor& src);
    // Blocks until every copy started so far has landed.
    void wait();

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

} // namespace shard::engine
