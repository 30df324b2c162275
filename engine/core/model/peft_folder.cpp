// PEFT adapter folders: the names and config fields Hugging Face PEFT writes and loads.
#include "core/model/peft_folder.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/model/llama_model.h"

namespace shard::engine::lora {

namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

std::string numberText(double v)
{
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.')
        s.pop_back();
    return s;
}

} // namespace

void writePeftFolder(const std::string& dir, const LoraConfig& config, const std::string& baseModel,
    const NamedTensors& adapters)
{
    nlohmann::json targets = nlohmann::json::array();
    for (Target t : config.targets)
        targets.push_back(targetShortModule(t));
    nlohmann::json j = {{"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"}, {"r", config.rank},
        {"lora_alpha", config.alpha}, {"lora_dropout", config.dropout}, {"target_modules", targets},
        {"use_rslora", config.rslora}, {"bias", "none"}, {"base_model_name_or_path", baseModel},
        {"fan_in_fan_out", false}, {"init_lora_weights", true}, {"inference_mode", true},
        {"modules_to_save", nullptr}, {"use_dora", false}};
    const std::string tmp = dir + ".tmp";
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp);
    {
        std::ofstream out(fs::path(tmp) / kConfigFile);
        out << j.dump(2) << "\n";
        out.flush();
        if (!out)
            throw std::runtime_error(
                tmp + "/" + kConfigFile + ": write failed (is the disk full?)");
    }
    NamedTensors keyed;
    for (const auto& [name, t] : adapters)
        keyed.push_back({peftKey(name), t.detach().to(at::kFloat).contiguous()});
    writeSafetensors((fs::path(tmp) / kWeightsFile).string(), keyed);
    fs::remove_all(dir, ec);
    fs::rename(tmp, dir);
}

LoraConfig readPeftConfig(const std::string& dir)
{
    const std::string path = (fs::path(dir) / kConfigFile).string();
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error(
            path + ": cannot open (give a PEFT adapter folder to --lora-init)");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
        throw std::runtime_error(path + ": not valid JSON (" + e.what() + ")");
    }
    try {
        if (j.value("peft_type", std::string()) != "LORA")
            throw std::runtime_error(
                "peft_type is '" + j.value("peft_type", std::string()) + "', not LORA");
        if (j.value("bias", std::string("none")) != "none")
            throw std::runtime_error(
                "bias '" + j.value("bias", std::string()) + "' is not supported (only bias none)");
        if (j.value("use_dora", false))
            throw std::runtime_error("DoRA adapters (use_dora) are not supported");
        LoraConfig c;
        c.rank = j.at("r").get<int64_t>();
        c.alpha = j.at("lora_alpha").get<double>();
        c.dropout = j.value("lora_dropout", 0.0);
        c.rslora = j.value("use_rslora", false);
        std::string list;
        const auto& tm = j.at("target_modules");
        if (tm.is_string())
            list = tm.get<std::string>();
        else
            for (const auto& t : tm)
                list += (list.empty() ? "" : ",") + t.get<std::string>();
        c.targets = parseTargets(list);
        return c;
    } catch (const nlohmann::json::exception& e) {
        throw std::runtime_error(path + ": " + e.what());
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(path + ": " + e.what());
    }
}

AdapterSource::AdapterSource(const LoraConfig& config, const std::string& peftDir, uint64_t seed)
    : m_seed(seed)
    , m_dir(peftDir)
{
    if (peftDir.empty())
        return;
    const LoraConfig file = readPeftConfig(peftDir);
    auto differ = [&](const std::string& what, const std::string& has, const std::string& want,
                      const std::string& flag) {
        throw std::runtime_error(peftDir + ": the adapter has " + what + " " + has
            + " but the run asks for " + want + "; pass " + flag + " to continue it");
    };
    if (file.rank != config.rank)
        differ("r", std::to_string(file.rank), std::to_string(config.rank),
            "--lora-rank " + std::to_string(file.rank));
    if (file.alpha != config.alpha)
        differ("lora_alpha", numberText(file.alpha), numberText(config.alpha),
            "--lora-alpha " + numberText(file.alpha));
    if (file.rslora != config.rslora)
        differ("use_rslora", file.rslora ? "true" : "false", config.rslora ? "true" : "false",
            file.rslora ? "--lora-rslora" : "no --lora-rslora");
    if (file.targets != config.targets) {
        std::string list;
        for (Target t : file.targets)
            list += (list.empty() ? "" : ",") + std::string(targetFlag(t));
        std::string want;
        for (Target t : config.targets)
            want += (want.empty() ? "" : ",") + std::string(targetFlag(t));
        differ("target_modules", list, want, "--lora-targets " + list);
    }
    m_reader = std::make_unique<SafetensorsReader>((fs::path(peftDir) / kWeightsFile).string());
}

at::Tensor AdapterSource::value(const Param& p) const
{
    if (!m_reader)
        return initialValue(p, m_seed);
    const std::string key = peftKey(p.info.name);
    if (!m_reader->contains(key))
        throw std::runtime_error(
            m_dir + "/" + kWeightsFile + ": missing tensor '" + key + "' of the adapter");
    at::Tensor t = m_reader->tensor(key);
    if (t.sizes().vec() != p.info.shape)
        throw std::runtime_error(m_dir + "/" + kWeightsFile + ": '" + key
            + "' has the wrong shape for this model and rank");
    return t.to(at::kFloat);
}

NamedTensors mergeInto(NamedTensors& tensors, const LoraConfig& config)
{
    std::map<std::string, at::Tensor> byName;
    NamedTensors adapters, base;
    for (auto& [name, t] : tensors)
        if (isAdapterName(name)) {
            adapters.push_back({name, t});
            byName[name] = t;
        } else {
            base.push_back({name, t});
        }
    const double s = config.scale();
    for (auto& [name, w] : base) {
        const std::string stem = name.size() > 7 ? name.substr(0, name.size() - 7) : name;
        auto a = byName.find(stem + ".lora_A.weight");
        auto b = byName.find(stem + ".lora_B.weight");
        if (a == byName.end() || b == byName.end())
            continue;
        at::Tensor merged = w.to(at::kDouble)
            + at::matmul(b->second.to(at::kDouble), a->second.to(at::kDouble)) * s;
        w = merged.to(at::kFloat);
    }
    tensors = std::move(base);
    return adapters;
}

} // namespace shard::engine::lora
