// Inputs for the training tests: a model folder with seeded weights and the demo tokenizer, and
// data of counting sequences from random starts (a pattern a tiny model learns in a few steps).
#pragma once

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "tokenizer/demo_tokenizer.h"

namespace shard::test {

// The tiny-1m preset in fp32 under another name (the tests' own models).
inline plan::ModelSpec tinyFp32Spec(const std::string& name)
{
    auto spec = *plan::findPreset("tiny-1m");
    spec.name = name;
    spec.torchDtype = "float32";
    return spec;
}

// The largest elementwise difference relative to b's largest magnitude.
inline double maxRelDiff(const at::Tensor& a, const at::Tensor& b)
{
    const double scale = std::max(1e-300, b.abs().max().item<double>());
    return (a - b).abs().max().item<double>() / scale;
}

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
