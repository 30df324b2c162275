// The process's anonymous resident memory (heap, SQLite's page cache; not the pages SQLite maps
// from a store's file, which the kernel can drop at will) and its peak while some work runs,
// sampled every 2 ms: what tst_run_import and bench_jobs_import measure an import by.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace shard::testing {

// RssAnon in MiB; -1 where /proc has none (Linux before 4.5, not Linux).
inline double anonMiB()
{
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("RssAnon:", 0) == 0)
            return std::atof(line.c_str() + 8) / 1024.0;
    return -1;
}

template<typename F> double peakAnonMiB(F&& work)
{
    std::atomic<bool> done {false};
    std::atomic<double> peak {anonMiB()};
    std::thread sampler([&] {
        while (!done) {
            if (const double now = anonMiB(); now > peak)
                peak = now;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    });
    work();
    done = true;
    sampler.join();
    return std::max(peak.load(), anonMiB());
}

} // namespace shard::testing
