// Inputs for the training tests: a model folder with seeded weights and the demo tokenizer, and
// data of counting sequences from random starts (a pattern a tiny model learns in a few steps).
#pragma once

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "tokenizer/demo_tokenizer.h"

namespace shard::test {

inline std::string writeTinyModel(const std::string& dir, const plan::ModelSpec& spec)
{
    engine::LlamaModel model(spec);
    engine::NamedTensors tensors;
    for (engine::Param* p : model.params())
        tensors.push_back({p->info.name, engine::LlamaModel::initialValue(*p, 5)});
    engine::writeHfConfigAndTokenizer(dir, spec, {});
    engine::writeSafetensorsFolder(dir, tensors);
    tokenizer::writeDemoTokenizer(dir, static_cast<int>(spec.vocabSize));
    return dir;
}

inline std::string writeCountingData(const std::string& path, int rows, int vocab, unsigned seed)
{
    std::ofstream out(path);
    std::mt19937 rng(seed);
    for (int r = 0; r < rows; ++r) {
        const int n = 10 + static_cast<int>(rng() % 30);
        std::vector<int> ids;
        const int start = static_cast<int>(rng() % vocab);
        for (int i = 0; i < n; ++i)
            ids.push_back((start + i) % vocab);
        out << nlohmann::json {{"input_ids", ids}}.dump() << "\n";
    }
    return path;
}

} // namespace shard::test
