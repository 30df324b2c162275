// Generation: the KV-cache decoder against the full forward (every step's logits, and greedy
// tokens) on tiny presets and variants (GQA, q/k/v biases, q/k norms, sliding window) and on the
// real stories260k model; the samplers' statistics on a fixed logits vector; seeds; stop strings;
// chat prompts; and `shard-worker generate` as a process (records, errors, a checkpoint).
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <sys/wait.h>

#include "core/generate/generation.h"
#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "engine_test_util.h"
#include "plan/model_spec.h"
#include "protocol/records.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/demo_tokenizer.h"
#include "tokenizer/tokenizer.h"

using namespace shard;
using engine::Decoder;
using engine::LlamaModel;

namespace {

std::string g_dir;

const std::string kStories = std::string(SHARD_SOURCE_DIR) + "/../shared/models/stories260k";

std::string slurp(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

int runCommand(const std::string& cmd, std::string* out, std::string* err)
{
    const std::string o = g_dir + "/stdout.txt", e = g_dir + "/stderr.txt";
    const int rc = std::system((cmd + " >" + o + " 2>" + e).c_str());
    *out = slurp(o);
    *err = slurp(e);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

std::unique_ptr<LlamaModel> randomModel(const plan::ModelSpec& spec, uint64_t seed)
{
    auto m = std::make_unique<LlamaModel>(spec);
    m->materialize(at::kFloat);
    m->initRandom(seed);
    // Larger weights than the HF init so that the logits are far from uniform.
    at::NoGradGuard g;
    for (auto* p : m->params())
        if (!p->info.isNormOrBias)
            p->value.mul_(4.0);
        else if (p->info.name.find("bias") != std::string::npos)
            p->value.normal_(0.0, 0.1);
    return m;
}

at::Tensor idsOf(const std::vector<int64_t>& v)
{
    return at::tensor(v, at::kLong).unsqueeze(0);
}

// Cached logits of a prompt of `prompt` tokens then `steps` single tokens against the full
// forward of the same sequence: the largest absolute difference.
double cachedVsFull(const LlamaModel& m, at::ScalarType dtype, int64_t prompt, int64_t steps)
{
    const auto access = engine::modelWeights(m);
    std::vector<int64_t> seq;
    for (int64_t i = 0; i < prompt + steps; ++i)
        seq.push_back((i * 37 + 11) % m.spec().vocabSize);
    const at::Tensor full
        = Decoder::fullForward(m, access, dtype, idsOf(seq)).to(at::kFloat).squeeze(0);
    Decoder d(m, access, dtype, at::kCPU, prompt + steps);
    std::vector<at::Tensor> parts;
    parts.push_back(
        d.forward(idsOf({seq.begin(), seq.begin() + prompt})).to(at::kFloat).squeeze(0));
    for (int64_t i = prompt; i < prompt + steps; ++i)
        parts.push_back(d.forward(idsOf({seq[i]})).to(at::kFloat).squeeze(0));
    T_CHECK(d.position() == prompt + steps);
    return (at::cat(parts, 0) - full).abs().max().item<double>();
}

engine::GenerateResult greedyOf(const LlamaModel& m, const tokenizer::Tokenizer& tok,
    const std::vector<int32_t>& prompt, int64_t n, bool cache, at::ScalarType dtype = at::kFloat)
{
    Decoder d(m, engine::modelWeights(m), dtype, at::kCPU, prompt.size() + n);
    engine::GenerateOptions o;
    o.maxNewTokens = n;
    o.useCache = cache;
    o.stopIds = {-1}; // never stop early: compare the whole length
    return engine::generate(d, tok, prompt, o);
}

void testTinyPresets()
{
    struct Variant {
        const char* name;
        std::function<void(plan::ModelSpec&)> change;
    };
    const std::vector<Variant> variants = {{"tiny-1m", [](plan::ModelSpec&) {}},
        {"tiny-1m gqa + biases",
            [](plan::ModelSpec& s) {
                s.numKvHeads = 2;
                s.attentionBias = true;
                s.outputBias = true;
            }},
        {"tiny-1m qk-norm", [](plan::ModelSpec& s) { s.qkNorm = true; }},
        {"tiny-1m sliding window 5", [](plan::ModelSpec& s) { s.slidingWindow = 5; }},
        {"tiny-15m", [](plan::ModelSpec&) {}}};
    const std::string tokDir = g_dir + "/demo-tok";
    for (const auto& v : variants) {
        auto spec = *plan::findPreset(std::string(v.name).substr(0, std::string(v.name).find(' ')));
        v.change(spec);
        const auto m = randomModel(spec, 3);
        const double diff = cachedVsFull(*m, at::kFloat, 7, 12);
        T_CHECK_MSG(
            diff < 1e-4, std::string(v.name) + ": cached logits differ by " + std::to_string(diff));
        // bf16 matmuls are slow on this CPU LibTorch: the small presets only.
        const double diffBf16
            = spec.hiddenSize <= 128 ? cachedVsFull(*m, at::kBFloat16, 7, 12) : 0.0;
        T_CHECK_MSG(diffBf16 < 0.5,
            std::string(v.name) + ": bf16 cached logits differ by " + std::to_string(diffBf16));
        tokenizer::writeDemoTokenizer(tokDir, static_cast<int>(spec.vocabSize));
        const auto tok = tokenizer::Tokenizer::fromFolder(tokDir);
        const std::vector<int32_t> prompt = {1, 5, 9, 13};
        const auto a = greedyOf(*m, tok, prompt, 24, true);
        const auto b = greedyOf(*m, tok, prompt, 24, false);
        T_CHECK_MSG(a.ids == b.ids, std::string(v.name) + ": KV-cache greedy != full greedy");
        T_CHECK(a.ids.size() == 24 && a.stopReason == "max_tokens");
        std::set<int32_t> distinct(a.ids.begin(), a.ids.end());
        T_CHECK_MSG(distinct.size() > 1, std::string(v.name) + ": degenerate greedy output");
        std::printf("%s: max |cached - full| %.2e (fp32), %.2e (bf16); greedy equal\n", v.name,
            diff, diffBf16);
    }
    // Past the capacity: a clear error.
    const auto m = randomModel(*plan::findPreset("tiny-1m"), 1);
    Decoder d(*m, engine::modelWeights(*m), at::kFloat, at::kCPU, 4);
    d.forward(idsOf({1, 2, 3}));
    EXPECT_THROW_WITH(d.forward(idsOf({4, 5})), "holds 4 positions");
}

void testSamplers()
{
    using engine::SamplingOptions;
    const at::Tensor logits = at::tensor(
        std::vector<float> {1.0f, 3.0f, 0.5f, 2.5f, -1.0f, 2.0f, 0.0f, 1.5f, -2.0f, 0.2f});
    const std::vector<int64_t> byRank = {1, 3, 5, 7, 0, 2, 9, 6, 4, 8};
    // Temperature 0 is argmax, whatever the seed.
    for (uint64_t seed : {0, 1, 2}) {
        SamplingOptions o;
        o.seed = seed;
        T_CHECK(engine::Sampler(o).next(logits, {}) == 1);
    }
    auto draws = [&](SamplingOptions o, int n) {
        engine::Sampler s(o);
        std::map<int32_t, int> count;
        for (int i = 0; i < n; ++i)
            ++count[s.next(logits, {})];
        return count;
    };
    // Top-k never leaves the top k.
    {
        SamplingOptions o;
        o.temperature = 1.5;
        o.topK = 3;
        o.seed = 7;
        const auto c = draws(o, 3000);
        for (const auto& [id, n] : c)
            T_CHECK_MSG(id == 1 || id == 3 || id == 5, "top-k drew " + std::to_string(id));
        T_CHECK(c.size() == 3);
    }
    // Top-p: the kept set is the smallest prefix (by probability) whose mass reaches p.
    for (double p : {0.3, 0.6, 0.9}) {
        SamplingOptions o;
        o.temperature = 1.0;
        o.topP = p;
        const at::Tensor full = at::softmax(logits, 0);
        const at::Tensor probs = engine::samplingProbs(logits, o, {});
        double mass = 0.0, massWithoutLast = 0.0;
        int kept = 0;
        for (int64_t id : byRank)
            if (probs[id].item<double>() > 0) {
                massWithoutLast = mass;
                mass += full[id].item<double>();
                ++kept;
            }
        T_CHECK_MSG(mass >= p - 1e-6 && massWithoutLast < p, "top-p " + std::to_string(p));
        for (int i = 0; i < kept; ++i) // a prefix of the ranking
            T_CHECK(probs[byRank[i]].item<double>() > 0);
        T_CHECK(std::abs(probs.sum().item<double>() - 1.0) < 1e-5);
        SamplingOptions d = o;
        d.seed = 3;
        for (const auto& [id, n] : draws(d, 2000))
            T_CHECK(probs[id].item<double>() > 0);
    }
    // Min-p: tokens below min_p * the top probability are dropped.
    {
        SamplingOptions o;
        o.temperature = 1.0;
        o.minP = 0.3;
        const at::Tensor full = at::softmax(logits, 0);
        const at::Tensor probs = engine::samplingProbs(logits, o, {});
        const double top = full.max().item<double>();
        for (int64_t id = 0; id < 10; ++id)
            T_CHECK((probs[id].item<double>() > 0) == (full[id].item<double>() >= 0.3 * top));
    }
    // Plain sampling follows softmax(logits / T): frequencies within 0.02 over 20000 draws.
    {
        SamplingOptions o;
        o.temperature = 0.8;
        o.seed = 11;
        const at::Tensor want = at::softmax(logits / 0.8, 0);
        const auto c = draws(o, 20000);
        for (int64_t id = 0; id < 10; ++id) {
            const double got = c.count(id) ? c.at(id) / 20000.0 : 0.0;
            T_CHECK_MSG(std::abs(got - want[id].item<double>()) < 0.02,
                "frequency of " + std::to_string(id) + ": " + std::to_string(got));
        }
    }
    // Seeds reproduce; another seed gives another sequence.
    {
        SamplingOptions o;
        o.temperature = 1.0;
        o.seed = 42;
        auto seq = [&](uint64_t seed) {
            SamplingOptions s = o;
            s.seed = seed;
            engine::Sampler sampler(s);
            std::vector<int32_t> out;
            for (int i = 0; i < 64; ++i)
                out.push_back(sampler.next(logits, {}));
            return out;
        };
        T_CHECK(seq(42) == seq(42));
        T_CHECK(seq(42) != seq(43));
    }
    // Repetition penalty: a positive logit is divided, a negative one multiplied.
    {
        SamplingOptions o;
        o.repetitionPenalty = 2.0;
        const at::Tensor l = engine::penalizedLogits(logits, o, {1, 4, 1});
        T_CHECK(std::abs(l[1].item<double>() - 1.5) < 1e-6);
        T_CHECK(std::abs(l[4].item<double>() + 2.0) < 1e-6);
        T_CHECK(std::abs(l[3].item<double>() - 2.5) < 1e-6);
        T_CHECK(engine::Sampler(o).next(logits, {1}) == 3);
    }
    SamplingOptions bad;
    bad.topP = 0.0;
    EXPECT_THROW_WITH(engine::validate(bad), "--top-p");
    bad = {};
    bad.temperature = -1;
    EXPECT_THROW_WITH(engine::validate(bad), "--temperature");
}

// Letters, spaces and punctuation only, with some of the commonest words of the stories.
bool looksLikeEnglish(const std::string& text)
{
    int words = 0;
    for (const char* w : {" the ", " was ", " a ", " and ", " to ", " She ", " He ", ". "})
        words += text.find(w) != std::string::npos;
    for (unsigned char c : text)
        if (!(std::isalnum(c) || std::isspace(c) || std::strchr(".,!?'\"-:;", c)))
            return false;
    return words >= 3;
}

void testStories260k()
{
    if (!std::filesystem::exists(kStories + "/model.safetensors")) {
        std::printf("SKIP stories260k: %s is absent\n", kStories.c_str());
        return;
    }
    const auto folder = engine::openHfModelFolder(kStories);
    LlamaModel m(folder.spec);
    m.materialize(at::kFloat);
    m.load(*folder.weights);
    const auto tok = tokenizer::Tokenizer::fromFolder(kStories);
    const double diff = cachedVsFull(m, at::kFloat, 9, 40);
    T_CHECK_MSG(diff < 1e-4, "stories260k: cached logits differ by " + std::to_string(diff));
    const std::vector<int32_t> bos = tok.encode("", true);
    T_CHECK(bos.size() == 1 && bos[0] == tok.bosId());
    const auto a = greedyOf(m, tok, bos, 120, true);
    const auto b = greedyOf(m, tok, bos, 120, false);
    T_CHECK_MSG(a.ids == b.ids, "stories260k: KV-cache greedy != full greedy");
    T_CHECK(a.text == tok.decode(a.ids, true));
    T_CHECK_MSG(looksLikeEnglish(a.text), "stories260k greedy is not fluent: " + a.text);
    std::printf("stories260k greedy from BOS: %s\n", a.text.c_str());
    // bf16 runs the same path.
    const auto c = greedyOf(m, tok, bos, 40, true, at::kBFloat16);
    T_CHECK(c.ids.size() == 40);

    // Stop strings: the text ends before the first match; one that never matches is fine.
    Decoder d(m, engine::modelWeights(m), at::kFloat, at::kCPU, 200);
    engine::GenerateOptions o;
    o.maxNewTokens = 120;
    o.stopIds = {-1};
    o.stopStrings = {"."};
    std::string streamed;
    const auto s = engine::generate(
        d, tok, bos, o, [&](const engine::TokenPiece& p) { streamed += p.text; });
    T_CHECK(s.stopReason == "stop_string");
    T_CHECK(s.text.find('.') == std::string::npos && !s.text.empty());
    T_CHECK(a.text.rfind(s.text, 0) == 0 && a.text[s.text.size()] == '.');
    T_CHECK(streamed == s.text);
    o.stopStrings = {"zebra-xylophone", "ran. The"};
    o.maxNewTokens = 60;
    const auto never = engine::generate(d, tok, bos, o);
    T_CHECK(never.stopReason == "max_tokens" || never.stopReason == "stop_string");
    T_CHECK(never.ids.size() <= 60);
    // A stop string spanning tokens: held back while it may still complete.
    const std::string phrase = a.text.substr(10, 12);
    o.stopStrings = {phrase};
    o.maxNewTokens = 120;
    std::string pieces;
    const auto span = engine::generate(d, tok, bos, o, [&](const engine::TokenPiece& p) {
        pieces += p.text;
        T_CHECK(pieces.find(phrase) == std::string::npos);
    });
    T_CHECK(span.stopReason == "stop_string" && span.text == a.text.substr(0, a.text.find(phrase)));
    // EOS ends generation (the stories end with </s>); a sampled run with a seed reproduces.
    o = {};
    o.maxNewTokens = 150;
    o.sampling.temperature = 0.9;
    o.sampling.topP = 0.95;
    o.sampling.seed = 5;
    Decoder big(m, engine::modelWeights(m), at::kFloat, at::kCPU, 512);
    const auto r1 = engine::generate(big, tok, bos, o);
    const auto r2 = engine::generate(big, tok, bos, o);
    T_CHECK(r1.ids == r2.ids && !r1.ids.empty());
    o.sampling.seed = 6;
    T_CHECK(engine::generate(big, tok, bos, o).ids != r1.ids);
    T_CHECK_MSG(r1.stopReason == "eos" || r1.stopReason == "max_tokens", r1.stopReason);

    // Chat prompts: the Llama 2 template (this tokenizer's class), as the tokenizer tests expect.
    engine::PromptOptions po;
    po.chat = true;
    po.system = "Be brief.";
    po.text = "Hi";
    const std::string rendered = "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]";
    std::string joined;
    for (const auto& seg : tokenizer::renderChat(tokenizer::ChatTemplateKind::Llama2,
             {{"system", "Be brief."}, {"user", "Hi"}}, tok, true))
        joined += seg.text;
    T_CHECK_MSG(joined == rendered, "llama2 generation prompt: " + joined);
    T_CHECK(engine::promptIds(tok, po) == tok.encode(rendered, false));
    T_CHECK(engine::promptIds(tok, po).front() == tok.bosId());
    po.chatTemplate = "chatml";
    T_CHECK(tok.decode(engine::promptIds(tok, po)).find("<|im_start|>assistant\n")
        != std::string::npos);
}

void testWorker()
{
    const std::string worker = SHARD_WORKER;
    std::string out, err;
    const std::string model = g_dir + "/tiny";
    T_CHECK(
        runCommand(worker + " init-model --preset tiny-1m --out " + model + " --seed 2", &out, &err)
        == 0);
    auto run = [&](const std::string& args) {
        return runCommand(worker + " generate " + args, &out, &err);
    };
    auto records = [&]() {
        std::vector<nlohmann::json> v;
        std::istringstream in(out);
        for (std::string line; std::getline(in, line);)
            v.push_back(nlohmann::json::parse(line));
        return v;
    };
    // Records: model, tokens, summary; pieces + tail = text; --no-kv-cache gives the same ids.
    T_CHECK(run("--model " + model + " --prompt 'ab' --max-new-tokens 16") == 0);
    auto recs = records();
    T_CHECK_MSG(recs.size() == 18, "records: " + out);
    std::vector<int32_t> ids;
    std::string pieces;
    if (recs.size() == 18) {
        T_CHECK(protocol::genModelFromJson(recs[0]).params > 0);
        for (size_t i = 1; i + 1 < recs.size(); ++i) {
            const auto t = protocol::genTokenFromJson(recs[i]);
            T_CHECK(t.index == static_cast<int64_t>(i - 1));
            ids.push_back(t.id);
            pieces += t.text;
        }
        const auto s = protocol::genSummaryFromJson(recs.back());
        T_CHECK(s.tokens == 16 && s.stopReason == "max_tokens" && s.promptTokens > 0);
        T_CHECK(pieces + s.tail == s.text);
        T_CHECK(s.decodeTokensPerSec > 0 && s.prefillTokensPerSec > 0);
    }
    T_CHECK(run("--model " + model + " --prompt 'ab' --max-new-tokens 16 --no-kv-cache") == 0);
    std::vector<int32_t> ref;
    for (const auto& j : records())
        if (j["type"] == "token")
            ref.push_back(j["id"].get<int32_t>());
    T_CHECK(ref == ids);
    // bf16 runs.
    T_CHECK(run("--model " + model + " --dtype bf16 --max-new-tokens 4") == 0);
    T_CHECK(records().back()["type"] == "summary");

    // Bad input: clear errors.
    T_CHECK(run("--model " + g_dir + "/nowhere") == 1);
    T_CHECK_MSG(err.find("no such folder") != std::string::npos, err);
    const std::string noTok = g_dir + "/no-tokenizer";
    std::filesystem::create_directories(noTok);
    std::filesystem::copy_file(model + "/config.json", noTok + "/config.json");
    std::filesystem::copy_file(model + "/model.safetensors", noTok + "/model.safetensors");
    T_CHECK(run("--model " + noTok) == 1);
    T_CHECK_MSG(err.find("has no tokenizer") != std::string::npos, err);
    std::string longPrompt;
    for (int i = 0; i < 1100; ++i)
        longPrompt += "a ";
    std::ofstream(g_dir + "/long.txt") << longPrompt;
    T_CHECK(run("--model " + model + " --prompt-file " + g_dir + "/long.txt") == 1);
    T_CHECK_MSG(err.find("context is 1024") != std::string::npos
            && err.find("--truncate") != std::string::npos,
        err);
    T_CHECK(run("--model " + model + " --prompt-file " + g_dir
                + "/long.txt --truncate --max-new-tokens 8")
        == 0);
    T_CHECK(records().back()["stop_reason"] == "max_tokens");
    T_CHECK(records().back()["prompt_tokens"].get<int64_t>() < 1024);
    T_CHECK(run("--model " + model + " --max-memory-mib 1") == 1);
    T_CHECK_MSG(
        err.find("needs") != std::string::npos && err.find("GiB") != std::string::npos, err);
    // A model far larger than this host: refused before any weight is read, with its size.
    const std::string huge = g_dir + "/huge";
    std::filesystem::create_directories(huge);
    plan::ModelSpec big = *plan::findPreset("llama-2-70b");
    big.maxPositionEmbeddings = 4096;
    engine::writeHfConfigAndTokenizer(huge, big, model);
    T_CHECK(run("--model " + huge + " --max-memory-mib 20000") == 1);
    T_CHECK_MSG(
        err.find("needs 25") != std::string::npos || err.find("needs 2") != std::string::npos, err);
    T_CHECK(run("--model " + model + " --top-p 2") == 1);
    T_CHECK(err.find("--top-p") != std::string::npos);
}

// The greedy token ids of a `shard-worker generate` run (its stdout).
std::vector<int32_t> tokenIds(const std::string& out)
{
    std::vector<int32_t> ids;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j["type"] == "token")
            ids.push_back(protocol::genTokenFromJson(j).id);
    }
    return ids;
}

// Training writes sample events (one rank, and two ranks of zero3, TP2, PP2 and TP2 x PP2 in
// lockstep); a checkpoint and the run folder generate like the exported model.
void testTrainingSamplesAndCheckpoints()
{
    const std::string worker = SHARD_WORKER;
    std::string out, err;
    const std::string model = g_dir + "/tiny";
    {
        std::ofstream data(g_dir + "/copy.jsonl");
        uint32_t rng = 5;
        for (int i = 0; i < 64; ++i) {
            std::string ids = "1";
            for (int k = 0; k < 31; ++k) {
                rng = rng * 1664525u + 1013904223u;
                ids += ", " + std::to_string(10 + (rng >> 16) % 200);
            }
            data << "{\"input_ids\": [" << ids << "]}\n";
        }
        std::ofstream(g_dir + "/prompts.txt") << "ab\n\n{\"prompt\": \"ba\"}\n";
    }
    const std::string common = " --model " + model + " --data " + g_dir
        + "/copy.jsonl --steps 4 --seq-len 32 --lr 1e-3 --sample-every 2 --sample-max-tokens 6";
    const std::string prompts = " --sample-prompts " + g_dir + "/prompts.txt";
    auto samplesOf = [&](const std::string& run) {
        std::vector<protocol::SampleEvent> v;
        std::ifstream in(run + "/events.jsonl");
        for (std::string line; std::getline(in, line);)
            if (auto s
                = protocol::sampleFromEvent(protocol::eventFromJson(nlohmann::json::parse(line))))
                v.push_back(*s);
        return v;
    };
    const std::string one = g_dir + "/run1";
    T_CHECK_MSG(runCommand(worker + " train" + common + prompts
                        + " --micro-batch 2 --checkpoint-every 4 --out " + one,
                    &out, &err)
            == 0,
        err);
    const auto s1 = samplesOf(one);
    T_CHECK_MSG(s1.size() == 4, "sample events: " + std::to_string(s1.size()));
    if (s1.size() == 4) {
        T_CHECK(s1[0].step == 2 && s1[0].prompt == "ab" && s1[1].prompt == "ba");
        T_CHECK(s1[3].step == 4);
    }
    // Two ranks (zero3 gathers each block inside the decode): the same samples, no deadlock.
    const std::string two = g_dir + "/run2";
    T_CHECK_MSG(runCommand(worker + " launch --nproc-per-node 2 -- train" + common + prompts
                        + " --micro-batch 1 --strategy zero3 --nproc-per-node 2 --out " + two,
                    &out, &err)
            == 0,
        err);
    const auto s2 = samplesOf(two);
    T_CHECK_MSG(s2.size() == 4, "2-rank sample events: " + std::to_string(s2.size()));
    // Tensor parallel with sequence parallel (each TP rank gathers every unit's parts and
    // decodes the whole model in lockstep): the 1-rank run's samples.
    const std::string tp = g_dir + "/run-tp2";
    T_CHECK_MSG(runCommand(worker + " launch --nproc-per-node 2 -- train" + common + prompts
                        + " --micro-batch 2 --tensor-parallel 2 --sequence-parallel "
                          "--nproc-per-node 2 --out "
                        + tp,
                    &out, &err)
            == 0,
        err);
    const auto sTp = samplesOf(tp);
    T_CHECK_MSG(sTp.size() == s1.size(), "TP2 sample events: " + std::to_string(sTp.size()));
    for (size_t i = 0; i < std::min(sTp.size(), s1.size()); ++i)
        T_CHECK_MSG(sTp[i].step == s1[i].step && sTp[i].completion == s1[i].completion,
            "TP2 sample " + std::to_string(i) + ": '" + sTp[i].completion + "' vs one rank's '"
                + s1[i].completion + "'");
    // Pipeline parallel, alone and with tensor parallel: each stage sends the weights it stores
    // and every rank decodes the whole model in lockstep: the 1-rank run's samples.
    for (const auto& [name, ranks, layout] : {std::tuple {"PP2", 2, " --pipeline-parallel 2"},
             std::tuple {"TP2 x PP2", 4, " --pipeline-parallel 2 --tensor-parallel 2"}}) {
        const std::string run = g_dir + "/run-" + std::to_string(ranks);
        const std::string n = std::to_string(ranks);
        T_CHECK_MSG(
            runCommand(worker + " launch --nproc-per-node " + n + " -- train" + common + prompts
                    + " --micro-batch 2" + layout + " --nproc-per-node " + n + " --out " + run,
                &out, &err)
                == 0,
            err);
        const auto got = samplesOf(run);
        T_CHECK_MSG(got.size() == s1.size(),
            std::string(name) + " sample events: " + std::to_string(got.size()));
        for (size_t i = 0; i < std::min(got.size(), s1.size()); ++i)
            T_CHECK_MSG(got[i].step == s1[i].step && got[i].completion == s1[i].completion,
                std::string(name) + " sample " + std::to_string(i) + ": '" + got[i].completion
                    + "' vs one rank's '" + s1[i].completion + "'");
    }
    // A tied embedding at TP2 x PP2: the last stage's copy is not gathered, the first stage's
    // whole table replaces it; the 1-rank run's samples.
    {
        const std::string cfg = g_dir + "/tied-config";
        std::filesystem::create_directories(cfg);
        std::ifstream in(model + "/config.json");
        nlohmann::json c = nlohmann::json::parse(in);
        c["tie_word_embeddings"] = true;
        std::ofstream(cfg + "/config.json") << c.dump(2);
        const std::string tied = g_dir + "/tied";
        T_CHECK(runCommand(worker + " init-model --preset " + cfg + " --out " + tied + " --seed 2",
                    &out, &err)
            == 0);
        const std::string tiedArgs = " --model " + tied + " --data " + g_dir
            + "/copy.jsonl --steps 4 --seq-len 32 --lr 1e-3 --sample-every 2 --sample-max-tokens 6"
            + prompts + " --micro-batch 2 --out ";
        T_CHECK_MSG(
            runCommand(worker + " train" + tiedArgs + g_dir + "/tied-1", &out, &err) == 0, err);
        T_CHECK_MSG(runCommand(worker
                            + " launch --nproc-per-node 4 -- train --pipeline-parallel 2 "
                              "--tensor-parallel 2"
                            + tiedArgs + g_dir + "/tied-4",
                        &out, &err)
                == 0,
            err);
        const auto want = samplesOf(g_dir + "/tied-1");
        const auto got = samplesOf(g_dir + "/tied-4");
        T_CHECK_MSG(want.size() == 4 && got.size() == want.size(),
            "tied sample events: " + std::to_string(got.size()));
        for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
            T_CHECK_MSG(got[i].step == want[i].step && got[i].completion == want[i].completion,
                "tied TP2 x PP2 sample " + std::to_string(i) + ": '" + got[i].completion
                    + "' vs one rank's '" + want[i].completion + "'");
    }
    // A bad prompts file is refused before training starts.
    T_CHECK(runCommand(worker + " train" + common + " --sample-prompts " + g_dir
                    + "/none.txt --out " + g_dir + "/run3",
                &out, &err)
        == 1);
    T_CHECK_MSG(err.find("none.txt") != std::string::npos, err);

    // The checkpoint, the run folder and the exported model give the same greedy tokens.
    const std::string args = " --prompt ab --max-new-tokens 12 --ignore-eos";
    T_CHECK(runCommand(worker + " generate --model " + one + "/model" + args, &out, &err) == 0);
    const auto exported = tokenIds(out);
    T_CHECK(exported.size() == 12);
    T_CHECK_MSG(runCommand(worker + " generate --checkpoint " + one + "/checkpoints/step-4" + args,
                    &out, &err)
            == 0,
        err);
    T_CHECK(tokenIds(out) == exported);
    T_CHECK(runCommand(worker + " generate --model " + one + args, &out, &err) == 0);
    T_CHECK(tokenIds(out) == exported);
    T_CHECK(runCommand(worker + " generate --model " + model + args, &out, &err) == 0);
    T_CHECK_MSG(tokenIds(out) != exported, "training changed nothing?");
}

} // namespace

int main()
{
    g_dir = test::tempDir("tst_generate");
    at::set_num_threads(1);
    testSamplers();
    testTinyPresets();
    testStories260k();
    testWorker();
    testTrainingSamplesAndCheckpoints();
    if (test::failures() == 0)
        std::filesystem::remove_all(g_dir);
    return test::finish("tst_generate");
}
