// End to end with the real engine: `shard-worker launch` of 2 ranks training a tiny model with
// zero3 on CPU, started by the LocalLauncher and by the SshLauncher (2 nodes x 1 rank over two
// real sshd servers), followed by the watchers into the store; stop on request leaves no rank.
#include <QFile>
#include <QProcess>
#include <QRandomGenerator>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/local_launcher.h"
#include "jobs/local_process.h"
#include "jobs/local_run_watcher.h"
#include "jobs/remote_run_watcher.h"
#include "jobs/slurm_launcher.h"
#include "jobs/ssh_launcher.h"
#include "jobs_test_util.h"
#include "slurm_fixture.h"
#include "sshd_fixture.h"

using namespace shard::jobs;

class TestRealWorkerRuns : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    QString m_model;
    QString m_data;

private Q_SLOTS:
    void initTestCase()
    {
        m_model = m_dir.filePath("model");
        // Pre-tokenized samples of a tiny repeating pattern: the loss must fall.
        m_data = m_dir.filePath("data.jsonl");
        SHARD_REQUIRE_TINY_RUN_INPUTS(m_model, m_data);
    }

    void localTwoRanksZero3()
    {
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        LocalLauncher launcher(&*store);
        LaunchRequest req;
        req.name = "local-real";
        req.spec = shard::test::tinyRunSpec(m_model, m_data, 12, 1, 2);
        req.runDir = m_dir.filePath("local-run");
        req.workerProgram = shard::test::kRealWorker;
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        auto run = store->run(*id);
        LocalRunWatcher watcher(*store, *id, run->runDir);
        watcher.setProcess(run->pid, LocalLauncher::startTimeOf(*run));
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start(200);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 240000);
        run = store->run(*id);
        QVERIFY2(run->status == RunStatus::Finished,
            qPrintable(toString(run->status) + ": " + run->message));
        QCOMPARE(*store->metricCount(*id), qint64(12));
        auto series = store->metricSeries(*id);
        QVERIFY(series->loss.back() < series->loss.front());
        QCOMPARE(run->peakMemoryPerRank.size(), 2);
        QVERIFY(run->peakMemoryPerRank[1] > 0);
        QCOMPARE(run->strategy, QString("zero3")); // from the engine's run.json
        QVERIFY(run->tokensPerSec > 0);
    }

    void localStopLeavesNoRank()
    {
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        LocalLauncher launcher(&*store);
        LaunchRequest req;
        req.name = "local-stop";
        req.spec = shard::test::tinyRunSpec(m_model, m_data, 100000, 1, 2);
        req.runDir = m_dir.filePath("stop-run");
        req.workerProgram = shard::test::kRealWorker;
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        QTRY_VERIFY_WITH_TIMEOUT(QFile(req.runDir + "/metrics.jsonl").size() > 0, 120000);
        QFile pids(req.runDir + "/launcher-ranks.pids");
        QVERIFY(pids.open(QIODevice::ReadOnly));
        QList<qint64> rankPids; // lines "<global rank> <pid>"
        for (const QByteArray& line : pids.readAll().split('\n'))
            if (line.split(' ').size() == 2)
                rankPids << line.split(' ')[1].toLongLong();
        QCOMPARE(rankPids.size(), 2);
        QVERIFY(launcher.stop(*id, 10000));
        auto run = store->run(*id);
        QCOMPARE(toString(run->status), QString("stopped"));
        for (qint64 pid : rankPids)
            QTRY_VERIFY_WITH_TIMEOUT(!LocalProcess::isAlive(pid, 0), 30000);
        QVERIFY(!LocalProcess::isAlive(run->pid, 0));
    }

    void demoCommand()
    {
        // `shard demo` as the README runs it, shortened: model, data, 2 ranks zero3, chart.
        QProcess shard;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("SHARD_STORE", m_dir.filePath("demo.sqlite"));
        env.insert("SHARD_WORKER", shard::test::kRealWorker);
        shard.setProcessEnvironment(env);
        shard.start(QStringLiteral(SHARD_BINARY_DIR "/app/shard"),
            {"demo", "--steps", "12", "--out", m_dir.filePath("demo")});
        QVERIFY(shard.waitForFinished(300000));
        const QString out = QString::fromUtf8(shard.readAllStandardOutput());
        QVERIFY2(shard.exitCode() == 0, qPrintable(out + shard.readAllStandardError()));
        QVERIFY(out.contains("2 ranks zero3 on CPU"));
        QVERIFY(out.contains("'demo': finished"));
        QVERIFY(out.contains("charts: " + m_dir.filePath("demo/charts.png")));
        QVERIFY(QFile(m_dir.filePath("demo/charts.png")).size() > 10000);
        auto store = RunStore::open(m_dir.filePath("demo.sqlite"));
        auto run = store->findRun("demo");
        QVERIFY(run);
        QCOMPARE(*store->metricCount(run->id), qint64(12));
        QCOMPARE(run->worldSize, 2);
    }

    void slurmOneNodeTwoRanks()
    {
        SlurmFixture slurm;
        QString why;
        if (!slurm.start(&why))
            QFAIL(qPrintable(why));
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        SlurmLauncher launcher(&*store);
        LaunchRequest req;
        req.name = "slurm-real";
        req.spec = shard::test::tinyRunSpec(m_model, m_data, 8, 1, 2);
        req.runDir = m_dir.filePath("slurm-run");
        req.workerProgram = shard::test::kRealWorker;
        auto id = launcher.submit(req, {});
        QVERIFY2(id, qPrintable(id.error()));
        SlurmRunWatcher watcher(*store, *id);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start(500);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 240000);
        auto run = store->run(*id);
        QVERIFY2(run->status == RunStatus::Finished,
            qPrintable(toString(run->status) + ": " + run->message));
        QCOMPARE(*store->metricCount(*id), qint64(8));
        QCOMPARE(run->peakMemoryPerRank.size(), 2);
    }

    void sshTwoNodes()
    {
        SshdFixture sshd;
        QString why;
        if (!sshd.start(2, &why))
            QFAIL(qPrintable(why));
        SshOptions opts;
        opts.configFile = sshd.configFile();
        opts.controlDir = m_dir.filePath("cm");
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        SshLauncher launcher(
            &*store, {*SshHost::parse("node0"), *SshHost::parse("node1")}, SshClient(opts));
        LaunchRequest req;
        req.name = "ssh-real";
        req.spec = shard::test::tinyRunSpec(m_model, m_data, 8, 2, 1);
        req.runDir = m_dir.filePath("ssh-run");
        req.workerProgram = shard::test::kRealWorker;
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        auto run = store->run(*id);
        RemoteRunWatcher watcher(*store, *id, *SshHost::parse("node0"), run->runDir, opts);
        watcher.setProcess(run->pid);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start();
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 240000);
        run = store->run(*id);
        QVERIFY2(run->status == RunStatus::Finished,
            qPrintable(toString(run->status) + ": " + run->message));
        QCOMPARE(*store->metricCount(*id), qint64(8));
        QCOMPARE(run->peakMemoryPerRank.size(), 2); // one rank on each node
        SshClient ssh(opts);
        ssh.closeMaster(*SshHost::parse("node0"));
        ssh.closeMaster(*SshHost::parse("node1"));
    }
};

QTEST_GUILESS_MAIN(TestRealWorkerRuns)
#include "tst_real_worker_runs.moc"
