// `shard-worker init-model --preset NAME --out DIR [--seed K]`: a Hugging Face folder with seeded
// random weights (config.json, model.safetensors, a demo tokenizer) for the tiny presets and demos.
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <ATen/ATen.h>

#include "command.h"
#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "core/safetensors/safetensors_file.h"
#include "plan/model_spec.h"
#ifdef SHARD_TOKENIZER_AVAILABLE
#include "tokenizer/demo_tokenizer.h"
#endif

namespace shard::worker {

namespace {

struct InitModelArgs {
    std::string preset;
    std::string out;
    uint64_t seed = 0;
    std::string dtype = "f32";
    std::string tokenizer;  // a folder whose tokenizer files are copied (default: demo tokenizer)
    double initScale = 1.0; // multiplies the matrices' random values (norm weights stay 1)
};

void initModel(const InitModelArgs& a)
{
    namespace fs = std::filesystem;
    // A preset, or a folder holding a config.json (any shape the engine supports).
    plan::ModelSpec spec = plan::resolveModel(a.preset);
    if (a.dtype != "f32" && a.dtype != "bf16")
        throw std::runtime_error("--dtype must be f32 or bf16");
    if (fs::exists(fs::path(a.out) / "config.json")
        || fs::exists(fs::path(a.out) / "model.safetensors"))
        throw std::runtime_error(
            "'" + a.out + "' already holds a model; choose another --out or remove it first");
    spec.name = fs::path(a.out).filename().string();
    spec.torchDtype = a.dtype == "f32" ? "float32" : "bfloat16";
    engine::LlamaModel model(spec);
    engine::NamedTensors tensors;
    for (engine::Param* p : model.params()) {
        at::Tensor t = engine::LlamaModel::initialValue(*p, a.seed);
        if (a.initScale != 1.0 && t.dim() >= 2)
            t = t * a.initScale;
        tensors.push_back({p->info.name, a.dtype == "f32" ? t : t.to(at::kBFloat16)});
    }
    fs::create_directories(a.out);
    if (!a.tokenizer.empty() && !fs::exists(fs::path(a.tokenizer) / "tokenizer.json"))
        throw std::runtime_error("--tokenizer '" + a.tokenizer + "' has no tokenizer.json");
    engine::writeHfConfigAndTokenizer(a.out, spec, a.tokenizer);
    engine::writeSafetensorsFolder(a.out, tensors);
#ifdef SHARD_TOKENIZER_AVAILABLE
    if (a.tokenizer.empty())
        tokenizer::writeDemoTokenizer(a.out, static_cast<int>(spec.vocabSize));
#else
    std::fprintf(stderr,
        "init-model: warning: this build has no tokenizer library; %s has no "
        "tokenizer files\n",
        a.out.c_str());
#endif
    // printf, not spdlog: this TU sees LibTorch's headers, and a PyTorch wheel's LibTorch carries
    // its own {fmt} (docs/ARCHITECTURE.md, "Building against a PyTorch wheel").
    std::fprintf(stderr, "init-model: wrote %s (%lld parameters, seed %llu) to %s\n",
        a.preset.c_str(), static_cast<long long>(model.numParams()),
        static_cast<unsigned long long>(a.seed), a.out.c_str());
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto args = std::make_shared<InitModelArgs>();
    auto* cmd = app.add_subcommand(
        "init-model", "Write a Hugging Face model folder with seeded random weights from a preset");
    cmd->add_option("--preset", args->preset,
           "Model preset (tiny-1m, tiny-15m, tiny-100m, ...) or a folder holding a config.json")
        ->required();
    cmd->add_option("--tokenizer", args->tokenizer,
        "Copy this folder's tokenizer files (default: a demo tokenizer of the vocabulary's size)");
    cmd->add_option("--out", args->out, "Output folder")->required();
    cmd->add_option("--seed", args->seed, "Random seed of the weights");
    cmd->add_option("--init-scale", args->initScale,
        "Multiply the matrices' random values (tests: larger weights make attention and the "
        "next token depend on every part of the model)");
    cmd->add_option("--dtype", args->dtype, "Stored dtype: f32 (default) or bf16");
    cmd->callback([args] { initModel(*args); });
});

} // namespace

} // namespace shard::worker
