// Safetensors header parsing and validation; no Torch here (fuzzed by fuzz_safetensors_header).
#include "safetensors_header.h"

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shard::engine {

namespace {

struct DtypeRow {
    StDtype dtype;
    const char* name;
    size_t size;
};

constexpr DtypeRow kDtypes[] = {{StDtype::F64, "F64", 8}, {StDtype::F32, "F32", 4},
    {StDtype::F16, "F16", 2}, {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8},
    {StDtype::I32, "I32", 4}, {StDtype::I16, "I16", 2}, {StDtype::I8, "I8", 1},
    {StDtype::U64, "U64", 8}, {StDtype::U32, "U32", 4}, {StDtype::U16, "U16", 2},
    {StDtype::U8, "U8", 1}, {StDtype::Bool, "BOOL", 1}, {StDtype::F8E4M3, "F8_E4M3", 1},
    {StDtype::F8E5M2, "F8_E5M2", 1}};

// nlohmann's parser recurses per nesting level; a hostile header of "[[[[..." must not exhaust
// the stack, so nesting is bounded before parsing (a valid header nests at most 3 deep).
constexpr int kMaxNesting = 16;

void checkNesting(const char* text, size_t n, const std::string& fileName)
{
    int depth = 0;
    bool inString = false;
    for (size_t i = 0; i < n; ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                inString = false;
            continue;
        }
        if (c == '"') {
            inString = true;
        } else if (c == '{' || c == '[') {
            if (++depth > kMaxNesting)
                throw std::runtime_error(fileName + ": safetensors header nests deeper than "
                    + std::to_string(kMaxNesting)
                    + " levels; the file is not a safetensors file or is corrupt");
        } else if (c == '}' || c == ']') {
            --depth;
        }
    }
}

uint64_t readLe64(const uint8_t* p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

uint64_t toU64(const nlohmann::json& j, const std::string& what)
{
    if (j.is_number_unsigned())
        return j.get<uint64_t>();
    if (j.is_number_integer() && j.get<int64_t>() >= 0)
        return static_cast<uint64_t>(j.get<int64_t>());
    throw std::runtime_error(what + " must be a non-negative integer, got " + j.dump());
}

} // namespace

StDtype stDtypeFromName(const std::string& name)
{
    for (const auto& row : kDtypes)
        if (name == row.name)
            return row.dtype;
    throw std::runtime_error("unknown dtype '" + name
        + "' (known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2)");
}

const char* stDtypeName(StDtype dtype)
{
    for (const auto& row : kDtypes)
        if (row.dtype == dtype)
            return row.name;
    return "?";
}

size_t stDtypeSize(StDtype dtype)
{
    for (const auto& row : kDtypes)
        if (row.dtype == dtype)
            return row.size;
    return 0;
}

int64_t StTensorInfo::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

const StTensorInfo* StHeader::find(const std::string& name) const
{
    for (const auto& t : tensors)
        if (t.name == name)
            return &t;
    return nullptr;
}

StHeader parseSafetensorsHeader(
    const uint8_t* prefix, size_t prefixBytes, uint64_t fileSize, const std::string& fileName)
{
    if (fileSize < 8 || prefixBytes < 8)
        throw std::runtime_error(fileName + ": too short for a safetensors file ("
            + std::to_string(fileSize) + " bytes; the 8-byte header length is missing)");
    StHeader header;
    header.headerBytes = readLe64(prefix);
    if (header.headerBytes > kMaxSafetensorsHeaderBytes)
        throw std::runtime_error(fileName + ": safetensors header length "
            + std::to_string(header.headerBytes)
            + " exceeds the 100 MB limit; the file is corrupt");
    if (header.headerBytes > fileSize - 8)
        throw std::runtime_error(fileName + ": safetensors header length "
            + std::to_string(header.headerBytes) + " runs past the end of the file ("
            + std::to_string(fileSize) + " bytes); the file is truncated or corrupt");
    if (prefixBytes < 8 + header.headerBytes)
        throw std::runtime_error(fileName + ": internal error: header prefix not fully read");
    header.dataOffset = 8 + header.headerBytes;
    header.dataBytes = fileSize - header.dataOffset;

    const char* text = reinterpret_cast<const char*>(prefix + 8);
    const size_t textBytes = static_cast<size_t>(header.headerBytes);
    checkNesting(text, textBytes, fileName);

    // Duplicate top-level keys are an error (nlohmann would silently keep the last one).
    std::set<std::string> seen;
    std::string duplicate;
    auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
            const auto& key = parsed.get_ref<const std::string&>();
            if (!seen.insert(key).second && duplicate.empty())
                duplicate = key;
        }
        return true;
    };
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text, text + textBytes, callback);
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(
            fileName + ": safetensors header is not valid JSON (" + std::string(e.what()) + ")");
    }
    if (!duplicate.empty())
        throw std::runtime_error(
            fileName + ": tensor '" + duplicate + "' appears twice in the safetensors header");
    if (!j.is_object())
        throw std::runtime_error(fileName + ": safetensors header must be a JSON object, got "
            + std::string(j.type_name()));

    for (auto it = j.begin(); it != j.end(); ++it) {
        const std::string& name = it.key();
        const auto& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object())
                throw std::runtime_error(
                    fileName + ": '__metadata__' must be an object of strings");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string())
                    throw std::runtime_error(
                        fileName + ": '__metadata__' value '" + m.key() + "' must be a string");
                header.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string where = fileName + ": tensor '" + name + "'";
        if (!v.is_object())
            throw std::runtime_error(where
                + ": entry must be an object with dtype, shape, "
                  "data_offsets");
        for (auto f = v.begin(); f != v.end(); ++f)
            if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
                throw std::runtime_error(where + ": unknown field '" + f.key() + "'");
        StTensorInfo info;
        info.name = name;
        auto dt = v.find("dtype");
        if (dt == v.end() || !dt->is_string())
            throw std::runtime_error(where + ": missing or non-string 'dtype'");
        try {
            info.dtype = stDtypeFromName(dt->get<std::string>());
        } catch (const std::exception& e) {
            throw std::runtime_error(where + ": " + e.what());
        }
        auto sh = v.find("shape");
        if (sh == v.end() || !sh->is_array())
            throw std::runtime_error(where + ": missing or non-array 'shape'");
        if (sh->size() > 8)
            throw std::runtime_error(where + ": shape has " + std::to_string(sh->size())
                + " dimensions (at most 8 supported)");
        // numel x dtype size must not overflow; any real tensor is far below 2^62 bytes.
        const uint64_t kLimit = uint64_t(1) << 62;
        uint64_t numel = 1;
        for (const auto& d : *sh) {
            uint64_t dim = 0;
            try {
                dim = toU64(d, "a shape dimension");
            } catch (const std::exception& e) {
                throw std::runtime_error(where + ": " + e.what());
            }
            if (dim > kLimit || (dim != 0 && numel > kLimit / dim))
                throw std::runtime_error(where + ": shape is too large");
            numel *= dim;
            info.shape.push_back(static_cast<int64_t>(dim));
        }
        auto off = v.find("data_offsets");
        if (off == v.end() || !off->is_array() || off->size() != 2)
            throw std::runtime_error(where + ": 'data_offsets' must be [begin, end]");
        try {
            info.begin = toU64((*off)[0], "data_offsets[0]");
            info.end = toU64((*off)[1], "data_offsets[1]");
        } catch (const std::exception& e) {
            throw std::runtime_error(where + ": " + e.what());
        }
        if (info.end < info.begin)
            throw std::runtime_error(where + ": data_offsets end " + std::to_string(info.end)
                + " is before begin " + std::to_string(info.begin));
        if (info.end > header.dataBytes)
            throw std::runtime_error(where + ": data_offsets [" + std::to_string(info.begin) + ", "
                + std::to_string(info.end) + ") run past the data area ("
                + std::to_string(header.dataBytes) + " bytes); the file is truncated or corrupt");
        const uint64_t size = stDtypeSize(info.dtype);
        if (numel > kLimit / size || numel * size != info.end - info.begin)
            throw std::runtime_error(where + ": holds " + std::to_string(info.end - info.begin)
                + " bytes but shape x dtype needs "
                + (numel > kLimit / size ? std::string("more than 2^62")
                                         : std::to_string(numel * size)));
        header.tensors.push_back(std::move(info));
    }

    std::sort(header.tensors.begin(), header.tensors.end(),
        [](const StTensorInfo& a, const StTensorInfo& b) {
            return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
        });
    // As in the format's reference loader, the tensors must tile the data area exactly: a gap
    // or trailing bytes mean the header length or an offset is wrong (weights would be shifted).
    const std::string fix = "; the header length or the data_offsets are wrong (the tensors must "
                            "cover the data area exactly, without gaps or trailing bytes)";
    uint64_t covered = 0;
    for (size_t i = 0; i < header.tensors.size(); ++i) {
        const auto& cur = header.tensors[i];
        if (i > 0 && cur.begin < covered)
            throw std::runtime_error(fileName + ": tensor '" + cur.name + "' overlaps tensor '"
                + header.tensors[i - 1].name + "' in the data area");
        if (cur.begin > covered)
            throw std::runtime_error(fileName + ": tensor '" + cur.name + "' starts at byte "
                + std::to_string(cur.begin) + " of the data area, but "
                + (i == 0 ? std::string("the data area starts at byte 0")
                          : "tensor '" + header.tensors[i - 1].name + "' ends at byte "
                            + std::to_string(covered))
                + fix);
        covered = cur.end;
    }
    if (covered != header.dataBytes)
        throw std::runtime_error(fileName + ": " + std::to_string(header.dataBytes - covered)
            + " bytes of the data area (" + std::to_string(header.dataBytes) + " bytes) follow "
            + (header.tensors.empty() ? std::string("an empty header")
                                      : "the last tensor '" + header.tensors.back().name
                        + "' (it ends at byte " + std::to_string(covered) + ")")
            + fix);
    return header;
}

std::string serializeSafetensorsHeader(
    const std::vector<StTensorInfo>& tensors, const std::map<std::string, std::string>& metadata)
{
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json m = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata)
            m[k] = v;
        j["__metadata__"] = m;
    }
    for (const auto& t : tensors)
        j[t.name] = {{"dtype", stDtypeName(t.dtype)}, {"shape", t.shape},
            {"data_offsets", {t.begin, t.end}}};
    std::string text = j.dump();
    while (text.size() % 8 != 0)
        text.push_back(' ');
    std::string out(8, '\0');
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i)
        out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + text;
}

} // namespace shard::engine
