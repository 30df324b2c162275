// The safetensors header: parsing and validation (torch-free, so a libFuzzer target can fuzz it)
// and serialization. Format: u64 little-endian header length N, N bytes of JSON, then the data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shard::engine {

enum class StDtype {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    Bool,
    F8E4M3,
    F8E5M2
};

// "F32" -> StDtype::F32; throws std::runtime_error for an unknown name.
StDtype stDtypeFromName(const std::string& name);
const char* stDtypeName(StDtype dtype);
size_t stDtypeSize(StDtype dtype);

struct StTensorInfo {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<int64_t> shape;
    uint64_t begin = 0; // byte offsets relative to the start of the data area
    uint64_t end = 0;
    int64_t numel() const;
};

struct StHeader {
    uint64_t headerBytes = 0; // N (the JSON text length)
    uint64_t dataOffset = 0;  // 8 + N: where the data area starts in the file
    uint64_t dataBytes = 0;   // file size - dataOffset
    std::map<std::string, std::string> metadata;
    std::vector<StTensorInfo> tensors; // in file order (ascending begin)

    const StTensorInfo* find(const std::string& name) const;
};

// Largest header accepted (the reference implementation's limit is 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates a header. `prefix` holds at least the first min(fileSize, 8 + N) bytes of
// the file (the whole file is fine); `fileSize` is the full file size. Every check of the format
// is made here: header length inside the file, well-formed JSON object, known dtypes, shapes of
// non-negative integers, offsets that tile the data area exactly (no overlap, gap or trailing
// bytes), byte length = numel x dtype size. Throws std::runtime_error("<fileName>: ... tensor
// '<name>' ...") on the first fault.
StHeader parseSafetensorsHeader(
    const uint8_t* prefix, size_t prefixBytes, uint64_t fileSize, const std::string& fileName);

// Serializes a header for tensors whose begin/end are already laid out; the JSON text is padded
// with spaces to a multiple of 8 bytes so that the data area is 8-byte aligned. Returns the 8
// length bytes followed by the JSON text.
std::string serializeSafetensorsHeader(
    const std::vector<StTensorInfo>& tensors, const std::map<std::string, std::string>& metadata);

} // namespace shard::engine
