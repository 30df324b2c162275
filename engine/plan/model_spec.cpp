// Model specs: Hugging Face config.json parsing and writing, built-in presets, and the exact
// parameter table (names and shapes as Hugging Face's state dict has them).
#include "plan/model_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shard::plan {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t ParamInfo::numel() const
{
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    return n;
}

namespace {

[[noreturn]] void fieldError(
    const std::string& source, const std::string& field, const std::string& what)
{
    throw std::runtime_error(source + ": '" + field + "' " + what);
}

std::string shortDump(const json& v)
{
    std::string s = v.dump();
    if (s.size() > 40)
        s = s.substr(0, 37) + "...";
    return s;
}

// An integer field; floats with an integral value (4096.0) are accepted.
std::optional<int64_t> optInt(const json& c, const std::string& src, const std::string& key)
{
    auto it = c.find(key);
    if (it == c.end() || it->is_null())
        return std::nullopt;
    if (it->is_number_integer())
        return it->get<int64_t>();
    if (it->is_number_float()) {
        double d = it->get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15)
            return static_cast<int64_t>(d);
    }
    fieldError(src, key, "must be an integer (got " + shortDump(*it) + ")");
}

int64_t reqInt(const json& c, const std::string& src, const std::string& key)
{
    auto v = optInt(c, src, key);
    if (!v)
        fieldError(src, key, "is missing (required for this model type)");
    return *v;
}

int64_t positive(int64_t v, const std::string& src, const std::string& key)
{
    if (v <= 0)
        fieldError(src, key, "must be a positive integer (got " + std::to_string(v) + ")");
    return v;
}

int64_t nonNegative(int64_t v, const std::string& src, const std::string& key)
{
    if (v < 0)
        fieldError(src, key, "must not be negative (got " + std::to_string(v) + ")");
    return v;
}

std::optional<double> optNumber(const json& c, const std::string& src, const std::string& key)
{
    auto it = c.find(key);
    if (it == c.end() || it->is_null())
        return std::nullopt;
    if (!it->is_number())
        fieldError(src, key, "must be a number (got " + shortDump(*it) + ")");
    double d = it->get<double>();
    if (!std::isfinite(d))
        fieldError(src, key, "must be finite");
    return d;
}

std::optional<bool> optBool(const json& c, const std::string& src, const std::string& key)
{
    auto it = c.find(key);
    if (it == c.end() || it->is_null())
        return std::nullopt;
    if (!it->is_boolean())
        fieldError(src, key, "must be true or false (got " + shortDump(*it) + ")");
    return it->get<bool>();
}

std::optional<std::string> optString(const json& c, const std::string& src, const std::string& key)
{
    auto it = c.find(key);
    if (it == c.end() || it->is_null())
        return std::nullopt;
    if (!it->is_string())
        fieldError(src, key, "must be a string (got " + shortDump(*it) + ")");
    return it->get<std::string>();
}

// bos/eos may be an integer, a list of integers (first one is used) or null.
int64_t tokenId(const json& c, const std::string& src, const std::string& key)
{
    auto it = c.find(key);
    if (it == c.end() || it->is_null())
        return -1;
    const json& v = it->is_array() ? (it->empty() ? json() : (*it)[0]) : *it;
    if (v.is_null())
        return -1;
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
        fieldError(src, key, "must be a token id or a list of them (got " + shortDump(*it) + ")");
    return v.get<int64_t>();
}

const char* const kSupportedTypes = "llama, mistral, qwen2, qwen3, deepseek_v3";

std::string modelTypeFromArchitectures(const json& c)
{
    auto it = c.find("architectures");
    if (it == c.end() || !it->is_array() || it->empty() || !(*it)[0].is_string())
        return {};
    std::string a = (*it)[0].get<std::string>();
    if (a == "LlamaForCausalLM")
        return "llama";
    if (a == "MistralForCausalLM")
        return "mistral";
    if (a == "Qwen2ForCausalLM")
        return "qwen2";
    if (a == "Qwen3ForCausalLM")
        return "qwen3";
    if (a == "DeepseekV3ForCausalLM")
        return "deepseek_v3";
    return {};
}

std::string architectureFor(const std::string& modelType)
{
    if (modelType == "llama")
        return "LlamaForCausalLM";
    if (modelType == "mistral")
        return "MistralForCausalLM";
    if (modelType == "qwen2")
        return "Qwen2ForCausalLM";
    if (modelType == "qwen3")
        return "Qwen3ForCausalLM";
    return "DeepseekV3ForCausalLM";
}

int64_t defaultMaxPositions(const std::string& t)
{
    if (t == "mistral")
        return 131072;
    if (t == "qwen2" || t == "qwen3")
        return 32768;
    if (t == "deepseek_v3")
        return 4096;
    return 2048;
}

void parseRopeScaling(
    const json& rs, const std::string& src, const std::string& key, ModelSpec& spec)
{
    if (!rs.is_object())
        fieldError(src, key, "must be an object or null (got " + shortDump(rs) + ")");
    std::string type;
    if (auto t = optString(rs, src, "rope_type"))
        type = *t;
    else if (auto t2 = optString(rs, src, "type"))
        type = *t2;
    else
        fieldError(src, key, "has neither 'rope_type' nor 'type'");
    if (type == "default")
        return;
    static const std::vector<std::string> kKnown = {"llama3", "linear", "dynamic", "yarn"};
    if (std::find(kKnown.begin(), kKnown.end(), type) == kKnown.end())
        fieldError(src, key + ".rope_type",
            "is '" + type + "'; supported: default, llama3, linear, dynamic, yarn");
    RopeScaling r;
    r.type = type;
    r.factor = optNumber(rs, src, "factor").value_or(1.0);
    if (r.factor <= 0)
        fieldError(src, key + ".factor", "must be positive");
    r.lowFreqFactor = optNumber(rs, src, "low_freq_factor").value_or(1.0);
    r.highFreqFactor = optNumber(rs, src, "high_freq_factor").value_or(4.0);
    r.originalMaxPositionEmbeddings
        = nonNegative(optInt(rs, src, "original_max_position_embeddings").value_or(0), src,
            key + ".original_max_position_embeddings");
    if (type == "llama3") {
        if (r.originalMaxPositionEmbeddings == 0)
            fieldError(
                src, key + ".original_max_position_embeddings", "is required for rope_type llama3");
        if (r.highFreqFactor <= r.lowFreqFactor)
            fieldError(src, key + ".high_freq_factor", "must be larger than low_freq_factor");
    }
    spec.ropeScaling = r;
}

ModelSpec parseConfig(const json& c, const std::string& src, const std::string& name)
{
    if (!c.is_object())
        throw std::runtime_error(src + ": expected a JSON object at the top level");
    ModelSpec s;
    s.name = name;
    auto mt = optString(c, src, "model_type");
    s.modelType = mt ? *mt : modelTypeFromArchitectures(c);
    if (s.modelType.empty())
        fieldError(src, "model_type", std::string("is missing; supported: ") + kSupportedTypes);
    if (s.modelType != "llama" && s.modelType != "mistral" && s.modelType != "qwen2"
        && s.modelType != "qwen3" && s.modelType != "deepseek_v3")
        fieldError(src, "model_type",
            "is '" + s.modelType + "'; supported: " + std::string(kSupportedTypes));

    s.vocabSize = positive(reqInt(c, src, "vocab_size"), src, "vocab_size");
    s.hiddenSize = positive(reqInt(c, src, "hidden_size"), src, "hidden_size");
    s.intermediateSize = positive(reqInt(c, src, "intermediate_size"), src, "intermediate_size");
    s.numLayers = positive(reqInt(c, src, "num_hidden_layers"), src, "num_hidden_layers");
    s.numHeads = positive(reqInt(c, src, "num_attention_heads"), src, "num_attention_heads");
    s.numKvHeads = positive(
        optInt(c, src, "num_key_value_heads").value_or(s.numHeads), src, "num_key_value_heads");
    if (s.numHeads % s.numKvHeads != 0)
        fieldError(src, "num_key_value_heads",
            "(" + std::to_string(s.numKvHeads) + ") must divide num_attention_heads ("
                + std::to_string(s.numHeads) + ")");
    if (auto hd = optInt(c, src, "head_dim")) {
        s.headDim = positive(*hd, src, "head_dim");
    } else {
        if (s.hiddenSize % s.numHeads != 0)
            fieldError(src, "head_dim",
                "is missing and hidden_size (" + std::to_string(s.hiddenSize)
                    + ") is not a multiple of num_attention_heads (" + std::to_string(s.numHeads)
                    + ")");
        s.headDim = s.hiddenSize / s.numHeads;
    }
    s.maxPositionEmbeddings = positive(
        optInt(c, src, "max_position_embeddings").value_or(defaultMaxPositions(s.modelType)), src,
        "max_position_embeddings");
    s.rmsNormEps = optNumber(c, src, "rms_norm_eps").value_or(1e-6);
    if (s.rmsNormEps <= 0)
        fieldError(src, "rms_norm_eps", "must be positive");

    // transformers >= 4.56 may carry rope_theta and the scaling inside "rope_parameters".
    const json* ropeParams = nullptr;
    if (auto it = c.find("rope_parameters"); it != c.end() && it->is_object())
        ropeParams = &*it;
    if (auto th = optNumber(c, src, "rope_theta"))
        s.ropeTheta = *th;
    else if (ropeParams && ropeParams->contains("rope_theta"))
        s.ropeTheta = optNumber(*ropeParams, src + ": rope_parameters", "rope_theta").value();
    if (s.ropeTheta <= 0)
        fieldError(src, "rope_theta", "must be positive");
    if (auto it = c.find("rope_scaling"); it != c.end() && !it->is_null())
        parseRopeScaling(*it, src, "rope_scaling", s);
    else if (ropeParams)
        parseRopeScaling(*ropeParams, src, "rope_parameters", s);

    if (auto act = optString(c, src, "hidden_act"); act && *act != "silu")
        fieldError(src, "hidden_act", "is '" + *act + "'; only 'silu' (SwiGLU) is supported");
    if (optBool(c, src, "mlp_bias").value_or(false))
        fieldError(src, "mlp_bias", "is true; MLP biases are not supported");

    s.tieWordEmbeddings = optBool(c, src, "tie_word_embeddings").value_or(false);
    bool attnBias = optBool(c, src, "attention_bias").value_or(false);
    if (s.modelType == "qwen2") {
        s.attentionBias = true; // Qwen2 always has q/k/v bias and never an o_proj bias
    } else if (s.modelType == "llama" || s.modelType == "qwen3" || s.modelType == "deepseek_v3") {
        s.attentionBias = attnBias;
        s.outputBias = attnBias;
    }
    s.qkNorm = s.modelType == "qwen3";
    if (auto sw = optInt(c, src, "sliding_window")) {
        bool used
            = s.modelType == "mistral" || optBool(c, src, "use_sliding_window").value_or(false);
        if (used)
            s.slidingWindow = nonNegative(*sw, src, "sliding_window");
    }
    if (auto dt = optString(c, src, "torch_dtype"))
        s.torchDtype = *dt;
    else if (auto dt2 = optString(c, src, "dtype"))
        s.torchDtype = *dt2;
    s.bosTokenId = tokenId(c, src, "bos_token_id");
    s.eosTokenId = tokenId(c, src, "eos_token_id");

    if (s.modelType == "deepseek_v3") {
        MoeSpec m;
        m.routedExperts = positive(reqInt(c, src, "n_routed_experts"), src, "n_routed_experts");
        m.expertsPerToken
            = positive(reqInt(c, src, "num_experts_per_tok"), src, "num_experts_per_tok");
        if (m.expertsPerToken > m.routedExperts)
            fieldError(src, "num_experts_per_tok", "must not exceed n_routed_experts");
        m.sharedExperts
            = nonNegative(optInt(c, src, "n_shared_experts").value_or(0), src, "n_shared_experts");
        m.moeIntermediateSize
            = positive(reqInt(c, src, "moe_intermediate_size"), src, "moe_intermediate_size");
        m.firstDenseLayers = nonNegative(
            optInt(c, src, "first_k_dense_replace").value_or(0), src, "first_k_dense_replace");
        if (auto f = optInt(c, src, "moe_layer_freq"); f && *f != 1)
            fieldError(src, "moe_layer_freq", "must be 1 (every layer after the dense ones)");
        m.qLoraRank = nonNegative(optInt(c, src, "q_lora_rank").value_or(0), src, "q_lora_rank");
        m.kvLoraRank = positive(reqInt(c, src, "kv_lora_rank"), src, "kv_lora_rank");
        m.qkNopeHeadDim = positive(reqInt(c, src, "qk_nope_head_dim"), src, "qk_nope_head_dim");
        m.qkRopeHeadDim = positive(reqInt(c, src, "qk_rope_head_dim"), src, "qk_rope_head_dim");
        m.vHeadDim = positive(reqInt(c, src, "v_head_dim"), src, "v_head_dim");
        m.mtpLayers = nonNegative(optInt(c, src, "num_nextn_predict_layers").value_or(0), src,
            "num_nextn_predict_layers");
        s.headDim = m.qkNopeHeadDim + m.qkRopeHeadDim;
        s.moe = m;
    }
    return s;
}

std::string lower(std::string s)
{
    for (char& ch : s)
        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

ModelSpec llama(const std::string& name, int64_t vocab, int64_t hidden, int64_t inter,
    int64_t layers, int64_t heads, int64_t kvHeads, int64_t maxPos, double theta, double eps)
{
    ModelSpec s;
    s.name = name;
    s.modelType = "llama";
    s.vocabSize = vocab;
    s.hiddenSize = hidden;
    s.intermediateSize = inter;
    s.numLayers = layers;
    s.numHeads = heads;
    s.numKvHeads = kvHeads;
    s.headDim = hidden / heads;
    s.maxPositionEmbeddings = maxPos;
    s.ropeTheta = theta;
    s.rmsNormEps = eps;
    s.bosTokenId = 1;
    s.eosTokenId = 2;
    return s;
}

ModelSpec llama31(
    const std::string& name, int64_t hidden, int64_t inter, int64_t layers, int64_t heads)
{
    ModelSpec s = llama(name, 128256, hidden, inter, layers, heads, 8, 131072, 500000.0, 1e-5);
    s.ropeScaling = RopeScaling {"llama3", 8.0, 1.0, 4.0, 8192};
    s.bosTokenId = 128000;
    s.eosTokenId = 128001;
    return s;
}

ModelSpec qwen25(const std::string& name, int64_t vocab, int64_t hidden, int64_t inter,
    int64_t layers, int64_t heads, int64_t kvHeads, bool tied, double eps)
{
    ModelSpec s = llama(name, vocab, hidden, inter, layers, heads, kvHeads, 131072, 1e6, eps);
    s.modelType = "qwen2";
    s.attentionBias = true;
    s.tieWordEmbeddings = tied;
    s.bosTokenId = 151643;
    s.eosTokenId = 151643;
    return s;
}

std::vector<ModelSpec> makePresets()
{
    std::vector<ModelSpec> p;
    // Tiny CPU models (llama architecture) trained by the demos and tests. Their vocabularies
    // match the built-in demo tokenizer sizes.
    p.push_back(llama("tiny-1m", 512, 128, 384, 4, 4, 4, 1024, 10000.0, 1e-5));
    p.push_back(llama("tiny-15m", 4096, 384, 1024, 8, 6, 2, 2048, 10000.0, 1e-5));
    p.push_back(llama("tiny-100m", 16384, 768, 2048, 12, 12, 4, 2048, 10000.0, 1e-5));

    p.push_back(llama("llama-2-7b", 32000, 4096, 11008, 32, 32, 32, 4096, 10000.0, 1e-5));
    p.push_back(llama("llama-2-13b", 32000, 5120, 13824, 40, 40, 40, 4096, 10000.0, 1e-5));
    p.push_back(llama("llama-2-70b", 32000, 8192, 28672, 80, 64, 8, 4096, 10000.0, 1e-5));
    ModelSpec l3 = llama("llama-3-8b", 128256, 4096, 14336, 32, 32, 8, 8192, 500000.0, 1e-5);
    l3.bosTokenId = 128000;
    l3.eosTokenId = 128001;
    p.push_back(l3);
    p.push_back(llama31("llama-3.1-8b", 4096, 14336, 32, 32));
    // Llama 3.2 1B: 16 layers, tied embeddings, the llama3 rope scaling with factor 32 (the GPU
    // benchmark's model, bench/gpu).
    ModelSpec l32 = llama31("llama-3.2-1b", 2048, 8192, 16, 32);
    l32.tieWordEmbeddings = true;
    l32.ropeScaling.factor = 32.0;
    p.push_back(l32);
    p.push_back(llama31("llama-3.1-70b", 8192, 28672, 80, 64));
    p.push_back(llama31("llama-3.1-405b", 16384, 53248, 126, 128));

    p.push_back(qwen25("qwen2.5-1.5b", 151936, 1536, 8960, 28, 12, 2, true, 1e-6));
    p.push_back(qwen25("qwen2.5-7b", 152064, 3584, 18944, 28, 28, 4, false, 1e-6));
    p.push_back(qwen25("qwen2.5-14b", 152064, 5120, 13824, 48, 40, 8, false, 1e-5));
    p.push_back(qwen25("qwen2.5-72b", 152064, 8192, 29568, 80, 64, 8, false, 1e-5));

    ModelSpec q3 = llama("qwen3-8b", 151936, 4096, 12288, 36, 32, 8, 40960, 1e6, 1e-6);
    q3.modelType = "qwen3";
    q3.headDim = 128;
    q3.qkNorm = true;
    q3.bosTokenId = 151643;
    q3.eosTokenId = 151645;
    p.push_back(q3);

    ModelSpec m = llama("mistral-7b", 32000, 4096, 14336, 32, 32, 8, 32768, 10000.0, 1e-5);
    m.modelType = "mistral";
    m.slidingWindow = 4096;
    p.push_back(m);

    ModelSpec d = llama("deepseek-v3", 129280, 7168, 18432, 61, 128, 128, 163840, 10000.0, 1e-6);
    d.modelType = "deepseek_v3";
    d.bosTokenId = 0;
    d.eosTokenId = 1;
    MoeSpec moe;
    moe.routedExperts = 256;
    moe.expertsPerToken = 8;
    moe.sharedExperts = 1;
    moe.moeIntermediateSize = 2048;
    moe.firstDenseLayers = 3;
    moe.qLoraRank = 1536;
    moe.kvLoraRank = 512;
    moe.qkNopeHeadDim = 128;
    moe.qkRopeHeadDim = 64;
    moe.vHeadDim = 128;
    moe.mtpLayers = 1;
    d.headDim = moe.qkNopeHeadDim + moe.qkRopeHeadDim;
    d.ropeScaling = RopeScaling {"yarn", 40.0, 1.0, 4.0, 4096};
    d.moe = moe;
    p.push_back(d);
    return p;
}

size_t editDistance(const std::string& a, const std::string& b)
{
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j)
        prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

void addLinear(std::vector<ParamInfo>& t, const std::string& prefix, int64_t out, int64_t in,
    bool bias, int64_t layer)
{
    t.push_back({prefix + ".weight", {out, in}, layer, false});
    if (bias)
        t.push_back({prefix + ".bias", {out}, layer, true});
}

void addNorm(std::vector<ParamInfo>& t, const std::string& name, int64_t dim, int64_t layer)
{
    t.push_back({name + ".weight", {dim}, layer, true});
}

void addMlp(std::vector<ParamInfo>& t, const std::string& prefix, int64_t hidden, int64_t inter,
    int64_t layer)
{
    addLinear(t, prefix + ".gate_proj", inter, hidden, false, layer);
    addLinear(t, prefix + ".up_proj", inter, hidden, false, layer);
    addLinear(t, prefix + ".down_proj", hidden, inter, false, layer);
}

} // namespace

ModelSpec parseHfConfig(const json& config, const std::string& name)
{
    return parseConfig(config, "config.json", name);
}

ModelSpec loadHfConfig(const std::string& folderOrFile)
{
    fs::path p(folderOrFile);
    std::error_code ec;
    if (fs::is_directory(p, ec))
        p /= "config.json";
    if (!fs::exists(p, ec))
        throw std::runtime_error(p.string() + ": no such file (a model folder needs config.json)");
    std::ifstream in(p, std::ios::binary);
    if (!in)
        throw std::runtime_error(p.string() + ": cannot be read (check its permissions)");
    std::stringstream buf;
    buf << in.rdbuf();
    json config;
    try {
        config = json::parse(buf.str());
    } catch (const json::parse_error& e) {
        std::string msg = e.what();
        auto pos = msg.find("parse error");
        throw std::runtime_error(p.string() + ": not valid JSON ("
            + (pos == std::string::npos ? msg : msg.substr(pos)) + ")");
    }
    fs::path folder = fs::absolute(p, ec).parent_path();
    std::string name = folder.filename().string();
    return parseConfig(config, p.string(), name.empty() ? p.stem().string() : name);
}

json toHfConfig(const ModelSpec& s)
{
    json c;
    c["architectures"] = json::array({architectureFor(s.modelType)});
    c["model_type"] = s.modelType;
    c["vocab_size"] = s.vocabSize;
    c["hidden_size"] = s.hiddenSize;
    c["intermediate_size"] = s.intermediateSize;
    c["num_hidden_layers"] = s.numLayers;
    c["num_attention_heads"] = s.numHeads;
    c["num_key_value_heads"] = s.numKvHeads;
    c["head_dim"] = s.headDim;
    c["max_position_embeddings"] = s.maxPositionEmbeddings;
    c["rms_norm_eps"] = s.rmsNormEps;
    c["rope_theta"] = s.ropeTheta;
    if (s.ropeScaling.type.empty()) {
        c["rope_scaling"] = nullptr;
    } else {
        json r;
        r["rope_type"] = s.ropeScaling.type;
        r["factor"] = s.ropeScaling.factor;
        if (s.ropeScaling.type == "llama3") {
            r["low_freq_factor"] = s.ropeScaling.lowFreqFactor;
            r["high_freq_factor"] = s.ropeScaling.highFreqFactor;
        }
        if (s.ropeScaling.originalMaxPositionEmbeddings > 0)
            r["original_max_position_embeddings"] = s.ropeScaling.originalMaxPositionEmbeddings;
        c["rope_scaling"] = r;
    }
    c["hidden_act"] = "silu";
    c["tie_word_embeddings"] = s.tieWordEmbeddings;
    c["initializer_range"] = 0.02;
    c["use_cache"] = true;
    c["torch_dtype"] = s.torchDtype;
    if (s.modelType == "llama" || s.modelType == "qwen3" || s.modelType == "deepseek_v3") {
        c["attention_bias"] = s.attentionBias;
        c["attention_dropout"] = 0.0;
    }
    if (s.modelType == "llama")
        c["mlp_bias"] = false;
    if (s.modelType == "mistral")
        c["sliding_window"] = s.slidingWindow > 0 ? json(s.slidingWindow) : json(nullptr);
    if (s.modelType == "qwen2" || s.modelType == "qwen3") {
        c["use_sliding_window"] = s.slidingWindow > 0;
        c["sliding_window"] = s.slidingWindow > 0 ? s.slidingWindow : s.maxPositionEmbeddings;
        c["max_window_layers"] = s.numLayers;
    }
    c["bos_token_id"] = s.bosTokenId >= 0 ? json(s.bosTokenId) : json(nullptr);
    c["eos_token_id"] = s.eosTokenId >= 0 ? json(s.eosTokenId) : json(nullptr);
    if (s.moe) {
        const MoeSpec& m = *s.moe;
        c["n_routed_experts"] = m.routedExperts;
        c["num_experts_per_tok"] = m.expertsPerToken;
        c["n_shared_experts"] = m.sharedExperts;
        c["moe_intermediate_size"] = m.moeIntermediateSize;
        c["first_k_dense_replace"] = m.firstDenseLayers;
        c["moe_layer_freq"] = 1;
        c["q_lora_rank"] = m.qLoraRank > 0 ? json(m.qLoraRank) : json(nullptr);
        c["kv_lora_rank"] = m.kvLoraRank;
        c["qk_nope_head_dim"] = m.qkNopeHeadDim;
        c["qk_rope_head_dim"] = m.qkRopeHeadDim;
        c["v_head_dim"] = m.vHeadDim;
        c["num_nextn_predict_layers"] = m.mtpLayers;
    }
    return c;
}

const std::vector<ModelSpec>& presets()
{
    static const std::vector<ModelSpec> all = makePresets();
    return all;
}

std::optional<ModelSpec> findPreset(const std::string& name)
{
    std::string key = lower(name);
    for (const auto& p : presets())
        if (p.name == key)
            return p;
    return std::nullopt;
}

std::vector<std::string> closePresetNames(const std::string& name, size_t max)
{
    std::string key = lower(name);
    std::vector<std::pair<size_t, std::string>> scored;
    for (const auto& p : presets()) {
        size_t d = editDistance(key, p.name);
        // A query that is part of the name ("qwen", "70b") counts as close.
        if (!key.empty() && p.name.find(key) != std::string::npos)
            d = std::min<size_t>(d, 1);
        scored.emplace_back(d, p.name);
    }
    std::stable_sort(scored.begin(), scored.end(),
        [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> out;
    for (const auto& [d, n] : scored) {
        if (out.size() >= max)
            break;
        if (d <= std::max<size_t>(3, key.size() / 2))
            out.push_back(n);
    }
    return out;
}

ModelSpec resolveModel(const std::string& presetOrPath)
{
    if (presetOrPath.empty())
        throw std::runtime_error("no model given: name a preset (see `shard models`) or a "
                                 "Hugging Face folder with config.json");
    if (auto p = findPreset(presetOrPath))
        return *p;
    std::error_code ec;
    if (fs::exists(presetOrPath, ec))
        return loadHfConfig(presetOrPath);
    std::string msg = "unknown model '" + presetOrPath + "': not a preset nor a path";
    auto close = closePresetNames(presetOrPath);
    if (!close.empty()) {
        msg += "; did you mean ";
        for (size_t i = 0; i < close.size(); ++i)
            msg += (i ? ", " : "") + close[i];
        msg += "?";
    }
    msg += " (`shard models` lists all presets)";
    throw std::runtime_error(msg);
}

std::vector<ParamInfo> parameterTable(const ModelSpec& s)
{
    std::vector<ParamInfo> t;
    const int64_t h = s.hiddenSize;
    t.push_back({"model.embed_tokens.weight", {s.vocabSize, h}, -1, false});
    for (int64_t l = 0; l < s.numLayers; ++l) {
        const std::string pre = "model.layers." + std::to_string(l);
        const std::string at = pre + ".self_attn";
        if (s.moe) {
            const MoeSpec& m = *s.moe;
            const int64_t qHead = m.qkNopeHeadDim + m.qkRopeHeadDim;
            if (m.qLoraRank > 0) {
                addLinear(t, at + ".q_a_proj", m.qLoraRank, h, s.attentionBias, l);
                addNorm(t, at + ".q_a_layernorm", m.qLoraRank, l);
                addLinear(t, at + ".q_b_proj", s.numHeads * qHead, m.qLoraRank, false, l);
            } else {
                addLinear(t, at + ".q_proj", s.numHeads * qHead, h, false, l);
            }
            addLinear(t, at + ".kv_a_proj_with_mqa", m.kvLoraRank + m.qkRopeHeadDim, h,
                s.attentionBias, l);
            addNorm(t, at + ".kv_a_layernorm", m.kvLoraRank, l);
            addLinear(t, at + ".kv_b_proj", s.numHeads * (m.qkNopeHeadDim + m.vHeadDim),
                m.kvLoraRank, false, l);
            addLinear(t, at + ".o_proj", h, s.numHeads * m.vHeadDim, s.outputBias, l);
            if (l < m.firstDenseLayers) {
                addMlp(t, pre + ".mlp", h, s.intermediateSize, l);
            } else {
                t.push_back({pre + ".mlp.gate.weight", {m.routedExperts, h}, l, false});
                t.push_back(
                    {pre + ".mlp.gate.e_score_correction_bias", {m.routedExperts}, l, true});
                for (int64_t e = 0; e < m.routedExperts; ++e)
                    addMlp(
                        t, pre + ".mlp.experts." + std::to_string(e), h, m.moeIntermediateSize, l);
                if (m.sharedExperts > 0)
                    addMlp(t, pre + ".mlp.shared_experts", h,
                        m.moeIntermediateSize * m.sharedExperts, l);
            }
        } else {
            addLinear(t, at + ".q_proj", s.qDim(), h, s.attentionBias, l);
            addLinear(t, at + ".k_proj", s.kvDim(), h, s.attentionBias, l);
            addLinear(t, at + ".v_proj", s.kvDim(), h, s.attentionBias, l);
            addLinear(t, at + ".o_proj", h, s.qDim(), s.outputBias, l);
            if (s.qkNorm) {
                addNorm(t, at + ".q_norm", s.headDim, l);
                addNorm(t, at + ".k_norm", s.headDim, l);
            }
            addMlp(t, pre + ".mlp", h, s.intermediateSize, l);
        }
        addNorm(t, pre + ".input_layernorm", h, l);
        addNorm(t, pre + ".post_attention_layernorm", h, l);
    }
    addNorm(t, "model.norm", h, -1);
    if (!s.tieWordEmbeddings)
        t.push_back({"lm_head.weight", {s.vocabSize, h}, -1, false});
    return t;
}

int64_t parameterCount(const ModelSpec& spec)
{
    int64_t n = 0;
    for (const auto& p : parameterTable(spec))
        n += p.numel();
    return n;
}

int64_t activeParameterCount(const ModelSpec& spec)
{
    int64_t total = parameterCount(spec);
    if (!spec.moe)
        return total;
    const MoeSpec& m = *spec.moe;
    const int64_t expert = 3 * spec.hiddenSize * m.moeIntermediateSize;
    const int64_t moeLayers = std::max<int64_t>(0, spec.numLayers - m.firstDenseLayers);
    return total - moeLayers * (m.routedExperts - m.expertsPerToken) * expert;
}

std::string formatParamCount(int64_t count)
{
    char buf[32];
    const double c = static_cast<double>(count);
    if (c >= 1e12)
        std::snprintf(buf, sizeof buf, "%.2fT", c / 1e12);
    else if (c >= 1e9)
        std::snprintf(buf, sizeof buf, "%.2fB", c / 1e9);
    else if (c >= 1e6)
        std::snprintf(buf, sizeof buf, "%.1fM", c / 1e6);
    else if (c >= 1e3)
        std::snprintf(buf, sizeof buf, "%.1fK", c / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(count));
    return buf;
}

} // namespace shard::plan
