// What the layout tests (tst_tp_training, tst_pp_training, tst_sp_training) share: `shard-worker
// train` runs of a model at a layout against one rank, their losses and exported weights, refusals,
// and copies of a run folder to resume a checkpoint at another layout.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/planner.h"
#include "process_runner.h"
#include "run_outputs.h"

namespace shard::testing::layout {

// The test's temporary folder (set once by main).
inline std::string& dir()
{
    static std::string d;
    return d;
}
inline constexpr int kSeq = 32;

// 64 rows of kSeq ids below 512: every micro-batch is full length, so the bytes sent per step
// are the same every step.
inline void writeData()
{
    std::ofstream data(dir() + "/data.jsonl");
    uint64_t x = 4242;
    for (int line = 0; line < 64; ++line) {
        data << "{\"input_ids\":[";
        for (int i = 0; i < kSeq; ++i) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            data << (i ? "," : "") << (x >> 33) % 512;
        }
        data << "]}\n";
    }
}

struct Run {
    std::vector<double> losses;
    std::vector<nlohmann::json> metrics;
    std::map<std::string, std::vector<float>> weights;
};

inline Run train(const std::string& model, const std::string& tag, int ranks,
    const std::vector<std::string>& extra)
{
    const std::string out = dir() + "/" + tag;
    std::vector<std::string> args = {"train", "--model", dir() + "/" + model, "--data",
        dir() + "/data.jsonl", "--steps", "8", "--seq-len", std::to_string(kSeq), "--lr", "1e-3",
        "--seed", "3", "--clip", "1.0", "--weight-decay", "0.1", "--threads", "1", "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    trainWithWorker(tag, ranks, args, out, 240);
    Run r;
    r.metrics = metricRecords(out);
    for (const auto& j : r.metrics)
        r.losses.push_back(j.value("loss", 0.0));
    r.weights = f32Tensors(out + "/model/model.safetensors");
    SHARD_EXPECT(!r.losses.empty() && !r.weights.empty(), tag + ": no metrics or weights");
    return r;
}

// The weights compared: all but k_proj's bias, whose gradient is zero in exact arithmetic (a
// key bias adds the same score to every key of a query, and softmax ignores that): what it
// holds after training is rounding noise of the sums, scaled up by AdamW, in any two runs
// that sum in another order (its relative L2 difference here is 3e-5 to 6e-5, every other
// tensor's below 2e-5).
inline std::map<std::string, std::vector<float>> compared(
    std::map<std::string, std::vector<float>> w)
{
    for (auto it = w.begin(); it != w.end();)
        it = it->first.find("k_proj.bias") != std::string::npos ? w.erase(it) : std::next(it);
    return w;
}

inline void expectClose(const std::string& what, const Run& ref, const Run& run)
{
    const RunDiff d
        = compareRuns(ref.losses, run.losses, compared(ref.weights), compared(run.weights));
    std::printf("%-40s loss max rel %.3g  weights max rel %.3g  L2 rel %.3g\n", what.c_str(),
        d.loss, d.weightMax, d.weightL2);
    SHARD_EXPECT(d.loss <= 1e-5 && d.weightL2 <= 1e-4,
        what + ": losses within 1e-5 and weights within 1e-4 (L2) of one rank");
}

// A model from a config.json (init-model's random weights, seed 1).
inline void makeModel(const std::string& name, const nlohmann::json& config)
{
    const std::string cfgDir = dir() + "/" + name + "-config";
    std::filesystem::create_directories(cfgDir);
    std::ofstream(cfgDir + "/config.json") << config.dump(2);
    auto p = spawnProcess({workerPath(), "init-model", "--preset", cfgDir, "--out",
        dir() + "/" + name, "--seed", "1"});
    SHARD_EXPECT(p.wait(60) && p.exitCode() == 0, "init-model " + name + ": " + p.err);
}

// The run's failure text: the launcher's stderr and every rank's log (--seq-len kSeq unless
// `extra` gives one).
inline std::string failure(const std::string& model, const std::string& tag, int ranks,
    const std::vector<std::string>& extra)
{
    const std::string out = dir() + "/" + tag;
    const bool seqGiven = std::find(extra.begin(), extra.end(), "--seq-len") != extra.end();
    std::vector<std::string> argv
        = {workerPath(), "launch", "--nproc-per-node", std::to_string(ranks), "--", "train",
            "--model", dir() + "/" + model, "--data", dir() + "/data.jsonl", "--steps", "2",
            "--threads", "1", "--nproc-per-node", std::to_string(ranks), "--out", out};
    if (!seqGiven)
        argv.insert(argv.end(), {"--seq-len", std::to_string(kSeq)});
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto p = spawnProcess(argv);
    const bool done = p.wait(120);
    SHARD_EXPECT(done && p.exitCode() != 0, tag + " must fail");
    std::string text = p.err;
    for (int r = 0; r < ranks; ++r)
        text += readFile(out + "/logs/rank-" + std::to_string(r) + ".log");
    return text;
}

inline void expectRefusal(const std::string& model, const std::string& tag, int ranks,
    const std::vector<std::string>& extra, const std::string& message)
{
    const std::string text = failure(model, tag, ranks, extra);
    SHARD_EXPECT(text.find(message) != std::string::npos,
        tag + ": expected \"" + message + "\" in: " + text.substr(0, 3000));
    SHARD_EXPECT(
        countLines(dir() + "/" + tag + "/metrics.jsonl") == 0, tag + ": refused before any step");
}

// A copy of the run folder `run` under `parent` (same folder name: the same run id) with only
// its checkpoint of `step`, to resume from there.
inline std::string copyWithCheckpoint(
    const std::string& run, const std::string& parent, int64_t step)
{
    namespace fs = std::filesystem;
    const std::string dst = parent + "/" + fs::path(run).filename().string();
    fs::create_directories(parent);
    fs::copy(run, dst, fs::copy_options::recursive);
    fs::remove_all(dst + "/model");
    for (const auto& e : fs::directory_iterator(dst + "/checkpoints"))
        if (e.path().filename().string() != "step-" + std::to_string(step))
            fs::remove_all(e.path());
    return dst;
}

inline int64_t stepBytes(const Run& r)
{
    return r.metrics.empty() ? -1 : r.metrics.back().value("comm_bytes", int64_t(-1));
}

// A run resumed across layouts: the first leg (ranks, arguments) trains 8 steps of `model` with
// a checkpoint every 3 steps; each later leg resumes a copy of the previous leg's folder that
// holds only its checkpoint of step 3 x leg. Checks that each leg resumed from the checkpoint it
// was given and returns the last leg's run with the losses of steps 1 to 8 from the chained
// folders, and the folders (chain-a/run, chain-b/run, ...).
struct Chain {
    Run run;
    std::vector<std::string> dirs;
};
inline Chain chainedRun(
    const std::string& model, const std::vector<std::pair<int, std::vector<std::string>>>& legs)
{
    Chain out;
    for (size_t i = 0; i < legs.size(); ++i) {
        const std::string tag = std::string("chain-") + char('a' + i) + "/run";
        if (i > 0)
            copyWithCheckpoint(
                out.dirs.back(), dir() + "/chain-" + char('a' + i), static_cast<int64_t>(3 * i));
        std::vector<std::string> args = legs[i].second;
        args.insert(args.end(), {"--checkpoint-every", "3", "--keep-checkpoints", "0"});
        if (i > 0)
            args.push_back("--resume");
        out.run = train(model, tag, legs[i].first, args);
        out.dirs.push_back(dir() + "/" + tag);
        if (i == 0)
            continue;
        // The leg resumed from the checkpoint it was given (not a fresh start).
        bool resumed = false;
        const std::string step = "step-" + std::to_string(3 * i);
        for (const auto& e : events(out.dirs.back()))
            resumed = resumed
                || (e.value("kind", "") == "checkpoint" && e.contains("data")
                    && e["data"].value("action", "") == "resume"
                    && e["data"].value("dir", "").find(step) != std::string::npos);
        SHARD_EXPECT(resumed, out.dirs.back() + ": resumed at " + step);
    }
    const auto losses = stepLosses(out.dirs.back());
    out.run.losses.clear();
    for (const auto& [step, loss] : losses)
        out.run.losses.push_back(loss);
    SHARD_EXPECT(losses.size() == 8 && losses.begin()->first == 1,
        "the chained run has the losses of steps 1 to 8");
    return out;
}

// The models the tensor-parallel tests train besides tiny-1m's Llama ("llama", made first):
// the config both share (GQA 4 / 2, MLP 256, 2 layers, vocabulary 512) as a Qwen3 ("qwen3":
// q/k norms, head_dim 48, a tied table) and a Qwen2 ("qwen2": q/k/v biases, untied); `base`
// gets the shared config.
inline void makeLlamaAndQwenModels(nlohmann::json* base = nullptr)
{
    auto p = spawnProcess({workerPath(), "init-model", "--preset", "tiny-1m", "--out",
        dir() + "/llama", "--seed", "1"});
    SHARD_EXPECT(p.wait(60) && p.exitCode() == 0, "init-model: " + p.err);
    const nlohmann::json shared = {{"hidden_size", 128}, {"intermediate_size", 256},
        {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
        {"vocab_size", 512}, {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6},
        {"rope_theta", 10000.0}, {"hidden_act", "silu"}};
    nlohmann::json qwen3 = shared;
    qwen3["model_type"] = "qwen3";
    qwen3["architectures"] = {"Qwen3ForCausalLM"};
    qwen3["head_dim"] = 48;
    qwen3["tie_word_embeddings"] = true;
    makeModel("qwen3", qwen3);
    nlohmann::json qwen2 = shared;
    qwen2["model_type"] = "qwen2";
    qwen2["architectures"] = {"Qwen2ForCausalLM"};
    qwen2["tie_word_embeddings"] = false;
    makeModel("qwen2", qwen2);
    if (base)
        *base = shared;
}

// The held-out losses of a run's metric records (--eval-every), in step order.
inline std::vector<double> evalLosses(const Run& r)
{
    std::vector<double> out;
    for (const auto& j : r.metrics)
        if (j.contains("eval_loss"))
            out.push_back(j.value("eval_loss", 0.0));
    return out;
}

// The planner's tensor-parallel bytes per rank per step for the "llama" model at TP2, one
// data-parallel copy of micro-batch 4.
inline int64_t plannedTpBytes(bool checkpointing, bool sequenceParallel)
{
    shard::plan::PlanInput in;
    in.model = shard::plan::loadHfConfig(dir() + "/llama");
    in.strategy = shard::plan::Strategy::Zero3;
    in.precision = shard::plan::Precision::Fp32;
    in.mode = shard::plan::AccountingMode::ZeroPaper;
    in.checkpointing
        = checkpointing ? shard::plan::Checkpointing::Full : shard::plan::Checkpointing::None;
    in.gpusPerNode = 2;
    in.tp = 2;
    in.sequenceParallel = sequenceParallel;
    in.microBatch = 4;
    in.seqLen = kSeq;
    in.device = shard::plan::DeviceSpec::cpu(24LL << 30);
    return shard::plan::plan(in).tpBytesPerDevicePerStep;
}

} // namespace shard::testing::layout
