// Offset-based JSON-lines consumption (idempotent ingestion, docs/ARCHITECTURE.md).
#include "jsonl_reader.h"

#include <fstream>
#include <stdexcept>

namespace shard::protocol {

JsonlChunkResult consumeJsonl(const std::string& data,
    const std::function<void(const nlohmann::json&, int64_t)>& onLine,
    const std::function<void(const std::string&, const std::string&)>& onBad)
{
    JsonlChunkResult result;
    size_t pos = 0;
    while (pos < data.size()) {
        const size_t nl = data.find('\n', pos);
        if (nl == std::string::npos)
            break; // half-written last line: leave it for the next read
        const std::string_view line(data.data() + pos, nl - pos);
        const bool blank = line.find_first_not_of(" \t\r") == std::string_view::npos;
        if (!blank) {
            ++result.lines;
            auto parsed = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
            if (parsed.is_discarded() || !parsed.is_object()) {
                ++result.badLines;
                if (onBad)
                    onBad(std::string(line), "not a JSON object");
            } else {
                try {
                    onLine(parsed, static_cast<int64_t>(pos));
                } catch (const std::exception& e) {
                    ++result.badLines;
                    if (onBad)
                        onBad(std::string(line), e.what());
                }
            }
        }
        pos = nl + 1;
        result.consumedBytes = static_cast<int64_t>(pos);
    }
    return result;
}

JsonlChunkResult readJsonlFile(const std::string& path, int64_t offset,
    const std::function<void(const nlohmann::json&, int64_t)>& onLine,
    const std::function<void(const std::string&, const std::string&)>& onBad, int64_t maxBytes)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return {}; // not written yet
    in.seekg(0, std::ios::end);
    const int64_t size = in.tellg();
    if (offset >= size)
        return {};
    const int64_t n = std::min<int64_t>(size - offset, maxBytes);
    std::string buf(static_cast<size_t>(n), '\0');
    in.seekg(offset);
    in.read(buf.data(), n);
    buf.resize(static_cast<size_t>(in.gcount()));
    return consumeJsonl(buf, onLine, onBad);
}

} // namespace shard::protocol
