// Device-to-host copies on a side stream (see host_transfer.h). The CUDA part is compiled where
// LibTorch has CUDA (SHARD_TORCH_HAS_CUDA, engine/core/CMakeLists.txt).
#include "core/memory/host_transfer.h"

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#ifdef SHARD_TORCH_HAS_CUDA
#include <optional>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace shard::engine {

struct HostTransfer::Impl {
    c10::Device device;
    std::vector<at::Tensor> sources; // device tensors a copy in flight reads
#ifdef SHARD_TORCH_HAS_CUDA
    std::optional<c10::cuda::CUDAStream> side;
#endif
};

HostTransfer::HostTransfer(c10::Device device)
    : m(std::make_unique<Impl>(Impl {device, {}}))
{
}

HostTransfer::~HostTransfer()
{
    try {
        wait();
    } catch (...) {
        // A failed device is reported by whoever waits next; a destructor must not throw.
    }
}

at::Tensor HostTransfer::start(const at::Tensor& src)
{
    at::Tensor host = at::empty(src.sizes(),
        at::TensorOptions().dtype(src.scalar_type()).device(at::kCPU).pinned_memory(src.is_cuda()));
    if (!src.is_cuda()) {
        host.copy_(src);
        return host;
    }
#ifdef SHARD_TORCH_HAS_CUDA
    const c10::DeviceIndex index = src.device().index();
    c10::cuda::CUDAGuard guard(index);
    if (!m->side)
        m->side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    auto check = [](cudaError_t e, const char* what) {
        if (e != cudaSuccess)
            throw std::runtime_error(
                std::string("host transfer: ") + what + ": " + cudaGetErrorString(e));
    };
    // The side stream starts after what the compute stream has queued (the reduced gradient).
    cudaEvent_t ready = nullptr;
    check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    check(
        cudaEventRecord(ready, c10::cuda::getCurrentCUDAStream(index).stream()), "cudaEventRecord");
    check(cudaStreamWaitEvent(m->side->stream(), ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    {
        c10::cuda::CUDAStreamGuard onSide(*m->side);
        host.copy_(src, /*non_blocking=*/true);
    }
    m->sources.push_back(src);
    return host;
#else
    throw std::runtime_error(
        "host transfer: a " + src.device().str() + " tensor in a build without CUDA");
#endif
}

void HostTransfer::wait()
{
#ifdef SHARD_TORCH_HAS_CUDA
    if (m->side && !m->sources.empty())
        m->side->synchronize();
#endif
    m->sources.clear();
}

} // namespace shard::engine
