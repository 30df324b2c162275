// The launch contract written once: protocol::LaunchArgs (toArgv <-> fromArgv, the command line
// jobs/ builds and the worker's `launch` reads) and the `train` flags table that both the worker
// and `shard run -- <train flags>` read into a RunSpec.
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include "protocol/launch_args.h"
#include "protocol/train_flags.h"

using namespace shard::protocol;

class TestLaunchContract : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void launchArgsRoundTrip()
    {
        LaunchArgs a;
        a.nprocPerNode = 2;
        a.nnodes = 3;
        a.nodeRank = 1;
        a.masterAddr = "10.0.0.1";
        a.masterPort = 29500;
        a.runDir = "/runs/a b";
        a.hangTimeoutSec = 0.25;
        a.collectiveTimeoutSec = 90;
        a.rdzvTimeoutSec = 120;
        a.workerArgs = {"train", "--config", "/runs/a b/launch-spec.json"};
        const auto argv = a.toArgv();
        QCOMPARE(QString::fromStdString(argv.front()), QString("launch"));
        const LaunchArgs b = LaunchArgs::fromArgv(argv);
        QCOMPARE(*b.nprocPerNode, 2);
        QCOMPARE(*b.nnodes, 3);
        QCOMPARE(*b.nodeRank, 1);
        QCOMPARE(QString::fromStdString(*b.masterAddr), QString("10.0.0.1"));
        QCOMPARE(*b.masterPort, 29500);
        QCOMPARE(QString::fromStdString(*b.runDir), QString("/runs/a b"));
        QCOMPARE(*b.hangTimeoutSec, 0.25);
        QCOMPARE(*b.collectiveTimeoutSec, 90.0);
        QCOMPARE(b.rdzvTimeoutSec, 120.0);
        QCOMPARE(b.gracePeriodSec, 5.0);
        QVERIFY(b.workerArgs == a.workerArgs);
        QVERIFY(b.toArgv() == argv); // the same words again
    }

    void launchArgsMinimal()
    {
        LaunchArgs a;
        a.nprocPerNode = 1;
        a.workerArgs = {"train", "--out", "x"};
        const std::vector<std::string> expected {
            "launch", "--nproc-per-node", "1", "--", "train", "--out", "x"};
        QVERIFY(a.toArgv() == expected); // unset flags and default timeouts are left out
        const LaunchArgs b = LaunchArgs::fromArgv({"--nnodes=2", "--", "train"});
        QCOMPARE(*b.nnodes, 2);
        QVERIFY(!b.nprocPerNode);
    }

    void launchArgsErrors()
    {
        auto error = [](const std::vector<std::string>& argv) -> QString {
            try {
                (void)LaunchArgs::fromArgv(argv);
            } catch (const std::invalid_argument& e) {
                return e.what();
            }
            return {};
        };
        QVERIFY(error({"--nproc-per-node", "two"}).contains("'two' is not an integer"));
        QVERIFY(error({"--hang-timeout", "soon"}).contains("is not a number of seconds"));
        QVERIFY(error({"--steps", "3"}).contains("unknown flag '--steps'"));
        QVERIFY(error({"--run-dir"}).contains("--run-dir needs a value"));
    }

    void trainFlagsFillTheSpec()
    {
        RunSpec s;
        applyTrainFlags(s,
            {"--model", "m", "--data=d.jsonl", "--steps", "25", "--lr", "0.01", "--packing",
                "--no-shuffle", "--nproc-per-node", "2", "--strategy", "hybrid", "--shard-group",
                "2", "--seed", "7", "--resume"});
        QCOMPARE(QString::fromStdString(s.model), QString("m"));
        QCOMPARE(int(s.data.size()), 1);
        QCOMPARE(QString::fromStdString(s.data[0]), QString("d.jsonl"));
        QCOMPARE(s.steps, int64_t(25));
        QCOMPARE(s.lr, 0.01);
        QVERIFY(s.packing);
        QVERIFY(!s.shuffle);
        QCOMPARE(s.procsPerNode, 2);
        QCOMPARE(QString::fromStdString(s.strategy), QString("hybrid"));
        QCOMPARE(s.shardGroup, 2);
        QCOMPARE(s.seed, uint64_t(7));
        QCOMPARE(QString::fromStdString(s.resume), QString("auto")); // no value: auto
        applyTrainFlags(s, {"--resume", "/ckpt/step-4", "--steps", "30"});
        QCOMPARE(QString::fromStdString(s.resume), QString("/ckpt/step-4"));
        QCOMPARE(s.steps, int64_t(30)); // the last one wins
    }

    void trainFlagErrors()
    {
        auto error = [](const std::vector<std::string>& args) -> QString {
            RunSpec s;
            try {
                applyTrainFlags(s, args);
            } catch (const std::runtime_error& e) {
                return e.what();
            }
            return {};
        };
        QVERIFY(error({"--steps", "many"}).contains("--steps: 'many' is not an integer"));
        QVERIFY(error({"--lr", "fast"}).contains("--lr: 'fast' is not a number"));
        QVERIFY(error({"--stpes", "3"}).contains("unknown train flag '--stpes'"));
        QVERIFY(error({"--packing=yes"}).contains("--packing takes no value"));
        QVERIFY(error({"--model"}).contains("--model needs a value"));
        // A seed is unsigned: a negative one is named as such (it said "not an integer").
        QVERIFY(error({"--seed", "-1"}).contains("--seed: '-1' is negative"));
    }

    // --lora-init continues an adapter in its own shape, as PEFT's from_pretrained does: rank,
    // alpha, dropout and targets come from its adapter_config.json unless a flag sets them, and
    // only such a flag that disagrees is an error (issue 27).
    void loraInitTakesTheAdaptersShape()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QFile config(dir.filePath("adapter_config.json"));
        QVERIFY(config.open(QIODevice::WriteOnly));
        config.write(R"({"peft_type":"LORA","r":4,"lora_alpha":8,"lora_dropout":0.05,)"
                     R"("target_modules":["q_proj","v_proj"],"use_rslora":false,"bias":"none"})");
        config.close();
        const std::string adapter = dir.path().toStdString();
        RunSpec s;
        applyTrainFlags(s, {"--method", "lora", "--lora-init", adapter});
        QCOMPARE(s.loraRank, int64_t(4));
        QCOMPARE(s.loraAlpha, 8.0);
        QCOMPARE(s.loraDropout, 0.05);
        QCOMPARE(QString::fromStdString(s.loraTargets), QString("q,v"));
        // The same values given explicitly agree.
        RunSpec same;
        applyTrainFlags(same,
            {"--method", "lora", "--lora-rank", "4", "--lora-targets", "v,q", "--lora-init",
                adapter});
        QCOMPARE(same.loraRank, int64_t(4));
        QCOMPARE(same.loraAlpha, 8.0);
        // A different one asked for is refused, naming the flag to drop.
        auto error = [&](const std::vector<std::string>& extra) -> QString {
            RunSpec e;
            std::vector<std::string> args {"--method", "lora", "--lora-init", adapter};
            args.insert(args.end(), extra.begin(), extra.end());
            try {
                applyTrainFlags(e, args);
            } catch (const std::runtime_error& x) {
                return x.what();
            }
            return {};
        };
        const QString rank = error({"--lora-rank", "8"});
        QVERIFY2(rank.contains("the adapter has r 4 but the run asks for r 8 (--lora-rank)")
                && rank.contains("drop --lora-rank"),
            qPrintable(rank));
        QVERIFY2(error({"--lora-targets", "q,k,v,o"}).contains("--lora-targets"),
            qPrintable(error({"--lora-targets", "q,k,v,o"})));
        // Without --lora-init the flags' defaults stand.
        RunSpec fresh;
        applyTrainFlags(fresh, {"--method", "lora"});
        QCOMPARE(fresh.loraRank, RunSpec().loraRank);
    }
};

QTEST_GUILESS_MAIN(TestLaunchContract)
#include "tst_launch_contract.moc"
