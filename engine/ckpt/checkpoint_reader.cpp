// Validation of a saved checkpoint and row-range reads for resume and resharding.
#include "checkpoint_reader.h"

#include <filesystem>
#include <stdexcept>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "ckpt/checkpoint_store.h"
#include "core/safetensors/safetensors_file.h"

namespace shard::ckpt {

namespace fs = std::filesystem;

namespace {

std::string shapeText(const std::vector<int64_t>& s)
{
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i)
        out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

std::string metaOr(const engine::StHeader& h, const std::string& key)
{
    auto it = h.metadata.find(key);
    return it == h.metadata.end() ? std::string("(none)") : it->second;
}

} // namespace

CheckpointReader::CheckpointReader(const std::string& dir)
    : m_dir(dir)
{
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw std::runtime_error("checkpoint " + dir + ": no such directory");
    if (!fs::exists(fs::path(dir) / kManifestFile, ec))
        throw std::runtime_error("checkpoint " + dir + ": no " + kManifestFile
            + " (not a checkpoint, or its writer was interrupted)");
    if (!isCompleteCheckpoint(dir))
        throw std::runtime_error("checkpoint " + dir
            + ": incomplete (no DONE marker; its writer was interrupted); use an earlier "
              "checkpoint or --resume auto");
    m_manifest = readManifest((fs::path(dir) / kManifestFile).string());
    const Manifest& m = m_manifest;
    for (int r = 0; r < m.worldSize; ++r) {
        const fs::path path = fs::path(dir) / m.rankFiles[r];
        if (!fs::exists(path, ec))
            throw std::runtime_error("checkpoint " + dir + ": shard file " + m.rankFiles[r]
                + " of rank " + std::to_string(r) + " is missing (the checkpoint was saved by "
                + std::to_string(m.worldSize) + " ranks and needs all their files)");
        auto file = std::make_unique<engine::SafetensorsFile>(path.string());
        const auto& h = file->header();
        const std::string runId = metaOr(h, "run_id");
        const std::string step = metaOr(h, "step");
        if (metaOr(h, "format") != kManifestFormat || runId != m.runId
            || step != std::to_string(m.step) || metaOr(h, "rank") != std::to_string(r))
            throw std::runtime_error("checkpoint " + dir + ": shard file " + m.rankFiles[r]
                + " belongs to run '" + runId + "' step " + step + " rank " + metaOr(h, "rank")
                + ", but the manifest is run '" + m.runId + "' step " + std::to_string(m.step)
                + " rank " + std::to_string(r) + " (files of different checkpoints were mixed)");
        m_files.push_back(std::move(file));
    }
    for (const auto& t : m.tensors) {
        for (const auto& c : t.chunks) {
            if (c.rows.rows() == 0)
                continue;
            std::vector<int64_t> shape = t.shape;
            shape[0] = c.rows.rows();
            for (const auto& kind : stateKinds()) {
                const std::string key = tensorKey(kind, t.name);
                const engine::StTensorInfo* info = m_files[c.rank]->header().find(key);
                if (!info)
                    throw std::runtime_error("checkpoint " + dir + ": shard file "
                        + m.rankFiles[c.rank] + " lacks '" + key + "' listed in the manifest");
                if (info->shape != shape || info->dtype != engine::StDtype::F32)
                    throw std::runtime_error("checkpoint " + dir + ": shard file "
                        + m.rankFiles[c.rank] + " holds '" + key + "' as "
                        + engine::stDtypeName(info->dtype) + shapeText(info->shape)
                        + ", the manifest says F32" + shapeText(shape));
            }
        }
    }
}

CheckpointReader::~CheckpointReader() = default;

const TensorEntry& CheckpointReader::entry(const std::string& name) const
{
    const TensorEntry* e = m_manifest.find(name);
    if (!e)
        throw std::runtime_error("checkpoint " + m_dir + ": no tensor '" + name + "'");
    return *e;
}

void CheckpointReader::readRowsInto(
    const std::string& kind, const std::string& name, const RowRange& want, at::Tensor& dst) const
{
    const TensorEntry& e = entry(name);
    if (want.begin < 0 || want.end < want.begin || want.end > e.shape[0]
        || want.padded < want.rows())
        throw std::runtime_error("checkpoint " + m_dir + ": rows [" + std::to_string(want.begin)
            + ", " + std::to_string(want.end) + ") padded to " + std::to_string(want.padded)
            + " are not a valid range of '" + name + "' " + shapeText(e.shape));
    std::vector<int64_t> shape = e.shape;
    shape[0] = want.padded;
    if (dst.sizes().vec() != shape)
        throw std::runtime_error("checkpoint " + m_dir + ": '" + name + "' rows need a buffer of "
            + shapeText(shape) + ", got " + shapeText(dst.sizes().vec()));
    std::vector<RowRange> stored;
    for (const auto& c : e.chunks)
        stored.push_back(c.rows);
    const auto copies = planRowCopies(stored, want);
    const std::string key = tensorKey(kind, name);
    for (const auto& cp : copies) {
        // A view of the memory-mapped chunk: only the copied rows' pages are read from disk.
        const at::Tensor src = m_files[e.chunks[cp.chunk].rank]->tensor(key);
        const at::Tensor rows = src.narrow(0, cp.srcRow, cp.rows);
        dst.narrow(0, cp.dstRow, cp.rows).copy_(rows);
        m_bytesRead += rows.numel() * static_cast<int64_t>(rows.element_size());
    }
    if (want.padding() > 0)
        dst.narrow(0, want.rows(), want.padding()).zero_();
}

at::Tensor CheckpointReader::readRows(
    const std::string& kind, const std::string& name, const RowRange& want) const
{
    std::vector<int64_t> shape = entry(name).shape;
    shape[0] = want.padded;
    at::Tensor out = at::empty(shape, at::kFloat);
    readRowsInto(kind, name, want, out);
    return out;
}

at::Tensor CheckpointReader::readFull(const std::string& kind, const std::string& name) const
{
    const int64_t d0 = entry(name).shape[0];
    return readRows(kind, name, RowRange {0, d0, d0});
}

at::Tensor CheckpointReader::readShard(
    const std::string& kind, const std::string& name, const ShardPlacement& placement) const
{
    return readRows(kind, name, rowsOf(entry(name).shape[0], placement));
}

nlohmann::json CheckpointReader::rankState(int rank) const
{
    if (rank < 0 || rank >= static_cast<int>(m_files.size()))
        throw std::runtime_error("checkpoint " + m_dir + ": no rank " + std::to_string(rank));
    const std::string text = metaOr(m_files[rank]->header(), "rank_state");
    try {
        return nlohmann::json::parse(text);
    } catch (const std::exception&) {
        throw std::runtime_error(
            "checkpoint " + m_dir + ": rank " + std::to_string(rank) + " state is not valid JSON");
    }
}

at::Tensor CheckpointReader::rngState(int rank) const
{
    if (rank < 0 || rank >= static_cast<int>(m_files.size()))
        throw std::runtime_error("checkpoint " + m_dir + ": no rank " + std::to_string(rank));
    if (!m_files[rank]->contains("rng/cpu"))
        return {};
    return m_files[rank]->tensor("rng/cpu").clone();
}

void CheckpointReader::checkCompatible(const ResumeExpectation& expect) const
{
    const Manifest& m = m_manifest;
    const std::string where = "checkpoint " + m_dir;
    if (!expect.runId.empty() && expect.runId != m.runId)
        throw std::runtime_error(where + " belongs to run '" + m.runId + "', not to this run ('"
            + expect.runId + "'); resume from this run's own checkpoints");
    if (!expect.modelConfig.is_null() && configHash(expect.modelConfig) != m.modelConfigHash) {
        std::string diff;
        for (const auto& d : jsonDifferences(m.modelConfig, expect.modelConfig))
            diff += (diff.empty() ? "" : "; ") + d;
        throw std::runtime_error(where + " was saved for a different model (config hash "
            + m.modelConfigHash + " vs " + configHash(expect.modelConfig) + "): " + diff);
    }
    if (!expect.data.is_null() && expect.data != m.data) {
        std::string diff;
        for (const auto& d : jsonDifferences(m.data, expect.data))
            diff += (diff.empty() ? "" : "; ") + d;
        throw std::runtime_error(where + " was saved with different data settings: " + diff
            + "; resume with the same data or start a new run");
    }
    if (!expect.tensors.empty()) {
        std::string problems;
        int count = 0;
        auto add = [&](const std::string& p) {
            if (count++ < 6)
                problems += (problems.empty() ? "" : "; ") + p;
        };
        for (const auto& t : expect.tensors) {
            const TensorEntry* e = m.find(t.name);
            if (!e)
                add("tensor '" + t.name + "' is missing from the checkpoint");
            else if (e->shape != t.shape)
                add("tensor '" + t.name + "' is " + shapeText(e->shape) + " in the checkpoint, "
                    + shapeText(t.shape) + " in the model");
        }
        for (const auto& e : m.tensors) {
            bool found = false;
            for (const auto& t : expect.tensors)
                found = found || t.name == e.name;
            if (!found)
                add("the checkpoint has tensor '" + e.name + "' that the model lacks");
        }
        if (count > 0)
            throw std::runtime_error(where + ": incompatible shapes: " + problems
                + (count > 6 ? "; and " + std::to_string(count - 6) + " more" : ""));
    }
}

} // namespace shard::ckpt
