// `shard run -- <train flags>` with the real shard-worker: the rank count given as the worker's
// --nproc-per-node starts that many ranks (it used to start 1 while the store said 2), a second,
// different count is refused, and lines dropped by --skip-bad-lines reach the store and
// `shard runs show`.
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/run_store.h"
#include "jobs_test_util.h"

using namespace shard::jobs;

namespace {

const QString kWorker = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");

QJsonObject readJson(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? QJsonDocument::fromJson(f.readAll()).object()
                                       : QJsonObject();
}

} // namespace

class TestCliTrainFlags : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    QString m_model;
    QString m_data;

    QProcessEnvironment env() const
    {
        QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
        e.insert("SHARD_STORE", m_dir.filePath("runs.sqlite"));
        e.insert("SHARD_RUNS_DIR", m_dir.filePath("runs"));
        e.insert("SHARD_WORKER", kWorker);
        return e;
    }

    shard::test::CliOut shard(const QStringList& args) const
    {
        return shard::test::runShard(env(), args, 180000);
    }

    QStringList trainFlags(const QString& data) const
    {
        return {"--model", m_model, "--data", data, "--steps", "2", "--seq-len", "16",
            "--micro-batch", "2", "--threads", "1", "--lr", "1e-3"};
    }

private Q_SLOTS:
    void initTestCase()
    {
        if (!QFile::exists(kWorker))
            QSKIP("shard-worker is not built here (SHARD_BUILD_ENGINE=OFF)");
        m_model = m_dir.filePath("model");
        QCOMPARE(QProcess::execute(kWorker,
                     {"init-model", "--preset", "tiny-1m", "--out", m_model, "--seed", "1"}),
            0);
        m_data = m_dir.filePath("data.jsonl");
        QFile f(m_data);
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (int i = 0; i < 40; ++i)
            f.write(i == 6 || i == 17 ? "not json\n"
                                      : QString("{\"input_ids\":[%1,%2,%3,%4]}\n")
                                            .arg(10 + i % 9)
                                            .arg(11 + i % 9)
                                            .arg(12 + i % 9)
                                            .arg(13 + i % 9)
                                            .toUtf8());
    }

    void rankCountAfterDashes()
    {
        auto o = shard(QStringList {"run", "--name", "two", "--"} + trainFlags(m_data)
            + QStringList {"--skip-bad-lines", "--nproc-per-node", "2"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        auto run = store->findRun("two");
        QVERIFY(run);
        QCOMPARE(run->worldSize, 2);
        // The engine ran 2 ranks and recorded them.
        QVERIFY2(QFile::exists(run->runDir + "/logs/rank-1.log"), qPrintable(run->runDir));
        QCOMPARE(readJson(run->runDir + "/run.json").value("procs_per_node").toInt(), 2);

        // The skipped lines: an event in the store and in `shard runs show`.
        auto events = store->events(run->id);
        QVERIFY(events);
        bool seen = false;
        for (const auto& e : *events)
            seen = seen || (e.kind == "data" && e.message.startsWith("skipped 2 bad lines"));
        QVERIFY(seen);
        o = shard({"runs", "show", "two"});
        QCOMPARE(o.code, 0);
        QVERIFY2(o.out.contains("skipped 2 bad lines"), qPrintable(o.out));
        QVERIFY2(o.out.contains("\"skipped_lines\":2"), qPrintable(o.out));
    }

    void twoDifferentRankCountsAreRefused()
    {
        auto o = shard(QStringList {"run", "--name", "clash", "--nproc", "2", "--"}
            + trainFlags(m_data) + QStringList {"--skip-bad-lines", "--nproc-per-node", "3"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("--nproc 2 and the train flag --nproc-per-node 3 disagree"),
            qPrintable(o.err));
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        QVERIFY(!store->findRun("clash"));
        // A rank count of 0 is refused in words (CLI11's own check printed its range as 0 to
        // 1.8e308).
        o = shard(QStringList {"run", "--name", "zero", "--nproc", "0", "--"} + trainFlags(m_data));
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("--nproc: must be above 0 (got '0')"), qPrintable(o.err));
        QVERIFY2(!o.err.contains("1797693"), qPrintable(o.err));
        QVERIFY(!store->findRun("zero"));
        // The preemption signal's lead may be 0 (none), not below.
        o = shard(QStringList {"run", "--name", "lead", "--slurm", "--preempt-signal", "-1", "--"}
            + trainFlags(m_data));
        QVERIFY(o.code != 0);
        QVERIFY2(
            o.err.contains("--preempt-signal: must be 0 or above (got '-1')"), qPrintable(o.err));
        QVERIFY(!store->findRun("lead"));
    }

    // `shard run` continues a run in its folder (issue 32): `--resume auto` after `--` and a
    // RUN.json with "resume": "auto" both used to be refused with "already holds a run".
    void resumeContinuesTheRun()
    {
        const QString runDir = m_dir.filePath("resumed");
        const QStringList steps4 = {"--steps", "4", "--checkpoint-every", "2"};
        auto o = shard(QStringList {"run", "--name", "res", "--run-dir", runDir, "--"}
            + trainFlags(m_data) + QStringList {"--skip-bad-lines"} + steps4);
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(QFile::exists(runDir + "/checkpoints/step-4/DONE"));

        // The flags route: two more steps from the checkpoint at step 4.
        o = shard(QStringList {"run", "--name", "res", "--run-dir", runDir, "--"}
            + trainFlags(m_data)
            + QStringList {
                "--skip-bad-lines", "--steps", "6", "--checkpoint-every", "2", "--resume", "auto"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QCOMPARE(lastMetricStep(runDir), 6);

        // The RUN.json route: the run's own spec, its steps raised, "resume": "auto".
        QJsonObject spec = readJson(runDir + "/run.json");
        QVERIFY(!spec.isEmpty());
        spec["steps"] = 8;
        spec["resume"] = "auto";
        const QString specPath = m_dir.filePath("resume-spec.json");
        QFile f(specPath);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QJsonDocument(spec).toJson());
        f.close();
        o = shard({"run", "--run-dir", runDir, specPath});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QCOMPARE(lastMetricStep(runDir), 8);

        // One record for the folder, as for a resume from the studio.
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        RunQuery q;
        q.text = runDir;
        auto runs = store->listRuns(q);
        QVERIFY(runs);
        QCOMPARE(runs->size(), 1);

        // resume "auto" without a folder to continue is refused, naming --run-dir.
        o = shard(QStringList {"run", "--name", "nowhere", "--"} + trainFlags(m_data)
            + QStringList {"--resume", "auto"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("--run-dir"), qPrintable(o.err));
    }

    // The preflight (jobs/preflight.h) before a local start: what the engine would refuse is
    // said with the CLI's flags and nothing starts (no run recorded); a warning is printed and
    // the run goes on.
    void preflightRefusesBeforeStart()
    {
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        auto o = shard(QStringList {"run", "--name", "malformed", "--"} + trainFlags(m_data));
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("not started:") && o.err.contains("2 malformed lines")
                && o.err.contains("data.jsonl:7") && o.err.contains("pass --skip-bad-lines"),
            qPrintable(o.err));
        QVERIFY(!store->findRun("malformed"));

        // 38 good records, 2 ranks: a micro-batch of 20 takes 40 a micro-step.
        o = shard(QStringList {"run", "--name", "too-big", "--nproc", "2", "--"}
            + trainFlags(m_data) + QStringList {"--skip-bad-lines", "--micro-batch", "20"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("training data has 38")
                && o.err.contains("set --micro-batch to 19 or less"),
            qPrintable(o.err));
        QVERIFY(!store->findRun("too-big"));

        // A model folder that is none.
        o = shard(QStringList {"run", "--name", "no-model", "--", "--model",
            m_dir.filePath("nowhere"), "--data", m_data, "--steps", "1"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("No such folder"), qPrintable(o.err));
        QVERIFY(!store->findRun("no-model"));

        // Skipped lines only warn.
        o = shard(QStringList {"run", "--name", "warned", "--"} + trainFlags(m_data)
            + QStringList {"--skip-bad-lines", "--steps", "1"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.err.contains("note: 2 malformed lines will be skipped"), qPrintable(o.err));

        // DPO: the first pairs through the chat template, and a pair with nothing to prefer
        // refused with its line, before anything starts.
        const QString pairs = m_dir.filePath("pairs.jsonl");
        QFile f(pairs);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"prompt":[{"role":"user","content":"What is 2 + 2?"}],)"
                R"("chosen":[{"role":"assistant","content":"4"}],)"
                R"("rejected":[{"role":"assistant","content":"5"}]})"
                "\n"
                R"({"prompt":"Name a colour.","chosen":"blue","rejected":"blue"})"
                "\n");
        f.close();
        o = shard(QStringList {"run", "--name", "pairs", "--", "--objective", "dpo", "--model",
            m_model, "--data", pairs, "--steps", "1", "--seq-len", "64", "--micro-batch", "1"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("the first pairs, as the model sees them:")
                && o.err.contains("What is 2 + 2?")
                && o.err.contains("<|start_header_id|>assistant")
                && o.err.contains("line 2: \"chosen\" and \"rejected\" are the same"),
            qPrintable(o.err));
        QVERIFY2(o.err.contains("not started:"), qPrintable(o.err));
        QVERIFY(!store->findRun("pairs"));
    }

    // `shard run --nproc 0` used to start the spec's rank count and exit 0 (issue 32).
    void zeroRanksRefused()
    {
        auto o = shard(
            QStringList {"run", "--name", "zero", "--nproc", "0", "--"} + trainFlags(m_data));
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("--nproc"), qPrintable(o.err));
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        QVERIFY(!store->findRun("zero"));
    }

private:
    static int lastMetricStep(const QString& runDir)
    {
        QFile f(runDir + "/metrics.jsonl");
        if (!f.open(QIODevice::ReadOnly))
            return -1;
        int step = -1;
        for (const QByteArray& line : f.readAll().split('\n'))
            if (!line.trimmed().isEmpty())
                step = QJsonDocument::fromJson(line).object().value("step").toInt();
        return step;
    }
};

QTEST_GUILESS_MAIN(TestCliTrainFlags)
#include "tst_cli_train_flags.moc"
