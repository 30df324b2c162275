// shard-worker eval-demo: the accuracy of a model folder on held-out questions of a built-in demo
// task, by greedy generation (the full forward is recomputed for every new token: the demo
// models are tiny and the answers short).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "data/demo_task.h"
#include "tokenizer/tokenizer.h"

namespace {

struct EvalDemoOptions {
    std::string model;
    std::string task = "arithmetic";
    int64_t count = 100;
    uint64_t seed = 1000;
    int maxNewTokens = 12;
    bool json = false;
};

std::vector<at::Tensor> unitWeights(const shard::engine::Unit& unit)
{
    std::vector<at::Tensor> w;
    w.reserve(unit.params.size());
    for (const auto& p : unit.params)
        w.push_back(p.value);
    return w;
}

// The tokens that end an answer: EOS and the chat templates' end-of-turn markers.
std::vector<int32_t> stopIds(const shard::tokenizer::Tokenizer& tok)
{
    std::vector<int32_t> ids;
    if (tok.eosId() >= 0)
        ids.push_back(tok.eosId());
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>", "</s>"})
        if (const int32_t id = tok.tokenToId(t); id >= 0)
            ids.push_back(id);
    return ids;
}

// Greedy continuation of `prompt` until a stop token or `maxNew` tokens.
std::vector<int32_t> greedy(const shard::engine::LlamaModel& model,
    const std::vector<int32_t>& prompt, int maxNew, const std::vector<int32_t>& stop)
{
    std::vector<int64_t> ids(prompt.begin(), prompt.end());
    std::vector<int32_t> out;
    const auto root = unitWeights(model.unit(0));
    for (int n = 0; n < maxNew; ++n) {
        const at::Tensor input = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).unsqueeze(0);
        const auto rope = model.rope(input.size(1), at::kFloat);
        at::Tensor x = model.embed(root, input);
        for (int u = 1; u < model.numUnits(); ++u)
            x = model.block(unitWeights(model.unit(u)), x, rope);
        const at::Tensor logits = model.head(root, x);
        const auto next = static_cast<int32_t>(logits[0][-1].argmax().item<int64_t>());
        if (std::find(stop.begin(), stop.end(), next) != stop.end())
            break;
        out.push_back(next);
        ids.push_back(next);
    }
    return out;
}

void runEvalDemo(const EvalDemoOptions& o)
{
    namespace fs = std::filesystem;
    if (!fs::is_directory(o.model))
        throw std::runtime_error("--model " + o.model
            + ": no such folder (give a model folder: an init-model output or <run>/model)");
    if (!fs::exists(fs::path(o.model) / "tokenizer.json"))
        throw std::runtime_error("--model " + o.model
            + ": no tokenizer.json (eval-demo needs the model's tokenizer in its folder)");
    if (o.count <= 0)
        throw std::runtime_error("--count must be positive");
    const shard::data::DemoTask task = shard::data::parseDemoTask(o.task);
    const auto tok = shard::tokenizer::Tokenizer::fromFolder(o.model);
    const auto folder = shard::engine::openHfModelFolder(o.model);
    shard::engine::LlamaModel model(folder.spec);
    model.materialize(at::kFloat);
    model.load(*folder.weights);

    at::NoGradGuard noGrad;
    const auto examples = shard::data::generateDemoExamples(task, o.count, o.seed);
    const std::vector<int32_t> stop = stopIds(tok);
    std::vector<std::string> expected, outputs;
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& ex : examples) {
        const auto prompt = shard::data::demoPromptIds(tok, ex, shard::data::DataFormat::Chat);
        const auto answer = tok.decode(greedy(model, prompt, o.maxNewTokens, stop), true);
        expected.push_back(ex.answer);
        outputs.push_back(answer);
        if (samples.size() < 5)
            samples.push_back({{"prompt", ex.prompt}, {"expected", ex.answer}, {"output", answer},
                {"correct", shard::data::scoreDemoAnswer(task, ex.answer, answer)}});
    }
    const double accuracy = shard::data::demoAccuracy(task, expected, outputs);
    if (o.json) {
        std::cout << nlohmann::json {{"task", shard::data::demoTaskName(task)}, {"count", o.count},
            {"seed", o.seed}, {"accuracy", accuracy},
            {"samples",
                samples}}.dump()
                  << '\n';
        return;
    }
    for (const auto& s : samples)
        std::cout << s["prompt"].get<std::string>() << " -> " << s["output"].get<std::string>()
                  << (s["correct"].get<bool>()
                             ? "  (right)"
                             : "  (wrong: " + s["expected"].get<std::string>() + ")")
                  << '\n';
    std::cout << "accuracy " << accuracy << " on " << o.count << " "
              << shard::data::demoTaskName(task) << " questions\n";
}

shard::worker::CommandRegistration registration([](CLI::App& app) {
    auto o = std::make_shared<EvalDemoOptions>();
    CLI::App* cmd = app.add_subcommand(
        "eval-demo", "Accuracy of a model folder on held-out demo questions (greedy generation)");
    cmd->add_option("--model", o->model, "Model folder (init-model output or <run>/model)")
        ->required();
    cmd->add_option("--task", o->task, "arithmetic (default) | copy");
    cmd->add_option("--count", o->count, "Number of questions (default 100)");
    cmd->add_option("--seed", o->seed, "Question seed (default 1000; training data uses others)");
    cmd->add_option("--max-new-tokens", o->maxNewTokens, "Generation limit (default 12)")
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--json", o->json,
        "Print {\"task\",\"count\",\"seed\",\"accuracy\",\"samples\":[...]} on one line");
    cmd->callback([o] { runEvalDemo(*o); });
});

} // namespace
