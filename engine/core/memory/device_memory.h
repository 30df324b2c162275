// A GPU's memory as its caching allocator counts it (CUDA builds): allocated and reserved bytes,
// current and peak, alloc retries and OOMs, the figures torchtitan reports as max_reserved and
// num_alloc_retries. On the CPU (or a build without CUDA) nothing is available and the engine's
// own counting allocator is the measure.
#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace shard::engine {

struct DeviceMemoryStats {
    bool available = false; // a CUDA device of a CUDA build: the fields below are filled
    int64_t allocatedBytes = 0;
    int64_t allocatedPeakBytes = 0; // since the last resetDevicePeaks
    int64_t reservedBytes = 0;      // held by the caching allocator (allocated + cached)
    int64_t reservedPeakBytes = 0;
    int64_t allocRetries = 0; // cudaMalloc retried after freeing the cache
    int64_t ooms = 0;         // out-of-memory errors raised
};

DeviceMemoryStats deviceMemoryStats(c10::Device device);
// Starts a new peak window (allocated and reserved) at the current level; no-op on the CPU.
void resetDevicePeaks(c10::Device device);

} // namespace shard::engine
