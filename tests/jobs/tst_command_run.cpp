// A command as a run, as a user runs it: `shard run --command 'torchrun ... train.py'` with
// Debian's PyTorch (a small model under torchrun on two CPU ranks over Gloo, FSDP FULL_SHARD
// where this PyTorch can import it, else DDP), printing Hugging Face Trainer's log lines: the
// run is recorded, its points stored, a failing rank named from torchrun's own report, a stop
// leaves no process behind, a relaunch continues the same record; bad commands say why.
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QHostAddress>
#include <QProcess>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>

#include <nlohmann/json.hpp>

#include "jobs/command_run.h"
#include "jobs/run_store.h"
#include "jobs_test_util.h"
#include "tbio/event_writer.h"
#include "torchrun_util.h"

using namespace shard::jobs;
using namespace shard::test;

class TestCommandRun : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    bool m_torch = false;

    QProcessEnvironment env() const
    {
        QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
        e.insert("SHARD_STORE", m_dir.filePath("runs.sqlite"));
        e.insert("SHARD_RUNS_DIR", m_dir.filePath("runs"));
        return e;
    }

    shard::test::CliOut shard(const QStringList& args, int timeoutMs = 180000) const
    {
        return shard::test::runShard(env(), args, timeoutMs);
    }

    RunStore store() const
    {
        return std::move(RunStore::open(m_dir.filePath("runs.sqlite"))).value();
    }

    QStringList torchrun(const QString& runDir, const QStringList& envs) const
    {
        QStringList a = {"run", "--name", QFileInfo(runDir).fileName(), "--run-dir", runDir,
            "--env", "USE_LIBUV=0"};
        for (const QString& e : envs)
            a << "--env" << e;
        a << "--command" << torchrunCommand();
        return a;
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_torch = haveTorch();
    }

    void trainsUnderTorchrun()
    {
        if (!m_torch)
            QSKIP("/usr/bin/python3 has no torch (python3-torch, which setup.sh installs)");
        const QString dir = m_dir.filePath("train");
        const auto o = shard(torchrun(dir, {"STEPS=20"}));
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(o.out.contains("finished (the command exited with status 0)"));
        RunStore s = store();
        const qint64 id = s.findRunByDir(QString(), dir).value();
        QVERIFY(id > 0);
        const RunRecord run = s.run(id).value();
        QCOMPARE(toString(run.status), toString(RunStatus::Finished));
        QCOMPARE(toString(run.target), QString("local"));
        QVERIFY(isCommandSpec(run.specJson));
        const MetricSeries m = s.metricSeries(id).value();
        QCOMPARE(m.size(), 20);
        QCOMPARE(m.step.front(), 1.0);
        QCOMPARE(m.step.back(), 20.0);
        QCOMPARE(m.lr.back(), 0.01);
        QVERIFY2(m.loss.back() < 0.5 * m.loss.front(), "the model learns");
        // The script logs no gradient norm or throughput: stored absent (NULL), not 0.
        for (int i = 0; i < m.size(); ++i)
            QVERIFY2(std::isnan(m.gradNorm[i]) && std::isnan(m.tokensPerSec[i]),
                qPrintable(QString("step %1: %2, %3")
                               .arg(m.step[i])
                               .arg(m.gradNorm[i])
                               .arg(m.tokensPerSec[i])));
        // The command's output is kept: the wrapper it chose, and stdout/stderr apart.
        QFile out(dir + "/logs/stdout.log");
        QVERIFY(out.open(QIODevice::ReadOnly));
        const QByteArray text = out.readAll();
        QVERIFY(text.contains("wrapper: "));
        qInfo("torchrun wrapped the model in %s",
            text.mid(text.indexOf("wrapper: ") + 9, 40).split('\n').front().constData());
        QVERIFY(QFile::exists(dir + "/logs/stderr.log"));
        QVERIFY(QFile::exists(dir + "/command.json"));
    }

    void failingRankIsNamed()
    {
        if (!m_torch)
            QSKIP("/usr/bin/python3 has no torch (python3-torch, which setup.sh installs)");
        const QString dir = m_dir.filePath("fails");
        const auto o = shard(torchrun(dir, {"STEPS=20", "FAIL_RANK=1", "FAIL_STEP=4"}));
        QVERIFY2(o.code != 0, qPrintable(o.out));
        RunStore s = store();
        const qint64 id = s.findRunByDir(QString(), dir).value();
        const RunRecord run = s.run(id).value();
        QCOMPARE(toString(run.status), toString(RunStatus::Failed));
        QVERIFY2(run.message.contains("rank 1 exit code 3"), qPrintable(run.message));
        QVERIFY2(run.message.contains("torchrun's report"), qPrintable(run.message));
        // The steps before the failure are stored.
        QVERIFY(s.metricSeries(id).value().size() >= 2);
    }

    void stopAndRelaunch()
    {
        if (!m_torch)
            QSKIP("/usr/bin/python3 has no torch (python3-torch, which setup.sh installs)");
        const QString dir = m_dir.filePath("long");
        QStringList args = torchrun(dir, {"STEPS=100000", "STEP_SLEEP=0.1"});
        args.insert(1, "--detach");
        const auto o = shard(args);
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        RunStore s = store();
        const qint64 id = s.findRunByDir(QString(), dir).value();
        const qint64 supervisor = s.run(id).value().pid;
        QVERIFY(supervisor > 0);
        // It trains: points arrive (rank 0's lines through torchrun's tee).
        QTRY_VERIFY_WITH_TIMEOUT(
            QFile(dir + "/metrics.jsonl").size() > 0 && QFile::exists(dir + "/metrics.jsonl") &&
                [&] {
                    QFile f(dir + "/metrics.jsonl");
                    return f.open(QIODevice::ReadOnly) && f.readAll().count('\n') >= 3;
                }(),
            120000);
        const auto stop = shard({"stop", QString::number(id)});
        QVERIFY2(stop.code == 0, qPrintable(stop.out + stop.err));
        QCOMPARE(toString(store().run(id).value().status), toString(RunStatus::Stopped));
        // No process of the run is left: torchrun, its ranks, the shell, the supervisor.
        QTRY_COMPARE_WITH_TIMEOUT(liveInGroup(supervisor), 0, 30000);
        const qint64 before = store().metricSeries(id).value().step.back();

        // Relaunched in its folder: the same record, its steps numbered on.
        QStringList again = torchrun(dir, {"STEPS=2"});
        again.insert(1, "--resume");
        const auto r = shard(again);
        QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
        RunStore after = store();
        QCOMPARE(after.findRunByDir(QString(), dir).value(), id);
        QCOMPARE(toString(after.run(id).value().status), toString(RunStatus::Finished));
        QCOMPARE(after.metricSeries(id).value().step.back(), double(before + 2));
    }

    // --logdir: the event files the command writes are followed while it runs and give the
    // points at their own steps (the stepless stdout line is not stored then).
    void followsTheLogdir()
    {
        const QString dir = m_dir.filePath("tb-run");
        const QString work = m_dir.filePath("tb-work");
        QVERIFY(QDir().mkpath(work + "/tb"));
        const auto o = shard(
            {"run", "--detach", "--run-dir", dir, "--workdir", work, "--logdir", "tb", "--command",
                "echo \"{'loss': 9.0, 'learning_rate': 1.0}\"; for i in $(seq 600); do "
                "[ -f done ] && exit 0; sleep 0.1; done; exit 1"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        const qint64 id = store().findRunByDir(QString(), dir).value();
        {
            // A writer as the command's (the engine's TensorBoard writer), written while it runs.
            shard::tbio::EventFileWriter w((work + "/tb").toStdString());
            w.write(1.0, 10, {{"train/loss", 3.5f}, {"train/learning_rate", 1e-3f}});
            w.write(2.0, 20, {{"train/loss", 2.5f}, {"train/learning_rate", 1e-3f}});
            w.write(2.5, 20, {{"eval/loss", 2.75f}});
            QTRY_VERIFY_WITH_TIMEOUT(
                [&] {
                    QFile f(dir + "/metrics.jsonl");
                    return f.open(QIODevice::ReadOnly) && f.readAll().contains("\"eval_loss\"");
                }(),
                30000);
            w.write(3.0, 30, {{"train/loss", 2.0f}, {"train/learning_rate", 5e-4f}});
        }
        QFile done(work + "/done");
        QVERIFY(done.open(QIODevice::WriteOnly));
        done.close();
        const auto a = shard({"attach", QString::number(id)});
        QVERIFY2(a.code == 0, qPrintable(a.out + a.err));
        const MetricSeries m = store().metricSeries(id).value();
        QCOMPARE(m.step, QVector<double>({10, 20, 30}));
        QCOMPARE(m.loss, QVector<double>({3.5, 2.5, 2.0}));
        QCOMPARE(m.evalStep, QVector<double>({20}));
        QCOMPARE(m.evalLoss, QVector<double>({2.75}));
        QVERIFY(std::fabs(m.lr.back() - 5e-4) < 1e-9);
    }

    // A command that logs nothing the studio reads, or whose --logdir never fills, is said once
    // as a warning event (the Monitor shows it) after $SHARD_SILENT_WARN_SEC; one that logs its
    // loss is not warned about.
    void silentCommandIsSaid()
    {
        QProcessEnvironment e = env();
        e.insert("SHARD_SILENT_WARN_SEC", "1");
        auto warnings = [](const QString& dir) {
            QFile f(dir + "/events.jsonl");
            QStringList out;
            if (f.open(QIODevice::ReadOnly))
                for (const QByteArray& line : f.readAll().split('\n'))
                    if (line.contains("\"kind\":\"warning\""))
                        out << QString::fromUtf8(line);
            return out;
        };
        const QString quiet = m_dir.filePath("quiet");
        const QString work = m_dir.filePath("quiet-work");
        QVERIFY(QDir().mkpath(work));
        const auto q = shard::test::runShard(e,
            {"run", "--run-dir", quiet, "--workdir", work, "--logdir", "tb", "--command",
                "sleep 4"},
            180000);
        QVERIFY2(q.code == 0, qPrintable(q.out + q.err));
        const QStringList w = warnings(quiet);
        QVERIFY2(w.size() == 2, qPrintable(w.join('\n')));
        QVERIFY2(w.join('\n').contains("no TensorBoard event file has appeared in " + work + "/tb"),
            qPrintable(w.join('\n')));
        QVERIFY2(w.join('\n').contains("no metric has been read from the command after 1 s"),
            qPrintable(w.join('\n')));
        const QString talking = m_dir.filePath("talking");
        const auto t = shard::test::runShard(e,
            {"run", "--run-dir", talking, "--command", "echo \"{'loss': 1.5}\"; sleep 4"}, 180000);
        QVERIFY2(t.code == 0, qPrintable(t.out + t.err));
        QVERIFY2(warnings(talking).isEmpty(), qPrintable(warnings(talking).join('\n')));
    }

    void badCommands()
    {
        // Not found: exit 127 in the run's message, with the shell's line.
        const QString dir = m_dir.filePath("missing");
        const auto o = shard({"run", "--run-dir", dir, "--command", "no-such-trainer-xyz --go"});
        QVERIFY(o.code != 0);
        const RunRecord run = store().run(store().findRunByDir(QString(), dir).value()).value();
        QCOMPARE(toString(run.status), toString(RunStatus::Failed));
        QVERIFY2(run.message.contains("status 127") && run.message.contains("command not found")
                && run.message.contains("no-such-trainer-xyz"),
            qPrintable(run.message));
        // Exits at once with its own status and error line.
        const QString quick = m_dir.filePath("quick");
        const auto q
            = shard({"run", "--run-dir", quick, "--command", "echo 'bad config' >&2; exit 4"});
        QVERIFY(q.code != 0);
        const RunRecord qr = store().run(store().findRunByDir(QString(), quick).value()).value();
        QVERIFY2(qr.message.contains("status 4") && qr.message.contains("bad config"),
            qPrintable(qr.message));
        // Refused before anything starts.
        auto refused = [&](const QStringList& args, const QString& needle) {
            const auto r = shard(args);
            QVERIFY2(r.code != 0 && r.err.contains(needle), qPrintable(r.err));
        };
        refused(
            {"run", "--command", "true", "--workdir", m_dir.filePath("nowhere")}, "no such folder");
        refused({"run", "--command", "true", "--resume"}, "--resume runs the command again");
        refused({"run", "--command", "true", "--", "--steps", "3"}, "drop the run spec");
        refused({"run", "--command", "true", "--env", "NOEQUALS"}, "is not KEY=VALUE");
        refused({"run", "--run-dir", quick, "--command", "true"}, "already holds a run");
    }

    // On a machine with NVIDIA GPUs the supervisor samples nvidia-smi into the records' per-GPU
    // memory. This machine has none: a stand-in on PATH answers the query nvidia-smi answers
    // (index, memory.used in MiB, CSV without header or units) for two GPUs, the second growing.
    void samplesNvidiaSmi()
    {
        const QString bin = m_dir.filePath("fake-gpu-bin");
        QDir().mkpath(bin);
        QFile smi(bin + "/nvidia-smi");
        QVERIFY(smi.open(QIODevice::WriteOnly));
        smi.write(
            "#!/bin/sh\n"
            "[ \"$1\" = --query-gpu=index,memory.used ] || { echo \"unexpected: $*\" >&2; "
            "exit 2; }\n"
            "n=$(cat \"$0.count\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$0.count\"\n"
            "echo \"0, 1000\"; echo \"1, $((2000 + n))\"\n");
        smi.close();
        smi.setPermissions(smi.permissions() | QFileDevice::ExeOwner);
        QProcessEnvironment e = env();
        e.insert("PATH", bin + ":" + e.value("PATH"));
        e.insert("SHARD_GPU_SAMPLE_MS", "100");
        const QString dir = m_dir.filePath("gpus");
        const auto o = runShard(e,
            {"run", "--name", "gpus", "--run-dir", dir, "--command",
                "for i in 1 2 3; do sleep 0.5; echo \"{'loss': 2.$i, 'learning_rate': 0.1}\"; "
                "done"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QFile metrics(dir + "/metrics.jsonl");
        QVERIFY(metrics.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = metrics.readAll().trimmed().split('\n');
        QCOMPARE(lines.size(), 3);
        for (const QByteArray& line : lines) {
            const auto j = nlohmann::json::parse(line.toStdString());
            QVERIFY2(j.contains("memory") && j["memory"].size() == 2, line.constData());
            QCOMPARE(j["memory"][0]["rank"].get<int>(), 0);
            QCOMPARE(j["memory"][0]["current"].get<int64_t>(), int64_t(1000) << 20);
            QVERIFY(j["memory"][0].contains("cuda"));
            QCOMPARE(j["memory"][1]["rank"].get<int>(), 1);
            QVERIFY(j["memory"][1]["peak"].get<int64_t>() > int64_t(2000) << 20);
        }
        // The store holds it per GPU, as an engine run's per-rank memory.
        RunStore s = store();
        const qint64 id = s.findRunByDir(QString(), dir).value();
        QTRY_COMPARE_WITH_TIMEOUT(s.memorySeries(id).value().size(), 2, 10000);
    }

    void launcherReports()
    {
        const QByteArray torchrunText
            = "Failures:\n[1]:\n  time      : 2026\n  host      : n1\n"
              "  rank      : 5 (local_rank: 1)\n  exitcode  : -9 (pid: 7)\n"
              "------\nRoot Cause (first observed failure):\n[0]:\n"
              "  time      : 2026\n  host      : n0\n"
              "  rank      : 2 (local_rank: 2)\n  exitcode  : 1 (pid: 3)\n";
        const auto t = parseLauncherFailure(torchrunText);
        QVERIFY(t);
        QCOMPARE(t->rank, 2);
        QCOMPARE(t->exitCode, 1);
        QCOMPARE(t->failures.size(), 2);
        QCOMPARE(t->failures[1], qMakePair(5, -9));
        const auto d = parseLauncherFailure(
            "[launch.py:319:sigkill_handler] ['python', 'train.py', '--local_rank=1'] exits with "
            "return code = 7");
        QVERIFY(d);
        QCOMPARE(d->source, QString("deepspeed"));
        QCOMPARE(d->exitCode, 7);
        QCOMPARE(d->rank, 1);
        QVERIFY(!parseLauncherFailure("Traceback (most recent call last):\nValueError: x\n"));
    }
};

QTEST_GUILESS_MAIN(TestCommandRun)
#include "tst_command_run.moc"
