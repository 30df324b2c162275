#include "host_sync.h"

#include <atomic>

#include <ATen/ATen.h>

namespace shard::engine::hostsync {

namespace {
std::atomic<int64_t> g_reads {0};
}

at::Tensor toHost(const at::Tensor& t)
{
    g_reads.fetch_add(1, std::memory_order_relaxed);
    return t.detach().cpu();
}

std::vector<double> readValues(const at::Tensor& t)
{
    g_reads.fetch_add(1, std::memory_order_relaxed);
    const at::Tensor host = t.detach().reshape({-1}).to(at::kCPU, at::kDouble).contiguous();
    const double* p = host.data_ptr<double>();
    return std::vector<double>(p, p + host.numel());
}

double readValue(const at::Tensor& t)
{
    TORCH_CHECK(t.numel() == 1, "hostsync::readValue needs a one-element tensor, got ", t.numel(),
        " elements");
    return readValues(t).front();
}

int64_t count()
{
    return g_reads.load(std::memory_order_relaxed);
}

} // namespace shard::engine::hostsync
