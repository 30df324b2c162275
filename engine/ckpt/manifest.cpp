// Manifest JSON (de)serialization, validation and the chunk table of a strategy.
#include "manifest.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>

#include "protocol/device_mesh.h"

namespace shard::ckpt {

const std::vector<std::string>& stateKinds()
{
    static const std::vector<std::string> kinds {kParam, kExpAvg, kExpAvgSq};
    return kinds;
}

int64_t TensorEntry::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

const TensorEntry* Manifest::find(const std::string& name) const
{
    for (const auto& t : tensors)
        if (t.name == name)
            return &t;
    return nullptr;
}

nlohmann::json toJson(const Manifest& m)
{
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : m.tensors) {
        nlohmann::json chunks = nlohmann::json::array();
        for (const auto& c : t.chunks)
            chunks.push_back({{"rank", c.rank}, {"rows", {c.rows.begin, c.rows.end}},
                {"padded_rows", c.rows.padded}});
        tensors.push_back(
            {{"name", t.name}, {"shape", t.shape}, {"decay", t.decay}, {"chunks", chunks}});
    }
    return {{"format", kManifestFormat}, {"version", m.version}, {"run_id", m.runId},
        {"step", m.step}, {"world_size", m.worldSize}, {"strategy", m.strategy},
        {"shard_group", m.shardGroup}, {"tensor_parallel", m.tensorParallel},
        {"pipeline_parallel", m.pipelineParallel}, {"model_config", m.modelConfig},
        {"model_config_hash", m.modelConfigHash}, {"model_source", m.modelSource},
        {"tokenizer_source", m.tokenizerSource}, {"data", m.data}, {"train_state", m.trainState},
        {"created_utc", m.createdUtc}, {"kinds", stateKinds()}, {"rank_files", m.rankFiles},
        {"tensors", tensors}};
}

namespace {

template<typename T> T field(const nlohmann::json& j, const char* key, const std::string& where)
{
    if (!j.contains(key))
        throw std::runtime_error(where + ": missing field '" + key + "'");
    try {
        return j.at(key).get<T>();
    } catch (const std::exception&) {
        throw std::runtime_error(where + ": field '" + key + "' has the wrong type");
    }
}

} // namespace

Manifest manifestFromJson(const nlohmann::json& j, const std::string& where)
{
    if (!j.is_object())
        throw std::runtime_error(where + ": not a JSON object");
    if (field<std::string>(j, "format", where) != kManifestFormat)
        throw std::runtime_error(where + ": not a shard-ckpt manifest (format '"
            + j["format"].get<std::string>() + "')");
    Manifest m;
    m.version = field<int>(j, "version", where);
    if (m.version != kManifestVersion)
        throw std::runtime_error(where + ": manifest version " + std::to_string(m.version)
            + " is not supported (this build reads version " + std::to_string(kManifestVersion)
            + ")");
    m.runId = field<std::string>(j, "run_id", where);
    m.step = field<int64_t>(j, "step", where);
    m.worldSize = field<int>(j, "world_size", where);
    m.strategy = field<std::string>(j, "strategy", where);
    m.shardGroup = field<int>(j, "shard_group", where);
    m.tensorParallel = j.value("tensor_parallel", 1); // absent before tensor parallel
    m.pipelineParallel = j.value("pipeline_parallel", 1);
    m.modelConfig = field<nlohmann::json>(j, "model_config", where);
    m.modelConfigHash = field<std::string>(j, "model_config_hash", where);
    m.modelSource = field<std::string>(j, "model_source", where);
    m.tokenizerSource = field<std::string>(j, "tokenizer_source", where);
    m.data = field<nlohmann::json>(j, "data", where);
    m.trainState = field<nlohmann::json>(j, "train_state", where);
    m.createdUtc = j.value("created_utc", "");
    m.rankFiles = field<std::vector<std::string>>(j, "rank_files", where);
    if (m.step < 0 || m.worldSize < 1)
        throw std::runtime_error(where + ": step must be >= 0 and world_size >= 1");
    if (!isKnownStrategy(m.strategy))
        throw std::runtime_error(where + ": unknown strategy '" + m.strategy + "'");
    if (static_cast<int>(m.rankFiles.size()) != m.worldSize)
        throw std::runtime_error(where + ": rank_files lists " + std::to_string(m.rankFiles.size())
            + " files for world size " + std::to_string(m.worldSize));
    if (configHash(m.modelConfig) != m.modelConfigHash)
        throw std::runtime_error(where
            + ": model_config_hash does not match model_config (the "
              "manifest was edited or is corrupt)");
    for (const auto& f : m.rankFiles)
        if (f.empty() || f.find('/') != std::string::npos || f == "..")
            throw std::runtime_error(where + ": rank file '" + f + "' is not a file name");
    std::set<std::string> names;
    for (const auto& tj : field<nlohmann::json>(j, "tensors", where)) {
        const std::string tw = where + ": tensor entry";
        TensorEntry t;
        t.name = field<std::string>(tj, "name", tw);
        const std::string w = where + ": tensor '" + t.name + "'";
        t.shape = field<std::vector<int64_t>>(tj, "shape", w);
        t.decay = field<bool>(tj, "decay", w);
        if (t.shape.empty())
            throw std::runtime_error(w + ": shape must have at least one dimension");
        for (int64_t d : t.shape)
            if (d < 0)
                throw std::runtime_error(w + ": negative dimension");
        if (!names.insert(t.name).second)
            throw std::runtime_error(w + ": listed twice");
        for (const auto& cj : field<nlohmann::json>(tj, "chunks", w)) {
            ChunkEntry c;
            c.rank = field<int>(cj, "rank", w);
            const auto rows = field<std::vector<int64_t>>(cj, "rows", w);
            c.rows.padded = field<int64_t>(cj, "padded_rows", w);
            if (rows.size() != 2)
                throw std::runtime_error(w + ": chunk rows must be [begin, end]");
            c.rows.begin = rows[0];
            c.rows.end = rows[1];
            if (c.rank < 0 || c.rank >= m.worldSize || c.rows.begin < 0 || c.rows.end < c.rows.begin
                || c.rows.end > t.shape[0] || c.rows.padded < c.rows.rows())
                throw std::runtime_error(w + ": chunk of rank " + std::to_string(c.rank)
                    + " has impossible rows [" + std::to_string(c.rows.begin) + ", "
                    + std::to_string(c.rows.end) + ") padded to " + std::to_string(c.rows.padded));
            t.chunks.push_back(c);
        }
        // Every row must be stored somewhere.
        std::vector<RowRange> stored;
        for (const auto& c : t.chunks)
            stored.push_back(c.rows);
        try {
            planRowCopies(stored, RowRange {0, t.shape[0], t.shape[0]});
        } catch (const std::exception& e) {
            throw std::runtime_error(w + ": " + e.what());
        }
        m.tensors.push_back(std::move(t));
    }
    return m;
}

Manifest readManifest(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error(path + ": cannot open the checkpoint manifest");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
        throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
    }
    return manifestFromJson(j, path);
}

std::string configHash(const nlohmann::json& config)
{
    // nlohmann::json objects are key-sorted, so dump() is canonical.
    const std::string text = config.dump();
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : text) {
        h ^= c;
        h *= 1099511628211ull;
    }
    char buf[40];
    std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
    return buf;
}

std::string rankFileName(int rank)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "rank-%05d.safetensors", rank);
    return buf;
}

std::string tensorKey(const std::string& kind, const std::string& name)
{
    return kind + "/" + name;
}

std::vector<TensorEntry> layoutTensors(const std::vector<TensorSpec>& tensors,
    const std::string& strategy, int worldSize, int shardGroup, int tp, int pp)
{
    // One mesh places every rank: its data- and tensor-parallel rows and its pipeline stage.
    const protocol::DeviceMesh mesh = checkpointMesh(strategy, worldSize, shardGroup, tp, pp);
    std::vector<std::pair<ShardPlacement, TpPlacement>> placements;
    std::vector<int> stageOf;
    for (int r = 0; r < worldSize; ++r) {
        placements.push_back(placementIn(mesh, r));
        stageOf.push_back(static_cast<int>(mesh.coords(r).pp));
    }
    std::vector<TensorEntry> out;
    for (const auto& t : tensors) {
        if (t.shape.empty())
            throw std::runtime_error("tensor '" + t.name
                + "' is a scalar; checkpoints shard tensors with at least one dimension");
        TensorEntry e;
        e.name = t.name;
        e.shape = t.shape;
        e.decay = t.decay;
        for (int r = 0; r < worldSize; ++r) {
            if (stageOf[static_cast<size_t>(r)] != t.stage)
                continue; // another stage's ranks store it
            const auto& [dp, tpp] = placements[static_cast<size_t>(r)];
            const RowRange rows = heldRows(t.shape[0], dp, t.split, tpp);
            if (storesRows(dp, t.split, tpp, rows))
                e.chunks.push_back({r, rows});
        }
        if (t.shape[0] == 0)
            e.chunks.push_back({0, RowRange {0, 0, 0}});
        out.push_back(std::move(e));
    }
    return out;
}

std::vector<std::string> jsonDifferences(
    const nlohmann::json& checkpoint, const nlohmann::json& current, size_t max)
{
    std::vector<std::string> out;
    if (!checkpoint.is_object() || !current.is_object()) {
        if (checkpoint != current)
            out.push_back(checkpoint.dump() + " in the checkpoint, " + current.dump() + " now");
        return out;
    }
    std::set<std::string> keys;
    for (auto it = checkpoint.begin(); it != checkpoint.end(); ++it)
        keys.insert(it.key());
    for (auto it = current.begin(); it != current.end(); ++it)
        keys.insert(it.key());
    for (const auto& k : keys) {
        const bool inA = checkpoint.contains(k), inB = current.contains(k);
        if (inA && inB && checkpoint[k] == current[k])
            continue;
        const std::string a = inA ? checkpoint[k].dump() : "(absent)";
        const std::string b = inB ? current[k].dump() : "(absent)";
        out.push_back(k + ": " + a + " in the checkpoint, " + b + " in this run");
        if (out.size() >= max)
            break;
    }
    return out;
}

} // namespace shard::ckpt
