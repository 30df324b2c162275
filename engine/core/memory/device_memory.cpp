// The CUDA caching allocator's statistics; the only CUDA code of shard_engine, compiled with
// CUDA where LibTorch has it (SHARD_TORCH_HAS_CUDA, engine/core/CMakeLists.txt).
#include "core/memory/device_memory.h"

#ifdef SHARD_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace shard::engine {

DeviceMemoryStats deviceMemoryStats(c10::Device device)
{
    DeviceMemoryStats out;
#ifdef SHARD_TORCH_HAS_CUDA
    if (!device.is_cuda())
        return out;
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    constexpr size_t kAggregate = 0; // StatType::AGGREGATE: every pool together
    out.available = true;
    out.allocatedBytes = s.allocated_bytes[kAggregate].current;
    out.allocatedPeakBytes = s.allocated_bytes[kAggregate].peak;
    out.reservedBytes = s.reserved_bytes[kAggregate].current;
    out.reservedPeakBytes = s.reserved_bytes[kAggregate].peak;
    out.allocRetries = s.num_alloc_retries;
    out.ooms = s.num_ooms;
#else
    (void)device;
#endif
    return out;
}

void resetDevicePeaks(c10::Device device)
{
#ifdef SHARD_TORCH_HAS_CUDA
    if (device.is_cuda())
        c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
    (void)device;
#endif
}

} // namespace shard::engine
