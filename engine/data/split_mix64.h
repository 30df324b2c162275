// SplitMix64: a small, portable, well-mixed generator. The data loader's shuffles and the demo
// tasks draw from it so that a seed gives the same sequence on every platform (the std
// distributions differ across standard libraries).
#pragma once

#include <cstdint>

namespace shard::data {

struct SplitMix64 {
    uint64_t state;

    uint64_t next()
    {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // A draw in [0, n), n > 0.
    int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

} // namespace shard::data
