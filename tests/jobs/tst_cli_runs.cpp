// The run commands of the `shard` CLI as a user runs them (real processes, the shell workload
// speaking `shard-worker launch`): run / attach / stop / runs list|show|compare|export|delete;
// killing the CLI mid-run leaves the run going, and re-attaching stores every point once.
#include <csignal>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/local_process.h"
#include "jobs/run_store.h"
#include "jobs_test_util.h"
#include "protocol/process_signal.h"

using namespace shard::jobs;

namespace {

using shard::test::kFakeWorker;
using shard::test::kShard;
using Out = shard::test::CliOut;

} // namespace

class TestCliRuns : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;

    // The fake worker trains no model: its runs start with --no-preflight (the preflight
    // would refuse the model "m" that is no folder, as it should).
    QProcessEnvironment env() const
    {
        QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
        e.insert("SHARD_STORE", m_dir.filePath("runs.sqlite"));
        e.insert("SHARD_RUNS_DIR", m_dir.filePath("runs"));
        e.insert("SHARD_WORKER", kFakeWorker);
        return e;
    }

    Out shard(const QStringList& args, int timeoutMs = 60000) const
    {
        return shard::test::runShard(env(), args, timeoutMs);
    }

    RunStore store() const
    {
        return std::move(RunStore::open(m_dir.filePath("runs.sqlite"))).value();
    }

private Q_SLOTS:
    void runFollowsToTheEnd()
    {
        auto o = shard({"run", "--no-preflight", "--name", "alpha", "--nproc", "2", "--env",
            "FAKE_STEP_SEC=0.01", "--", "--model", "m", "--steps", "25", "--lr", "0.01"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(o.out.contains("run 1 'alpha' started (local)"));
        QVERIFY(o.out.contains("finished (completed)"));
        QVERIFY(o.out.contains("steps 25, final loss"));
        auto s = store();
        QCOMPARE(*s.metricCount(1), qint64(25));
        QCOMPARE(s.run(1)->totalSteps, qint64(25));

        // A spec file: the spec is validated, recorded and handed to the worker.
        QFile spec(m_dir.filePath("beta.json"));
        QVERIFY(spec.open(QIODevice::WriteOnly));
        spec.write(R"({"name":"beta","model":"m","data":["d.jsonl"],"steps":12,"lr":0.003,
            "strategy":"zero3","procs_per_node":2})");
        spec.close();
        o = shard({"run", "--no-preflight", "--env", "FAKE_STEP_SEC=0.01", spec.fileName()});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        auto beta = s.findRun("beta");
        QVERIFY(beta);
        QCOMPARE(beta->strategy, QString("zero3"));
        QCOMPARE(beta->worldSize, 2);
        QCOMPARE(*s.metricCount(beta->id), qint64(12));
        QVERIFY(QFile::exists(beta->runDir + "/launch-spec.json"));
    }

    void hostileNameIsEscaped()
    {
        // A run name with terminal control sequences reaches the terminal escaped.
        const QString name
            = "evil\x1b[2J\x1b]0;title\x07\nfake line\r\x9b" + QString(QChar(0x202e));
        auto o = shard({"run", "--no-preflight", "--name", name, "--env", "FAKE_STEP_SEC=0.01",
            "--", "--model", "m", "--steps", "3"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        for (const QStringList& args : {QStringList {"runs", "list"},
                 QStringList {"runs", "show", name}, QStringList {"attach", name}}) {
            const Out out = shard(args);
            for (const QString& text : {o.out, out.out}) {
                QVERIFY2(!text.contains(QChar(0x1b)) && !text.contains(QChar(0x07))
                        && !text.contains('\r') && !text.contains(QChar(0x9b))
                        && !text.contains(QChar(0x202e)),
                    qPrintable(args.join(' ') + ": " + text.toUtf8().toPercentEncoding(" \n")));
                QVERIFY2(!text.contains("\nfake line"), qPrintable(text));
            }
            QVERIFY2(out.out.contains("evil\\x1b[2J"), qPrintable(args.join(' ') + ": " + out.out));
        }
    }

    void listShowCompareExport()
    {
        auto o = shard({"runs", "list", "--json"});
        QCOMPARE(o.code, 0);
        const QJsonArray runs = QJsonDocument::fromJson(o.out.toUtf8()).array();
        QVERIFY(runs.size() >= 2);
        QCOMPARE(runs.last().toObject()["name"].toString(), QString("alpha"));
        QCOMPARE(runs.last().toObject()["status"].toString(), QString("finished"));

        o = shard({"runs", "list"});
        QVERIFY(o.out.contains("alpha") && o.out.contains("beta") && o.out.contains("25/25"));

        o = shard({"runs", "show", "alpha"});
        QCOMPARE(o.code, 0);
        QVERIFY(o.out.contains("rank 1 peak memory"));
        QVERIFY(o.out.contains("finish"));
        QVERIFY2(!o.out.contains("notes:"), qPrintable(o.out));
        // Notes written in the studio are shown, every line of them.
        {
            auto s = store();
            const qint64 alpha = s.findRun("alpha")->id;
            QVERIFY(s.setNotes(alpha, "baseline for the lr sweep\ndiverged once at step 40"));
        }
        o = shard({"runs", "show", "alpha"});
        QCOMPARE(o.code, 0);
        QVERIFY2(o.out.contains("  notes:\n    baseline for the lr sweep\n"
                                "    diverged once at step 40\n"),
            qPrintable(o.out));

        const QString png = m_dir.filePath("cmp.png");
        o = shard({"runs", "compare", "alpha", "beta", "--png", png});
        QVERIFY2(o.code == 0, qPrintable(o.err));
        QVERIFY(o.out.contains("config values that differ"));
        QVERIFY(o.out.contains("lr"));
        QFile f(png);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray bytes = f.readAll();
        QVERIFY(bytes.startsWith("\x89PNG\r\n\x1a\n"));
        QVERIFY(bytes.size() > 10000);

        const QString csv = m_dir.filePath("alpha.csv");
        o = shard({"runs", "export", "alpha", "--out", csv});
        QCOMPARE(o.code, 0);
        QFile c(csv);
        QVERIFY(c.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = c.readAll().trimmed().split('\n');
        QCOMPARE(lines.size(), 26);
        QVERIFY(lines[0].startsWith("step,tokens,wall_time,loss"));
        QVERIFY(lines[1].startsWith("1,256,"));
        o = shard({"runs", "export", "alpha", "--memory"});
        QCOMPARE(o.out.trimmed().split('\n').size(), 1 + 25 * 2);
        // Every memory category is a column (a LoRA run's frozen base was left out).
        QVERIFY2(o.out.startsWith("step,rank,sharded_params,gathered_params,frozen_params,grads,"
                                  "optimizer,activations,other,current,peak\n"),
            qPrintable(o.out.left(200)));
    }

    void killedCliThenReattach()
    {
        QProcess cli;
        cli.setProcessEnvironment(env());
        cli.start(kShard,
            {"run", "--no-preflight", "--name", "gamma", "--env", "FAKE_STEP_SEC=0.05", "--",
                "--steps", "80"});
        QVERIFY(cli.waitForStarted());
        auto s = store();
        qint64 id = 0;
        QTRY_VERIFY_WITH_TIMEOUT((id = s.findRun("gamma").valueOr({}).id) > 0, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(*s.metricCount(id) >= 5, 30000);
        QVERIFY2(cli.state() == QProcess::Running, "the CLI ended before the test could kill it");
        // The CLI dies mid-run.
        QCOMPARE(shard::protocol::signalProcess(static_cast<pid_t>(cli.processId()), SIGKILL), 0);
        cli.waitForFinished();
        const RunRecord r = *s.run(id);
        QVERIFY(LocalProcess::isAlive(r.pid, 0)); // the run goes on
        QTRY_VERIFY_WITH_TIMEOUT(!LocalProcess::isAlive(r.pid, 0), 20000);
        QCOMPARE(toString(s.run(id)->status), QString("running")); // nobody watched the end

        auto o = shard({"attach", QString::number(id)});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(o.out.contains("finished"));
        QCOMPARE(*s.metricCount(id), qint64(80));
        QFile metrics(r.runDir + "/metrics.jsonl");
        QVERIFY(metrics.open(QIODevice::ReadOnly));
        QCOMPARE(*s.ingestOffset(id, "metrics"), metrics.size());
        o = shard({"attach", QString::number(id)}); // again: nothing twice
        QCOMPARE(*s.metricCount(id), qint64(80));
    }

    // `shard attach RUNDIR`: a folder written on this machine by a worker started by hand is
    // recorded on first attach, through the local launcher, and is the same record after.
    void attachAFolderStartedByHand()
    {
        const QString dir = m_dir.filePath("by-hand");
        QProcess worker;
        QProcessEnvironment e = env();
        e.insert("FAKE_STEP_SEC", "0.01");
        worker.setProcessEnvironment(e);
        worker.start(shard::test::kFakeWorker, {"launch", "--run-dir", dir, "--steps", "12"});
        QVERIFY(worker.waitForFinished(30000));
        QCOMPARE(worker.exitCode(), 0);
        QVERIFY(QFile::exists(dir + "/metrics.jsonl"));

        auto o = shard({"attach", dir});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("attached to run"), qPrintable(o.out));
        QVERIFY2(o.out.contains("finished"), qPrintable(o.out));
        auto s = store();
        const qint64 id = s.findRunByDir(QString(), dir).valueOr(0);
        QVERIFY(id > 0);
        QCOMPARE(*s.metricCount(id), qint64(12));
        o = shard({"attach", dir}); // again: the same record, nothing twice
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains(QString("attached to run %1 ").arg(id)), qPrintable(o.out));
        QCOMPARE(*s.metricCount(id), qint64(12));

        // A folder that holds no run is refused with what to pick instead.
        QVERIFY(QDir().mkpath(m_dir.filePath("not-a-run")));
        o = shard({"attach", m_dir.filePath("not-a-run")});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("not a run folder"), qPrintable(o.err));
    }

    void stopAndDetach()
    {
        auto o = shard({"run", "--no-preflight", "--detach", "--name", "delta", "--env",
            "FAKE_STEP_SEC=0.05", "--", "--steps", "100000"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(o.out.contains("detached"));
        auto s = store();
        const RunRecord r = *s.findRun("delta");
        QVERIFY(LocalProcess::isAlive(r.pid, 0));
        QTRY_VERIFY_WITH_TIMEOUT(QFile(r.runDir + "/metrics.jsonl").size() > 0, 30000);
        o = shard({"runs", "delete", "delta"});
        QCOMPARE(o.code, 1);
        QVERIFY(o.err.contains("stop it first"));
        o = shard({"stop", "delta", "--grace", "3"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(o.out.contains("stopped"));
        QVERIFY(!LocalProcess::isAlive(r.pid, 0));
        QCOMPARE(toString(s.run(r.id)->status), QString("stopped"));
        o = shard({"runs", "delete", "delta"});
        QCOMPARE(o.code, 0);
        QVERIFY(!s.findRun("delta"));
    }

    void badInput_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("unknown run") << QStringList {"runs", "show", "999"} << "no run with id 999";
        QTest::newRow("no spec") << QStringList {"run"} << "give a run spec";
        QTest::newRow("bad spec") << QStringList {"run", "/nonexistent/spec.json"}
                                  << "cannot read run spec /nonexistent/spec.json";
        QTest::newRow("bad status")
            << QStringList {"runs", "list", "--status", "zzz"} << "unknown status 'zzz'";
        QTest::newRow("one run to compare")
            << QStringList {"runs", "compare", "1"} << "at least two runs";
        QTest::newRow("bad host") << QStringList {"run", "--host", "a;b", "--", "--steps", "1"}
                                  << "is not a host name";
    }

    void badInput()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        auto o = shard(args);
        QCOMPARE(o.code, 1);
        QVERIFY2(o.err.contains(message), qPrintable(o.err));
        QCOMPARE(o.err.trimmed().count('\n'), 0);
    }

    void corruptStore()
    {
        QTemporaryDir dir;
        QFile f(dir.filePath("bad.sqlite"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(4096, 'z'));
        f.close();
        auto o = shard({"runs", "list", "--store", f.fileName()});
        QCOMPARE(o.code, 1);
        QVERIFY2(o.err.contains("is corrupt or not a Shard Studio store"), qPrintable(o.err));
    }
};

QTEST_GUILESS_MAIN(TestCliRuns)
#include "tst_cli_runs.moc"
