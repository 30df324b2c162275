// shard-worker eval-demo: the accuracy of a model folder on held-out questions of a built-in demo
// task, by greedy generation.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "core/generate/generation.h"
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
    std::string pairsOut; // preference pairs from the model's wrong answers
};

// Greedy continuation of `prompt` until a stop token or `maxNew` tokens (KV-cache decoding).
std::vector<int32_t> greedy(const shard::engine::LlamaModel& model,
    const shard::tokenizer::Tokenizer& tok, const std::vector<int32_t>& prompt, int maxNew)
{
    shard::engine::Decoder decoder(model, shard::engine::modelWeights(model), at::kFloat, at::kCPU,
        static_cast<int64_t>(prompt.size()) + maxNew);
    shard::engine::GenerateOptions o;
    o.maxNewTokens = maxNew;
    return shard::engine::generate(decoder, tok, prompt, o).ids;
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
    std::vector<std::string> expected, outputs;
    nlohmann::json samples = nlohmann::json::array();
    std::ofstream pairs;
    if (!o.pairsOut.empty()) {
        pairs.open(o.pairsOut, std::ios::binary | std::ios::trunc);
        if (!pairs)
            throw std::runtime_error("--pairs-out " + o.pairsOut + ": cannot write");
    }
    int64_t pairCount = 0;
    for (const auto& ex : examples) {
        const auto prompt = shard::data::demoPromptIds(tok, ex, shard::data::DataFormat::Chat);
        const auto answer = tok.decode(greedy(model, tok, prompt, o.maxNewTokens), true);
        expected.push_back(ex.answer);
        outputs.push_back(answer);
        // The model's own wrong answer rejected, the right one chosen (on-policy pairs for
        // --objective dpo|orpo); an empty answer teaches nothing and is left out.
        if (pairs.is_open() && !shard::data::scoreDemoAnswer(task, ex.answer, answer)) {
            const auto first = answer.find_first_not_of(" \t\n");
            const auto last = answer.find_last_not_of(" \t\n");
            const std::string wrong = first == std::string::npos
                ? std::string()
                : answer.substr(first, last - first + 1);
            if (!wrong.empty() && wrong != ex.answer) {
                nlohmann::json pair = shard::data::demoPreferenceRecord(task, ex);
                pair["rejected"][0]["content"] = wrong;
                pairs << pair.dump() << '\n';
                ++pairCount;
            }
        }
        if (samples.size() < 5)
            samples.push_back({{"prompt", ex.prompt}, {"expected", ex.answer}, {"output", answer},
                {"correct", shard::data::scoreDemoAnswer(task, ex.answer, answer)}});
    }
    const double accuracy = shard::data::demoAccuracy(task, expected, outputs);
    if (pairs.is_open()) {
        pairs.flush();
        if (!pairs)
            throw std::runtime_error("--pairs-out " + o.pairsOut + ": write failed");
        std::cerr << "eval-demo: wrote " << pairCount << " preference pairs (the model's wrong "
                  << "answers rejected) to " << o.pairsOut << "\n";
    }
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
        ->check(shard::cmdline::positiveNumber());
    cmd->add_option("--pairs-out", o->pairsOut,
        "Also write a preference pair (JSONL) for each wrong answer: the right answer chosen, "
        "the model's own rejected (on-policy data for --objective dpo or orpo)");
    cmd->add_flag("--json", o->json,
        "Print {\"task\",\"count\",\"seed\",\"accuracy\",\"samples\":[...]} on one line");
    cmd->callback([o] { runEvalDemo(*o); });
});

} // namespace
