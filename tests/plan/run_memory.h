// What the planner-against-engine tests share: a `shard-worker train` at some rank count (one
// process, or `launch` for several) and the memory its ranks reported in metrics.jsonl.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process_runner.h"

namespace shard::testing {

// Runs `shard-worker <trainArgs>` on `ranks` ranks (one process, or `launch` with
// --nproc-per-node for several); false with the worker's stderr in `err` when it fails or
// outlives `timeoutSec`.
inline bool trainOnRanks(
    std::vector<std::string> trainArgs, int ranks, int timeoutSec, std::string* err)
{
    std::vector<std::string> argv {workerPath()};
    if (ranks > 1) {
        argv.insert(argv.end(), {"launch", "--nproc-per-node", std::to_string(ranks), "--"});
        trainArgs.insert(trainArgs.end(), {"--nproc-per-node", std::to_string(ranks)});
    }
    argv.insert(argv.end(), trainArgs.begin(), trainArgs.end());
    auto p = spawnProcess(argv);
    const bool done = p.wait(timeoutSec);
    if (done && p.exitCode() == 0)
        return true;
    *err = done ? p.err : "timed out after " + std::to_string(timeoutSec) + " s: " + p.err;
    return false;
}

// The memory records of a run directory's metrics.jsonl: the largest peak over ranks and
// steps, and the last metric record's per-rank entries.
struct RunMemory {
    int64_t peak = -1;
    nlohmann::json last = nlohmann::json::array();

    int ranks() const { return static_cast<int>(last.size()); }
    // The largest value of `key` over the ranks' last records (-1 when none has it).
    int64_t maxOfLast(const char* key) const
    {
        int64_t m = -1;
        for (const auto& r : last)
            m = std::max(m, r.value(key, int64_t(-1)));
        return m;
    }
    // The largest sum of `a` and `b` (absent = 0) over the ranks' last records.
    int64_t maxSumOfLast(const char* a, const char* b) const
    {
        int64_t m = -1;
        for (const auto& r : last)
            m = std::max(m, r.value(a, int64_t(0)) + r.value(b, int64_t(0)));
        return m;
    }
};

inline RunMemory readRunMemory(const std::string& runDir)
{
    RunMemory m;
    std::ifstream f(runDir + "/metrics.jsonl");
    std::string line;
    while (std::getline(f, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || j.value("type", "") != "metric" || !j.contains("memory"))
            continue;
        for (const auto& r : j["memory"])
            m.peak = std::max(m.peak, r.value("peak", int64_t(-1)));
        m.last = j["memory"];
    }
    return m;
}

} // namespace shard::testing
