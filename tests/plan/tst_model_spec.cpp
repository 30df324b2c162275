// Model specs: presets, exact parameter counts and names, config.json parsing, writing and
// errors. Expected values are published counts or written out by hand below.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "check.h"
#include "plan/model_spec.h"

using namespace shard::plan;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

ModelSpec preset(const std::string& name)
{
    auto p = findPreset(name);
    if (!p) {
        std::fprintf(stderr, "missing preset %s\n", name.c_str());
        std::exit(1);
    }
    return *p;
}

// Dense Llama-family count written out as a closed formula (independent of parameterTable).
int64_t denseCount(int64_t V, int64_t h, int64_t I, int64_t L, int64_t nh, int64_t nkv, int64_t hd,
    bool tied, bool qkvBias, bool qkNorm)
{
    int64_t q = nh * hd, kv = nkv * hd;
    int64_t attn = h * q + 2 * h * kv + q * h + (qkvBias ? q + 2 * kv : 0) + (qkNorm ? 2 * hd : 0);
    int64_t mlp = 3 * h * I;
    int64_t perLayer = attn + mlp + 2 * h;
    return V * h * (tied ? 1 : 2) + L * perLayer + h;
}

void testPublishedCounts()
{
    // The three counts the design names, plus published model-card counts.
    CHECK_EQ(parameterCount(preset("llama-2-7b")), int64_t(6738415616));
    CHECK_EQ(parameterCount(preset("llama-3-8b")), int64_t(8030261248));
    CHECK_EQ(parameterCount(preset("qwen2.5-7b")), int64_t(7615616512));
    CHECK_EQ(parameterCount(preset("llama-3.1-8b")), int64_t(8030261248));
    CHECK_EQ(parameterCount(preset("llama-2-13b")), int64_t(13015864320));
    CHECK_EQ(parameterCount(preset("llama-2-70b")), int64_t(68976648192));
    CHECK_EQ(parameterCount(preset("llama-3.1-70b")), int64_t(70553706496));
    CHECK_EQ(parameterCount(preset("llama-3.1-405b")), int64_t(405853388800));
    CHECK_EQ(parameterCount(preset("mistral-7b")), int64_t(7241732096));
    CHECK_EQ(parameterCount(preset("qwen2.5-1.5b")), int64_t(1543714304));
}

void testFormulaCounts()
{
    struct Row {
        const char* name;
        int64_t V, h, I, L, nh, nkv, hd;
        bool tied, bias, qkNorm;
    };
    const Row rows[] = {
        {"qwen2.5-14b", 152064, 5120, 13824, 48, 40, 8, 128, false, true, false},
        {"qwen2.5-72b", 152064, 8192, 29568, 80, 64, 8, 128, false, true, false},
        {"qwen3-8b", 151936, 4096, 12288, 36, 32, 8, 128, false, false, true},
        {"tiny-1m", 512, 128, 384, 4, 4, 4, 32, false, false, false},
        {"tiny-15m", 4096, 384, 1024, 8, 6, 2, 64, false, false, false},
        {"tiny-100m", 16384, 768, 2048, 12, 12, 4, 64, false, false, false},
    };
    for (const Row& r : rows) {
        ModelSpec s = preset(r.name);
        CHECK_EQ(parameterCount(s),
            denseCount(r.V, r.h, r.I, r.L, r.nh, r.nkv, r.hd, r.tied, r.bias, r.qkNorm));
        CHECK_EQ(s.vocabSize, r.V);
        CHECK_EQ(s.headDim, r.hd);
        CHECK_EQ(activeParameterCount(s), parameterCount(s));
    }
    // Tiny presets: sizes near their names, vocabularies of the demo tokenizer.
    int64_t n1 = parameterCount(preset("tiny-1m")), n15 = parameterCount(preset("tiny-15m")),
            n100 = parameterCount(preset("tiny-100m"));
    CHECK(n1 > 800000 && n1 < 1200000);
    CHECK(n15 > 13000000 && n15 < 17000000);
    CHECK(n100 > 90000000 && n100 < 110000000);
    for (const char* t : {"tiny-1m", "tiny-15m", "tiny-100m"}) {
        ModelSpec s = preset(t);
        CHECK_EQ(s.modelType, std::string("llama"));
        CHECK(s.maxPositionEmbeddings == 1024 || s.maxPositionEmbeddings == 2048);
    }

    // DeepSeek-V3 (MLA + MoE), written out: 61 layers, first 3 dense, 256 routed experts.
    int64_t h = 7168, V = 129280;
    int64_t mla = 1536 * h + 1536 + 128 * 192 * 1536 + (512 + 64) * h + 512 + 128 * 256 * 512
        + h * 128 * 128;
    int64_t dense = 3 * h * 18432, expert = 3 * h * 2048;
    int64_t moe = 256 * h + 256 + 256 * expert + expert;
    int64_t total = 2 * V * h + h + 3 * (mla + dense + 2 * h) + 58 * (mla + moe + 2 * h);
    ModelSpec ds = preset("deepseek-v3");
    CHECK_EQ(parameterCount(ds), total);
    CHECK(total > int64_t(670e9) && total < int64_t(672e9)); // "671B"
    int64_t active = total - 58 * (256 - 8) * expert;
    CHECK_EQ(activeParameterCount(ds), active);
    CHECK(active > int64_t(36e9) && active < int64_t(38e9)); // "37B activated"
}

void testTableNames()
{
    auto t = parameterTable(preset("llama-2-7b"));
    CHECK_EQ(t.size(), size_t(1 + 32 * 9 + 2));
    CHECK_EQ(t[0].name, std::string("model.embed_tokens.weight"));
    CHECK(t[0].shape == std::vector<int64_t>({32000, 4096}));
    CHECK_EQ(t[1].name, std::string("model.layers.0.self_attn.q_proj.weight"));
    CHECK_EQ(t[2].name, std::string("model.layers.0.self_attn.k_proj.weight"));
    CHECK_EQ(t[3].name, std::string("model.layers.0.self_attn.v_proj.weight"));
    CHECK_EQ(t[4].name, std::string("model.layers.0.self_attn.o_proj.weight"));
    CHECK_EQ(t[5].name, std::string("model.layers.0.mlp.gate_proj.weight"));
    CHECK(t[5].shape == std::vector<int64_t>({11008, 4096}));
    CHECK_EQ(t[6].name, std::string("model.layers.0.mlp.up_proj.weight"));
    CHECK_EQ(t[7].name, std::string("model.layers.0.mlp.down_proj.weight"));
    CHECK(t[7].shape == std::vector<int64_t>({4096, 11008}));
    CHECK_EQ(t[8].name, std::string("model.layers.0.input_layernorm.weight"));
    CHECK(t[8].isNormOrBias);
    CHECK_EQ(t[9].name, std::string("model.layers.0.post_attention_layernorm.weight"));
    CHECK_EQ(t[8].layer, int64_t(0));
    CHECK_EQ(t[t.size() - 2].name, std::string("model.norm.weight"));
    CHECK_EQ(t.back().name, std::string("lm_head.weight"));
    CHECK_EQ(t.back().layer, int64_t(-1));

    // GQA shapes (Llama-3-8B: 8 kv heads of 128).
    std::map<std::string, std::vector<int64_t>> l3;
    for (auto& p : parameterTable(preset("llama-3-8b")))
        l3[p.name] = p.shape;
    CHECK(l3["model.layers.31.self_attn.k_proj.weight"] == std::vector<int64_t>({1024, 4096}));
    CHECK(l3["model.layers.31.self_attn.o_proj.weight"] == std::vector<int64_t>({4096, 4096}));

    // Qwen2: q/k/v bias, no o_proj bias; tied 1.5B has no lm_head.
    std::map<std::string, std::vector<int64_t>> q;
    for (auto& p : parameterTable(preset("qwen2.5-1.5b")))
        q[p.name] = p.shape;
    CHECK(q["model.layers.0.self_attn.q_proj.bias"] == std::vector<int64_t>({1536}));
    CHECK(q["model.layers.0.self_attn.k_proj.bias"] == std::vector<int64_t>({256}));
    CHECK(q["model.layers.0.self_attn.v_proj.bias"] == std::vector<int64_t>({256}));
    CHECK(q.count("model.layers.0.self_attn.o_proj.bias") == 0);
    CHECK(q.count("lm_head.weight") == 0);

    // Qwen3: per-head q/k norms of head_dim, q_proj rows = heads * head_dim.
    std::map<std::string, std::vector<int64_t>> q3;
    for (auto& p : parameterTable(preset("qwen3-8b")))
        q3[p.name] = p.shape;
    CHECK(q3["model.layers.5.self_attn.q_norm.weight"] == std::vector<int64_t>({128}));
    CHECK(q3["model.layers.5.self_attn.k_norm.weight"] == std::vector<int64_t>({128}));

    // Every name unique.
    for (const char* name : {"llama-2-7b", "qwen3-8b", "deepseek-v3"}) {
        auto tab = parameterTable(preset(name));
        std::map<std::string, int> seen;
        for (auto& p : tab)
            CHECK_EQ(++seen[p.name], 1);
    }
}

// Hugging Face's own config.json files (abridged only of fields the engine does not read).
const char* kLlama31Config = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

const char* kQwen3Config = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

const char* kQwen25Config = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
  "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072,
  "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 28,
  "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 152064})";

void testParse()
{
    ModelSpec l = parseHfConfig(json::parse(kLlama31Config), "x");
    CHECK_EQ(l.name, std::string("x"));
    CHECK_EQ(l.numKvHeads, int64_t(8));
    CHECK_EQ(l.headDim, int64_t(128));
    CHECK_EQ(l.ropeScaling.type, std::string("llama3"));
    CHECK_EQ(l.ropeScaling.factor, 8.0);
    CHECK_EQ(l.ropeScaling.originalMaxPositionEmbeddings, int64_t(8192));
    CHECK_EQ(l.eosTokenId, int64_t(128001));
    CHECK_EQ(l.ropeTheta, 500000.0);
    CHECK_EQ(parameterCount(l), int64_t(8030261248));

    ModelSpec q3 = parseHfConfig(json::parse(kQwen3Config));
    CHECK(q3.qkNorm);
    CHECK(q3.tieWordEmbeddings);
    CHECK_EQ(q3.headDim, int64_t(128)); // not hidden/heads = 64
    CHECK_EQ(q3.qDim(), int64_t(2048));
    CHECK_EQ(parameterCount(q3), int64_t(596049920)); // Qwen3-0.6B
    CHECK(q3.ropeScaling.type.empty());

    ModelSpec q25 = parseHfConfig(json::parse(kQwen25Config));
    CHECK(q25.attentionBias && !q25.outputBias);
    CHECK_EQ(q25.slidingWindow, int64_t(0)); // use_sliding_window false
    CHECK_EQ(parameterCount(q25), int64_t(7615616512));

    // Llama with attention_bias: q/k/v and o biases.
    json lb = json::parse(kLlama31Config);
    lb["attention_bias"] = true;
    int64_t withBias = parameterCount(parseHfConfig(lb));
    CHECK_EQ(withBias, int64_t(8030261248) + 32 * (4096 + 1024 + 1024 + 4096));

    // Missing optional fields take Hugging Face's defaults.
    json minimal = {{"model_type", "llama"}, {"vocab_size", 100}, {"hidden_size", 64},
        {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
    ModelSpec m = parseHfConfig(minimal);
    CHECK_EQ(m.numKvHeads, int64_t(4));
    CHECK_EQ(m.headDim, int64_t(16));
    CHECK_EQ(m.maxPositionEmbeddings, int64_t(2048));
    CHECK_EQ(m.eosTokenId, int64_t(-1));

    // transformers >= 4.56 rope_parameters.
    json rp = minimal;
    rp["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
        {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 8192}};
    ModelSpec r = parseHfConfig(rp);
    CHECK_EQ(r.ropeTheta, 500000.0);
    CHECK_EQ(r.ropeScaling.type, std::string("llama3"));
}

void testParseErrors()
{
    json base = json::parse(kLlama31Config);
    auto without = [&](const char* key) {
        json c = base;
        c.erase(key);
        return c;
    };
    auto with = [&](const char* key, json v) {
        json c = base;
        c[key] = v;
        return c;
    };
    CHECK_THROWS_WITH(parseHfConfig(without("hidden_size")), "'hidden_size' is missing");
    CHECK_THROWS_WITH(
        parseHfConfig(with("hidden_size", "4096")), "'hidden_size' must be an integer");
    CHECK_THROWS_WITH(parseHfConfig(with("hidden_size", -4)), "'hidden_size' must be a positive");
    CHECK_THROWS_WITH(parseHfConfig(with("num_key_value_heads", 5)), "'num_key_value_heads'");
    CHECK_THROWS_WITH(parseHfConfig(with("model_type", "gpt2")), "'model_type' is 'gpt2'");
    CHECK_THROWS_WITH(parseHfConfig(with("hidden_act", "gelu")), "'hidden_act'");
    CHECK_THROWS_WITH(parseHfConfig(with("tie_word_embeddings", 1)), "'tie_word_embeddings'");
    CHECK_THROWS_WITH(parseHfConfig(with("rope_scaling", json {{"rope_type", "weird"}})),
        "rope_scaling.rope_type");
    CHECK_THROWS_WITH(parseHfConfig(with("rope_scaling", json {{"rope_type", "llama3"}})),
        "original_max_position_embeddings");
    CHECK_THROWS_WITH(parseHfConfig(json::array()), "JSON object");
    json nohd = base;
    nohd["num_attention_heads"] = 30;
    nohd["num_key_value_heads"] = 10;
    CHECK_THROWS_WITH(parseHfConfig(nohd), "'head_dim' is missing");
    json ds = toHfConfig(preset("deepseek-v3"));
    ds.erase("kv_lora_rank");
    CHECK_THROWS_WITH(parseHfConfig(ds), "'kv_lora_rank' is missing");
}

void testFiles()
{
    fs::path dir
        = fs::temp_directory_path() / ("shard_tst_model_spec_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "My-Model");
    {
        std::ofstream(dir / "My-Model" / "config.json") << kQwen3Config;
    }
    ModelSpec a = loadHfConfig((dir / "My-Model").string());
    CHECK_EQ(a.name, std::string("My-Model"));
    CHECK_EQ(parameterCount(a), int64_t(596049920));
    ModelSpec b = loadHfConfig((dir / "My-Model" / "config.json").string());
    CHECK_EQ(b.name, std::string("My-Model"));
    ModelSpec c = resolveModel((dir / "My-Model").string());
    CHECK_EQ(c.modelType, std::string("qwen3"));

    fs::create_directories(dir / "bad");
    {
        std::ofstream(dir / "bad" / "config.json")
            << "{\"model_type\": \"llama\", \"hidden_size\": ";
    }
    CHECK_THROWS_WITH(loadHfConfig((dir / "bad").string()), "not valid JSON");
    CHECK_THROWS_WITH(loadHfConfig((dir / "bad").string()), "bad/config.json");
    {
        json j = json::parse(kLlama31Config);
        j["intermediate_size"] = nullptr;
        std::ofstream(dir / "bad" / "config.json") << j.dump();
    }
    CHECK_THROWS_WITH(
        loadHfConfig((dir / "bad").string()), "bad/config.json: 'intermediate_size' is missing");
    fs::create_directories(dir / "empty");
    CHECK_THROWS_WITH(loadHfConfig((dir / "empty").string()), "no such file");
    CHECK_THROWS_WITH(resolveModel((dir / "empty").string()), "config.json");
    fs::remove_all(dir);
}

void testRoundTrip()
{
    for (const ModelSpec& p : presets()) {
        json c = toHfConfig(p);
        CHECK(c.contains("architectures") && c["architectures"].is_array());
        CHECK(c.contains("model_type") && c.contains("torch_dtype"));
        ModelSpec q = parseHfConfig(json::parse(c.dump()), p.name);
        CHECK_EQ(q.modelType, p.modelType);
        CHECK_EQ(q.vocabSize, p.vocabSize);
        CHECK_EQ(q.hiddenSize, p.hiddenSize);
        CHECK_EQ(q.intermediateSize, p.intermediateSize);
        CHECK_EQ(q.numLayers, p.numLayers);
        CHECK_EQ(q.numHeads, p.numHeads);
        CHECK_EQ(q.numKvHeads, p.numKvHeads);
        CHECK_EQ(q.headDim, p.headDim);
        CHECK_EQ(q.maxPositionEmbeddings, p.maxPositionEmbeddings);
        CHECK_EQ(q.rmsNormEps, p.rmsNormEps);
        CHECK_EQ(q.ropeTheta, p.ropeTheta);
        CHECK_EQ(q.ropeScaling.type, p.ropeScaling.type);
        CHECK_EQ(q.ropeScaling.factor, p.ropeScaling.factor);
        CHECK_EQ(q.tieWordEmbeddings, p.tieWordEmbeddings);
        CHECK_EQ(q.attentionBias, p.attentionBias);
        CHECK_EQ(q.outputBias, p.outputBias);
        CHECK_EQ(q.qkNorm, p.qkNorm);
        CHECK_EQ(q.slidingWindow, p.slidingWindow);
        CHECK_EQ(q.bosTokenId, p.bosTokenId);
        CHECK_EQ(q.eosTokenId, p.eosTokenId);
        CHECK_EQ(q.isMoe(), p.isMoe());
        CHECK_EQ(parameterCount(q), parameterCount(p));
    }
}

void testLookup()
{
    CHECK(findPreset("Llama-2-7B").has_value()); // case-insensitive
    CHECK(!findPreset("llama-9").has_value());
    auto close = closePresetNames("llama2-7b");
    CHECK(!close.empty() && close[0] == "llama-2-7b");
    auto qwen = closePresetNames("qwen-7b");
    CHECK(std::find(qwen.begin(), qwen.end(), "qwen2.5-7b") != qwen.end());
    CHECK_THROWS_WITH(resolveModel("lama-2-7b"), "did you mean llama-2-7b");
    CHECK_THROWS_WITH(resolveModel(""), "no model given");
    CHECK_EQ(formatParamCount(6738415616), std::string("6.74B"));
    CHECK_EQ(formatParamCount(15735168), std::string("15.7M"));
    // Preset names are lower-case, unique.
    std::map<std::string, int> seen;
    for (const auto& p : presets()) {
        CHECK_EQ(++seen[p.name], 1);
        for (char ch : p.name)
            CHECK(!(ch >= 'A' && ch <= 'Z'));
    }
    for (const char* n : {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3.1-8b",
             "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-14b",
             "qwen2.5-72b", "mistral-7b", "deepseek-v3", "tiny-1m", "tiny-15m", "tiny-100m"})
        CHECK(findPreset(n).has_value());
}

} // namespace

int main()
{
    testPublishedCounts();
    testFormulaCounts();
    testTableNames();
    testParse();
    testParseErrors();
    testFiles();
    testRoundTrip();
    testLookup();
    return shard::plan::test::finish("tst_model_spec");
}
