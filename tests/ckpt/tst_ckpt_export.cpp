// Export of a sharded checkpoint to a Hugging Face folder: fp32 reads back bit-exact, bf16 is
// round-to-nearest-even of the fp32 values (checked against an independent bit computation),
// sharded output with an index, config.json and tokenizer files, and the error cases.
#include <algorithm>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "ckpt/hf_export.h"
#include "ckpt_test_util.h"
#include "core/safetensors/safetensors_file.h"
#include "plan/model_spec.h"

using namespace shard::ckpt;
using namespace ckpt_test;
namespace fs = std::filesystem;

static const std::vector<std::pair<std::string, std::vector<int64_t>>> kShapes {
    {"model.embed_tokens.weight", {64, 16}}, {"model.layers.0.mlp.up_proj.weight", {32, 16}},
    {"model.norm.weight", {16}}, {"lm_head.weight", {64, 16}}};

static uint16_t bf16Rne(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t lsb = (u >> 16) & 1u;
    return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

static Synthetic withTies()
{
    Synthetic s = makeSynthetic(kShapes, 11);
    // Exact ties between two bf16 values must round to the even one.
    float* p = s.param[2].data_ptr<float>();
    p[0] = 1.0f + 1.0f / 256;         // halfway between 1 and 1 + 2^-7: rounds down to 1
    p[1] = 1.0f + 3.0f / 256;         // halfway: rounds up to 1 + 2^-6
    p[2] = -(1.0f + 1.0f / 256);      //
    p[3] = 1.0f + 1.0f / 256 + 1e-6f; // just above the tie: rounds up
    return s;
}

static void writeTokenizer(const std::string& dir)
{
    fs::create_directories(dir);
    std::ofstream(dir + "/tokenizer.json") << R"({"model":{"type":"BPE"}})";
    std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token":"</s>"})";
    std::ofstream(dir + "/notes.txt") << "not a tokenizer file";
}

static std::string saveWithSource(const Synthetic& s, const std::string& root,
    const std::string& modelDir, const std::string& strategy, int world)
{
    // saveSynthetic does not set the model source; patch the manifest fields through a save
    // with a request of our own at one rank, or use the threads helper for several ranks.
    auto res = saveSynthetic(s, root + "/checkpoints", 7, strategy, world);
    const std::string manifestPath = res.dir + "/manifest.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(manifestPath));
    j["model_source"] = modelDir;
    std::ofstream(manifestPath) << j.dump(1);
    return res.dir;
}

static void testFp32()
{
    TempDir tmp;
    const Synthetic s = withTies();
    writeTokenizer(tmp.path + "/model");
    const std::string ckpt = saveWithSource(s, tmp.path, tmp.path + "/model", "zero3", 3);
    const std::string out = tmp.path + "/export";
    ExportResult r = exportHuggingFace(ckpt, out, {});
    CHECK(r.weightFiles == std::vector<std::string>({"model.safetensors"}));
    CHECK(r.tokenizerFiles.size() == 2 && r.warning.empty());
    CHECK(fs::exists(out + "/tokenizer.json") && !fs::exists(out + "/notes.txt"));
    CHECK(!fs::exists(out + ".tmp"));
    // One full tensor at a time: the largest is 64 x 16 floats.
    CHECK(r.peakTensorBytes == 64 * 16 * 4);
    shard::engine::SafetensorsReader reader(out);
    CHECK(reader.names().size() == s.specs.size());
    for (size_t i = 0; i < s.specs.size(); ++i)
        CHECK(bitEqual(reader.tensor(s.specs[i].name), s.param[i]));
    const auto spec = shard::plan::loadHfConfig(out);
    CHECK(spec.numLayers == 2 && spec.hiddenSize == 16 && spec.torchDtype == "float32");
}

static void testBf16AndShards()
{
    TempDir tmp;
    const Synthetic s = withTies();
    const std::string ckpt = saveWithSource(s, tmp.path, tmp.path + "/gone", "ddp", 2);
    const std::string out = tmp.path + "/export";
    ExportOptions o;
    o.dtype = "bf16";
    o.maxShardBytes = 3000; // forces one tensor per shard (2 KiB each)
    ExportResult r = exportHuggingFace(ckpt, out, o);
    CHECK(r.weightFiles.size() == 4); // [embed] [up, norm] [lm_head] + index
    CHECK(r.weightFiles.back() == "model.safetensors.index.json");
    CHECK(r.warning.find("no tokenizer copied") != std::string::npos);
    const auto index = nlohmann::json::parse(std::ifstream(out + "/model.safetensors.index.json"));
    CHECK(index["weight_map"]["lm_head.weight"] == "model-00003-of-00003.safetensors");
    CHECK(index["weight_map"]["model.norm.weight"] == "model-00002-of-00003.safetensors");
    CHECK(index["metadata"]["total_size"] == r.bytes);
    CHECK(r.bytes == (64 * 16 * 2 + 32 * 16 + 16) * 2);
    shard::engine::SafetensorsReader reader(out);
    for (size_t i = 0; i < s.specs.size(); ++i) {
        const at::Tensor t = reader.tensor(s.specs[i].name);
        CHECK(t.scalar_type() == at::kBFloat16);
        const at::Tensor src = s.param[i].contiguous();
        const float* f = src.data_ptr<float>();
        const uint16_t* b = static_cast<const uint16_t*>(t.contiguous().data_ptr());
        int64_t bad = 0;
        for (int64_t k = 0; k < src.numel(); ++k)
            bad += b[k] != bf16Rne(f[k]);
        CHECK(bad == 0);
    }
    const at::Tensor norm = reader.tensor("model.norm.weight").to(at::kFloat);
    CHECK(norm[0].item<float>() == 1.0f);
    CHECK(norm[1].item<float>() == 1.0f + 1.0f / 64);
    CHECK(norm[2].item<float>() == -1.0f);
    CHECK(norm[3].item<float>() == 1.0f + 1.0f / 128);
    CHECK(shard::plan::loadHfConfig(out).torchDtype == "bfloat16");
}

static void testErrors()
{
    TempDir tmp;
    const Synthetic s = makeSynthetic(kShapes, 1);
    const std::string ckpt = saveWithSource(s, tmp.path, "", "single", 1);
    fs::create_directories(tmp.path + "/full");
    std::ofstream(tmp.path + "/full/x") << "x";
    CHECK_THROWS_WITH([&] { exportHuggingFace(ckpt, tmp.path + "/full", {}); },
        "already exists and is not an empty folder");
    ExportOptions o;
    o.dtype = "fp8";
    CHECK_THROWS_WITH(
        [&] { exportHuggingFace(ckpt, tmp.path + "/o", o); }, "--dtype fp8", "fp32 or bf16");
    CHECK_THROWS_WITH(
        [&] { exportHuggingFace(tmp.path + "/nope", tmp.path + "/o2", {}); }, "no such directory");
    CHECK(!fs::exists(tmp.path + "/o2") && !fs::exists(tmp.path + "/o2.tmp"));
}

// Runs a shell command, returns its exit status and (stdout+stderr) text.
static int run(const std::string& cmd, std::string& output)
{
    output.clear();
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    char buf[512];
    while (p && std::fgets(buf, sizeof buf, p))
        output += buf;
    const int status = p ? pclose(p) : -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void testCommand()
{
    const char* worker = std::getenv("SHARD_WORKER");
    if (!worker || !fs::exists(worker)) {
        std::printf("SKIP export command: SHARD_WORKER not set\n");
        return;
    }
    TempDir tmp;
    const Synthetic s = makeSynthetic(kShapes, 4);
    writeTokenizer(tmp.path + "/model");
    saveWithSource(s, tmp.path, tmp.path + "/model", "zero3", 2);
    std::string out;
    // A run folder resolves to its newest complete checkpoint.
    CHECK(run(std::string(worker) + " export --checkpoint " + tmp.path + " --out " + tmp.path
                  + "/hf --dtype bf16",
              out)
        == 0);
    CHECK(out.find("step-7") != std::string::npos);
    shard::engine::SafetensorsReader reader(tmp.path + "/hf");
    CHECK(bitEqual(reader.tensor("lm_head.weight"), s.param[3].to(at::kBFloat16)));
    CHECK(fs::exists(tmp.path + "/hf/tokenizer.json"));
    CHECK(run(std::string(worker) + " export --checkpoint " + tmp.path + " --out " + tmp.path
                  + "/hf2 --dtype int4",
              out)
        == 1);
    CHECK(out.find("--dtype int4: use fp32 or bf16") != std::string::npos);
    CHECK(std::count(out.begin(), out.end(), '\n') == 1);
    CHECK(run(std::string(worker) + " export --checkpoint " + tmp.path + "/checkpoints/step-9"
                  + " --out " + tmp.path + "/hf3",
              out)
        == 1);
    CHECK(out.find("no such directory") != std::string::npos);
}

int main()
{
    at::set_num_threads(1);
    testFp32();
    testBf16AndShards();
    testErrors();
    testCommand();
    return finish("export");
}
