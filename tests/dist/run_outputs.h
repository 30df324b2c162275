// What a finished run left for the multi-rank tests to compare: its metric records and the F32
// tensors of a safetensors file (the exported model, or the LoRA adapter).
#pragma once

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

} // namespace shard::testing
