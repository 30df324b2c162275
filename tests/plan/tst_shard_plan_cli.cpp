// The real `shard` binary: `shard plan` and `shard models` output, JSON fields, and one clear
// stderr line with a non-zero exit for each bad input.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "check.h"
#include "plan/model_spec.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Result {
    int code = -1;
    std::string out;
    std::string err;
};

fs::path tempDir()
{
    static fs::path dir = [] {
        fs::path d = fs::temp_directory_path() / ("shard_tst_cli_" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

std::string slurp(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

Result shard(const std::string& args)
{
    const fs::path out = tempDir() / "out.txt", err = tempDir() / "err.txt";
    std::string cmd = std::string("'") + SHARD_BINARY_DIR + "/app/shard' " + args + " >'"
        + out.string() + "' 2>'" + err.string() + "'";
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

size_t lineCount(const std::string& s)
{
    size_t n = 0;
    for (char c : s)
        n += c == '\n';
    return n + (!s.empty() && s.back() != '\n');
}

// A failing invocation: non-zero exit, exactly one line on stderr that contains `needle`.
void expectError(const std::string& args, const std::string& needle)
{
    Result r = shard(args);
    if (r.code == 0 || lineCount(r.err) != 1 || r.err.find(needle) == std::string::npos)
        shard::plan::test::fail(__FILE__, __LINE__,
            "shard " + args + " -> exit " + std::to_string(r.code) + ", stderr: " + r.err
                + " (wanted one line containing '" + needle + "')");
}

void testHumanTable()
{
    Result r = shard("plan --model llama-2-7b --gpus 8 --strategy zero3 --precision bf16-mixed "
                     "--checkpointing full --micro-batch 2 --seq-len 4096");
    CHECK_EQ(r.code, 0);
    CHECK(r.err.empty());
    for (const char* s : {"llama-2-7b", "6,738,415,616", "ddp", "zero1", "zero2", "[zero3]",
             "sharded params", "gathered params", "grads", "optimizer", "activations", "logits",
             "comm buffers", "overhead", "total", "Verdict: zero3 FITS",
             "largest micro-batch that fits", "fewest GPUs that fit", "FLOPs per token",
             "sent per GPU per step", "roofline step time"})
        if (r.out.find(s) == std::string::npos)
            shard::plan::test::fail(__FILE__, __LINE__, std::string("table lacks '") + s + "'");
    // The checkpoint: 12 bytes (fp32 weight, AdamW m and v) per parameter, an eighth per rank.
    {
        char ckpt[96];
        std::snprintf(ckpt, sizeof ckpt, "%.2f on disk, %.2f per rank",
            12.0 * 6738415616.0 / (1 << 30), 12.0 * 6738415616.0 / 8 / (1 << 30));
        if (r.out.find(ckpt) == std::string::npos)
            shard::plan::test::fail(
                __FILE__, __LINE__, std::string("no checkpoint row '") + ckpt + "' in:\n" + r.out);
    }
    // GiB with two decimals: the zero3 sharded fp32 params = 4 x 6,738,415,616 / 8 bytes.
    char shard3[32];
    std::snprintf(shard3, sizeof shard3, "%.2f", 4.0 * 6738415616.0 / 8 / (1 << 30));
    CHECK(r.out.find(shard3) != std::string::npos);
    // Every line fits 100 columns.
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
        CHECK(line.size() <= 100);
}

void testJson()
{
    Result r = shard("plan --model llama-2-7b --gpus 8 --strategy zero3 --checkpointing full "
                     "--micro-batch 2 --seq-len 4096 --json");
    CHECK_EQ(r.code, 0);
    json j = json::parse(r.out, nullptr, false);
    CHECK(!j.is_discarded());
    if (j.is_discarded())
        return;
    CHECK(j["params"].is_number_integer());
    CHECK_EQ(j["params"].get<int64_t>(), int64_t(6738415616));
    CHECK(j["fits"].is_boolean() && j["fits"].get<bool>());
    int64_t sum = 0;
    for (auto& [k, v] : j["per_device"].items())
        if (k != "total")
            sum += v.get<int64_t>();
    CHECK_EQ(sum, j["per_device"]["total"].get<int64_t>());
    CHECK_EQ(j["per_device"]["sharded_params"].get<int64_t>(), int64_t(4) * 6738415616 / 8);
    for (const char* s : {"ddp", "zero1", "zero2", "zero3"})
        CHECK(j["strategies"].contains(s) && j["strategies"][s].contains("per_device")
            && j["strategies"][s]["per_device"].contains("total"));
    CHECK_EQ(j["strategies"]["zero3"]["per_device"], j["per_device"]);
    CHECK(!j["strategies"]["ddp"]["fits"].get<bool>());
    CHECK(j["largest_micro_batch"].get<int64_t>() > 2);
    CHECK_EQ(j["fewest_gpus"].get<int64_t>(), int64_t(2));
    CHECK_EQ(j["flops_per_token"].get<double>(), 6.0 * 6738415616 + 12.0 * 32 * 4096 * 4096);

    // CPU device and the ZeRO-paper mode.
    Result c = shard("plan --model tiny-15m --gpus 2 --gpu-memory cpu --precision fp32 "
                     "--seq-len 256 --micro-batch 4 --json");
    CHECK_EQ(c.code, 0);
    json cj = json::parse(c.out, nullptr, false);
    CHECK(!cj.is_discarded() && cj["device"]["kind"] == "cpu");
    Result p = shard("plan --model llama-2-7b --gpus 8 --nodes 8 --mode zero-paper --json");
    CHECK_EQ(p.code, 0);
    json pj = json::parse(p.out, nullptr, false);
    CHECK(!pj.is_discarded() && pj["mode"] == "zero-paper" && pj["gpus"] == 64);
    // The paper's volumes are 16-bit elements: the table does not call its 2-byte reduce fp32.
    Result pt = shard("plan --model llama-2-7b --gpus 8 --mode zero-paper");
    CHECK_EQ(pt.code, 0);
    const size_t sent = pt.out.find("sent per GPU per step");
    CHECK(sent != std::string::npos);
    if (sent != std::string::npos) {
        const std::string line = pt.out.substr(sent, pt.out.find('\n', sent) - sent);
        if (line.find("fp32") != std::string::npos || line.find("reduces") == std::string::npos
            || line.find("16-bit") == std::string::npos)
            shard::plan::test::fail(__FILE__, __LINE__, "zero-paper comm line: " + line);
    }
    Result h = shard("plan --model llama-3-8b --gpus 8 --nodes 2 --strategy hybrid --shard-group 8 "
                     "--offload optimizer");
    CHECK_EQ(h.code, 0);
    CHECK(h.out.find("[hybrid/8]") != std::string::npos);
    CHECK(h.out.find("host RAM (offloaded)") != std::string::npos);
}

void testCalibration()
{
    Result show = shard("plan --show-calibration");
    CHECK_EQ(show.code, 0);
    json cal = json::parse(show.out, nullptr, false);
    CHECK(!cal.is_discarded() && cal.contains("act_per_hidden") && cal.contains("zero_paper_k"));
    // A calibration file changes the prediction without a rebuild.
    fs::path file = tempDir() / "cal.json";
    std::ofstream(file) << R"({"gpu_overhead_bytes": 0, "gpu_fragmentation": 0})";
    Result r = shard("plan --model llama-2-7b --gpus 8 --seq-len 1024 --json --calibration '"
        + file.string() + "'");
    CHECK_EQ(r.code, 0);
    json j = json::parse(r.out, nullptr, false);
    CHECK(!j.is_discarded() && j["per_device"]["overhead"] == 0);
    std::ofstream(file) << R"({"gpu_overhead": 1})";
    expectError("plan --model llama-2-7b --calibration '" + file.string() + "'",
        "cal.json: calibration: unknown key 'gpu_overhead'");
}

void testHfFolder()
{
    // A Hugging Face folder written from a preset plans like the preset.
    fs::path dir = tempDir() / "Qwen2.5-7B";
    fs::create_directories(dir);
    std::ofstream(dir / "config.json")
        << shard::plan::toHfConfig(*shard::plan::findPreset("qwen2.5-7b")).dump(2);
    Result r = shard("plan --model '" + dir.string() + "' --gpus 4 --seq-len 2048 --json");
    CHECK_EQ(r.code, 0);
    json j = json::parse(r.out, nullptr, false);
    CHECK(!j.is_discarded() && j["params"] == 7615616512LL && j["model"] == "Qwen2.5-7B");
}

// `shard doctor`: the real checks of this machine (the build tree's worker is found and its
// LibTorch named; a machine without a GPU trains on the CPU), and a missing worker is the one
// failure, with the command that fixes it.
void testDoctor()
{
    Result r = shard("doctor");
    CHECK(r.out.find("shard-worker") != std::string::npos);
    if (fs::exists(fs::path(SHARD_BINARY_DIR) / "engine" / "worker" / "shard-worker")) {
        CHECK_EQ(r.code, 0);
        CHECK(r.out.find("LibTorch") != std::string::npos);
    }
    Result j = shard("doctor --json");
    const json d = json::parse(j.out, nullptr, false);
    CHECK(d.is_object() && d["checks"].is_array());
    bool worker = false, system = false, gpu = false;
    for (const auto& c : d["checks"]) {
        CHECK(c.contains("status") && c.contains("detail") && c.contains("fix"));
        if (c["name"] == "shard-worker")
            worker = c["status"] == "ok";
        if (c["name"] == "system")
            system = c["detail"].get<std::string>().find("GiB RAM") != std::string::npos;
        if (c["name"] == "gpu")
            gpu = true;
        if (c["status"] == "missing") // anything missing says how to fix it
            CHECK(!c["fix"].get<std::string>().empty());
    }
    // The build tree's worker, when this build has one.
    if (fs::exists(fs::path(SHARD_BINARY_DIR) / "engine" / "worker" / "shard-worker"))
        CHECK(worker);
    CHECK(system && gpu);
    const std::string cmd = std::string("SHARD_WORKER=/nonexistent/shard-worker '")
        + SHARD_BINARY_DIR + "/app/shard' doctor > '" + (tempDir() / "doctor.txt").string()
        + "' 2>&1";
    const int status = std::system(cmd.c_str());
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    const std::string out = slurp(tempDir() / "doctor.txt");
    CHECK(out.find("MISSING shard-worker") != std::string::npos);
    CHECK(out.find("fix: build it") != std::string::npos);
}

void testModels()
{
    Result r = shard("models");
    CHECK_EQ(r.code, 0);
    CHECK(r.out.find("6,738,415,616") != std::string::npos);
    CHECK(r.out.find("tiny-1m") != std::string::npos);
    Result j = shard("models --json");
    CHECK_EQ(j.code, 0);
    json a = json::parse(j.out, nullptr, false);
    CHECK(a.is_array());
    bool found = false;
    for (auto& m : a)
        if (m["name"] == "qwen2.5-7b") {
            found = true;
            CHECK_EQ(m["params"].get<int64_t>(), int64_t(7615616512));
            CHECK_EQ(m["config"]["model_type"], "qwen2");
        }
    CHECK(found);
}

// --method lora / qlora: the new rows and JSON categories; full fine-tuning shows none of them.
void testLora()
{
    const std::string base = "plan --model llama-3.1-8b --gpus 1 --strategy ddp --gpu-memory 24 "
                             "--micro-batch 2 --seq-len 2048 --checkpointing full";
    Result full = shard(base);
    CHECK_EQ(full.code, 0);
    CHECK(full.out.find("frozen base") == std::string::npos);
    CHECK(full.out.find("Method  full fine-tuning") != std::string::npos);
    Result q = shard(base + " --method qlora --lora-rank 16 --lora-targets q,k,v,o,gate,up,down");
    CHECK_EQ(q.code, 0);
    for (const char* s : {"Method  qlora, rank 16", "41,943,040 adapter parameters", "frozen base",
             "NF4 base", "adapters", "adapter grads", "adapter optimizer", "Verdict: ddp FITS"})
        if (q.out.find(s) == std::string::npos)
            shard::plan::test::fail(
                __FILE__, __LINE__, std::string("qlora table lacks '") + s + "'");
    Result j = shard(base + " --method lora --json");
    CHECK_EQ(j.code, 0);
    json p = json::parse(j.out, nullptr, false);
    CHECK(!p.is_discarded());
    if (p.is_discarded())
        return;
    CHECK_EQ(p["method"].get<std::string>(), std::string("lora"));
    CHECK_EQ(p["lora"]["adapter_params"].get<int64_t>(), int64_t(6815744));
    CHECK_EQ(p["per_device"]["frozen_base"].get<int64_t>(), int64_t(2) * 8030261248);
    CHECK_EQ(p["per_device"]["adapter_optimizer"].get<int64_t>(), int64_t(8) * 6815744);
    int64_t sum = 0;
    for (auto& [k, v] : p["per_device"].items())
        if (k != "total")
            sum += v.get<int64_t>();
    CHECK_EQ(sum, p["per_device"]["total"].get<int64_t>());
    // zero3 shards the frozen base, ddp keeps it whole.
    CHECK(p["strategies"]["zero3"]["per_device"]["frozen_base"].get<int64_t>()
        == p["strategies"]["ddp"]["per_device"]["frozen_base"].get<int64_t>()); // one GPU
    expectError(base + " --method dora", "unknown method 'dora'");
    expectError(base + " --method lora --lora-targets q,gatee", "unknown LoRA target 'gatee'");
    expectError(base + " --method lora --lora-rank 0", "--lora-rank must be a positive integer");
}

void testErrors()
{
    expectError("plan --model llama2-7b --gpus 8", "did you mean llama-2-7b");
    expectError("plan --gpus 8", "--model is required");
    // Malformed and incomplete config.json: the message names the file / field.
    fs::path bad = tempDir() / "bad-model";
    fs::create_directories(bad);
    std::ofstream(bad / "config.json") << "{\"model_type\": \"llama\",";
    expectError("plan --model '" + bad.string() + "'", "config.json: not valid JSON");
    std::ofstream(bad / "config.json")
        << R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
               "num_hidden_layers": 32, "num_attention_heads": 32})";
    expectError("plan --model '" + bad.string() + "'", "'intermediate_size' is missing");
    std::ofstream(bad / "config.json")
        << R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": "big",
               "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32})";
    expectError("plan --model '" + bad.string() + "'", "'hidden_size' must be an integer");
    fs::path empty = tempDir() / "no-config";
    fs::create_directories(empty);
    expectError("plan --model '" + empty.string() + "'", "no such file");

    expectError("plan --model llama-2-7b --gpus 8 --strategy hybrid --shard-group 3",
        "hybrid shard group 3 does not divide the 8 GPUs");
    expectError("plan --model llama-2-7b --gpus 8 --strategy zero3 --shard-group 2",
        "--shard-group applies only to --strategy hybrid");
    expectError("plan --model llama-2-7b --gpus 0", "--gpus must be a positive integer (got 0)");
    expectError("plan --model llama-2-7b --micro-batch -1", "--micro-batch must be a positive");
    expectError("plan --model llama-2-7b --seq-len abc", "--seq-len: 'abc' is not an integer");
    expectError("plan --model llama-2-7b --gpu-memory -24", "--gpu-memory must be a positive");
    expectError(
        "plan --model llama-2-7b --seq-len 8192", "longer than llama-2-7b's maximum of 4096");
    expectError("plan --model llama-2-7b --strategy zero4", "unknown strategy 'zero4'");
    expectError("plan --model llama-2-7b --precision int8", "unknown precision 'int8'");
    expectError("plan --model tiny-1m --seq-len 128 --gpu-memory cpu --offload optimizer",
        "means nothing on a CPU device");

    // zero3 on one GPU is allowed, with a note.
    Result one = shard("plan --model tiny-1m --gpus 1 --strategy zero3 --seq-len 128");
    CHECK_EQ(one.code, 0);
    CHECK(one.out.find("sharding gains nothing on 1 GPU") != std::string::npos);
}

// Other engines' configs: `--deepspeed` with DeepSpeed's accounting beside the engine's, the
// exports written to files and planned again, and a bad config refused in one line.
void testEngineConfigs()
{
    const fs::path dir = tempDir();
    // A plan exported as a DeepSpeed config, then planned from it (the seeds' 2 x 8 GPUs).
    Result exp = shard("plan --model llama-2-7b --gpus 8 --nodes 2 --offload optimizer "
                       "--micro-batch 2 --export deepspeed --out '"
        + (dir / "ds.json").string() + "'");
    CHECK_EQ(exp.code, 0);
    CHECK(exp.out.empty());
    CHECK(exp.err.find("not in the deepspeed output: sequence length") != std::string::npos);
    Result ds = shard("plan --deepspeed '" + (dir / "ds.json").string()
        + "' --model llama-2-7b --gpus 8 --nodes 2");
    CHECK_EQ(ds.code, 0);
    for (const char* needle : {"ZeRO stage 3, offload optimizer to cpu (pinned), bf16-mixed, "
                               "micro-batch 2 x accumulation 1 x 16 GPUs = train_batch_size 32",
             "DeepSpeed's own estimator (estimate_zero3_model_states_mem_needs",
             "Shard Studio zero3", "Where DeepSpeed differs"})
        if (ds.out.find(needle) == std::string::npos)
            shard::plan::test::fail(
                __FILE__, __LINE__, std::string("no '") + needle + "' in\n" + ds.out);
    Result js = shard("plan --deepspeed '" + (dir / "ds.json").string()
        + "' --model llama-2-7b --gpus 8 --nodes 2 --json");
    CHECK_EQ(js.code, 0);
    const nlohmann::json j = nlohmann::json::parse(js.out);
    CHECK_EQ(j["config"]["deepspeed"]["stage"].get<int>(), 3);
    CHECK(j["deepspeed"]["per_device"]["total"].get<int64_t>() > 0);
    CHECK(j["engine"]["per_device"]["total"].get<int64_t>() > 0);
    CHECK(j["deepspeed_estimator"]["gpu_bytes"].get<int64_t>() > 0);
    // accelerate and torchtitan exports plan again as the same layout.
    CHECK_EQ(shard("plan --model llama-2-7b --gpus 8 --nodes 2 --strategy hybrid --shard-group 8 "
                   "--checkpointing full --export accelerate --out '"
                 + (dir / "acc.yaml").string() + "'")
                 .code,
        0);
    Result acc = shard(
        "plan --accelerate '" + (dir / "acc.yaml").string() + "' --model llama-2-7b --json");
    CHECK_EQ(acc.code, 0);
    const nlohmann::json a = nlohmann::json::parse(acc.out);
    CHECK_EQ(a["config"]["strategy"].get<std::string>(), std::string("hybrid"));
    CHECK_EQ(a["config"]["gpus"].get<int64_t>(), 16);
    CHECK_EQ(a["checkpointing"].get<std::string>(), std::string("full"));
    Result tt = shard("plan --model llama-2-7b --gpus 8 --strategy zero2 --export torchtitan");
    CHECK_EQ(tt.code, 0);
    CHECK(tt.out.find("fsdp_reshard_after_forward = 'never'") != std::string::npos);
    Result sb = shard("plan --model llama-2-7b --gpus 8 --nodes 4 --export sbatch --script run.py");
    CHECK(sb.out.find("#SBATCH --nodes=4") != std::string::npos);
    CHECK(sb.out.find("run.py") != std::string::npos);
    // Bad input: one line naming the file and the fix.
    std::ofstream(dir / "bad.json") << R"({"train_batch_size": 30,
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})";
    expectError(
        "plan --deepspeed '" + (dir / "bad.json").string() + "' --model llama-2-7b --gpus 8",
        "train_batch_size 30 is not train_micro_batch_size_per_gpu 2");
    // The config decides the strategy: a flag that would too is refused by the parser.
    Result both = shard("plan --deepspeed '" + (dir / "ds.json").string()
        + "' --model llama-2-7b --gpus 8 --strategy zero2");
    CHECK(both.code != 0);
    CHECK(both.err.find("--strategy excludes --deepspeed") != std::string::npos);
    expectError("plan --model llama-2-7b --export megatron", "--export 'megatron' is not one of");
}

} // namespace

namespace {

// Tensor and pipeline parallelism (issue 29): the seeds' 70B layout, in the paper's accounting
// (it fits 80 GB) and, by default, in the engine's (as this engine would train it); its mesh in
// the table and the JSON; the engine accounting refuses what the engine does not train.
void testTensorPipeline()
{
    const std::string flags = "plan --model llama-2-70b --gpus 8 --nodes 8 --tp 4 --pp 2 "
                              "--strategy zero1 --grad-accum 16 --seq-len 4096 "
                              "--sequence-parallel";
    Result r = shard(flags + " --mode zero-paper");
    CHECK_EQ(r.code, 0);
    for (const char* s : {"zero-paper accounting",
             "Layout  pp 2 x dp_replicate 1 x dp_shard 8 x tp 4", "Verdict: zero1 FITS",
             "memory peak at", "pipeline stage 0", "parameters per GPU", "pipeline bubble", "+ TP ",
             "or export the plan for torchtitan", "with sequence parallel"})
        if (r.out.find(s) == std::string::npos)
            shard::plan::test::fail(
                __FILE__, __LINE__, std::string("3D table lacks '") + s + "'\n" + r.out);
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind("Note:", 0) != 0)
            CHECK(line.size() <= 100);
    Result j = shard(flags + " --json");
    CHECK_EQ(j.code, 0);
    const json plan = json::parse(j.out, nullptr, false);
    CHECK(!plan.is_discarded());
    if (!plan.is_discarded()) {
        CHECK_EQ(plan["mesh"]["tp"].get<int64_t>(), int64_t(4));
        CHECK_EQ(plan["mesh"]["dp_shard"].get<int64_t>(), int64_t(8));
        CHECK_EQ(plan["mode"].get<std::string>(), std::string("engine"));
        CHECK(plan["sequence_parallel"].get<bool>());
        CHECK(plan["per_device"]["activations"].get<int64_t>() > 0);
    }
    const Result e = shard(flags);
    CHECK_EQ(e.code, 0);
    CHECK(e.out.find("engine accounting: each rank's tensor-parallel slice") != std::string::npos);
    // Offload under the layout: each rank's optimizer state planned in host memory.
    const Result off = shard(flags + " --offload optimizer --json");
    CHECK_EQ(off.code, 0);
    const json offPlan = json::parse(off.out, nullptr, false);
    CHECK(!offPlan.is_discarded() && offPlan.value("host_per_device", int64_t(0)) > 0);
    // Sequence parallel needs tensor parallel and a sequence length it divides.
    expectError("plan --model llama-2-70b --gpus 8 --pp 2 --sequence-parallel",
        "use --tensor-parallel 2 or more, or drop --sequence-parallel");
    expectError("plan --model llama-2-70b --gpus 8 --nodes 8 --tp 4 --pp 2 --strategy zero1 "
                "--grad-accum 16 --seq-len 4094 --sequence-parallel",
        "use --seq-len 4092 or 4096");
    expectError("plan --model llama-2-70b --gpus 8 --tp 3",
        "tensor parallel size 3 does not divide the 8 GPUs; use a divisor of 8 (1, 2, 4, 8)");
    expectError(flags + " --export deepspeed", "written for torchtitan only");
    // Interleaved 1F1B: the JSON carries the chunks and the smaller bubble; a micro-batch count
    // that is not a multiple of the stages is refused with the nearest that are.
    Result v = shard(flags + " --virtual-stages 2 --json");
    CHECK_EQ(v.code, 0);
    const json iv = json::parse(v.out, nullptr, false);
    CHECK(!iv.is_discarded());
    if (!iv.is_discarded() && !plan.is_discarded()) {
        CHECK_EQ(iv["virtual_stages"].get<int64_t>(), int64_t(2));
        CHECK_NEAR(iv["bubble_fraction"].get<double>(), 1.0 / 33.0, 1e-12);
        CHECK_NEAR(plan["bubble_fraction"].get<double>(), 1.0 / 17.0, 1e-12);
    }
    expectError("plan --model llama-2-70b --gpus 8 --nodes 8 --tp 4 --pp 2 --grad-accum 5 "
                "--virtual-stages 2",
        "gradient accumulation 5 is not a multiple of 2; use gradient accumulation 4 or 6");
}

// `--recommend-layout`: every layout of the GPUs with Megatron's formula beside it, the pick
// marked and said with its reason; the same as JSON.
void testRecommendLayout()
{
    const std::string flags = "plan --model llama-2-70b --gpus 8 --nodes 8 --strategy zero1 "
                              "--grad-accum 16 --seq-len 4096 --checkpointing full "
                              "--recommend-layout";
    Result r = shard(flags);
    CHECK_EQ(r.code, 0);
    for (const char* s : {"Layouts of 64 GPUs for llama-2-70b", "global batch 1024 sequences",
             "Megatron GiB", "DP 64 x TP 1 x PP 1", "DP 8 x TP 4 x PP 2", "Recommended: DP ",
             "data parallelism alone (DP 64 x TP 1 x PP 1) needs"})
        if (r.out.find(s) == std::string::npos)
            shard::plan::test::fail(
                __FILE__, __LINE__, std::string("layouts lack '") + s + "'\n" + r.out);
    size_t marked = 0;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);)
        marked += line.rfind("* DP ", 0) == 0;
    CHECK_EQ(marked, size_t(1));
    Result j = shard(flags + " --json");
    CHECK_EQ(j.code, 0);
    const json rec = json::parse(j.out, nullptr, false);
    CHECK(!rec.is_discarded());
    if (!rec.is_discarded()) {
        CHECK_EQ(rec["gpus"].get<int64_t>(), int64_t(64));
        CHECK_EQ(rec["global_batch"].get<int64_t>(), int64_t(1024));
        CHECK(rec["best"].is_object());
        CHECK_EQ(rec["layouts"].size(), size_t(22));
        for (const auto& l : rec["layouts"])
            if (l.contains("per_device"))
                CHECK(l["megatron"]["total"].get<double>() > 0);
    }
}

} // namespace

int main()
{
    if (!fs::exists(fs::path(SHARD_BINARY_DIR) / "app" / "shard")) {
        std::fprintf(stderr, "shard binary not built at %s/app/shard\n", SHARD_BINARY_DIR);
        return 1;
    }
    testHumanTable();
    testJson();
    testModels();
    testDoctor();
    testHfFolder();
    testCalibration();
    testLora();
    testErrors();
    testEngineConfigs();
    testTensorPipeline();
    testRecommendLayout();
    fs::remove_all(tempDir());
    return shard::plan::test::finish("tst_shard_plan_cli");
}
