// GGUF export (docs/ARCHITECTURE.md, "GGUF export"). The file layout is GGUF v3: a header, the
// metadata key-values, the tensor infos, then each tensor's data at an offset aligned to 32
// bytes. Names, metadata keys and the q/k row order follow what llama.cpp's loader reads for the
// llama, qwen2 and qwen3 architectures.
#include "ckpt/gguf_export.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "ckpt/ggml_quants.h"
#include "core/model/hf_folder.h"
#include "tokenizer/tokenizer.h"

namespace shard::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// GGUF value types and ggml tensor types used here.
enum GgufType : uint32_t {
    kU32 = 4,
    kI32 = 5,
    kF32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
};
constexpr uint64_t kAlignment = 32;

[[noreturn]] void fail(const std::string& message)
{
    throw std::runtime_error("export gguf: " + message);
}

// Little-endian serialisation into a growing byte buffer (the header and metadata are small).
struct Bytes {
    std::vector<char> data;
    void raw(const void* p, size_t n)
    {
        const char* c = static_cast<const char*>(p);
        data.insert(data.end(), c, c + n);
    }
    void u32(uint32_t v) { raw(&v, 4); }
    void u64(uint64_t v) { raw(&v, 8); }
    void f32(float v) { raw(&v, 4); }
    void str(const std::string& s)
    {
        u64(s.size());
        raw(s.data(), s.size());
    }
};

// The metadata, in insertion order.
struct Metadata {
    Bytes bytes;
    uint64_t count = 0;
    void key(const std::string& k, GgufType t)
    {
        bytes.str(k);
        bytes.u32(t);
        ++count;
    }
    void u32(const std::string& k, uint32_t v) { key(k, kU32), bytes.u32(v); }
    void f32(const std::string& k, float v) { key(k, kF32), bytes.f32(v); }
    void boolean(const std::string& k, bool v)
    {
        key(k, kBool);
        const uint8_t b = v ? 1 : 0;
        bytes.raw(&b, 1);
    }
    void str(const std::string& k, const std::string& v) { key(k, kString), bytes.str(v); }
    void strings(const std::string& k, const std::vector<std::string>& v)
    {
        key(k, kArray);
        bytes.u32(kString);
        bytes.u64(v.size());
        for (const auto& s : v)
            bytes.str(s);
    }
    void floats(const std::string& k, const std::vector<float>& v)
    {
        key(k, kArray);
        bytes.u32(kF32);
        bytes.u64(v.size());
        bytes.raw(v.data(), v.size() * 4);
    }
    void ints(const std::string& k, const std::vector<int32_t>& v)
    {
        key(k, kArray);
        bytes.u32(kI32);
        bytes.u64(v.size());
        bytes.raw(v.data(), v.size() * 4);
    }
};

json readJson(const fs::path& path)
{
    std::ifstream in(path);
    if (!in)
        fail("cannot read " + path.string());
    try {
        return json::parse(in);
    } catch (const std::exception& e) {
        fail(path.string() + " is not valid JSON: " + e.what());
    }
}

// ---- tokenizer -----------------------------------------------------------------------------

struct Vocab {
    std::string model; // llama | gpt2
    std::string pre;   // tokenizer.ggml.pre
    std::vector<std::string> tokens;
    std::vector<float> scores; // llama only
    std::vector<int32_t> types;
    std::vector<std::string> merges; // gpt2 only
    bool addSpacePrefix = false;
};

// llama.cpp's token types.
enum TokenType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
};

// A merge's two parts: "a b" (split at the first space, as Hugging Face reads it) or ["a", "b"].
std::pair<std::string, std::string> mergeParts(const json& m)
{
    if (m.is_string()) {
        const std::string t = m.get<std::string>();
        const size_t space = t.find(' ');
        if (space == std::string::npos)
            fail("tokenizer.json: merge \"" + t + "\" has no space");
        return {t.substr(0, space), t.substr(space + 1)};
    }
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        return {m[0].get<std::string>(), m[1].get<std::string>()};
    fail("tokenizer.json: a merge is neither \"a b\" nor [\"a\", \"b\"]: " + m.dump());
}

// Every object in `node` (itself included, depth first) whose "type" is `type`.
std::vector<const json*> nodesOfType(const json& node, const std::string& type)
{
    std::vector<const json*> out;
    const auto walk = [&](const auto& self, const json& n) -> void {
        if (n.is_object() && n.value("type", std::string()) == type)
            out.push_back(&n);
        if (n.is_structured())
            for (const auto& child : n)
                self(self, child);
    };
    walk(walk, node);
    return out;
}

bool containsType(const json& node, const std::string& type)
{
    return !nodesOfType(node, type).empty();
}

// The llama.cpp pre-tokenizer whose regex is this tokenizer's (llama.cpp matches them by name).
std::string byteLevelPre(const json& tok)
{
    std::vector<std::string> patterns;
    for (const json* split : nodesOfType(tok["pre_tokenizer"], "Split"))
        if (split->contains("pattern") && (*split)["pattern"].contains("Regex"))
            patterns.push_back((*split)["pattern"]["Regex"].get<std::string>());
    const std::string llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                               "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                               "\\s+(?!\\S)|\\s+";
    const std::string qwen2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                              "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                              "\\s+(?!\\S)|\\s+";
    if (patterns.size() == 1 && patterns[0] == llama3)
        return "llama-bpe";
    if (patterns.size() == 1 && patterns[0] == qwen2)
        return "qwen2";
    if (patterns.empty()) {
        // GPT-2's own: a ByteLevel pre-tokenizer with its built-in regex.
        const json& pre = tok["pre_tokenizer"];
        if (pre.is_object() && pre.value("type", std::string()) == "ByteLevel"
            && pre.value("use_regex", true))
            return "gpt-2";
    }
    fail("tokenizer.json's pre-tokenizer (" + tok["pre_tokenizer"].dump().substr(0, 200)
        + ") is none llama.cpp knows by name (Llama-3's, Qwen2's or GPT-2's regex); a GGUF "
          "with another one would split text differently from this model");
}

Vocab readVocab(const std::string& dir, int64_t vocabSize)
{
    const json tok = readJson(fs::path(dir) / "tokenizer.json");
    if (!tok.contains("model") || !tok["model"].is_object())
        fail(dir + "/tokenizer.json has no \"model\"");
    const json& model = tok["model"];
    const std::string type = model.value("type", std::string());
    if (type != "BPE")
        fail(dir + "/tokenizer.json: model type '" + type
            + "' (only BPE tokenizers, SentencePiece-style or byte-level, map to GGUF here)");
    Vocab v;
    const bool byteFallback = model.value("byte_fallback", false);
    const bool byteLevel = containsType(tok["pre_tokenizer"], "ByteLevel");
    if (byteFallback && !byteLevel) {
        v.model = "llama";
        v.pre = "default";
        const json& norm = tok["normalizer"];
        v.addSpacePrefix = containsType(norm, "Prepend")
            || (containsType(tok["pre_tokenizer"], "Metaspace")
                && tok["pre_tokenizer"].value("prepend_scheme", std::string("always")) != "never");
    } else if (byteLevel && !byteFallback) {
        v.model = "gpt2";
        v.pre = byteLevelPre(tok);
    } else {
        fail(dir
            + "/tokenizer.json is neither SentencePiece-style (BPE with byte_fallback) nor "
              "byte-level BPE; GGUF's tokenizers cannot express it");
    }

    // Tokens by id: the vocabulary, then the added tokens.
    int64_t n = 0;
    for (const auto& [text, id] : model["vocab"].items())
        n = std::max<int64_t>(n, id.get<int64_t>() + 1);
    for (const auto& a : tok.value("added_tokens", json::array()))
        n = std::max<int64_t>(n, a["id"].get<int64_t>() + 1);
    if (n > vocabSize)
        fail("the tokenizer has " + std::to_string(n) + " tokens but the model's vocabulary has "
            + std::to_string(vocabSize) + " rows");
    v.tokens.assign(static_cast<size_t>(vocabSize), std::string());
    v.types.assign(static_cast<size_t>(vocabSize), kNormal);
    std::vector<bool> present(static_cast<size_t>(vocabSize), false);
    for (const auto& [text, id] : model["vocab"].items()) {
        v.tokens[id.get<size_t>()] = text;
        present[id.get<size_t>()] = true;
    }
    for (const auto& a : tok.value("added_tokens", json::array())) {
        const size_t id = a["id"].get<size_t>();
        v.tokens[id] = a["content"].get<std::string>();
        present[id] = true;
        v.types[id] = a.value("special", false) ? kControl : kUserDefined;
    }
    // Rows of the embedding without a token (a vocabulary padded to a multiple of 64, say).
    for (size_t id = 0; id < present.size(); ++id)
        if (!present[id]) {
            v.tokens[id] = "[PAD" + std::to_string(id) + "]";
            v.types[id] = kUnused;
        }

    std::vector<std::pair<std::string, std::string>> merges;
    for (const auto& m : model.value("merges", json::array()))
        merges.push_back(mergeParts(m));
    if (v.model == "gpt2") { // GGUF's merges are "a b"
        for (const auto& [a, b] : merges)
            v.merges.push_back(a + " " + b);
        return v;
    }
    // SentencePiece-style: llama.cpp merges the adjacent pair whose joined token scores highest,
    // so a token's score is minus the rank of the first merge that makes it.
    std::unordered_map<std::string, size_t> rank;
    for (size_t r = 0; r < merges.size(); ++r)
        rank.emplace(merges[r].first + merges[r].second, r);
    v.scores.assign(v.tokens.size(), 0.0f);
    const std::string unk = model.value("unk_token", std::string());
    for (size_t id = 0; id < v.tokens.size(); ++id) {
        const std::string& t = v.tokens[id];
        if (!unk.empty() && t == unk)
            v.types[id] = kUnknown;
        else if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>' && v.types[id] != kControl)
            v.types[id] = kByte;
        if (const auto it = rank.find(t); it != rank.end())
            v.scores[id] = -static_cast<float>(it->second);
        else if (v.types[id] == kNormal)
            v.scores[id] = -static_cast<float>(merges.size() + id); // single characters
    }
    return v;
}

// ---- tensors -------------------------------------------------------------------------------

struct TensorPlan {
    std::string name;           // GGUF name
    std::string source;         // safetensors name ("" for computed tensors)
    std::vector<int64_t> shape; // Hugging Face (row-major) shape
    ggml::Type type = ggml::F32;
    int64_t layer = -1;   // the block it belongs to (blk.N.), -1 for the others
    int permuteHeads = 0; // > 0: llama.cpp's q/k row order for this many heads
    at::Tensor computed;  // rope_freqs
    uint64_t offset = 0;
    uint64_t bytes = 0;
};

// Hugging Face's interleaved-halves rotary rows to llama.cpp's pairwise order (what llama.cpp's
// converter does to Llama weights): per head, rows [0, d/2) and [d/2, d) interleave.
at::Tensor permuteRows(const at::Tensor& w, int64_t heads)
{
    const int64_t rows = w.size(0);
    std::vector<int64_t> shape {heads, 2, rows / heads / 2};
    for (int64_t i = 1; i < w.dim(); ++i)
        shape.push_back(w.size(i));
    return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

// Llama-3's rope scaling as llama.cpp reads it: a per-frequency divisor tensor.
at::Tensor llama3RopeFactors(const plan::ModelSpec& s)
{
    const auto& r = s.ropeScaling;
    const int64_t half = s.headDim / 2;
    std::vector<float> f(static_cast<size_t>(half));
    const double lowWavelen = r.originalMaxPositionEmbeddings / r.lowFreqFactor;
    const double highWavelen = r.originalMaxPositionEmbeddings / r.highFreqFactor;
    for (int64_t i = 0; i < half; ++i) {
        const double freq = 1.0 / std::pow(s.ropeTheta, double(2 * i) / double(s.headDim));
        const double wavelen = 2.0 * M_PI / freq;
        if (wavelen < highWavelen) {
            f[size_t(i)] = 1.0f;
        } else if (wavelen > lowWavelen) {
            f[size_t(i)] = float(r.factor);
        } else {
            const double smooth = (r.originalMaxPositionEmbeddings / wavelen - r.lowFreqFactor)
                / (r.highFreqFactor - r.lowFreqFactor);
            f[size_t(i)] = float(1.0 / ((1.0 - smooth) / r.factor + smooth));
        }
    }
    return at::tensor(f, at::kFloat);
}

// llama-quantize's choice of type for one matrix of a q4_k_m file (its llama_tensor_get_type
// for a dense model): q6_K for the output matrix (the embedding when it is tied) and for
// attn_v and ffn_down in the layers that "use more bits" (the first and last eighth, and every
// third between), q4_K for the rest.
ggml::Type q4kmTypeOf(const std::string& name, int64_t layer, int64_t layers, bool tied)
{
    const auto ends = [&](const std::string& tail) {
        return name.size() >= tail.size()
            && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (name == "output.weight" || (tied && name == "token_embd.weight"))
        return ggml::Q6_K;
    const bool moreBits = layer >= 0
        && (layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2);
    if ((ends("attn_v.weight") || ends("ffn_down.weight")) && moreBits)
        return ggml::Q6_K;
    return ggml::Q4_K;
}

// llama.cpp's fallback for a matrix whose rows are not whole blocks of its type: q4_K to q5_0,
// q6_K to q8_0, and f16 where rows are not whole 32-value blocks either.
ggml::Type fallbackOf(ggml::Type t, int64_t columns)
{
    if (columns % ggml::blockValues(t) == 0)
        return t;
    if (t == ggml::Q4_K && columns % ggml::blockValues(ggml::Q5_0) == 0)
        return ggml::Q5_0;
    if (t == ggml::Q6_K && columns % ggml::blockValues(ggml::Q8_0) == 0)
        return ggml::Q8_0;
    return ggml::F16;
}

class OutFile {
public:
    explicit OutFile(const std::string& path)
        : m_path(path)
    {
        m_f = std::fopen(path.c_str(), "wb");
        if (!m_f)
            fail("cannot create " + path + ": " + std::strerror(errno));
    }
    ~OutFile()
    {
        if (m_f)
            std::fclose(m_f);
    }
    void write(const void* p, size_t n)
    {
        if (n && std::fwrite(p, 1, n, m_f) != n)
            fail("writing " + m_path + " failed: " + std::strerror(errno) + " (is the disk full?)");
        m_pos += n;
    }
    void pad()
    {
        static const char zeros[kAlignment] = {};
        write(zeros, size_t((kAlignment - m_pos % kAlignment) % kAlignment));
    }
    void close()
    {
        if (std::fflush(m_f) != 0 || ::fsync(fileno(m_f)) != 0)
            fail("writing " + m_path + " failed: " + std::strerror(errno) + " (is the disk full?)");
        const int rc = std::fclose(m_f);
        m_f = nullptr;
        if (rc != 0)
            fail("closing " + m_path + " failed: " + std::strerror(errno));
    }
    uint64_t pos() const { return m_pos; }

private:
    std::string m_path;
    std::FILE* m_f = nullptr;
    uint64_t m_pos = 0;
};

std::string ollamaTemplate(const std::string& chatTemplate, std::vector<std::string>& stops)
{
    if (chatTemplate.find("<|start_header_id|>") != std::string::npos) {
        stops = {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
        return "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}"
               "<|eot_id|>{{ end }}{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>\n\n"
               "{{ .Prompt }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
               "{{ .Response }}<|eot_id|>";
    }
    if (chatTemplate.find("<|im_start|>") != std::string::npos) {
        stops = {"<|im_start|>", "<|im_end|>"};
        return "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
               "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}"
               "<|im_start|>assistant\n{{ .Response }}<|im_end|>\n";
    }
    if (chatTemplate.find("[INST]") != std::string::npos) {
        stops = {"[INST]", "[/INST]"};
        return "[INST] {{ if .System }}<<SYS>>\n{{ .System }}\n<</SYS>>\n\n{{ end }}"
               "{{ .Prompt }} [/INST] {{ .Response }}";
    }
    return {};
}

void writeModelfile(
    const std::string& path, const std::string& ggufName, const tokenizer::Tokenizer& tok)
{
    std::vector<std::string> stops;
    const std::string tmpl = ollamaTemplate(tok.chatTemplate(), stops);
    if (!tok.eosToken().empty()
        && std::find(stops.begin(), stops.end(), tok.eosToken()) == stops.end())
        stops.push_back(tok.eosToken());
    std::string text = "# Ollama: ollama create <name> -f " + fs::path(path).filename().string()
        + "\nFROM ./" + ggufName + "\n";
    if (!tmpl.empty())
        text += "TEMPLATE \"\"\"" + tmpl + "\"\"\"\n";
    else if (!tok.chatTemplate().empty())
        text += "# The chat template is in the GGUF (tokenizer.chat_template); it has no Ollama "
                "equivalent here, so prompts are passed through as they are.\n";
    else
        text += "# No chat template: a completion model (prompts are passed through).\n";
    for (const auto& s : stops)
        text += "PARAMETER stop \"" + s + "\"\n";
    const std::string partial = path + ".partial";
    {
        OutFile f(partial);
        f.write(text.data(), text.size());
        f.close();
    }
    fs::rename(partial, path);
}

} // namespace

namespace {

// The --type values: the matrices' type, the file type llama.cpp names the mix by, and whether
// the matrices follow llama-quantize's q4_k_m mix (q4_K with its q6_K choices).
struct GgufPreset {
    const char* name;
    ggml::Type type;
    uint32_t fileType;
    bool q4kmMix = false;
};
constexpr GgufPreset kPresets[]
    = {{"f32", ggml::F32, 0}, {"f16", ggml::F16, 1}, {"bf16", ggml::BF16, 32},
        {"q8_0", ggml::Q8_0, 7}, {"q6_k", ggml::Q6_K, 18}, {"q4_k_m", ggml::Q4_K, 15, true}};

const GgufPreset* presetOf(const std::string& type)
{
    for (const auto& p : kPresets)
        if (type == p.name)
            return &p;
    return nullptr;
}

} // namespace

bool isGgufType(const std::string& type)
{
    return presetOf(type) != nullptr;
}

std::string ggufTypeList()
{
    std::string out;
    const size_t n = std::size(kPresets);
    for (size_t i = 0; i < n; ++i)
        out += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + std::string(kPresets[i].name);
    return out;
}

GgufResult exportGguf(
    const std::string& modelDir, const std::string& outFile, const GgufOptions& options)
{
    const GgufPreset* preset = presetOf(options.type);
    if (!preset)
        fail("--type '" + options.type + "': use " + ggufTypeList());
    const ggml::Type want = preset->type;
    const uint32_t fileType = preset->fileType;
    const bool q4km = preset->q4kmMix;

    engine::HfModelFolder folder = engine::openHfModelFolder(modelDir);
    const plan::ModelSpec& s = folder.spec;
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::fromFolder(modelDir);

    std::string arch;
    bool permute = false;
    if (s.isMoe())
        fail("mixture-of-experts models are not exported to GGUF here");
    if (s.modelType == "llama" || s.modelType == "mistral") {
        arch = "llama", permute = true;
        if (s.attentionBias)
            fail(s.modelType + " with attention_bias has no llama.cpp 'llama' layout");
    } else if (s.modelType == "qwen2") {
        arch = "qwen2";
    } else if (s.modelType == "qwen3") {
        arch = "qwen3";
        if (s.outputBias)
            fail("qwen3 with an o_proj bias has no llama.cpp layout");
    } else {
        fail("model_type '" + s.modelType + "' (llama, mistral, qwen2 and qwen3 export to GGUF)");
    }
    const std::string& rope = s.ropeScaling.type;
    if (!rope.empty() && rope != "llama3" && rope != "linear")
        fail("rope_scaling type '" + rope + "' is not exported (llama3 and linear are)");

    Vocab vocab = readVocab(modelDir, s.vocabSize);

    // ---- metadata
    Metadata md;
    md.str("general.architecture", arch);
    md.str("general.name",
        options.name.empty() ? fs::path(modelDir).lexically_normal().filename().string()
                             : options.name);
    md.u32("general.file_type", fileType);
    if (ggml::blockValues(want) > 1)
        md.u32("general.quantization_version", 2);
    md.u32("general.alignment", uint32_t(kAlignment));
    const std::string a = arch + ".";
    md.u32(a + "vocab_size", uint32_t(s.vocabSize));
    md.u32(a + "context_length", uint32_t(s.maxPositionEmbeddings));
    md.u32(a + "embedding_length", uint32_t(s.hiddenSize));
    md.u32(a + "block_count", uint32_t(s.numLayers));
    md.u32(a + "feed_forward_length", uint32_t(s.intermediateSize));
    md.u32(a + "attention.head_count", uint32_t(s.numHeads));
    md.u32(a + "attention.head_count_kv", uint32_t(s.numKvHeads));
    md.f32(a + "attention.layer_norm_rms_epsilon", float(s.rmsNormEps));
    md.f32(a + "rope.freq_base", float(s.ropeTheta));
    md.u32(a + "rope.dimension_count", uint32_t(s.headDim));
    if (s.headDim * s.numHeads != s.hiddenSize) {
        md.u32(a + "attention.key_length", uint32_t(s.headDim));
        md.u32(a + "attention.value_length", uint32_t(s.headDim));
    }
    if (rope == "linear") {
        md.str(a + "rope.scaling.type", "linear");
        md.f32(a + "rope.scaling.factor", float(s.ropeScaling.factor));
    }
    md.str("tokenizer.ggml.model", vocab.model);
    md.str("tokenizer.ggml.pre", vocab.pre);
    md.strings("tokenizer.ggml.tokens", vocab.tokens);
    if (!vocab.scores.empty())
        md.floats("tokenizer.ggml.scores", vocab.scores);
    md.ints("tokenizer.ggml.token_type", vocab.types);
    if (!vocab.merges.empty())
        md.strings("tokenizer.ggml.merges", vocab.merges);
    if (tok.bosId() >= 0)
        md.u32("tokenizer.ggml.bos_token_id", uint32_t(tok.bosId()));
    if (tok.eosId() >= 0)
        md.u32("tokenizer.ggml.eos_token_id", uint32_t(tok.eosId()));
    for (size_t id = 0; id < vocab.types.size(); ++id)
        if (vocab.types[id] == kUnknown) {
            md.u32("tokenizer.ggml.unknown_token_id", uint32_t(id));
            break;
        }
    // What the engine's tokenizer adds around a text, so llama.cpp adds the same.
    const std::vector<int32_t> empty = tok.encode("", true);
    const bool addBos = !empty.empty() && empty.front() == tok.bosId() && tok.bosId() >= 0;
    const bool addEos = !empty.empty() && empty.back() == tok.eosId() && tok.eosId() >= 0
        && !(empty.size() == 1 && addBos && tok.bosId() == tok.eosId());
    md.boolean("tokenizer.ggml.add_bos_token", addBos);
    md.boolean("tokenizer.ggml.add_eos_token", addEos);
    if (vocab.model == "llama")
        md.boolean("tokenizer.ggml.add_space_prefix", vocab.addSpacePrefix);
    if (!tok.chatTemplate().empty())
        md.str("tokenizer.chat_template", tok.chatTemplate());

    // ---- tensors
    std::vector<TensorPlan> plans;
    const auto add = [&](const std::string& name, const std::string& source, int heads = 0) {
        if (!folder.weights->contains(source))
            fail("the weights have no tensor '" + source + "'");
        TensorPlan p;
        p.name = name;
        p.source = source;
        p.shape = folder.weights->info(source).shape;
        p.permuteHeads = heads;
        plans.push_back(std::move(p));
    };
    add("token_embd.weight", "model.embed_tokens.weight");
    for (int64_t l = 0; l < s.numLayers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const std::string h = "model.layers." + std::to_string(l) + ".";
        add(b + "attn_norm.weight", h + "input_layernorm.weight");
        add(b + "attn_q.weight", h + "self_attn.q_proj.weight", permute ? int(s.numHeads) : 0);
        add(b + "attn_k.weight", h + "self_attn.k_proj.weight", permute ? int(s.numKvHeads) : 0);
        add(b + "attn_v.weight", h + "self_attn.v_proj.weight");
        add(b + "attn_output.weight", h + "self_attn.o_proj.weight");
        if (s.attentionBias) {
            add(b + "attn_q.bias", h + "self_attn.q_proj.bias");
            add(b + "attn_k.bias", h + "self_attn.k_proj.bias");
            add(b + "attn_v.bias", h + "self_attn.v_proj.bias");
        }
        if (s.qkNorm) {
            add(b + "attn_q_norm.weight", h + "self_attn.q_norm.weight");
            add(b + "attn_k_norm.weight", h + "self_attn.k_norm.weight");
        }
        add(b + "ffn_norm.weight", h + "post_attention_layernorm.weight");
        add(b + "ffn_gate.weight", h + "mlp.gate_proj.weight");
        add(b + "ffn_up.weight", h + "mlp.up_proj.weight");
        add(b + "ffn_down.weight", h + "mlp.down_proj.weight");
    }
    add("output_norm.weight", "model.norm.weight");
    if (!s.tieWordEmbeddings)
        add("output.weight", "lm_head.weight");
    if (rope == "llama3") {
        TensorPlan p;
        p.name = "rope_freqs.weight";
        p.computed = llama3RopeFactors(s);
        p.shape = {p.computed.size(0)};
        plans.push_back(std::move(p));
    }
    // Types: matrices take the requested type (for q4_k_m, llama-quantize's mix); norms, biases
    // and rope factors stay f32; a matrix whose rows are not whole blocks of its type falls back
    // as llama.cpp's tools do (to q5_0, q8_0 or f16), and the result says which.
    uint64_t offset = 0;
    GgufResult result;
    for (auto& p : plans) {
        int64_t numel = 1;
        for (int64_t d : p.shape)
            numel *= d;
        if (p.name.rfind("blk.", 0) == 0)
            p.layer = std::stoll(p.name.substr(4, p.name.find('.', 4) - 4));
        if (p.shape.size() < 2) {
            p.type = ggml::F32;
        } else {
            const ggml::Type chosen
                = q4km ? q4kmTypeOf(p.name, p.layer, s.numLayers, s.tieWordEmbeddings) : want;
            p.type = fallbackOf(chosen, p.shape.back());
            if (p.type != chosen)
                result.fallbacks.push_back(p.name + ": " + ggml::typeName(p.type) + " instead of "
                    + ggml::typeName(chosen) + " (rows of " + std::to_string(p.shape.back())
                    + " values are not whole " + std::to_string(ggml::blockValues(chosen))
                    + "-value blocks)");
        }
        ++result.types[ggml::typeName(p.type)];
        p.bytes = ggml::bytesOf(p.type, numel);
        p.offset = offset;
        offset += (p.bytes + kAlignment - 1) / kAlignment * kAlignment;
    }

    // ---- write
    const std::string partial = outFile + ".partial";
    std::error_code ec;
    if (fs::path(outFile).has_parent_path())
        fs::create_directories(fs::path(outFile).parent_path(), ec);
    try {
        OutFile f(partial);
        Bytes head;
        head.raw("GGUF", 4);
        head.u32(3);
        head.u64(plans.size());
        head.u64(md.count);
        f.write(head.data.data(), head.data.size());
        f.write(md.bytes.data.data(), md.bytes.data.size());
        Bytes infos;
        for (const auto& p : plans) {
            infos.str(p.name);
            infos.u32(uint32_t(p.shape.size()));
            for (auto d = p.shape.rbegin(); d != p.shape.rend(); ++d) // ggml: innermost first
                infos.u64(uint64_t(*d));
            infos.u32(p.type);
            infos.u64(p.offset);
        }
        f.write(infos.data.data(), infos.data.size());
        f.pad();
        const uint64_t dataStart = f.pos();
        std::vector<char> q;
        for (const auto& p : plans) {
            at::Tensor t = p.source.empty() ? p.computed : folder.weights->tensor(p.source);
            t = t.to(at::kFloat).contiguous();
            if (p.permuteHeads > 0)
                t = permuteRows(t, p.permuteHeads);
            if (f.pos() - dataStart != p.offset)
                fail("internal: tensor " + p.name + " is not at its offset");
            if (p.type == ggml::F32) {
                f.write(t.data_ptr(), p.bytes);
            } else if (p.type == ggml::F16) {
                const at::Tensor h = t.to(at::kHalf).contiguous();
                f.write(h.data_ptr(), p.bytes);
            } else if (p.type == ggml::BF16) {
                const at::Tensor h = t.to(at::kBFloat16).contiguous();
                f.write(h.data_ptr(), p.bytes);
            } else {
                ggml::quantize(p.type, t.data_ptr<float>(), t.numel(), q);
                f.write(q.data(), q.size());
            }
            f.pad();
            if (options.progress)
                options.progress(int64_t(&p - plans.data()) + 1, int64_t(plans.size()));
        }
        result.bytes = int64_t(f.pos());
        f.close();
        fs::rename(partial, outFile);
    } catch (...) {
        fs::remove(partial, ec);
        throw;
    }
    result.file = outFile;
    result.architecture = arch;
    result.tokenizerModel = vocab.model;
    result.pre = vocab.pre;
    result.tensors = int64_t(plans.size());
    if (options.modelfile) {
        fs::path mf = fs::path(outFile);
        mf.replace_extension(".Modelfile");
        writeModelfile(mf.string(), fs::path(outFile).filename().string(), tok);
        result.modelfile = mf.string();
    }
    return result;
}

} // namespace shard::ckpt
