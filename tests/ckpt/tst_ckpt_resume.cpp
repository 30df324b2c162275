// Exact resume with the real worker: a run killed with SIGKILL after a checkpoint (and one killed
// while writing a checkpoint) and resumed with --resume gives the same per-step losses in
// metrics.jsonl and bit-identical final weights as an uninterrupted run (CPU, fp32); export of
// the final checkpoint loads back to the same logits; a different model is refused by name; a
// full disk during a checkpoint stops the run with an error event and keeps the previous one.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt/hf_export.h"
#include "ckpt_test_util.h"
#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "core/train/model_runner.h"
#include "core/train/single_strategy.h"
#include "protocol/process_signal.h"
#include "protocol/run_pace.h"

using namespace shard;
using namespace ckpt_test;
namespace fs = std::filesystem;

static std::string g_worker;
static std::string g_root;

static std::vector<std::string> trainArgs(const std::string& out, const std::string& model)
{
    return {"train", "--model", model, "--data", g_root + "/data.jsonl", "--out", out, "--steps",
        "8", "--micro-batch", "4", "--seq-len", "64", "--lr", "3e-3", "--seed", "3", "--threads",
        "1", "--checkpoint-every", "3", "--keep-checkpoints", "2", "--warmup", "2"};
}

static std::string slurp(const std::string& path)
{
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

static bool sameWeights(const std::string& a, const std::string& b)
{
    engine::SafetensorsReader ra(a), rb(b);
    if (ra.names() != rb.names())
        return false;
    for (const auto& n : ra.names())
        if (!bitEqual(ra.tensor(n), rb.tensor(n))) {
            std::fprintf(
                stderr, "tensor %s differs between %s and %s\n", n.c_str(), a.c_str(), b.c_str());
            return false;
        }
    return true;
}

static at::Tensor logitsOf(const std::string& modelDir, const at::Tensor& ids)
{
    engine::HfModelFolder folder = engine::openHfModelFolder(modelDir);
    engine::LlamaModel model(folder.spec);
    engine::StrategyOptions so;
    engine::SingleStrategy strategy(so);
    const engine::SafetensorsReader& w = *folder.weights;
    strategy.setup(
        model, [&](const engine::Param& p) { return w.tensor(p.info.name).to(at::kFloat); });
    engine::ModelRunner runner(model, strategy, engine::ForwardConfig {});
    at::NoGradGuard noGrad;
    return runner.logits(ids);
}

// Kills the run when `trigger` exists; returns false when the run ended first.
static bool killWhen(pid_t pid, const std::string& trigger)
{
    for (int i = 0; i < 60000; ++i) {
        if (fs::exists(trigger)) {
            shard::protocol::signalProcess(pid, SIGKILL);
            int status = 0;
            waitpid(pid, &status, 0);
            return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        }
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) == pid)
            return false;
        usleep(1000);
    }
    shard::protocol::signalProcess(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return false;
}

// After a resume from the step-`from` checkpoint (issue 27, item 6): the resumed process's
// "start" sits at that step and at the run's clock there (not "0:00 | 0" after the first
// process's events), and the finish event's tokens/s and active time are the whole run's, as
// protocol::RunPace (and so the run store) adds them up from metrics.jsonl.
static void checkResumedEvents(const std::string& run, int64_t from)
{
    std::vector<nlohmann::json> starts, finishes;
    std::istringstream events(slurp(run + "/events.jsonl"));
    for (std::string line; std::getline(events, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j.value("kind", "") == "start")
            starts.push_back(j);
        if (j.value("kind", "") == "finish")
            finishes.push_back(j);
    }
    shard::protocol::RunPace pace;
    double wallAtFrom = -1;
    std::istringstream metrics(slurp(run + "/metrics.jsonl"));
    for (std::string line; std::getline(metrics, line);) {
        const auto r = shard::protocol::metricFromJson(nlohmann::json::parse(line));
        pace.add(r);
        if (r.step == from && wallAtFrom < 0)
            wallAtFrom = r.wallTimeSec;
    }
    CHECK(starts.size() == 2);
    CHECK(finishes.size() == 1);
    if (starts.size() != 2 || finishes.size() != 1)
        return;
    const auto& resumed = starts.back();
    std::printf("resumed start: step %lld at %.3f s (step %lld logged at %.3f s)\n",
        static_cast<long long>(resumed.value("step", int64_t(-1))),
        resumed.value("wall_time", -1.0), static_cast<long long>(from), wallAtFrom);
    CHECK(resumed.value("step", int64_t(-1)) == from);
    CHECK(wallAtFrom > 0 && resumed.value("wall_time", 0.0) >= wallAtFrom);
    const auto& data = finishes.front()["data"];
    const double tps = data.value("tokens_per_sec", 0.0);
    std::printf("finish: %.1f tokens/s, the run's pace %.1f; active %.3f s vs %.3f s\n", tps,
        pace.tokensPerSec(), data.value("active_sec", 0.0), pace.activeSec());
    CHECK(pace.tokensPerSec() > 0 && std::abs(tps - pace.tokensPerSec()) <= 1e-9 * tps);
    CHECK(data.value("active_sec", 0.0) == pace.activeSec());
}

static void testResume()
{
    const std::string model = g_root + "/model";
    const std::string a = g_root + "/A";
    CHECK(runWorker(g_worker, trainArgs(a, model), g_root + "/A.log") == 0);
    const auto reference = stepLosses(a);
    CHECK(reference.size() == 8);
    CHECK((shard::ckpt::listCheckpoints(a + "/checkpoints").size() == 2)); // keep 2: step-6, step-8

    // Killed after the step-3 checkpoint, then resumed.
    const std::string b = g_root + "/B";
    const bool killed = killWhen(spawnWorker(g_worker, trainArgs(b, model), g_root + "/B.log"),
        b + "/checkpoints/step-3/DONE");
    CHECK(killed);
    std::printf("B killed after step %zu was logged\n", stepLosses(b).size());
    auto args = trainArgs(b, model);
    args.push_back("--resume");
    CHECK(runWorker(g_worker, args, g_root + "/B2.log") == 0);
    const auto resumed = stepLosses(b);
    CHECK(resumed == reference);
    for (const auto& [step, loss] : reference)
        if (resumed.count(step) && resumed.at(step) != loss)
            std::fprintf(stderr, "step %lld: %.17g vs %.17g\n", static_cast<long long>(step),
                resumed.at(step), loss);
    CHECK(sameWeights(a + "/model", b + "/model"));
    CHECK(slurp(b + "/events.jsonl").find("resumed from") != std::string::npos);
    checkResumedEvents(b, 3);

    // Killed while writing the step-6 checkpoint (or just after: either way resume is exact).
    const std::string c = g_root + "/C";
    const bool killed2 = killWhen(spawnWorker(g_worker, trainArgs(c, model), g_root + "/C.log"),
        shard::ckpt::tempDirFor(c + "/checkpoints", 6));
    CHECK(killed2);
    const auto latest = shard::ckpt::latestComplete(c);
    CHECK(latest.has_value());
    std::printf("C killed during its step-6 checkpoint; newest complete: %s\n",
        latest ? latest->c_str() : "none");
    args = trainArgs(c, model);
    args.push_back("--resume");
    args.push_back("auto");
    CHECK(runWorker(g_worker, args, g_root + "/C2.log") == 0);
    CHECK(stepLosses(c) == reference);
    CHECK(sameWeights(a + "/model", c + "/model"));
    CHECK(!fs::exists(shard::ckpt::tempDirFor(c + "/checkpoints", 6)));

    // Export of the final checkpoint: fp32 is the trainer's own output, logits identical.
    const std::string hf = g_root + "/export";
    const auto r = shard::ckpt::exportHuggingFace(a + "/checkpoints/step-8", hf, {});
    CHECK(r.tokenizerFiles.size() >= 1 && fs::exists(hf + "/tokenizer.json"));
    CHECK(sameWeights(a + "/model", hf));
    const at::Tensor ids = at::randint(0, 512, {2, 16}, at::kLong);
    CHECK(bitEqual(logitsOf(hf, ids), logitsOf(a + "/model", ids)));
    shard::ckpt::ExportOptions bf;
    bf.dtype = "bf16";
    shard::ckpt::exportHuggingFace(a + "/checkpoints/step-8", g_root + "/export-bf16", bf);
    const at::Tensor lb = logitsOf(g_root + "/export-bf16", ids);
    const at::Tensor lf = logitsOf(hf, ids);
    const double err = (lb - lf).abs().max().item<double>();
    std::printf("bf16 export: max |logit difference| %.3g\n", err);
    CHECK(err > 0 && err < 0.1);
}

static void testMismatch()
{
    // A different model (tiny-15m) cannot resume the tiny-1m run; nothing is destroyed.
    const std::string b = g_root + "/B";
    const std::string before = slurp(b + "/metrics.jsonl");
    auto args = trainArgs(b, g_root + "/model15");
    args.push_back("--resume");
    args.push_back(b + "/checkpoints/step-8");
    CHECK(runWorker(g_worker, args, g_root + "/mismatch.log") == 1);
    const std::string log = slurp(g_root + "/mismatch.log");
    CHECK(log.find("different model") != std::string::npos);
    CHECK(log.find("hidden_size: 128 in the checkpoint, 256 in this run") != std::string::npos
        || log.find("hidden_size") != std::string::npos);
    CHECK(slurp(b + "/metrics.jsonl").substr(0, before.size()) == before);
    CHECK(shard::ckpt::isCompleteCheckpoint(b + "/checkpoints/step-8"));

    // Another run's checkpoint (other seed: another run id) is refused.
    args = trainArgs(g_root + "/D", g_root + "/model");
    args[std::find(args.begin(), args.end(), "--seed") - args.begin() + 1] = "4";
    args.push_back("--resume");
    args.push_back(b);
    CHECK(runWorker(g_worker, args, g_root + "/other-run.log") == 1);
    CHECK(slurp(g_root + "/other-run.log").find("belongs to run") != std::string::npos);
}

static void testFullDisk()
{
    const std::string mnt = g_root + "/small";
    fs::create_directories(mnt);
    // tiny-1m: a checkpoint is ~11.8 MB; the second does not fit in 16 MiB.
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=16m") != 0) {
        std::printf(
            "SKIP full-disk run: cannot mount a tmpfs (%s); run as root\n", std::strerror(errno));
        return;
    }
    const std::string run = mnt + "/run";
    const int rc = runWorker(g_worker, trainArgs(run, g_root + "/model"), g_root + "/full.log");
    CHECK(rc == 74); // a write to the run directory failed
    const std::string events = slurp(run + "/events.jsonl");
    CHECK(events.find("\"kind\":\"error\"") != std::string::npos);
    CHECK(events.find("No space left on device") != std::string::npos);
    CHECK(events.find("\"reason\":\"error\"") != std::string::npos);
    CHECK(slurp(g_root + "/full.log").find("No space left on device") != std::string::npos);
    const auto latest = shard::ckpt::latestComplete(run);
    CHECK(latest && *latest == run + "/checkpoints/step-3");
    if (latest) {
        shard::ckpt::CheckpointReader reader(*latest);
        CHECK(reader.readFull(shard::ckpt::kParam, "model.norm.weight").numel() == 128);
    }
    CHECK(!fs::exists(shard::ckpt::tempDirFor(run + "/checkpoints", 6)));
    umount2(mnt.c_str(), MNT_DETACH);
}

int main()
{
    TempDir tmp;
    g_root = tmp.path;
    if (!setUpWorkerTest(g_worker, g_root, 50))
        return 1;
    CHECK(runWorker(g_worker, {"init-model", "--preset", "tiny-15m", "--out", g_root + "/model15"},
              g_root + "/init15.log")
        == 0);
    testResume();
    testMismatch();
    testFullDisk();
    return finish("resume");
}
