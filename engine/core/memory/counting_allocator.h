// A CPU allocator that wraps c10::GetCPUAllocator() and counts live and peak bytes, installed
// process-wide with c10::SetCPUAllocator. Tensors allocated before installation are not counted.
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
};

} // namespace shard::engine
