// Memory-mapped safetensors reads, atomic writes, and the sharded index.
#include "safetensors_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/Functions.h>
#include <nlohmann/json.hpp>

namespace shard::engine {

namespace fs = std::filesystem;

struct SafetensorsFile::Mapping {
    void* data = nullptr;
    size_t size = 0;
    ~Mapping()
    {
        if (data && size)
            munmap(data, size);
    }
};

at::ScalarType toScalarType(StDtype dtype, const std::string& where)
{
    switch (dtype) {
    case StDtype::F64:
        return at::kDouble;
    case StDtype::F32:
        return at::kFloat;
    case StDtype::F16:
        return at::kHalf;
    case StDtype::BF16:
        return at::kBFloat16;
    case StDtype::I64:
        return at::kLong;
    case StDtype::I32:
        return at::kInt;
    case StDtype::I16:
        return at::kShort;
    case StDtype::I8:
        return at::kChar;
    case StDtype::U8:
        return at::kByte;
    case StDtype::Bool:
        return at::kBool;
    default:
        break;
    }
    throw std::runtime_error(where + ": dtype " + stDtypeName(dtype)
        + " is not supported by this engine (use F32, BF16 or F16)");
}

StDtype toStDtype(at::ScalarType type)
{
    switch (type) {
    case at::kDouble:
        return StDtype::F64;
    case at::kFloat:
        return StDtype::F32;
    case at::kHalf:
        return StDtype::F16;
    case at::kBFloat16:
        return StDtype::BF16;
    case at::kLong:
        return StDtype::I64;
    case at::kInt:
        return StDtype::I32;
    case at::kShort:
        return StDtype::I16;
    case at::kChar:
        return StDtype::I8;
    case at::kByte:
        return StDtype::U8;
    case at::kBool:
        return StDtype::Bool;
    default:
        break;
    }
    throw std::runtime_error(
        std::string("safetensors: cannot store tensors of type ") + c10::toString(type));
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : m_path(path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st { };
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        throw std::runtime_error(path + ": not a regular file");
    }
    m_map = std::make_shared<Mapping>();
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
        void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            throw std::runtime_error(path + ": cannot memory-map (" + std::strerror(err) + ")");
        }
        m_map->data = p;
        m_map->size = size;
    }
    ::close(fd);
    m_header
        = parseSafetensorsHeader(static_cast<const uint8_t*>(m_map->data), m_map->size, size, path);
}

SafetensorsFile::~SafetensorsFile() = default;

std::vector<std::string> SafetensorsFile::names() const
{
    std::vector<std::string> out;
    for (const auto& t : m_header.tensors)
        out.push_back(t.name);
    return out;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const
{
    const StTensorInfo* info = m_header.find(name);
    if (!info)
        throw std::runtime_error(m_path + ": no tensor '" + name + "'");
    const auto type = toScalarType(info->dtype, m_path + ": tensor '" + name + "'");
    const auto options = at::TensorOptions().dtype(type).device(at::kCPU);
    if (info->numel() == 0)
        return at::empty(info->shape, options);
    auto* bytes = static_cast<uint8_t*>(m_map->data) + m_header.dataOffset + info->begin;
    const size_t elem = stDtypeSize(info->dtype);
    if (reinterpret_cast<uintptr_t>(bytes) % elem != 0) {
        // Misaligned data (legal in the format): copy into an aligned tensor.
        at::Tensor out = at::empty(info->shape, options);
        std::memcpy(out.data_ptr(), bytes, info->end - info->begin);
        return out;
    }
    auto keep = m_map;
    return at::from_blob(
        bytes, info->shape, [keep](void*) mutable { keep.reset(); }, options);
}

SafetensorsReader::SafetensorsReader(const std::string& fileOrDir)
{
    std::error_code ec;
    if (fs::is_directory(fileOrDir, ec)) {
        const fs::path dir(fileOrDir);
        const fs::path index = dir / "model.safetensors.index.json";
        const fs::path single = dir / "model.safetensors";
        if (fs::exists(index)) {
            std::ifstream in(index);
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(in);
            } catch (const std::exception& e) {
                throw std::runtime_error(index.string() + ": not valid JSON (" + e.what() + ")");
            }
            if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
                throw std::runtime_error(index.string() + ": missing object 'weight_map'");
            std::map<std::string, size_t> fileIndex;
            for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
                if (!it.value().is_string())
                    throw std::runtime_error(
                        index.string() + ": weight_map entry '" + it.key() + "' must name a file");
                const std::string file = it.value().get<std::string>();
                if (file.find('/') != std::string::npos || file == ".." || file.empty())
                    throw std::runtime_error(index.string() + ": weight_map entry '" + it.key()
                        + "' names '" + file + "', which is not a file in this folder");
                auto f = fileIndex.find(file);
                if (f == fileIndex.end()) {
                    const std::string path = (dir / file).string();
                    if (!fs::exists(path))
                        throw std::runtime_error(index.string() + ": shard '" + file
                            + "' (holding tensor '" + it.key() + "') does not exist");
                    m_open.push_back(std::make_unique<SafetensorsFile>(path));
                    m_files.push_back(path);
                    f = fileIndex.emplace(file, m_open.size() - 1).first;
                }
                if (!m_open[f->second]->contains(it.key()))
                    throw std::runtime_error(m_files[f->second] + ": tensor '" + it.key()
                        + "' listed in the index is missing from this shard");
                m_where[it.key()] = f->second;
            }
            return;
        }
        if (!fs::exists(single))
            throw std::runtime_error(fileOrDir
                + ": no model.safetensors or model.safetensors.index.json in this folder");
        m_open.push_back(std::make_unique<SafetensorsFile>(single.string()));
        m_files.push_back(single.string());
    } else {
        m_open.push_back(std::make_unique<SafetensorsFile>(fileOrDir));
        m_files.push_back(fileOrDir);
    }
    for (const auto& name : m_open[0]->names())
        m_where[name] = 0;
}

std::vector<std::string> SafetensorsReader::names() const
{
    std::vector<std::string> out;
    for (const auto& [name, idx] : m_where)
        out.push_back(name);
    return out;
}

const StTensorInfo& SafetensorsReader::info(const std::string& name) const
{
    auto it = m_where.find(name);
    if (it == m_where.end())
        throw std::runtime_error(m_files.front() + ": no tensor '" + name + "'");
    return *m_open[it->second]->header().find(name);
}

at::Tensor SafetensorsReader::tensor(const std::string& name) const
{
    auto it = m_where.find(name);
    if (it == m_where.end())
        throw std::runtime_error((m_files.size() == 1 ? m_files.front() : "the model's shards")
            + ": no tensor '" + name + "'");
    return m_open[it->second]->tensor(name);
}

void SafetensorsReader::readInto(const std::string& name, at::Tensor& dst) const
{
    at::Tensor src = tensor(name);
    if (src.sizes() != dst.sizes()) {
        auto it = m_where.find(name);
        throw std::runtime_error(m_files[it->second] + ": tensor '" + name + "' has shape "
            + c10::str(src.sizes()) + " but the model expects " + c10::str(dst.sizes()));
    }
    dst.copy_(src);
}

namespace {

void writeAll(std::FILE* f, const void* data, size_t n, const std::string& path)
{
    if (n && std::fwrite(data, 1, n, f) != n)
        throw std::runtime_error(path + ": write failed (" + std::strerror(errno) + ")");
}

} // namespace

void writeSafetensors(const std::string& path, const NamedTensors& tensors,
    const std::map<std::string, std::string>& metadata)
{
    std::vector<StTensorInfo> infos;
    uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        StTensorInfo info;
        info.name = name;
        info.dtype = toStDtype(t.scalar_type());
        info.shape = t.sizes().vec();
        info.begin = offset;
        offset += static_cast<uint64_t>(t.numel()) * stDtypeSize(info.dtype);
        info.end = offset;
        infos.push_back(std::move(info));
    }
    const std::string header = serializeSafetensorsHeader(infos, metadata);
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f)
        throw std::runtime_error(tmp + ": cannot create (" + std::strerror(errno) + ")");
    try {
        writeAll(f, header.data(), header.size(), tmp);
        for (const auto& [name, t] : tensors) {
            const at::Tensor c = t.detach().to(at::kCPU).contiguous();
            writeAll(f, c.data_ptr(), c.numel() * c.element_size(), tmp);
        }
        if (std::fflush(f) != 0 || fsync(fileno(f)) != 0)
            throw std::runtime_error(tmp + ": flush failed (" + std::strerror(errno) + ")");
    } catch (...) {
        std::fclose(f);
        std::remove(tmp.c_str());
        throw;
    }
    std::fclose(f);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        throw std::runtime_error(
            path + ": cannot rename into place (" + std::strerror(errno) + ")");
    }
}

std::vector<std::string> writeSafetensorsFolder(
    const std::string& dir, const NamedTensors& tensors, uint64_t maxShardBytes)
{
    fs::create_directories(dir);
    std::vector<NamedTensors> shards(1);
    uint64_t shardBytes = 0;
    uint64_t total = 0;
    for (const auto& nt : tensors) {
        const uint64_t bytes = static_cast<uint64_t>(nt.second.numel()) * nt.second.element_size();
        if (shardBytes > 0 && shardBytes + bytes > maxShardBytes) {
            shards.emplace_back();
            shardBytes = 0;
        }
        shards.back().push_back(nt);
        shardBytes += bytes;
        total += bytes;
    }
    if (shards.size() == 1) {
        writeSafetensors((fs::path(dir) / "model.safetensors").string(), tensors);
        return {"model.safetensors"};
    }
    std::vector<std::string> files;
    nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
    const size_t n = shards.size();
    for (size_t i = 0; i < n; ++i) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
        writeSafetensors((fs::path(dir) / name).string(), shards[i]);
        files.push_back(name);
        for (const auto& nt : shards[i])
            weightMap[nt.first] = name;
    }
    nlohmann::ordered_json index
        = {{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}};
    const std::string indexPath = (fs::path(dir) / "model.safetensors.index.json").string();
    std::ofstream out(indexPath + ".tmp");
    out << index.dump(2) << "\n";
    out.close();
    if (!out)
        throw std::runtime_error(indexPath + ": write failed");
    fs::rename(indexPath + ".tmp", indexPath);
    files.push_back("model.safetensors.index.json");
    return files;
}

} // namespace shard::engine
