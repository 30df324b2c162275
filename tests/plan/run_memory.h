// What the planner-against-engine tests share: the memory a run's ranks reported in
// metrics.jsonl (the runs start with run_outputs.h's trainWithWorker).
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace shard::testing {

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
