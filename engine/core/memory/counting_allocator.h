// A CPU allocator that wraps c10::GetCPUAllocator() and counts live and peak bytes, installed
// process-wide with c10::SetCPUAllocator. Tensors allocated before installation are not counted.
// An optional limit on the live bytes ($SHARD_MEMORY_LIMIT_BYTES, read at installation, or
// setLimitBytes) makes an allocation beyond it throw c10::OutOfMemoryError, as a GPU's caching
// allocator does when the device is full: the engine's out-of-memory path, tested on the CPU.
#pragma once

#include <cstdint>

namespace shard::engine {

class CountingAllocator {
public:
    // Installs the counting allocator once (later calls are no-ops); returns it.
    static CountingAllocator& install();
    static bool installed();

    int64_t currentBytes() const;
    int64_t peakBytes() const;
    // Starts a new peak window at the current level (peak "since the previous record").
    void resetPeak();
    int64_t allocations() const;
    // The largest live bytes since the process started (resetPeak does not touch it).
    int64_t highWaterBytes() const;
    // Freed blocks kept for reuse (not live), and the cap on them: SHARD_ALLOC_CACHE_MB when set,
    // else the high-water mark, at least 1 GiB.
    int64_t cachedBytes() const;
    int64_t cacheCapBytes() const;

    // The limit on live bytes (0 = none).
    int64_t limitBytes() const;
    void setLimitBytes(int64_t bytes);
};

// The environment variable that sets the limit (bytes; a K, M or G suffix multiplies by 1024^n).
inline constexpr const char* kMemoryLimitEnv = "SHARD_MEMORY_LIMIT_BYTES";

} // namespace shard::engine
