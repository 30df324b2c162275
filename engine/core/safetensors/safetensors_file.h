// Reading (memory-mapped) and writing safetensors files with LibTorch tensors, single file or
// sharded with model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "safetensors_header.h"

namespace shard::engine {

// One memory-mapped safetensors file. The header is validated when the file is opened.
class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return m_path; }
    const StHeader& header() const { return m_header; }
    bool contains(const std::string& name) const { return m_header.find(name) != nullptr; }
    std::vector<std::string> names() const;

    // A read-only CPU tensor over the mapped bytes (no copy when suitably aligned; never write
    // into it). It keeps the mapping alive.
    at::Tensor tensor(const std::string& name) const;

private:
    struct Mapping;
    std::string m_path;
    std::shared_ptr<Mapping> m_map;
    StHeader m_header;
};

// A model's weights: `dir/model.safetensors`, or the shards listed by
// `dir/model.safetensors.index.json`, or a single .safetensors path.
class SafetensorsReader {
public:
    explicit SafetensorsReader(const std::string& fileOrDir);
    bool contains(const std::string& name) const { return m_where.count(name) != 0; }
    std::vector<std::string> names() const;
    const StTensorInfo& info(const std::string& name) const;
    // Throws naming the file and tensor when absent.
    at::Tensor tensor(const std::string& name) const;
    // Copies (and converts the dtype of) `name` into dst, which must have the same shape.
    void readInto(const std::string& name, at::Tensor& dst) const;
    const std::vector<std::string>& files() const { return m_files; }

private:
    std::vector<std::string> m_files;
    std::vector<std::unique_ptr<SafetensorsFile>> m_open;
    std::map<std::string, size_t> m_where; // tensor -> index into m_open
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes one file atomically (temporary file, then rename). Tensors keep their dtype (F32, BF16,
// F16, F64, I64, I32, U8 supported).
void writeSafetensors(const std::string& path, const NamedTensors& tensors,
    const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes `dir/model.safetensors`, or, when the total exceeds maxShardBytes,
// `dir/model-0000i-of-0000n.safetensors` plus `model.safetensors.index.json`.
// Returns the file names written (relative to dir).
std::vector<std::string> writeSafetensorsFolder(
    const std::string& dir, const NamedTensors& tensors, uint64_t maxShardBytes = 5ull << 30);

at::ScalarType toScalarType(StDtype dtype, const std::string& where);
StDtype toStDtype(at::ScalarType type);

} // namespace shard::engine
