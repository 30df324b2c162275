// shard-worker generate: text from a model folder, an exported or finished run, or a checkpoint,
// decoded incrementally with a KV cache and streamed as JSON lines on stdout (protocol records:
// "model", one "token" per generated token, "summary"). Logs and errors go to stderr.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_store.h"
#include "command.h"
#include "core/generate/generation.h"
#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "protocol/checkpoint_discovery.h"
#include "protocol/records.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace shard::worker {

namespace {

namespace fs = std::filesystem;

struct GenerateArgs {
    std::string model;
    std::string checkpoint;
    std::string tokenizer;
    std::string prompt;
    std::string promptFile;
    bool chat = false;
    std::string system;
    std::string chatTemplate;
    std::string dtype = "fp32";
    std::string device = "cpu";
    int64_t maxNewTokens = 128;
    engine::SamplingOptions sampling;
    std::vector<std::string> stop;
    bool truncate = false;
    bool ignoreEos = false;
    bool noCache = false;
    int threads = 0;
    int64_t maxMemoryMiB = 0;
};

// Where the weights come from: a Hugging Face folder, or a checkpoint (its manifest).
struct Source {
    std::string hfDir;      // set for a folder
    std::string checkpoint; // set for a checkpoint
    plan::ModelSpec spec;
    std::string tokenizerDir;
    std::unique_ptr<engine::SafetensorsReader> weights; // a folder's, validated
};

bool hasTokenizer(const std::string& dir)
{
    return !dir.empty() && fs::exists(fs::path(dir) / "tokenizer.json");
}

Source checkpointSource(const std::string& arg)
{
    Source s;
    s.checkpoint = ckpt::resolveResume(arg, "");
    const ckpt::Manifest m
        = ckpt::readManifest((fs::path(s.checkpoint) / ckpt::kManifestFile).string());
    s.spec = plan::parseHfConfig(m.modelConfig, fs::path(m.modelSource).filename().string());
    for (const std::string& dir : {m.tokenizerSource, m.modelSource})
        if (hasTokenizer(dir)) {
            s.tokenizerDir = dir;
            break;
        }
    return s;
}

// --model DIR: a Hugging Face folder; a run folder means its exported model (<run>/model) or,
// while it has none, its newest complete checkpoint.
Source resolveSource(const GenerateArgs& a)
{
    if (!a.checkpoint.empty())
        return checkpointSource(a.checkpoint);
    if (a.model.empty())
        throw std::runtime_error("give --model DIR (a model folder or a run) or --checkpoint DIR");
    std::error_code ec;
    if (!fs::is_directory(a.model, ec))
        throw std::runtime_error("--model " + a.model + ": no such folder");
    std::string dir = a.model;
    if (!fs::exists(fs::path(dir) / "config.json")) {
        if (fs::exists(fs::path(dir) / "model" / "config.json"))
            dir = (fs::path(dir) / "model").string();
        else if (ckpt::latestComplete(dir))
            return checkpointSource(dir);
        else
            throw std::runtime_error("--model " + a.model
                + ": neither a model folder (config.json) nor a run with an exported model or a "
                  "complete checkpoint");
    }
    Source s;
    s.hfDir = dir;
    s.spec = plan::loadHfConfig(dir);
    // Validated against its weights before anything the size of the model is built (a config
    // of 10^9 layers is refused here, not allocated). A folder of config.json alone still gets
    // the memory check first: it is refused by its size, else for its missing weights.
    if (fs::exists(fs::path(dir) / "model.safetensors")
        || fs::exists(fs::path(dir) / "model.safetensors.index.json")) {
        engine::HfModelFolder folder = engine::openHfModelFolder(dir);
        s.spec = folder.spec;
        s.weights = std::move(folder.weights);
    }
    if (hasTokenizer(dir))
        s.tokenizerDir = dir;
    return s;
}

// The chat template the run being generated from was trained with: the "chat_template" of the
// run.json beside the folder or checkpoint (the folder itself, its parent: <run>/model, or two
// up: <run>/checkpoints/step-N); "" when it named none or no run is found. Without it a run
// trained with --chat-template would be prompted in its tokenizer's template instead.
std::string trainedChatTemplate(const std::string& path)
{
    const std::string run = protocol::runFolderOf(path);
    if (run.empty())
        return {};
    std::ifstream in(fs::path(run) / "run.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    const auto t = j.find("chat_template");
    return t != j.end() && t->is_string() ? t->get<std::string>() : std::string();
}

int64_t availableHostBytes()
{
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
        if (key == "MemAvailable:")
            return kb * 1024;
    return 0;
}

std::string gib(int64_t bytes)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
    return buf;
}

// Refuses before allocating anything when weights + cache exceed what the device has.
void checkFits(
    const GenerateArgs& a, const plan::ModelSpec& spec, at::ScalarType dtype, int64_t capacity)
{
    const int64_t weights = plan::parameterCount(spec) * c10::elementSize(dtype);
    const int64_t cache = engine::Decoder::cacheBytesFor(spec, dtype, capacity, 1);
    const int64_t need = weights + cache;
    int64_t have = a.maxMemoryMiB > 0 ? a.maxMemoryMiB << 20 : 0;
    std::string what = "--max-memory-mib";
    if (have == 0 && a.device == "cpu") {
        have = availableHostBytes();
        what = "available host memory";
    }
    if (have > 0 && need > have)
        throw std::runtime_error("model '" + spec.name + "' needs " + gib(need) + " in " + a.dtype
            + " (weights " + gib(weights) + ", KV cache " + gib(cache) + " for "
            + std::to_string(capacity) + " positions) but " + what + " is " + gib(have)
            + (a.dtype == "fp32" ? "; try --dtype bf16 or a smaller model"
                                 : "; use a smaller model or a shorter --max-new-tokens"));
}

std::string readPrompt(const GenerateArgs& a)
{
    if (!a.promptFile.empty()) {
        std::ifstream in(a.promptFile, std::ios::binary);
        if (!in)
            throw std::runtime_error("--prompt-file " + a.promptFile + ": cannot read");
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    }
    return a.prompt;
}

void writeRecord(const nlohmann::json& j)
{
    const std::string line = protocol::encodeLine(j) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
}

void runGenerate(const GenerateArgs& a)
{
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    if (!a.prompt.empty() && !a.promptFile.empty())
        throw std::runtime_error("give --prompt or --prompt-file, not both");
    if (!a.model.empty() && !a.checkpoint.empty())
        throw std::runtime_error("give --model or --checkpoint, not both");
    if (a.maxNewTokens <= 0)
        throw std::runtime_error("--max-new-tokens must be positive");
    engine::validate(a.sampling);
    at::ScalarType dtype;
    if (a.dtype == "fp32" || a.dtype == "f32")
        dtype = at::kFloat;
    else if (a.dtype == "bf16")
        dtype = at::kBFloat16;
    else
        throw std::runtime_error("--dtype " + a.dtype + ": use fp32 or bf16");
    if (a.device != "cpu" && a.device.rfind("cuda", 0) != 0)
        throw std::runtime_error("--device " + a.device + ": use cpu or cuda[:N]");
    if (a.device != "cpu" && !at::hasCUDA())
        throw std::runtime_error(
            "--device " + a.device + ": this build has no CUDA device available; use --device cpu");
    const at::Device device(a.device);
    if (a.threads > 0)
        at::set_num_threads(a.threads);

    Source src = resolveSource(a);
    const std::string tokDir = a.tokenizer.empty() ? src.tokenizerDir : a.tokenizer;
    if (!hasTokenizer(tokDir))
        throw std::runtime_error(
            (src.hfDir.empty() ? "checkpoint " + src.checkpoint : "model folder " + src.hfDir)
            + " has no tokenizer (tokenizer.json); generate needs one: copy tokenizer.json and "
              "tokenizer_config.json from the base model, or pass --tokenizer DIR");
    const auto tok = tokenizer::Tokenizer::fromFolder(tokDir);

    // The prompt, checked against the context before any weight is read.
    engine::PromptOptions po;
    po.text = readPrompt(a);
    po.chat = a.chat;
    po.system = a.system;
    po.chatTemplate = a.chatTemplate;
    std::string why;
    if (a.chat && po.chatTemplate.empty()) {
        po.chatTemplate = trainedChatTemplate(a.checkpoint.empty() ? a.model : src.checkpoint);
        if (!po.chatTemplate.empty())
            why = "the run's ";
    }
    if (a.chat) {
        const auto choice = tokenizer::chooseChatTemplate(tok, po.chatTemplate);
        std::fprintf(stderr, "generate: chat template %s (%s%s)\n",
            tokenizer::chatTemplateTitle(choice.kind).c_str(), why.c_str(), choice.source.c_str());
    }
    std::vector<int32_t> prompt = engine::promptIds(tok, po);
    if (prompt.empty())
        throw std::runtime_error("the prompt encodes to no tokens and the tokenizer adds no BOS; "
                                 "give a non-empty --prompt");
    const int64_t context = src.spec.maxPositionEmbeddings > 0 ? src.spec.maxPositionEmbeddings
                                                               : prompt.size() + a.maxNewTokens;
    if (static_cast<int64_t>(prompt.size()) >= context) {
        if (!a.truncate)
            throw std::runtime_error("the prompt has " + std::to_string(prompt.size())
                + " tokens but the model's context is " + std::to_string(context)
                + " (max_position_embeddings); shorten it or pass --truncate to keep its end");
        // Keep the leading BOS (when there is one) and the newest tokens, leaving room to answer.
        const int64_t keep = std::max<int64_t>(1, context - std::min(a.maxNewTokens, context / 2));
        const bool bos = tok.bosId() >= 0 && prompt.front() == tok.bosId();
        std::vector<int32_t> cut;
        if (bos)
            cut.push_back(prompt.front());
        cut.insert(cut.end(), prompt.end() - (keep - (bos ? 1 : 0)), prompt.end());
        std::fprintf(stderr, "generate: prompt truncated from %zu to %zu tokens (context %lld)\n",
            prompt.size(), cut.size(), static_cast<long long>(context));
        prompt = std::move(cut);
    }
    const int64_t capacity
        = std::min<int64_t>(context, static_cast<int64_t>(prompt.size()) + a.maxNewTokens);
    checkFits(a, src.spec, dtype, capacity);

    engine::LlamaModel model(src.spec);
    {
        // One copy of the weights, in the compute dtype on the device, filled tensor by tensor.
        at::NoGradGuard noGrad;
        const auto opts = at::TensorOptions().dtype(dtype).device(device);
        std::unique_ptr<engine::SafetensorsReader> weights = std::move(src.weights);
        std::unique_ptr<ckpt::CheckpointReader> reader;
        if (!weights && !src.hfDir.empty())
            weights = std::move(engine::openHfModelFolder(src.hfDir).weights); // says what lacks
        else if (!weights)
            reader = std::make_unique<ckpt::CheckpointReader>(src.checkpoint);
        for (engine::Param* p : model.params()) {
            p->value = at::empty(p->info.shape, opts);
            if (weights) {
                if (device.is_cpu())
                    weights->readInto(p->info.name, p->value);
                else
                    p->value.copy_(weights->tensor(p->info.name));
            } else {
                p->value.copy_(reader->readFull(ckpt::kParam, p->info.name));
            }
            // NaN or Inf weights would decode to token 0 every time (argmax of NaN logits).
            const bool nan = p->value.isnan().any().item<bool>();
            if (nan || p->value.isinf().any().item<bool>())
                throw std::runtime_error(
                    (weights ? "model folder " + src.hfDir : "checkpoint " + src.checkpoint)
                    + ": tensor '" + p->info.name + "' holds " + (nan ? "NaN" : "Inf")
                    + " (as loaded in " + a.dtype
                    + "); the weights are damaged: export or download them again");
        }
    }
    protocol::GenModelRecord mr;
    mr.model = src.hfDir.empty() ? src.checkpoint : src.hfDir;
    mr.params = model.numParams();
    mr.dtype = dtype == at::kFloat ? "fp32" : "bf16";
    mr.device = device.str();
    mr.loadSec = std::chrono::duration<double>(Clock::now() - t0).count();
    writeRecord(protocol::toJson(mr));

    engine::Decoder decoder(model, engine::modelWeights(model), dtype, device, capacity);
    engine::GenerateOptions go;
    go.maxNewTokens = a.maxNewTokens;
    go.sampling = a.sampling;
    go.stopStrings = a.stop;
    go.useCache = !a.noCache;
    if (a.ignoreEos)
        go.stopIds = {-1}; // no token id is -1: only the limits and stop strings end it
    const auto r = engine::generate(decoder, tok, prompt, go, [](const engine::TokenPiece& p) {
        writeRecord(protocol::toJson(protocol::GenTokenRecord {p.index, p.id, p.text}));
    });
    protocol::GenSummaryRecord s;
    s.tokens = static_cast<int64_t>(r.ids.size());
    s.promptTokens = r.promptTokens;
    s.prefillSec = r.prefillSec;
    s.decodeSec = r.decodeSec;
    s.prefillTokensPerSec = r.prefillTokensPerSec();
    s.decodeTokensPerSec = r.decodeTokensPerSec();
    s.stopReason = r.stopReason;
    s.text = r.text;
    s.tail = r.tail;
    writeRecord(protocol::toJson(s));
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    auto* cmd = app.add_subcommand("generate",
        "Generate text from a model folder, a run or a checkpoint (KV cache; JSON lines on "
        "stdout)");
    cmd->add_option("--model", a->model,
        "Hugging Face model folder, or a run folder (its exported model or newest checkpoint)");
    cmd->add_option("--checkpoint", a->checkpoint,
        "Checkpoint folder (RUN/checkpoints/step-N) or a run folder (its newest checkpoint)");
    cmd->add_option(
        "--tokenizer", a->tokenizer, "Folder with tokenizer.json (default: the model's)");
    cmd->add_option("--prompt", a->prompt, "Prompt text (default: empty, i.e. BOS alone)");
    cmd->add_option("--prompt-file", a->promptFile, "Read the prompt from a file");
    cmd->add_flag("--chat", a->chat, "Render the prompt as a user turn of the chat template");
    cmd->add_option("--system", a->system, "With --chat: a system prompt");
    cmd->add_option("--chat-template", a->chatTemplate,
        "With --chat: llama3, chatml or llama2 (default: from tokenizer_config.json)");
    cmd->add_option("--max-new-tokens", a->maxNewTokens, "Token limit (default 128)");
    cmd->add_option("--temperature", a->sampling.temperature, "0 = greedy (default)");
    cmd->add_option("--top-k", a->sampling.topK, "Keep the k most likely tokens (0 = all)");
    cmd->add_option("--top-p", a->sampling.topP, "Nucleus: keep mass >= p (default 1)");
    cmd->add_option("--min-p", a->sampling.minP, "Drop tokens below p * the top probability");
    cmd->add_option("--repetition-penalty", a->sampling.repetitionPenalty, "1 = none (default)");
    cmd->add_option("--seed", a->sampling.seed, "Sampling seed (default 0)");
    cmd->add_option("--stop", a->stop, "Stop string (repeatable)");
    cmd->add_option("--dtype", a->dtype, "fp32 (default) or bf16");
    cmd->add_option("--device", a->device, "cpu (default) or cuda[:N]");
    cmd->add_flag("--truncate", a->truncate,
        "Keep the end of a prompt longer than the context instead of failing");
    cmd->add_flag("--ignore-eos", a->ignoreEos,
        "Do not stop at EOS or end-of-turn tokens (fixed-length runs, benchmarks)");
    cmd->add_flag("--no-kv-cache", a->noCache, "Recompute the full forward every step (reference)");
    cmd->add_option("--threads", a->threads, "Intra-op threads (default: all cores)");
    cmd->add_option("--max-memory-mib", a->maxMemoryMiB,
        "Refuse models whose weights + KV cache exceed this (default: available host memory)");
    cmd->callback([a] { runGenerate(*a); });
});

} // namespace

} // namespace shard::worker
