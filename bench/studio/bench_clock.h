// What the studio benchmarks measure with: this thread's CPU time (the work a UI step costs,
// unaffected by other processes competing for the cores) and the median of repeats.
#pragma once

#include <algorithm>
#include <ctime>
#include <vector>

namespace shard::bench {

inline double threadCpuMs()
{
    timespec ts {};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace shard::bench
