// The training loop end to end on a tiny-1m model: determinism, checkpointing and accumulation
// equivalence, bf16-mixed, learning, evaluation, the run directory records and the HF output,
// and one clear error (with nothing in the run directory destroyed) for each bad input.
#include <fstream>
#include <random>
#include <sstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "core/train/trainer.h"
#include "engine_test_util.h"
#include "protocol/records.h"
#include "tiny_run_inputs.h"
#include "tokenizer/demo_tokenizer.h"

using namespace shard;
using namespace shard::engine;
using nlohmann::json;

namespace {

std::string g_dir;

std::string makeModel(const std::string& name)
{
    auto spec = *plan::findPreset("tiny-1m");
    spec.name = name;
    spec.torchDtype = "float32";
    return test::writeTinyModel(g_dir + "/" + name, spec);
}

std::string makeData(const std::string& name, int rows, int vocab, unsigned seed)
{
    return test::writeCountingData(g_dir + "/" + name, rows, vocab, seed);
}

protocol::RunSpec baseSpec(
    const std::string& model, const std::string& data, const std::string& out)
{
    protocol::RunSpec s;
    s.model = model;
    s.data = {data};
    s.outDir = out;
    s.steps = 4;
    s.microBatch = 2;
    s.seqLen = 24;
    s.lr = 3e-3;
    s.warmup = 1;
    s.threads = 1;
    s.seed = 9;
    s.logEvery = 1;
    return s;
}

TrainResult train(const protocol::RunSpec& s, bool files = false)
{
    Trainer t(s, TrainerOptions {false, files, files});
    return t.run();
}

std::string slurp(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

double rel(double a, double b)
{
    return std::abs(a - b) / std::max(1e-30, std::abs(b));
}

int runCommand(const std::string& cmd, std::string* stderrText)
{
    const std::string errFile = g_dir + "/stderr.txt";
    const int rc = std::system((cmd + " >" + g_dir + "/stdout.txt 2>" + errFile).c_str());
    if (stderrText)
        *stderrText = slurp(errFile);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

} // namespace

int main()
{
    g_dir = shard::test::tempDir("tst_train");
    const std::string model = makeModel("m");
    const std::string data = makeData("data.jsonl", 40, 512, 1);

    // Determinism: the same spec twice gives identical losses and identical output weights.
    auto spec = baseSpec(model, data, g_dir + "/runA");
    spec.gradAccum = 2;
    TrainResult a = train(spec, true);
    spec.outDir = g_dir + "/runB";
    TrainResult b = train(spec, true);
    T_CHECK(a.losses.size() == 4);
    T_CHECK_MSG(a.losses == b.losses, "two identical runs gave different losses");
    T_CHECK(slurp(g_dir + "/runA/model/model.safetensors")
        == slurp(g_dir + "/runB/model/model.safetensors"));

    // Activation checkpointing recomputes the same values.
    spec.checkpointing = "full";
    spec.outDir = g_dir + "/runC";
    TrainResult c = train(spec);
    for (size_t i = 0; i < a.losses.size(); ++i)
        T_CHECK_MSG(rel(c.losses[i], a.losses[i]) < 1e-6, "checkpointing changed the loss");

    // Accumulation: 2 micro-steps of 2 rows == 1 micro-step of 4 rows (no shuffle).
    auto acc = baseSpec(model, data, g_dir + "/runD");
    acc.shuffle = false;
    acc.microBatch = 2;
    acc.gradAccum = 2;
    TrainResult d = train(acc);
    acc.microBatch = 4;
    acc.gradAccum = 1;
    TrainResult e = train(acc);
    for (size_t i = 0; i < d.losses.size(); ++i)
        T_CHECK_MSG(rel(d.losses[i], e.losses[i]) < 1e-5,
            "accumulation differs at step " + std::to_string(i + 1) + ": "
                + std::to_string(d.losses[i]) + " vs " + std::to_string(e.losses[i]));

    // Learning: repeated small data, the loss falls well below the uniform ln(512) = 6.24.
    auto learn = baseSpec(model, makeData("small.jsonl", 4, 512, 2), g_dir + "/runE");
    learn.steps = 25;
    learn.microBatch = 4;
    learn.lr = 1e-2;
    learn.schedule = "constant";
    learn.shuffle = false;
    TrainResult l = train(learn);
    T_CHECK_MSG(l.losses.back() < 0.5 * l.losses.front(),
        "loss did not fall: " + std::to_string(l.losses.front()) + " -> "
            + std::to_string(l.losses.back()));

    // bf16-mixed: close to fp32 on the first step, and it learns.
    learn.precision = "bf16-mixed";
    learn.steps = 10;
    TrainResult bf = train(learn);
    T_CHECK_MSG(rel(bf.losses[0], l.losses[0]) < 0.02, "bf16-mixed first loss far from fp32");
    T_CHECK(bf.losses.back() < bf.losses.front());

    // Records, logs, eval and the HF output.
    {
        auto s = baseSpec(model, data, g_dir + "/runR");
        s.evalFraction = 0.2;
        s.evalEvery = 2;
        s.steps = 4;
        Trainer t(s, TrainerOptions {false, true, true});
        TrainResult r = t.run();
        T_CHECK(r.evalLosses.size() == 2);
        std::ifstream metrics(g_dir + "/runR/metrics.jsonl");
        std::string line;
        int n = 0, withEval = 0;
        while (std::getline(metrics, line)) {
            auto rec = protocol::metricFromJson(json::parse(line));
            ++n;
            T_CHECK(rec.step == n);
            T_CHECK(rec.loss == r.losses[n - 1]);
            T_CHECK(rec.memory.size() == 1 && rec.memory[0].peakBytes > 0
                && rec.memory[0].shardedParamBytes == 4 * t.model().numParams()
                && rec.memory[0].optimizerBytes == 8 * t.model().numParams());
            withEval += rec.evalLoss.has_value();
        }
        T_CHECK(n == 4 && withEval == 2);
        const std::string events = slurp(g_dir + "/runR/events.jsonl");
        T_CHECK(events.find("\"start\"") != std::string::npos);
        T_CHECK(events.find("\"completed\"") != std::string::npos);
        T_CHECK(slurp(g_dir + "/runR/logs/rank-0.log").find("step 4/4") != std::string::npos);
        T_CHECK(std::filesystem::exists(g_dir + "/runR/run.json"));
        T_CHECK(std::filesystem::exists(g_dir + "/runR/model/tokenizer.json"));
        HfModelFolder out = openHfModelFolder(g_dir + "/runR/model");
        T_CHECK(out.spec.numLayers == 4);
        // The saved weights are the trained ones, not the initial ones.
        T_CHECK(!at::equal(out.weights->tensor("model.layers.0.mlp.up_proj.weight"),
            openHfModelFolder(model).weights->tensor("model.layers.0.mlp.up_proj.weight")));
        // A second run into the same directory is refused and destroys nothing.
        const std::string before = slurp(g_dir + "/runR/metrics.jsonl");
        EXPECT_THROW_WITH(train(s, true), "already holds a run");
        T_CHECK(slurp(g_dir + "/runR/metrics.jsonl") == before);
    }

    // Bad input: one clear message each, raised before the run directory is touched.
    {
        const std::string out = g_dir + "/bad-run";
        auto expectBad
            = [&](protocol::RunSpec s, std::initializer_list<std::string> parts, int line) {
                  shard::test::expectThrow(
                      [&] {
                          Trainer t(s, TrainerOptions {false, true, true});
                      },
                      parts, __FILE__, line);
                  T_CHECK_MSG(!std::filesystem::exists(out), "bad input created the run directory");
              };
        expectBad(baseSpec(g_dir + "/nope", data, out), {"nope", "does not exist"}, __LINE__);
        std::filesystem::create_directories(g_dir + "/noconfig");
        expectBad(baseSpec(g_dir + "/noconfig", data, out), {"no config.json"}, __LINE__);
        std::filesystem::create_directories(g_dir + "/badconfig");
        std::ofstream(g_dir + "/badconfig/config.json")
            << slurp(model + "/config.json")
                   .replace(slurp(model + "/config.json").find("\"hidden_size\": 128"), 18,
                       "\"hidden_size\": -3");
        expectBad(baseSpec(g_dir + "/badconfig", data, out), {"hidden_size"}, __LINE__);
        std::filesystem::create_directories(g_dir + "/noweights");
        std::filesystem::copy_file(model + "/config.json", g_dir + "/noweights/config.json");
        expectBad(baseSpec(g_dir + "/noweights", data, out), {"no model.safetensors"}, __LINE__);
        {
            // A weights file lacking one tensor.
            std::filesystem::create_directories(g_dir + "/missing");
            std::filesystem::copy_file(model + "/config.json", g_dir + "/missing/config.json");
            SafetensorsReader r(model);
            NamedTensors some;
            for (const auto& n : r.names())
                if (n != "model.norm.weight")
                    some.push_back({n, r.tensor(n)});
            writeSafetensors(g_dir + "/missing/model.safetensors", some);
            expectBad(baseSpec(g_dir + "/missing", data, out), {"model.norm.weight", "missing"},
                __LINE__);
        }
        expectBad(baseSpec(model, g_dir + "/absent.jsonl", out), {"absent.jsonl", "cannot open"},
            __LINE__);
        std::ofstream(g_dir + "/empty.jsonl").close();
        expectBad(baseSpec(model, g_dir + "/empty.jsonl", out),
            {"empty.jsonl", "no usable records"}, __LINE__);
        std::ofstream(g_dir + "/badline.jsonl") << "{\"input_ids\":[1,2]}\n\n{\"input_ids\":[1,\n";
        expectBad(baseSpec(model, g_dir + "/badline.jsonl", out), {"badline.jsonl:3"}, __LINE__);
        std::ofstream(g_dir + "/badid.jsonl") << "{\"input_ids\":[1,2,9999]}\n";
        expectBad(baseSpec(model, g_dir + "/badid.jsonl", out),
            {"badid.jsonl:1", "9999", "vocabulary"}, __LINE__);
        std::ofstream(g_dir + "/badlabels.jsonl") << "{\"input_ids\":[1,2],\"labels\":[1]}\n";
        expectBad(baseSpec(model, g_dir + "/badlabels.jsonl", out), {"badlabels.jsonl:1", "labels"},
            __LINE__);
        auto longSeq = baseSpec(model, data, out);
        longSeq.seqLen = 5000;
        expectBad(longSeq, {"5000", "max_position_embeddings"}, __LINE__);
        auto prec = baseSpec(model, data, out);
        prec.precision = "fp16-mixed";
        expectBad(prec, {"fp16-mixed", "fp32 or bf16-mixed"}, __LINE__);
        auto zero = baseSpec(model, data, out);
        zero.microBatch = 0;
        expectBad(zero, {"micro_batch"}, __LINE__);
        auto strat = baseSpec(model, data, out);
        strat.strategy = "zero7";
        expectBad(strat, {"zero7"}, __LINE__);
    }

    // The worker commands.
    {
        const std::string worker = SHARD_WORKER;
        std::string err;
        T_CHECK(runCommand(
                    worker + " init-model --preset tiny-1m --out " + g_dir + "/cli-model --seed 4",
                    &err)
            == 0);
        T_CHECK(std::filesystem::exists(g_dir + "/cli-model/model.safetensors"));
        T_CHECK(
            runCommand(worker + " init-model --preset tiny-1m --out " + g_dir + "/cli-model", &err)
            != 0);
        T_CHECK(err.find("already holds a model") != std::string::npos);
        T_CHECK(
            runCommand(worker + " init-model --preset tiny-1n --out " + g_dir + "/x", &err) != 0);
        T_CHECK_MSG(err.find("tiny-1m") != std::string::npos, "no close preset name: " + err);
        // Same seed, same weights.
        T_CHECK(runCommand(
                    worker + " init-model --preset tiny-1m --out " + g_dir + "/cli-model2 --seed 4",
                    &err)
            == 0);
        T_CHECK(slurp(g_dir + "/cli-model/model.safetensors")
            == slurp(g_dir + "/cli-model2/model.safetensors"));
        // A JSON run spec, with a flag overriding it.
        auto s = baseSpec(g_dir + "/cli-model", data, g_dir + "/cli-run");
        s.steps = 50;
        std::ofstream(g_dir + "/run.json") << protocol::toJson(s).dump();
        T_CHECK(runCommand(worker + " train --config " + g_dir + "/run.json --steps 2", &err) == 0);
        const std::string stdoutText = slurp(g_dir + "/stdout.txt");
        T_CHECK_MSG(stdoutText.find("\"metric\"") != std::string::npos, "no records on stdout");
        int lines = 0;
        std::ifstream m(g_dir + "/cli-run/metrics.jsonl");
        for (std::string line; std::getline(m, line);)
            ++lines;
        T_CHECK_MSG(lines == 2, "--steps did not override the spec");
        // Bad data through the CLI: exit 1 and one line naming file:line.
        std::ofstream(g_dir + "/cli-bad.jsonl") << "{\"input_ids\":[1]}\n{\"input_ids\":\"x\"}\n";
        const int rc = runCommand(worker + " train --model " + g_dir + "/cli-model --data " + g_dir
                + "/cli-bad.jsonl --out " + g_dir
                + "/cli-run2 --steps 1 --micro-batch 1 "
                  "--seq-len 8 --lr 1e-3",
            &err);
        T_CHECK(rc == 1);
        T_CHECK_MSG(err.find("cli-bad.jsonl:2") != std::string::npos
                && std::count(err.begin(), err.end(), '\n') == 1,
            "CLI error is not one line naming file:line: " + err);
        T_CHECK(!std::filesystem::exists(g_dir + "/cli-run2"));
    }

    std::filesystem::remove_all(g_dir);
    return shard::test::finish("tst_train");
}
