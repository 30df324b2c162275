// LoRA through the real worker (tiny-1m, fp32, 10 steps, rank 4 on q,k,v,o,gate): ddp, zero2 and
// zero3 at 2 ranks and zero3 at 4 ranks match the 1-rank LoRA run within 1e-5 relative in the
// loss and 1e-4 (L2 relative) in the exported adapters; the frozen base is reported as its own
// memory category and zero3 shards it (1/N); a LoRA run killed with SIGKILL after a checkpoint
// and resumed gives bit-identical losses and adapters; the checkpoint holds the adapters only;
// `--lora-init` continues the exported adapter in its own shape.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "process_runner.h"
#include "run_outputs.h"

using namespace shard::testing;

namespace {

std::string g_dir;

struct Run {
    std::vector<double> losses;
    std::vector<nlohmann::json> metrics;
    std::map<std::string, std::vector<float>> adapters;
    std::string adapterBytes;
    bool ok = false;
};

Run loadRun(const std::string& dir)
{
    Run r;
    r.metrics = metricRecords(dir);
    for (const auto& j : r.metrics)
        r.losses.push_back(j.value("loss", 0.0));
    r.adapters = f32Tensors(dir + "/adapter/adapter_model.safetensors", &r.adapterBytes);
    r.ok = !r.losses.empty() && !r.adapters.empty();
    return r;
}

std::vector<std::string> trainArgs(const std::string& out, const std::vector<std::string>& extra)
{
    std::vector<std::string> args = {"train", "--model", g_dir + "/model", "--data",
        g_dir + "/data.jsonl", "--steps", "10", "--seq-len", "32", "--lr", "1e-2", "--seed", "3",
        "--clip", "1.0", "--weight-decay", "0.1", "--threads", "1", "--out", out, "--lora-rank",
        "4", "--lora-alpha", "8", "--lora-targets", "q,k,v,o,gate"};
    if (std::find(extra.begin(), extra.end(), "--method") == extra.end())
        args.insert(args.end(), {"--method", "lora"});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

Run train(const std::string& tag, int ranks, const std::vector<std::string>& extra)
{
    const std::string out = g_dir + "/" + tag;
    trainWithWorker(tag, ranks, trainArgs(out, extra), out, 200);
    Run r = loadRun(out);
    SHARD_EXPECT(r.ok, tag + ": no metrics or adapters");
    return r;
}

RunDiff compare(const Run& a, const Run& b)
{
    return compareRuns(a.losses, b.losses, a.adapters, b.adapters);
}

int64_t memoryField(const Run& r, int rank, const char* field)
{
    return lastMemoryField(r.metrics, rank, field, int64_t(-1));
}

void testEquivalence()
{
    Run single = train("single", 1, {"--micro-batch", "4"});
    SHARD_EXPECT(single.losses.size() == 10 && single.losses.back() < single.losses.front(),
        "the 1-rank LoRA run learns");
    std::map<std::string, Run> runs;
    for (const char* s : {"ddp", "zero2", "zero3"})
        runs[std::string(s) + "-2"]
            = train(std::string(s) + "-2", 2, {"--micro-batch", "2", "--strategy", s});
    runs["zero3-4"] = train("zero3-4", 4, {"--micro-batch", "1", "--strategy", "zero3"});
    for (const auto& [name, run] : runs) {
        const RunDiff d = compare(single, run);
        std::printf("LoRA %-8s vs 1 rank: loss max rel %.3g, adapters L2 rel %.3g\n", name.c_str(),
            d.loss, d.weightL2);
        SHARD_EXPECT(d.loss <= 1e-5 && d.weightL2 <= 1e-4, name + " matches the 1-rank LoRA run");
    }
    // QLoRA (NF4 base): zero3 gathers the packed bytes; it matches its 1-rank run.
    Run qsingle = train("qlora-single", 1, {"--micro-batch", "4", "--method", "qlora"});
    Run qz3 = train("qlora-zero3-2", 2,
        {"--micro-batch", "2", "--strategy", "zero3", "--method", "qlora", "--checkpointing",
            "full"});
    const RunDiff dq = compare(qsingle, qz3);
    std::printf(
        "QLoRA zero3-2 vs 1 rank: loss max rel %.3g, adapters L2 rel %.3g\n", dq.loss, dq.weightL2);
    SHARD_EXPECT(dq.loss <= 1e-5 && dq.weightL2 <= 1e-4, "QLoRA zero3-2 matches its 1-rank run");
    SHARD_EXPECT(
        memoryField(qz3, 1, "frozen_params") < memoryField(runs["zero3-2"], 1, "frozen_params") / 2,
        "the NF4 base takes less than half the fp32 base's bytes");
    // The frozen base is its own category; zero3 holds 1/N of it, ddp all of it.
    const int64_t base1 = memoryField(single, 0, "frozen_params");
    const int64_t ddp = memoryField(runs["ddp-2"], 1, "frozen_params");
    const int64_t z2 = memoryField(runs["zero3-2"], 1, "frozen_params");
    const int64_t z4 = memoryField(runs["zero3-4"], 3, "frozen_params");
    std::printf("frozen base bytes per rank: 1 rank %lld, ddp-2 %lld, zero3-2 %lld, zero3-4 %lld\n",
        static_cast<long long>(base1), static_cast<long long>(ddp), static_cast<long long>(z2),
        static_cast<long long>(z4));
    SHARD_EXPECT(base1 > 0 && ddp == base1, "ddp replicates the frozen base");
    SHARD_EXPECT(std::abs(double(z2) - base1 / 2.0) <= 0.02 * base1, "zero3-2 holds half");
    SHARD_EXPECT(std::abs(double(z4) - base1 / 4.0) <= 0.02 * base1, "zero3-4 holds a quarter");
}

void testResume()
{
    const std::vector<std::string> ck = {"--micro-batch", "4", "--checkpoint-every", "4",
        "--keep-checkpoints", "3", "--lora-dropout", "0.1"};
    Run reference = train("resume-ref", 1, ck);
    const std::string out = g_dir + "/resume-killed";
    std::vector<std::string> argv = {workerPath()};
    for (const auto& a : trainArgs(out, ck))
        argv.push_back(a);
    auto p = spawnProcess(argv);
    SHARD_EXPECT(
        killWhen(p, out + "/checkpoints/step-4/DONE"), "killed after the step-4 checkpoint");
    // The checkpoint holds the adapters only (no base weight in the manifest).
    const std::string manifest = readFile(out + "/checkpoints/step-4/manifest.json");
    SHARD_EXPECT(manifest.find("lora_A.weight") != std::string::npos
            && manifest.find("q_proj.weight\"") == std::string::npos
            && manifest.find("embed_tokens") == std::string::npos,
        "a LoRA checkpoint holds the adapters, not the base");
    argv.push_back("--resume");
    auto r = spawnProcess(argv);
    SHARD_EXPECT(r.wait(200) && r.exitCode() == 0, "resume: " + r.err);
    Run resumed = loadRun(out);
    const auto a = stepLosses(g_dir + "/resume-ref");
    const auto b = stepLosses(out);
    SHARD_EXPECT(a.size() == 10 && a == b, "resumed LoRA losses are bit-identical");
    SHARD_EXPECT(!resumed.adapterBytes.empty() && resumed.adapterBytes == reference.adapterBytes,
        "resumed adapters are bit-identical");

    // Export of the final checkpoint: the PEFT folder holds the trained adapters, --merge the
    // model the run wrote at its end (both merged in float64 from the same fp32 tensors).
    const std::string ckpt = out + "/checkpoints/step-10";
    auto e1 = spawnProcess(
        {workerPath(), "export", "--checkpoint", ckpt, "--out", g_dir + "/peft-export"});
    SHARD_EXPECT(e1.wait(120) && e1.exitCode() == 0, "export: " + e1.err);
    SHARD_EXPECT(f32Tensors(g_dir + "/peft-export/adapter_model.safetensors") == resumed.adapters,
        "the exported PEFT adapter is the trained one");
    const auto cfg = nlohmann::json::parse(
        readFile(g_dir + "/peft-export/adapter_config.json"), nullptr, false);
    SHARD_EXPECT(!cfg.is_discarded() && cfg.value("r", 0) == 4
            && cfg.value("peft_type", "") == "LORA" && cfg["target_modules"].size() == 5,
        "adapter_config.json: " + cfg.dump());
    auto e2 = spawnProcess({workerPath(), "export", "--checkpoint", ckpt, "--out",
        g_dir + "/merged-export", "--merge"});
    SHARD_EXPECT(e2.wait(120) && e2.exitCode() == 0, "export --merge: " + e2.err);
    const auto merged = f32Tensors(g_dir + "/merged-export/model.safetensors");
    const auto runModel = f32Tensors(out + "/model/model.safetensors");
    SHARD_EXPECT(!merged.empty() && merged == runModel,
        "export --merge equals the merged model the run wrote");
    SHARD_EXPECT(readFile(g_dir + "/merged-export/README.md").find("merged") != std::string::npos,
        "the merged folder says what it is");
}

// `--lora-init` continues an adapter in its own shape, as PEFT's from_pretrained does: a process
// given none of the LoRA shape flags trains the exported adapter's rank 4, alpha 8, dropout 0.1
// and five targets from where it was (its first loss is the trained adapter's, far below the
// fresh run's first), and a flag that disagrees with the adapter is refused with the flag named.
void testContinueAdapter()
{
    const std::string adapter = g_dir + "/peft-export";
    auto args = [&](const std::string& out) {
        return std::vector<std::string> {"train", "--model", g_dir + "/model", "--data",
            g_dir + "/data.jsonl", "--steps", "2", "--seq-len", "32", "--micro-batch", "4", "--lr",
            "1e-2", "--seed", "3", "--threads", "1", "--out", out, "--method", "lora",
            "--lora-init", adapter};
    };
    const std::string out = g_dir + "/continued";
    trainWithWorker("continued", 1, args(out), out, 200);
    const auto spec = nlohmann::json::parse(readFile(out + "/run.json"), nullptr, false);
    SHARD_EXPECT(!spec.is_discarded() && spec.value("lora_rank", 0) == 4
            && spec.value("lora_alpha", 0.0) == 8.0 && spec.value("lora_dropout", 0.0) == 0.1
            && spec.value("lora_targets", "") == "q,k,v,o,gate",
        "the continued run takes the adapter's shape: " + spec.dump());
    const auto fresh = stepLosses(g_dir + "/resume-ref"); // step -> loss
    const auto continued = stepLosses(out);
    const double freshFirst = fresh.empty() ? 0 : fresh.begin()->second;
    const double freshLast = fresh.empty() ? 0 : fresh.rbegin()->second;
    const double first = continued.empty() ? 1e9 : continued.begin()->second;
    SHARD_EXPECT(fresh.size() == 10 && continued.size() == 2
            && first < freshFirst - 0.5 * (freshFirst - freshLast),
        "the continued run starts from the trained adapter (first loss " + std::to_string(first)
            + ", the fresh run " + std::to_string(freshFirst) + " -> " + std::to_string(freshLast)
            + ")");
    std::vector<std::string> argv = {workerPath()};
    for (const auto& a : args(g_dir + "/conflict"))
        argv.push_back(a);
    argv.insert(argv.end(), {"--lora-rank", "8"});
    auto p = spawnProcess(argv);
    SHARD_EXPECT(p.wait(120) && p.exitCode() != 0 && p.err.find("--lora-rank") != std::string::npos
            && p.err.find('4') != std::string::npos,
        "a rank that disagrees with the adapter is refused naming --lora-rank: " + p.err);
}

} // namespace

int main()
{
    g_dir = makeTempDir("lora");
    if (!makeTinyRunInputs(g_dir))
        return 1;
    testEquivalence();
    testResume();
    testContinueAdapter();
    if (g_failures == 0) {
        std::printf("tst_lora_runs: all passed\n");
        removeTempDirs();
    }
    return g_failures == 0 ? 0 : 1;
}
