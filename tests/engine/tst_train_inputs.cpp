// `shard-worker train` and `launch` as a user runs them, with inputs that used to be accepted
// silently: --threads above the cores, a micro-batch the data or the memory cannot hold, an
// unknown chat template (and the --chat-template that fixes it), --skip-bad-lines (reported in
// events.jsonl), and the rank count given to train instead of the launcher.
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/train/global_batch.h"
#include "core/train/trainer.h"
#include "engine_test_util.h"
#include "plan/planner.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string g_dir;

using Result = shard::test::CommandOutput;

// Runs `shard-worker args` (killed after 120 s: a run that should have been refused must not
// hang the test) and collects its output.
Result worker(const std::string& args)
{
    return shard::test::runCaptured(
        "timeout -s KILL 120 " + std::string(SHARD_WORKER) + " " + args + " 2>&1");
}

bool contains(const Result& r, const std::string& part)
{
    if (r.output.find(part) != std::string::npos)
        return true;
    std::fprintf(stderr, "output lacks '%s':\n%s\n", part.c_str(), r.output.c_str());
    return false;
}

void writeTokenData(const std::string& path, int rows)
{
    std::ofstream out(path);
    for (int i = 0; i < rows; ++i) {
        std::vector<int> ids;
        for (int t = 0; t < 12; ++t)
            ids.push_back(10 + (i + t) % 50);
        out << json {{"input_ids", ids}}.dump() << "\n";
    }
}

std::vector<json> records(const std::string& path)
{
    std::vector<json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);)
        if (!line.empty())
            out.push_back(json::parse(line));
    return out;
}

json event(const std::string& run, const std::string& kind)
{
    for (const auto& e : records(run + "/events.jsonl"))
        if (e.value("kind", "") == kind)
            return e;
    return nullptr;
}

json runSpec(const std::string& run)
{
    std::ifstream in(run + "/run.json");
    return json::parse(in, nullptr, false);
}

std::string g_model, g_data;

std::string trainFlags(
    const std::string& out, const std::string& microBatch = "2", const std::string& threads = "1")
{
    return "train --model " + g_model + " --data " + g_data + " --out " + out
        + " --steps 2 --seq-len 16 --lr 1e-3 --micro-batch " + microBatch + " --threads " + threads;
}

void threads()
{
    const int cores = shard::engine::usableCores();
    const Result r = worker(trainFlags(g_dir + "/threads", "2", "100000"));
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "--threads 100000 is outside 0.." + std::to_string(cores)));
    T_CHECK(contains(r, "use --threads " + std::to_string(cores) + " or less"));
    T_CHECK(!fs::exists(g_dir + "/threads/metrics.jsonl"));
    const Result ok = worker(trainFlags(g_dir + "/threads-ok", "2", std::to_string(cores)));
    T_CHECK_MSG(ok.code == 0, ok.output);
}

void microBatch()
{
    // More rows than the data holds (the run used to grow until the OOM killer came).
    Result r = worker(trainFlags(g_dir + "/huge", "100000000"));
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "--micro-batch 100000000 x 1 ranks needs 100000000 rows"));
    T_CHECK(contains(r, "the training data has 64 records"));
    T_CHECK(contains(r, "the largest micro-batch that fits is 64"));
    // Within the data but beyond the planner's memory estimate for this host.
    shard::plan::PlanInput in;
    in.model = *shard::plan::findPreset("tiny-1m");
    in.strategy = shard::plan::Strategy::Zero3;
    in.precision = shard::plan::Precision::Fp32;
    in.seqLen = 1024;
    in.gpusPerNode = 1;
    in.device = shard::plan::DeviceSpec::cpu(shard::plan::physicalMemoryBytes());
    const int64_t largest = shard::plan::largestMicroBatch(in, 1 << 20);
    if (largest <= 0 || largest > 50000) {
        std::printf("skipping the memory case: the planner's largest micro-batch here is %lld\n",
            static_cast<long long>(largest));
        return;
    }
    const std::string data = g_dir + "/many.jsonl";
    writeTokenData(data, static_cast<int>(largest + 1));
    r = worker("train --model " + g_model + " --data " + data + " --out " + g_dir
        + "/oom --steps 1 --seq-len 1024 --threads 1 --micro-batch " + std::to_string(largest + 1));
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "does not fit in memory"));
    T_CHECK(contains(r, "the largest micro-batch that fits is " + std::to_string(largest)));
}

void chatTemplate()
{
    // A model whose tokenizer_config.json carries a template the engine does not know.
    const std::string model = g_dir + "/chat-model";
    fs::copy(g_model, model, fs::copy_options::recursive);
    json cfg;
    {
        std::ifstream in(model + "/tokenizer_config.json");
        cfg = json::parse(in);
    }
    const std::string llama3 = cfg.at("chat_template").get<std::string>();
    cfg["chat_template"] = "{% for m in messages %}<|user|>{{ m['content'] }}</s>{% endfor %}";
    std::ofstream(model + "/tokenizer_config.json") << cfg.dump();
    const std::string data = g_dir + "/chat.jsonl";
    {
        std::ofstream out(data);
        for (int i = 0; i < 16; ++i)
            out << json {{"messages",
                             {{{"role", "user"}, {"content", "What is " + std::to_string(i) + "?"}},
                                 {{"role", "assistant"}, {"content", std::to_string(i)}}}}}
                       .dump()
                << "\n";
    }
    const std::string base = "train --model " + model + " --data " + data
        + " --steps 1 --seq-len 32 --micro-batch 2 --threads 1 --out " + g_dir;
    Result r = worker(base + "/chat-unknown");
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "not one of the known templates"));
    T_CHECK(contains(r, "--chat-template llama3|chatml|llama2"));
    // The flag the message names exists: a built-in, or a template file of a known family.
    r = worker(base + "/chat-named --chat-template llama3");
    T_CHECK_MSG(r.code == 0, r.output);
    T_CHECK(runSpec(g_dir + "/chat-named").value("chat_template", "") == "llama3");
    std::ofstream(g_dir + "/llama3.jinja") << llama3;
    r = worker(base + "/chat-file --chat-template " + g_dir + "/llama3.jinja");
    T_CHECK_MSG(r.code == 0, r.output);
    r = worker(base + "/chat-bad --chat-template zephyr");
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "unknown chat template 'zephyr': give a built-in"));
    std::ofstream(g_dir + "/other.jinja") << "{{ '<|user|>' + messages[0]['content'] }}";
    r = worker(base + "/chat-other --chat-template " + g_dir + "/other.jinja");
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "other.jinja: the template is not one of the built-in families"));
}

void skippedLines()
{
    const std::string data = g_dir + "/some-bad.jsonl";
    {
        std::ifstream in(g_data);
        std::ofstream out(data);
        int line = 0;
        for (std::string text; std::getline(in, text);) {
            ++line;
            out << ((line == 5 || line == 9 || line == 20) ? "{\"input_ids\": [1, oops" : text)
                << "\n";
        }
    }
    const std::string run = g_dir + "/skip";
    Result r = worker("train --model " + g_model + " --data " + data + " --out " + run
        + " --steps 2 --seq-len 16 --micro-batch 2 --threads 1 --skip-bad-lines");
    T_CHECK_MSG(r.code == 0, r.output);
    const json data0 = event(run, "data");
    T_CHECK_MSG(data0.is_object(), "no data event in events.jsonl");
    if (data0.is_object()) {
        T_CHECK(data0["data"]["skipped_lines"] == 3);
        T_CHECK(data0["data"]["first"].size() == 3);
        T_CHECK(data0["data"]["first"][0].get<std::string>().find("some-bad.jsonl:5:")
            != std::string::npos);
        T_CHECK(data0["message"].get<std::string>().find("skipped 3 bad lines") == 0);
    }
    const json finish = event(run, "finish");
    T_CHECK(finish.is_object() && finish["data"]["skipped_lines"] == 3);
    // Without the flag the first bad line stops the run and names it.
    r = worker("train --model " + g_model + " --data " + data + " --out " + g_dir
        + "/noskip --steps 2 --seq-len 16 --threads 1");
    T_CHECK(r.code == 1);
    T_CHECK(contains(r, "some-bad.jsonl:5:"));
}

void rankCount()
{
    // The rank count given to train only: the launcher starts that many (it used to start 1).
    const std::string run = g_dir + "/ranks-train";
    Result r = worker("launch -- " + trainFlags(run) + " --nproc-per-node 2");
    T_CHECK_MSG(r.code == 0, r.output);
    T_CHECK(runSpec(run).value("procs_per_node", 0) == 2);
    const json start = event(run, "start");
    T_CHECK(start.is_object() && start["data"]["world_size"] == 2);
    // Given to the launcher only: run.json records it (it said 1) and hybrid checks against it.
    const std::string hybrid = g_dir + "/ranks-hybrid";
    r = worker("launch --nproc-per-node 2 -- " + trainFlags(hybrid)
        + " --strategy hybrid --shard-group 2");
    T_CHECK_MSG(r.code == 0, r.output);
    T_CHECK(runSpec(hybrid).value("procs_per_node", 0) == 2);
    // Two different values are refused, either way round.
    r = worker(
        "launch --nproc-per-node 1 -- " + trainFlags(g_dir + "/ranks-bad") + " --nproc-per-node 2");
    T_CHECK(r.code != 0);
    T_CHECK(contains(r, "give the rank count once"));
}

} // namespace
// The engine's memory check plans a LoRA / QLoRA run as one (frozen base + adapters), not as full
// fine-tuning: Llama-3.1-8B QLoRA fits a host on which its full fine-tuning does not.
void loraMemoryCheck()
{
    const shard::plan::ModelSpec model = *shard::plan::findPreset("llama-3.1-8b");
    shard::protocol::RunSpec spec;
    spec.device = "cpu";
    spec.strategy = "zero3";
    spec.precision = "bf16-mixed";
    spec.checkpointing = "full";
    spec.microBatch = 1;
    spec.seqLen = 128;
    auto total = [&](const std::string& method) {
        shard::plan::PlanInput in;
        in.model = model;
        in.precision = shard::plan::Precision::Bf16Mixed;
        in.checkpointing = shard::plan::Checkpointing::Full;
        in.seqLen = 128;
        in.gpusPerNode = 1;
        in.method = shard::plan::parseMethod(method);
        in.device = shard::plan::DeviceSpec::cpu(shard::plan::physicalMemoryBytes());
        return shard::plan::plan(in).perDevice.total();
    };
    const int64_t ram = shard::plan::physicalMemoryBytes();
    if (total("qlora") > ram || total("full") <= ram) {
        std::printf(
            "skipping the LoRA memory case: %lld bytes of RAM here\n", static_cast<long long>(ram));
        return;
    }
    bool fullRefused = false;
    try {
        shard::engine::checkMicroBatch(spec, model, 1, 1, 64);
    } catch (const std::exception& e) {
        fullRefused = std::string(e.what()).find("does not fit in memory") != std::string::npos;
    }
    T_CHECK(fullRefused);
    spec.method = "qlora";
    bool qloraAccepted = true;
    try {
        shard::engine::checkMicroBatch(spec, model, 1, 1, 64);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qlora refused: %s\n", e.what());
        qloraAccepted = false;
    }
    T_CHECK(qloraAccepted);
}

// Offload checks the node's host memory before anything is allocated: Llama-3.1-8B in bf16 under
// zero3 over 8 ranks of one node holds 16 bytes per parameter over 8 (+2 with params+optimizer)
// per rank, 119.7 GiB (134.6 GiB) for the node.
void offloadHostMemory()
{
    const shard::plan::ModelSpec model = *shard::plan::findPreset("llama-3.1-8b");
    shard::protocol::RunSpec spec;
    spec.device = "cuda";
    spec.strategy = "zero3";
    spec.precision = "bf16-mixed";
    spec.offload = "optimizer";
    auto refusal = [&](int64_t hostBytes) {
        try {
            shard::engine::checkOffloadHostMemory(spec, model, 8, 8, hostBytes);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const int64_t gib = int64_t(1) << 30;
    T_CHECK(refusal(256 * gib).empty());
    const std::string small = refusal(64 * gib);
    T_CHECK_MSG(
        small.find("for this node's 8 ranks, but the node has 64.00 GiB") != std::string::npos
            && small.find("more nodes") != std::string::npos,
        small);
    spec.offload = "params+optimizer";
    const std::string both = refusal(128 * gib);
    T_CHECK_MSG(both.find("params+optimizer keeps 16.83 GiB per rank in host memory, 134.62 GiB")
            != std::string::npos,
        both);
    spec.offload = "optimizer";
    T_CHECK(refusal(128 * gib).empty());
    spec.offload = "none";
    T_CHECK(refusal(1).empty()); // nothing in host memory to check
}

// A copy of the model folder (config.json, weights, tokenizer) at `dst`.
std::string copyModel(const std::string& dst)
{
    fs::remove_all(dst);
    fs::copy(g_model, dst, fs::copy_options::recursive);
    return dst;
}

// Writes NaN into the first element of tensor `name` of dir/model.safetensors (fp32 or bf16),
// through the file's own header: no Torch involved, as a damaged download would be.
bool poisonTensor(const std::string& dir, const std::string& name)
{
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t headerBytes = 0;
    f.read(reinterpret_cast<char*>(&headerBytes), 8);
    std::string header(headerBytes, '\0');
    f.read(header.data(), static_cast<std::streamsize>(headerBytes));
    const json h = json::parse(header, nullptr, false);
    if (!f || !h.is_object() || !h.contains(name))
        return false;
    const std::string dtype = h[name].value("dtype", "");
    f.seekp(
        static_cast<std::streamoff>(8 + headerBytes + h[name]["data_offsets"][0].get<uint64_t>()));
    const unsigned char nanF32[4] = {0x00, 0x00, 0xc0, 0x7f};
    const unsigned char nanBf16[2] = {0xc0, 0x7f};
    if (dtype == "F32")
        f.write(reinterpret_cast<const char*>(nanF32), 4);
    else if (dtype == "BF16")
        f.write(reinterpret_cast<const char*>(nanBf16), 2);
    else
        return false;
    return static_cast<bool>(f);
}

// Damaged model folders (issue 32): a config.json whose layer count the weights do not hold is
// refused before anything its size is allocated (10^9 layers used to grow ~200 MB/s, silently);
// NaN weights are named with the tensor, by train (not "lower the learning rate") and by
// generate (which printed NUL tokens and exited 0).
void damagedModels()
{
    const std::string layers = copyModel(g_dir + "/absurd-layers");
    {
        std::ifstream in(layers + "/config.json");
        json config = json::parse(in);
        config["num_hidden_layers"] = 1000000000;
        std::ofstream(layers + "/config.json") << config.dump(2);
    }
    const std::string absurd = "num_hidden_layers is 1000000000 but the weights";
    Result r = shard::test::runCaptured("timeout -s KILL 30 " + std::string(SHARD_WORKER)
        + " train --model " + layers + " --data " + g_data + " --out " + g_dir
        + "/absurd-run --steps 1 --seq-len 16 --micro-batch 2 --threads 1 2>&1");
    T_CHECK_MSG(r.code == 1, r.output);
    T_CHECK(contains(r, absurd));
    r = shard::test::runCaptured("timeout -s KILL 30 " + std::string(SHARD_WORKER)
        + " generate --model " + layers + " --prompt hi --max-new-tokens 4 2>&1");
    T_CHECK_MSG(r.code == 1, r.output);
    T_CHECK(contains(r, absurd));

    const std::string tensor = "model.layers.0.mlp.up_proj.weight";
    const std::string nan = copyModel(g_dir + "/nan-weights");
    T_CHECK(poisonTensor(nan, tensor));
    r = worker("train --model " + nan + " --data " + g_data + " --out " + g_dir
        + "/nan-run --steps 2 --seq-len 16 --micro-batch 2 --threads 1");
    T_CHECK_MSG(r.code == 1, r.output);
    T_CHECK(contains(r, "the model's weights are damaged: tensor '" + tensor + "' holds NaN"));
    const json error = event(g_dir + "/nan-run", "error");
    T_CHECK_MSG(!error.is_null()
            && error.value("message", "").find("tensor '" + tensor + "' holds NaN")
                != std::string::npos,
        error.dump());
    r = worker("generate --model " + nan + " --prompt hi --max-new-tokens 5");
    T_CHECK_MSG(r.code == 1, r.output);
    T_CHECK(contains(r, "tensor '" + tensor + "' holds NaN"));
    T_CHECK_MSG(r.output.find("\"token\"") == std::string::npos, r.output);
}

int main()
{
    g_dir = shard::test::tempDir("tst_train_inputs");
    g_model = g_dir + "/model";
    g_data = g_dir + "/data.jsonl";
    const Result init = worker("init-model --preset tiny-1m --out " + g_model + " --seed 1");
    if (init.code != 0) {
        std::fprintf(stderr, "init-model failed:\n%s\n", init.output.c_str());
        return 1;
    }
    writeTokenData(g_data, 64);
    threads();
    microBatch();
    loraMemoryCheck();
    offloadHostMemory();
    chatTemplate();
    skippedLines();
    rankCount();
    damagedModels();
    fs::remove_all(g_dir);
    return shard::test::finish("tst_train_inputs");
}
