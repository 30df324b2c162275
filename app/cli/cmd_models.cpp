// `shard models [--json]`: the built-in model presets with parameter counts and shapes.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "plan/model_spec.h"

namespace shard::cli {
namespace {

std::string withCommas(int64_t v)
{
    std::string s = std::to_string(v);
    for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
        s.insert(static_cast<size_t>(i), ",");
    return s;
}

void printModels(bool asJson)
{
    using namespace shard::plan;
    if (asJson) {
        nlohmann::json out = nlohmann::json::array();
        for (const ModelSpec& m : presets()) {
            nlohmann::json j;
            j["name"] = m.name;
            j["model_type"] = m.modelType;
            j["params"] = parameterCount(m);
            j["active_params"] = activeParameterCount(m);
            j["layers"] = m.numLayers;
            j["hidden_size"] = m.hiddenSize;
            j["intermediate_size"] = m.intermediateSize;
            j["heads"] = m.numHeads;
            j["kv_heads"] = m.numKvHeads;
            j["head_dim"] = m.headDim;
            j["vocab_size"] = m.vocabSize;
            j["max_position_embeddings"] = m.maxPositionEmbeddings;
            j["tie_word_embeddings"] = m.tieWordEmbeddings;
            j["moe"] = m.isMoe();
            j["config"] = toHfConfig(m);
            out.push_back(j);
        }
        std::printf("%s\n", out.dump(2).c_str());
        return;
    }
    std::printf("%-15s %-11s %17s %7s %6s %6s %9s %7s %8s %6s\n", "preset", "type", "parameters",
        "layers", "hidden", "heads", "kv heads", "ffn", "vocab", "ctx");
    for (const ModelSpec& m : presets()) {
        std::string ffn = std::to_string(m.intermediateSize);
        if (m.moe)
            ffn = std::to_string(m.moe->moeIntermediateSize) + "x"
                + std::to_string(m.moe->routedExperts);
        std::string ctx = m.maxPositionEmbeddings >= 1024
            ? std::to_string(m.maxPositionEmbeddings / 1024) + "k"
            : std::to_string(m.maxPositionEmbeddings);
        std::printf("%-15s %-11s %17s %7lld %6lld %6lld %9lld %7s %8lld %6s%s\n", m.name.c_str(),
            m.modelType.c_str(), withCommas(parameterCount(m)).c_str(),
            static_cast<long long>(m.numLayers), static_cast<long long>(m.hiddenSize),
            static_cast<long long>(m.numHeads), static_cast<long long>(m.numKvHeads), ffn.c_str(),
            static_cast<long long>(m.vocabSize), ctx.c_str(),
            m.tieWordEmbeddings ? "  tied" : (m.isMoe() ? "  MoE, planning only" : ""));
    }
    std::printf("\nAny Hugging Face folder with a config.json works too: shard plan --model "
                "PATH ...\n");
}

const CommandRegistration kModels([](CLI::App& app) {
    auto* sub = app.add_subcommand("models", "List the built-in model presets");
    auto asJson = std::make_shared<bool>(false);
    sub->add_flag("--json", *asJson, "One JSON array with each preset's shapes and config.json");
    sub->callback([asJson] { printModels(*asJson); });
});

} // namespace
} // namespace shard::cli
