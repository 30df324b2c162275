// Incremental JSON-lines reader by byte offset: feeds only complete lines, so a half-written
// last line is left for the next read, and re-reading from a stored offset adds nothing twice.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace shard::protocol {

struct JsonlChunkResult {
    int64_t consumedBytes = 0; // bytes of complete lines handled (advance the offset by this)
    int64_t lines = 0;
    int64_t badLines = 0;
};

// Splits `data` into complete lines and calls onLine(json, lineStartOffsetInData) for each line
// that parses; onBad(text, error) for those that do not. A trailing fragment without '\n' is not
// consumed.
JsonlChunkResult consumeJsonl(const std::string& data,
    const std::function<void(const nlohmann::json&, int64_t)>& onLine,
    const std::function<void(const std::string&, const std::string&)>& onBad = {});

// Reads a file from `offset` (at most maxBytes) and consumes its complete lines.
JsonlChunkResult readJsonlFile(const std::string& path, int64_t offset,
    const std::function<void(const nlohmann::json&, int64_t)>& onLine,
    const std::function<void(const std::string&, const std::string&)>& onBad = {},
    int64_t maxBytes = 64 << 20);

} // namespace shard::protocol
