// What a finished run left for the multi-rank tests to compare: its metric records and the F32
// tensors of a safetensors file (the exported model, or the LoRA adapter); how those tests start
// a run on N ranks, and how they compare two runs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "process_runner.h"

namespace shard::testing {

// The "metric" records of <dir>/metrics.jsonl, in order.
inline std::vector<nlohmann::json> metricRecords(const std::string& dir)
{
    std::vector<nlohmann::json> out;
    std::istringstream lines(readFile(dir + "/metrics.jsonl"));
    std::string line;
    while (std::getline(lines, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.value("type", "") == "metric")
            out.push_back(std::move(j));
    }
    return out;
}

// Field `field` of rank `rank`'s memory entry in the last of `metrics`: `absent` when the entry
// lacks it, -1 when there is no record or no entry for that rank.
inline int64_t lastMemoryField(
    const std::vector<nlohmann::json>& metrics, int rank, const char* field, int64_t absent)
{
    if (metrics.empty())
        return -1;
    for (const auto& m : metrics.back()["memory"])
        if (m.value("rank", -1) == rank)
            return m.value(field, absent);
    return -1;
}

// Every F32 tensor of a safetensors file by name (empty when the file is missing or short);
// `bytes` gets the whole file when given.
inline std::map<std::string, std::vector<float>> f32Tensors(
    const std::string& path, std::string* bytes = nullptr)
{
    std::map<std::string, std::vector<float>> out;
    const std::string st = readFile(path);
    if (bytes)
        *bytes = st;
    if (st.size() < 8)
        return out;
    uint64_t n = 0;
    std::memcpy(&n, st.data(), 8);
    auto header = nlohmann::json::parse(st.substr(8, n), nullptr, false);
    const char* data = st.data() + 8 + n;
    for (auto& [name, meta] : header.items()) {
        if (name == "__metadata__" || meta.value("dtype", "") != "F32")
            continue;
        const size_t b = meta["data_offsets"][0], e = meta["data_offsets"][1];
        std::vector<float> v((e - b) / 4);
        std::memcpy(v.data(), data + b, e - b);
        out[name] = std::move(v);
    }
    return out;
}

// Runs `shard-worker` with `trainArgs` (starting with "train", holding --out `out`) on `ranks`
// ranks: through `shard-worker launch --nproc-per-node N --` and with --nproc-per-node N above
// one. Expects exit 0 within `timeoutSec`, else says so with the end of stderr and the start of
// rank 0's log.
inline void trainWithWorker(const std::string& tag, int ranks, std::vector<std::string> trainArgs,
    const std::string& out, int timeoutSec)
{
    std::vector<std::string> argv = {workerPath()};
    if (ranks > 1) {
        argv.insert(argv.end(), {"launch", "--nproc-per-node", std::to_string(ranks), "--"});
        trainArgs.insert(trainArgs.end(), {"--nproc-per-node", std::to_string(ranks)});
    }
    argv.insert(argv.end(), trainArgs.begin(), trainArgs.end());
    auto p = spawnProcess(argv);
    const bool done = p.wait(timeoutSec);
    SHARD_EXPECT(done && p.exitCode() == 0,
        tag + " failed: " + p.err.substr(p.err.size() > 1500 ? p.err.size() - 1500 : 0)
            + readFile(out + "/logs/rank-0.log").substr(0, 3000));
}

// How far two runs are apart: the largest relative loss difference over their steps, and over
// their tensors the largest L2-relative and max-abs-relative difference (infinite when the
// steps or tensors do not correspond).
struct RunDiff {
    double loss = 0, weightMax = 0, weightL2 = 0;
};

inline RunDiff compareRuns(const std::vector<double>& lossesA, const std::vector<double>& lossesB,
    const std::map<std::string, std::vector<float>>& a,
    const std::map<std::string, std::vector<float>>& b)
{
    RunDiff d;
    if (lossesA.size() != lossesB.size() || a.size() != b.size() || lossesA.empty()) {
        d.loss = d.weightMax = d.weightL2 = INFINITY;
        return d;
    }
    for (size_t i = 0; i < lossesA.size(); ++i)
        d.loss = std::max(d.loss, std::abs(lossesA[i] - lossesB[i]) / std::abs(lossesA[i]));
    for (const auto& [name, x] : a) {
        auto it = b.find(name);
        if (it == b.end() || it->second.size() != x.size()) {
            d.weightMax = d.weightL2 = INFINITY;
            continue;
        }
        double diff2 = 0, norm2 = 0, maxAbs = 0, maxDiff = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double e = double(x[i]) - double(it->second[i]);
            diff2 += e * e;
            norm2 += double(x[i]) * x[i];
            maxAbs = std::max(maxAbs, std::abs(double(x[i])));
            maxDiff = std::max(maxDiff, std::abs(e));
        }
        d.weightL2 = std::max(d.weightL2, std::sqrt(diff2 / std::max(norm2, 1e-30)));
        d.weightMax = std::max(d.weightMax, maxDiff / std::max(maxAbs, 1e-30));
    }
    return d;
}

} // namespace shard::testing
