// Run-directory records: JSON round trips, offset-based JSONL consumption, run spec validation,
// config differences on resolved specs.
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "protocol/checkpoint_discovery.h"
#include "protocol/config_diff.h"
#include "protocol/jsonl_reader.h"
#include "protocol/records.h"
#include "protocol/run_spec.h"
#include "protocol/train_flags.h"

using namespace shard::protocol;

class TestProtocol : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void metricRoundTrip()
    {
        MetricRecord r;
        r.step = 7;
        r.tokens = 7 * 512;
        r.loss = 2.5;
        r.lr = 1e-4;
        r.evalLoss = 2.75;
        r.memory.push_back({1, 10, 20, 30, 40, 50, 60, 70, 80});
        const auto back = metricFromJson(nlohmann::json::parse(encodeLine(toJson(r))));
        QCOMPARE(back.step, 7);
        QCOMPARE(back.tokens, 3584);
        QCOMPARE(back.loss, 2.5);
        QVERIFY(back.evalLoss.has_value());
        QCOMPARE(*back.evalLoss, 2.75);
        QCOMPARE(int(back.memory.size()), 1);
        QCOMPARE(back.memory[0].rank, 1);
        QCOMPARE(back.memory[0].optimizerBytes, 40);
        QCOMPARE(back.memory[0].peakBytes, 80);
    }

    // A GPU rank's caching-allocator figures ride in "cuda"; a CPU rank's record has none.
    void metricCudaMemory()
    {
        RankMemory cpu {0, 10, 20, 30, 40, 50, 60, 70, 80};
        QVERIFY(!toJson(cpu).contains("cuda"));
        QVERIFY(!rankMemoryFromJson(toJson(cpu)).cuda);
        RankMemory gpu = cpu;
        gpu.cuda = true;
        gpu.cudaAllocatedBytes = 1000;
        gpu.cudaAllocatedPeakBytes = 2000;
        gpu.cudaReservedBytes = 4096;
        gpu.cudaReservedPeakBytes = 8192;
        gpu.cudaAllocRetries = 3;
        gpu.cudaOoms = 1;
        const nlohmann::json j = toJson(gpu);
        QCOMPARE(j["cuda"]["reserved_peak"].get<int64_t>(), int64_t(8192));
        const RankMemory back = rankMemoryFromJson(nlohmann::json::parse(j.dump()));
        QVERIFY(back.cuda);
        QCOMPARE(back.cudaAllocatedBytes, int64_t(1000));
        QCOMPARE(back.cudaAllocatedPeakBytes, int64_t(2000));
        QCOMPARE(back.cudaReservedBytes, int64_t(4096));
        QCOMPARE(back.cudaReservedPeakBytes, int64_t(8192));
        QCOMPARE(back.cudaAllocRetries, int64_t(3));
        QCOMPARE(back.cudaOoms, int64_t(1));
        QCOMPARE(back.peakBytes, int64_t(80));
    }

    // A run that logs no learning rate, gradient norm or throughput (a command run) writes
    // none and reads them back absent, not 0; a value of the wrong type is refused.
    void metricAbsentValues()
    {
        MetricRecord r;
        r.step = 3;
        r.loss = 1.5;
        const nlohmann::json j = toJson(r);
        QVERIFY(!j.contains("lr") && !j.contains("grad_norm") && !j.contains("tokens_per_sec"));
        const auto back = metricFromJson(nlohmann::json::parse(encodeLine(j)));
        QVERIFY(!back.lr && !back.gradNorm && !back.tokensPerSec);
        r.gradNorm = 0.0; // a logged zero stays a value
        r.tokensPerSec = 1200.0;
        const auto logged = metricFromJson(toJson(r));
        QVERIFY(logged.gradNorm && *logged.gradNorm == 0.0);
        QCOMPARE(logged.tokensPerSec.value_or(0.0), 1200.0);
        QVERIFY(!metricFromJson({{"v", 1}, {"step", 1}, {"loss", 1.0}, {"grad_norm", nullptr}})
                     .gradNorm);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error,
            metricFromJson({{"v", 1}, {"step", 1}, {"loss", 1.0}, {"grad_norm", "high"}}));
    }

    void metricMissingField()
    {
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, metricFromJson({{"v", 1}, {"loss", 1.0}}));
        QVERIFY_THROWS_EXCEPTION(
            std::runtime_error, metricFromJson({{"v", 99}, {"step", 1}, {"loss", 1.0}}));
    }

    void eventRoundTrip()
    {
        EventRecord e {"error", 3.5, 12, "rank 1 killed by signal 9", {{"rank", 1}, {"signal", 9}}};
        const auto back = eventFromJson(toJson(e));
        QCOMPARE(QString::fromStdString(back.kind), QStringLiteral("error"));
        QCOMPARE(back.step, 12);
        QCOMPARE(back.data["signal"].get<int>(), 9);
    }

    void consumeLeavesHalfWrittenLine()
    {
        const std::string data = "{\"a\":1}\n\n{\"a\":2}\n{\"a\":";
        int sum = 0;
        auto res = consumeJsonl(
            data, [&](const nlohmann::json& j, int64_t) { sum += j["a"].get<int>(); });
        QCOMPARE(sum, 3);
        QCOMPARE(res.lines, 2);
        QCOMPARE(res.consumedBytes, int64_t(data.rfind('\n') + 1));
    }

    void consumeReportsBadLines()
    {
        std::vector<std::string> bad;
        auto res = consumeJsonl(
            "not json\n[1,2]\n{\"ok\":true}\n", [](const nlohmann::json&, int64_t) {},
            [&](const std::string& line, const std::string&) { bad.push_back(line); });
        QCOMPARE(res.badLines, 2);
        QCOMPARE(int(bad.size()), 2);
        QCOMPARE(QString::fromStdString(bad[0]), QStringLiteral("not json"));
    }

    void readFileByOffsetIsIdempotent()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("m.jsonl").toStdString();
        {
            std::ofstream out(path);
            out << "{\"n\":1}\n{\"n\":2}\n{\"n\":";
        }
        int64_t offset = 0;
        int count = 0;
        auto on = [&](const nlohmann::json&, int64_t) { ++count; };
        offset += readJsonlFile(path, offset, on).consumedBytes;
        QCOMPARE(count, 2);
        offset += readJsonlFile(path, offset, on).consumedBytes; // nothing new
        QCOMPARE(count, 2);
        {
            std::ofstream out(path, std::ios::app);
            out << "3}\n";
        }
        offset += readJsonlFile(path, offset, on).consumedBytes;
        QCOMPARE(count, 3);
    }

    void runSpecRoundTrip()
    {
        RunSpec s;
        s.name = "demo";
        s.model = "/m";
        s.data = {"/d.jsonl"};
        s.steps = 10;
        s.strategy = "hybrid";
        s.shardGroup = 2;
        s.procsPerNode = 4;
        const auto back = runSpecFromJson(toJson(s));
        QCOMPARE(QString::fromStdString(back.strategy), QStringLiteral("hybrid"));
        QCOMPARE(back.shardGroup, 2);
        QCOMPARE(back.worldSize(), 4);
        validate(back);
    }

    void runSpecErrors_data()
    {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QString>("needle");
        const QString base = R"("model":"/m","data":["/d"],"steps":5)";
        QTest::newRow("unknown field") << "{" + base + R"(,"stpes":3})"
                                       << "unknown field 'stpes'";
        QTest::newRow("bad strategy") << "{" + base + R"(,"strategy":"zero4"})"
                                      << "strategy 'zero4'";
        QTest::newRow("hybrid group")
            << "{" + base + R"(,"strategy":"hybrid","shard_group":3,"procs_per_node":4})"
            << "does not divide";
        QTest::newRow("zero micro batch") << "{" + base + R"(,"micro_batch":0})"
                                          << "micro_batch";
        // (device auto, the default, may resolve to a GPU: the engine refuses offload there)
        QTest::newRow("offload on cpu") << "{" + base + R"(,"device":"cpu","offload":"optimizer"})"
                                        << "nothing on CPU";
        QTest::newRow("bf16 reduce in fp32") << "{" + base + R"(,"reduce_dtype":"bf16"})"
                                             << "reduce_dtype bf16 goes with precision bf16-mixed";
        QTest::newRow("reduce dtype")
            << "{" + base + R"(,"precision":"bf16-mixed","reduce_dtype":"fp16"})"
            << "reduce_dtype 'fp16'";
        QTest::newRow("offload with lora")
            << "{" + base + R"(,"device":"cuda","offload":"optimizer","method":"lora"})"
            << "adapters' optimizer state is small";
        QTest::newRow("wrong type") << "{" + base + R"(,"lr":"fast"})"
                                    << "'lr' has the wrong type";
        QTest::newRow("no steps") << R"({"model":"/m","data":["/d"]})"
                                  << "--steps";
    }

    void runSpecErrors()
    {
        QFETCH(QString, json);
        QFETCH(QString, needle);
        try {
            validate(runSpecFromJson(nlohmann::json::parse(json.toStdString())));
            QFAIL("expected an error");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(needle), e.what());
        }
    }

    // Values the fault probes slipped through (issue 32): each refused with the field and the
    // fix, whether it comes as a train flag or in a spec.
    void badTrainFlagValues_data()
    {
        QTest::addColumn<QStringList>("flags");
        QTest::addColumn<QString>("needle");
        QTest::newRow("clip nan") << QStringList {"--clip", "nan"}
                                  << "--clip: 'nan' is not a number";
        QTest::newRow("clip inf") << QStringList {"--clip", "inf"}
                                  << "clip must be a finite number";
        QTest::newRow("clip negative") << QStringList {"--clip", "-1"} << "clip must be a finite";
        QTest::newRow("checkpoint every -1")
            << QStringList {"--checkpoint-every", "-1"} << "checkpoint_every must be >= 0";
        QTest::newRow("keep checkpoints -1")
            << QStringList {"--keep-checkpoints", "-1"} << "keep_checkpoints must be >= 0";
        QTest::newRow("seed -1") << QStringList {"--seed", "-1"}
                                 << "--seed: '-1' is negative; give a whole number from 0";
        QTest::newRow("seed text")
            << QStringList {"--seed", "x"} << "--seed: 'x' is not a whole number";
        QTest::newRow("micro batch nan")
            << QStringList {"--micro-batch", "nan"} << "--micro-batch: 'nan' is not an integer";
        QTest::newRow("max restarts -1") << QStringList {"--max-restarts", "-1"}
                                         << "max_restarts must be 0 (off) or a positive count";
        QTest::newRow("lr inf") << QStringList {"--lr", "inf"} << "lr must be a finite number";
        QTest::newRow("eval fraction nan")
            << QStringList {"--eval-fraction", "nan"} << "is not a number";
    }

    void badTrainFlagValues()
    {
        QFETCH(QStringList, flags);
        QFETCH(QString, needle);
        std::vector<std::string> args = {"--model", "/m", "--data", "/d", "--steps", "5"};
        for (const QString& f : flags)
            args.push_back(f.toStdString());
        try {
            RunSpec spec;
            applyTrainFlags(spec, args);
            validate(spec);
            QFAIL("expected an error");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(needle), e.what());
        }
    }

    // A spec built in code (not through the flags) is held to the same rule: JSON cannot record
    // NaN, so a spec with one would not rerun as it ran.
    void nanInSpecRefused()
    {
        RunSpec spec;
        spec.model = "/m";
        spec.data = {"/d"};
        spec.steps = 5;
        validate(spec);
        spec.clip = std::nan("");
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, validate(spec));
        spec.clip = 1.0;
        spec.beta2 = std::nan("");
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, validate(spec));
    }

    // DPO's live reference: one rule for validate, `shard plan` and the studio. Full fine-tuning
    // keeps a frozen copy of the model, placed over data-parallel ranks only.
    void liveReferenceRule()
    {
        RunSpec s;
        s.objective = "dpo";
        s.reference = "live";
        s.method = "full";
        QVERIFY(liveReferenceRefusal(s).empty());
        s.pipelineParallel = 2;
        const std::string why = liveReferenceRefusal(s);
        QVERIFY(why.find("--reference precomputed") != std::string::npos);
        QVERIFY(why.find("--method lora") != std::string::npos);
        s.pipelineParallel = 1;
        s.tensorParallel = 2;
        QVERIFY(!liveReferenceRefusal(s).empty());
        s.method = "lora"; // the reference is the base with its adapters off: no copy
        QVERIFY(liveReferenceRefusal(s).empty());
        s.method = "full";
        s.reference = "auto"; // precomputed with full fine-tuning
        QVERIFY(liveReferenceRefusal(s).empty());
        s.reference = "live";
        s.objective = "sft";
        QVERIFY(liveReferenceRefusal(s).empty());
    }

    void configDifferencesIgnoreDefaults()
    {
        // One spec states the defaults, the other leaves them out: nothing differs.
        const nlohmann::json terse = {{"model", "m"}, {"data", {"a.jsonl"}}, {"steps", 10}};
        nlohmann::json full = toJson(runSpecFromJson(terse));
        full["name"] = "other name";
        full["out"] = "/elsewhere";
        full["resume"] = "auto"; // a continued run's: not a setting to compare
        QVERIFY(differingConfigValues({terse, full}).empty());
        // A real difference is one row with both values; a spec that is not a run spec is
        // compared as it is, and what it lacks is empty.
        nlohmann::json faster = terse;
        faster["lr"] = 0.01;
        faster["beta1"] = 0.8;
        const auto d = differingConfigValues({terse, faster, {{"lr", 0.5}, {"custom", 1}}});
        QStringList keys;
        for (const auto& x : d)
            keys << QString::fromStdString(x.key);
        QVERIFY2(keys.contains("lr") && keys.contains("beta1") && keys.contains("custom"),
            qPrintable(keys.join(',')));
        for (const auto& x : d)
            if (x.key == "beta1") {
                QCOMPARE(x.values.at(0), std::string("0.9"));
                QCOMPARE(x.values.at(1), std::string("0.8"));
                QCOMPARE(x.values.at(2), std::string());
            }
        QVERIFY(differingConfigValues({terse}).empty());
    }

    // Compare's config diff shows the method and the LoRA rank of runs that differ in them (and
    // the tensor-parallel layout); a full run and one that states method full with the default
    // rank do not differ.
    void configDifferencesShowMethodAndRank()
    {
        const nlohmann::json full = {{"model", "m"}, {"data", {"a.jsonl"}}, {"steps", 10}};
        nlohmann::json lora = full;
        lora["method"] = "lora";
        lora["lora_rank"] = 16;
        nlohmann::json statedFull = full;
        statedFull["method"] = "full";
        QVERIFY(differingConfigValues({full, statedFull}).empty());
        const auto d = differingConfigValues({full, lora});
        QStringList keys;
        for (const auto& x : d)
            keys << QString::fromStdString(x.key);
        QCOMPARE(keys, (QStringList {"lora_rank", "method"}));
        QCOMPARE(d.at(0).values, (std::vector<std::string> {"8", "16"}));
        QCOMPARE(d.at(1).values, (std::vector<std::string> {"full", "lora"}));
        // The layout: a tensor-parallel run against one that never set it (tp 1).
        nlohmann::json tp = full;
        tp["tensor_parallel"] = 2;
        const auto layout = differingConfigValues({full, tp});
        QCOMPARE(int(layout.size()), 1);
        QCOMPARE(layout.at(0).key, std::string("tensor_parallel"));
        QCOMPARE(layout.at(0).values, (std::vector<std::string> {"1", "2"}));
    }

    // The run a model path belongs to: the run folder itself, <run>/model and
    // <run>/checkpoints/step-<n> all lead to it; a run.json that is not a run's spec (an
    // exported model's, a JSON array, broken JSON) is passed over; no run anywhere is empty.
    void runFolderOfFindsTheRun()
    {
        namespace fs = std::filesystem;
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const fs::path run = fs::path(tmp.path().toStdString()) / "run";
        fs::create_directories(run / "model");
        fs::create_directories(run / "checkpoints" / "step-4");
        std::ofstream(run / "run.json") << R"({"model": "m", "data": ["a.jsonl"]})";
        const std::string want = fs::path(run).lexically_normal().string();
        QCOMPARE(runFolderOf(run.string()), want);
        QCOMPARE(runFolderOf((run / "model").string()), want);
        QCOMPARE(runFolderOf((run / "checkpoints" / "step-4").string()), want);
        QCOMPARE(runFolderOf((run / "checkpoints" / ".." / "model").string()), want);

        // Three levels up is too far: a folder below a checkpoint is not the run's.
        fs::create_directories(run / "checkpoints" / "step-4" / "inner");
        QCOMPARE(runFolderOf((run / "checkpoints" / "step-4" / "inner").string()), std::string());

        // A run.json that is no run's spec does not stop the search, and is not an answer.
        std::ofstream(run / "model" / "run.json") << R"({"exported": true})";
        QCOMPARE(runFolderOf((run / "model").string()), want);
        std::ofstream(run / "model" / "run.json") << "[1, 2]";
        QCOMPARE(runFolderOf((run / "model").string()), want);
        std::ofstream(run / "model" / "run.json") << "{not json";
        QCOMPARE(runFolderOf((run / "model").string()), want);

        const fs::path lone = fs::path(tmp.path().toStdString()) / "lone";
        fs::create_directories(lone);
        QCOMPARE(runFolderOf(lone.string()), std::string());
        QCOMPARE(runFolderOf(""), std::string());
        QCOMPARE(runFolderOf("/"), std::string());
    }
};

QTEST_GUILESS_MAIN(TestProtocol)
#include "tst_protocol.moc"
