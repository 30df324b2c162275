// Streaming safetensors export: headers are computed from the manifest's shapes first, then each
// tensor is read from the shard files, converted and appended.
#include "hf_export.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_store.h"
#include "core/model/hf_folder.h"
#include "core/model/lora.h"
#include "core/model/nf4.h"
#include "core/model/peft_folder.h"
#include "core/safetensors/safetensors_file.h"
#include "plan/model_spec.h"

namespace shard::ckpt {

namespace fs = std::filesystem;

const std::vector<std::string>& tokenizerFileNames()
{
    static const std::vector<std::string> names {"tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
        "added_tokens.json", "generation_config.json", "chat_template.jinja"};
    return names;
}

namespace {

struct File {
    std::FILE* f = nullptr;
    std::string path;
    ~File()
    {
        if (f)
            std::fclose(f);
    }
    void write(const void* data, size_t n)
    {
        if (n && std::fwrite(data, 1, n, f) != n)
            throw std::runtime_error(path + ": write failed (" + std::strerror(errno) + ")");
    }
    void close()
    {
        if (std::fflush(f) != 0 || fsync(fileno(f)) != 0)
            throw std::runtime_error(path + ": flush failed (" + std::strerror(errno) + ")");
        const int rc = std::fclose(f);
        f = nullptr;
        if (rc != 0)
            throw std::runtime_error(path + ": close failed (" + std::strerror(errno) + ")");
    }
};

// A LoRA checkpoint: the PEFT folder, or the base with the adapters merged (W + s B A in fp64).
ExportResult exportLora(const CheckpointReader& reader, plan::ModelSpec spec,
    const std::string& outDir, const ExportOptions& options, at::ScalarType dtype)
{
    const Manifest& m = reader.manifest();
    const nlohmann::json& l = m.trainState.at("lora");
    engine::lora::LoraConfig cfg;
    cfg.rank = l.at("r").get<int64_t>();
    cfg.alpha = l.at("alpha").get<double>();
    cfg.dropout = l.value("dropout", 0.0);
    cfg.rslora = l.value("rslora", false);
    cfg.targets = engine::lora::parseTargets(l.at("targets").get<std::string>());
    ExportResult result;
    engine::NamedTensors adapters;
    for (const auto& t : m.tensors) {
        adapters.push_back({t.name, reader.readFull(kParam, t.name)});
        result.bytes += t.numel() * 4;
    }
    if (!options.merge) {
        engine::lora::writePeftFolder(outDir, cfg, m.modelSource, adapters);
        result.weightFiles = {"adapter_model.safetensors"};
        return result;
    }
    std::error_code ec;
    if (!fs::is_directory(m.modelSource, ec))
        throw std::runtime_error("--merge needs the run's base model, '" + m.modelSource
            + "', which is not available here; export the adapter without --merge");
    engine::HfModelFolder base = engine::openHfModelFolder(m.modelSource);
    engine::NamedTensors all;
    // QLoRA trained its adapters against the NF4 base: merge onto the dequantised projections.
    const bool qlora = l.value("method", std::string("lora")) == "qlora";
    const bool doubleQuant = l.value("double_quant", false);
    for (const auto& info : plan::parameterTable(base.spec)) {
        at::Tensor w = base.weights->tensor(info.name).to(at::kFloat);
        if (qlora && info.layer >= 0 && info.shape.size() == 2
            && info.name.find("_proj.weight") != std::string::npos) {
            const engine::nf4::Rows q = engine::nf4::quantizeRows(w, doubleQuant);
            w = engine::nf4::dequantizeRows(q.packed, q.absmax, at::kFloat, q.nested);
        }
        all.push_back({info.name, w});
    }
    for (auto& a : adapters)
        all.push_back(a);
    engine::lora::mergeInto(all, cfg);
    result.bytes = 0;
    for (auto& [name, t] : all) {
        t = t.to(dtype).contiguous();
        result.bytes += t.numel() * t.element_size();
    }
    const std::string tmp = fs::path(outDir).lexically_normal().string() + ".tmp";
    fs::remove_all(tmp, ec);
    const std::string tokDir = options.tokenizerDir.empty()
        ? (m.tokenizerSource.empty() ? m.modelSource : m.tokenizerSource)
        : options.tokenizerDir;
    engine::writeHfConfigAndTokenizer(tmp, spec, tokDir);
    result.weightFiles = engine::writeSafetensorsFolder(tmp, all, options.maxShardBytes);
    writeFileDurable((fs::path(tmp) / "README.md").string(),
        "# Merged LoRA model\n\nThe base model " + m.modelSource
            + (qlora ? std::string(" (its projections NF4-quantised")
                        + (doubleQuant ? ", their block scales double-quantised," : "")
                        + " and dequantised, as QLoRA trained on)"
                     : std::string())
            + " with the LoRA adapters of checkpoint " + reader.dir()
            + " merged in: W + scale * B A (scale " + std::to_string(cfg.scale())
            + "), computed in float64 and stored as " + spec.torchDtype + ".\n");
    fs::remove(outDir, ec); // empty, checked by the caller
    fs::rename(tmp, outDir, ec);
    if (ec)
        throw std::runtime_error(outDir + ": cannot rename into place (" + ec.message() + ")");
    return result;
}

} // namespace

ExportResult exportHuggingFace(
    const std::string& checkpointDir, const std::string& outDir, const ExportOptions& options)
{
    at::ScalarType dtype;
    engine::StDtype stType;
    std::string torchDtype;
    if (options.dtype == "fp32" || options.dtype == "float32") {
        dtype = at::kFloat;
        stType = engine::StDtype::F32;
        torchDtype = "float32";
    } else if (options.dtype == "bf16" || options.dtype == "bfloat16") {
        dtype = at::kBFloat16;
        stType = engine::StDtype::BF16;
        torchDtype = "bfloat16";
    } else {
        throw std::runtime_error("--dtype " + options.dtype + ": use fp32 or bf16");
    }
    if (outDir.empty())
        throw std::runtime_error("no output folder given (--out DIR)");
    std::error_code ec;
    if (fs::exists(outDir, ec) && !(fs::is_directory(outDir, ec) && fs::is_empty(outDir, ec)))
        throw std::runtime_error(
            outDir + ": already exists and is not an empty folder; choose another --out");

    const CheckpointReader reader(checkpointDir);
    const Manifest& m = reader.manifest();

    plan::ModelSpec spec;
    try {
        spec = plan::parseHfConfig(m.modelConfig, fs::path(m.modelSource).filename().string());
    } catch (const std::exception& e) {
        throw std::runtime_error("checkpoint " + checkpointDir
            + ": the manifest's model config is not usable: " + e.what());
    }
    spec.torchDtype = torchDtype;
    if (m.trainState.contains("lora"))
        return exportLora(reader, spec, outDir, options, dtype);
    if (options.merge)
        throw std::runtime_error("checkpoint " + checkpointDir
            + " is a full fine-tuning checkpoint: there are no adapters to merge (drop --merge)");

    const std::string tmp = fs::path(outDir).lexically_normal().string() + ".tmp";
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec)
        throw std::runtime_error(tmp + ": cannot create (" + ec.message() + ")");
    ExportResult result;
    try {
        writeFileDurable(
            (fs::path(tmp) / "config.json").string(), plan::toHfConfig(spec).dump(2) + "\n");

        // Plan the shards from the shapes alone.
        const size_t elem = engine::stDtypeSize(stType);
        std::vector<std::vector<const TensorEntry*>> shards(1);
        uint64_t shardBytes = 0;
        for (const auto& t : m.tensors) {
            const uint64_t bytes = static_cast<uint64_t>(t.numel()) * elem;
            if (shardBytes > 0 && shardBytes + bytes > options.maxShardBytes) {
                shards.emplace_back();
                shardBytes = 0;
            }
            shards.back().push_back(&t);
            shardBytes += bytes;
        }
        const size_t n = shards.size();
        nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
        for (size_t i = 0; i < n; ++i) {
            char name[64];
            if (n == 1)
                std::snprintf(name, sizeof name, "model.safetensors");
            else
                std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
            std::vector<engine::StTensorInfo> infos;
            uint64_t offset = 0;
            for (const TensorEntry* t : shards[i]) {
                engine::StTensorInfo info;
                info.name = t->name;
                info.dtype = stType;
                info.shape = t->shape;
                info.begin = offset;
                offset += static_cast<uint64_t>(t->numel()) * elem;
                info.end = offset;
                infos.push_back(std::move(info));
                weightMap[t->name] = name;
            }
            const std::string header
                = engine::serializeSafetensorsHeader(infos, {{"format", "pt"}});
            File out;
            out.path = (fs::path(tmp) / name).string();
            out.f = std::fopen(out.path.c_str(), "wb");
            if (!out.f)
                throw std::runtime_error(
                    out.path + ": cannot create (" + std::strerror(errno) + ")");
            out.write(header.data(), header.size());
            for (const TensorEntry* t : shards[i]) {
                at::Tensor full = reader.readFull(kParam, t->name);
                result.peakTensorBytes = std::max<int64_t>(
                    result.peakTensorBytes, full.numel() * static_cast<int64_t>(sizeof(float)));
                if (dtype != at::kFloat)
                    full = full.to(dtype);
                out.write(full.data_ptr(), full.numel() * full.element_size());
                result.bytes += full.numel() * full.element_size();
            }
            out.close();
            result.weightFiles.push_back(name);
        }
        if (n > 1) {
            nlohmann::ordered_json index
                = {{"metadata", {{"total_size", result.bytes}}}, {"weight_map", weightMap}};
            writeFileDurable(
                (fs::path(tmp) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
            result.weightFiles.push_back("model.safetensors.index.json");
        }

        std::string tokDir = options.tokenizerDir;
        if (tokDir.empty())
            tokDir = m.tokenizerSource.empty() ? m.modelSource : m.tokenizerSource;
        if (tokDir.empty() || !fs::is_directory(tokDir, ec)) {
            result.warning = "no tokenizer copied: the run's tokenizer folder '" + tokDir
                + "' is not available (give --tokenizer DIR)";
        } else {
            for (const auto& f : tokenizerFileNames()) {
                const fs::path src = fs::path(tokDir) / f;
                if (!fs::is_regular_file(src, ec))
                    continue;
                fs::copy_file(src, fs::path(tmp) / f, fs::copy_options::overwrite_existing, ec);
                if (ec)
                    throw std::runtime_error(src.string() + ": cannot copy (" + ec.message() + ")");
                fsyncPath((fs::path(tmp) / f).string());
                result.tokenizerFiles.push_back(f);
            }
            if (result.tokenizerFiles.empty())
                result.warning = "no tokenizer files found in '" + tokDir + "'";
        }
        fsyncPath(tmp);
        if (fs::exists(outDir, ec))
            fs::remove(outDir, ec); // empty, checked above
        fs::rename(tmp, outDir, ec);
        if (ec)
            throw std::runtime_error(outDir + ": cannot rename into place (" + ec.message() + ")");
    } catch (...) {
        fs::remove_all(tmp, ec);
        throw;
    }
    return result;
}

} // namespace shard::ckpt
