// HF folder validation and output.
#include "hf_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shard::engine {

namespace fs = std::filesystem;

const char* const kTokenizerFiles[]
    = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
        "vocab.json", "merges.txt", "generation_config.json", nullptr};

HfModelFolder openHfModelFolder(const std::string& dir)
{
    std::error_code ec;
    if (!fs::exists(dir, ec))
        throw std::runtime_error("model folder '" + dir + "' does not exist");
    if (!fs::is_directory(dir, ec))
        throw std::runtime_error("model '" + dir
            + "' is not a folder (give a Hugging Face folder with config.json and *.safetensors)");
    if (!fs::exists(fs::path(dir) / "config.json"))
        throw std::runtime_error("model folder '" + dir
            + "' has no config.json (create one with `shard-worker init-model` or download a "
              "Hugging Face model)");
    HfModelFolder out;
    out.dir = dir;
    out.spec = plan::loadHfConfig(dir);
    if (out.spec.isMoe())
        throw std::runtime_error(dir + "/config.json: model_type '" + out.spec.modelType
            + "' (mixture of experts) can be planned but not trained by this engine");
    out.weights = std::make_unique<SafetensorsReader>(dir);
    // The layers the weights hold, before the parameter table (its size is the config's).
    const std::string layerPrefix = "model.layers.";
    int64_t weightLayers = 0;
    for (const std::string& name : out.weights->names()) {
        if (name.rfind(layerPrefix, 0) != 0)
            continue;
        const std::string rest = name.substr(layerPrefix.size());
        const auto dot = rest.find('.');
        const std::string index = rest.substr(0, dot);
        if (!index.empty() && index.size() < 10
            && index.find_first_not_of("0123456789") == std::string::npos)
            weightLayers = std::max<int64_t>(weightLayers, std::stoll(index) + 1);
    }
    if (out.spec.numLayers > weightLayers)
        throw std::runtime_error(dir + "/config.json: num_hidden_layers is "
            + std::to_string(out.spec.numLayers) + " but the weights ("
            + out.weights->files().front() + ") hold " + std::to_string(weightLayers)
            + " layer(s); fix num_hidden_layers or use the weights written with this config");
    for (const auto& p : plan::parameterTable(out.spec)) {
        if (!out.weights->contains(p.name))
            throw std::runtime_error(out.weights->files().front() + ": missing tensor '" + p.name
                + "' required by " + dir + "/config.json");
        const auto& info = out.weights->info(p.name);
        if (info.shape != p.shape) {
            std::string got, want;
            for (auto d : info.shape)
                got += (got.empty() ? "" : ", ") + std::to_string(d);
            for (auto d : p.shape)
                want += (want.empty() ? "" : ", ") + std::to_string(d);
            throw std::runtime_error(dir + ": tensor '" + p.name + "' has shape [" + got
                + "] but config.json implies [" + want + "]");
        }
        toScalarType(info.dtype, dir + ": tensor '" + p.name + "'");
    }
    return out;
}

std::string findNonFiniteTensor(const SafetensorsReader& weights)
{
    for (const std::string& name : weights.names()) {
        const at::Tensor t = weights.tensor(name);
        if (!t.is_floating_point())
            continue;
        const bool nan = t.isnan().any().item<bool>();
        if (nan || t.isinf().any().item<bool>())
            return "tensor '" + name + "' holds " + (nan ? "NaN" : "Inf");
    }
    return {};
}

void writeHfConfigAndTokenizer(
    const std::string& dir, const plan::ModelSpec& spec, const std::string& tokenizerSource)
{
    fs::create_directories(dir);
    {
        const std::string path = (fs::path(dir) / "config.json").string();
        std::ofstream out(path + ".tmp");
        out << plan::toHfConfig(spec).dump(2) << "\n";
        out.close();
        if (!out)
            throw std::runtime_error(path + ": write failed");
        fs::rename(path + ".tmp", path);
    }
    if (tokenizerSource.empty())
        return;
    for (int i = 0; kTokenizerFiles[i]; ++i) {
        const fs::path src = fs::path(tokenizerSource) / kTokenizerFiles[i];
        if (fs::exists(src)
            && fs::absolute(src) != fs::absolute(fs::path(dir) / kTokenizerFiles[i]))
            fs::copy_file(
                src, fs::path(dir) / kTokenizerFiles[i], fs::copy_options::overwrite_existing);
    }
}

} // namespace shard::engine
