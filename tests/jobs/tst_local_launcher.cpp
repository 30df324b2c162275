// LocalLauncher with a real detached process (tests/jobs/fake-shard-worker.sh speaks the
// `shard-worker launch` interface): run to completion, own session, stop, re-attach after a
// restart, vanished launcher -> interrupted, clear errors.
#include <csignal>
#include <unistd.h>

#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/local_launcher.h"
#include "jobs/local_process.h"
#include "jobs/local_run_watcher.h"
#include "jobs/ssh_client.h"
#include "jobs_test_util.h"
#include "protocol/process_signal.h"

using namespace shard::jobs;

namespace {

LaunchRequest request(const QString& runDir, int steps, double stepSec = 0.02)
{
    return shard::test::fakeRunRequest("local-test", runDir, steps, stepSec);
}

} // namespace

class TestLocalLauncher : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // One name for every new run folder (local, SSH, Slurm, commands): the safe name and the
    // time to the millisecond; and one reading of "~/" for remote paths.
    void runFolderNames()
    {
        const QString n = newRunDirName("my run/../x");
        QVERIFY2(QRegularExpression("^my_run_.._x-\\d{8}-\\d{6}-\\d{3}$").match(n).hasMatch(),
            qPrintable(n));
        QVERIFY(newRunDirName("").startsWith("run-"));
        QCOMPARE(SshClient::homeRelative("~/shard-runs/a"), QString("shard-runs/a"));
        QCOMPARE(SshClient::homeRelative("/abs/~/a"), QString("/abs/~/a"));
        QCOMPARE(SshClient::homeRelative("rel"), QString("rel"));
    }

    // A launcher's pid file: alive only while the process it names is the one that wrote it.
    void pidFile()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("launcher.pid");
        QVERIFY(!LocalProcess::pidFileAlive(path).has_value()); // no file
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::number(qint64(::getpid())) + "\n");
        f.close();
        QCOMPARE(LocalProcess::pidFileAlive(path), std::optional<bool>(true));
        // The same pid, but the file predates the process: a reused pid, the writer is gone.
        QVERIFY(f.open(QIODevice::ReadWrite));
        QVERIFY(f.setFileTime(
            QDateTime::currentDateTime().addDays(-2), QFileDevice::FileModificationTime));
        f.close();
        QCOMPARE(LocalProcess::pidFileAlive(path), std::optional<bool>(false));
        // A process that has exited.
        QProcess p;
        p.start("true");
        QVERIFY(p.waitForFinished(5000));
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(QByteArray::number(p.processId() > 0 ? p.processId() : 999999999) + "\n");
        f.close();
        QCOMPARE(LocalProcess::pidFileAlive(path), std::optional<bool>(false));
        QVERIFY(LocalProcess::startedAt(::getpid()) <= QDateTime::currentDateTime());
        QVERIFY(!LocalProcess::startedAt(999999999).isValid());
    }

    void runsToCompletion()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        LocalLauncher launcher(&*store);
        LaunchRequest req = request(dir.filePath("run1"), 15);
        req.spec.maxRestarts = 2; // the spec's max_restarts reaches the node launcher
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        auto run = store->run(*id);
        QCOMPARE(toString(run->status), QString("running"));
        QVERIFY(run->pid > 0);
        // Its own session: a terminal's Ctrl-C or the studio exiting does not reach it.
        QCOMPARE(static_cast<qint64>(::getsid(static_cast<pid_t>(run->pid))), run->pid);

        LocalRunWatcher watcher(*store, *id, run->runDir);
        watcher.setProcess(run->pid, LocalLauncher::startTimeOf(*run));
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start(100);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 15000);
        run = store->run(*id);
        QCOMPARE(toString(run->status), QString("finished"));
        QCOMPARE(run->lastStep, qint64(15));
        QCOMPARE(*store->metricCount(*id), qint64(15));
        QCOMPARE(run->peakMemoryPerRank.size(), 2);
        QCOMPARE(run->peakMemoryPerRank[1], qint64(6000 + 15 + 1));
        // The worker got the rank count, and its spec names the run directory.
        QFile args(run->runDir + "/args-node-0.txt");
        QVERIFY(args.open(QIODevice::ReadOnly));
        const QByteArray a = args.readAll();
        QVERIFY(a.contains("--nproc-per-node\n2\n"));
        QVERIFY2(a.contains("--max-restarts\n2\n"), a.constData());
        QVERIFY(a.contains("--config\n" + run->runDir.toUtf8() + "/launch-spec.json\n"));
        QFile sent(run->runDir + "/launch-spec.json");
        QVERIFY(sent.open(QIODevice::ReadOnly));
        const auto spec = nlohmann::json::parse(sent.readAll().toStdString());
        QCOMPARE(QString::fromStdString(spec["out"].get<std::string>()), run->runDir);
    }

    void stopOnRequest()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        LocalLauncher launcher(&*store);
        auto id = launcher.start(request(dir.filePath("run"), 100000, 0.05));
        QVERIFY2(id, qPrintable(id.error()));
        const auto run = *store->run(*id);
        QTRY_VERIFY_WITH_TIMEOUT(QFile(run.runDir + "/metrics.jsonl").size() > 0, 30000);
        QVERIFY(launcher.stop(*id, 3000));
        QVERIFY(!LocalProcess::isAlive(run.pid, LocalLauncher::startTimeOf(run)));
        auto after = store->run(*id);
        QCOMPARE(toString(after->status), QString("stopped"));
        QVERIFY(after->lastStep >= 1);
        auto again = launcher.stop(*id);
        QVERIFY(!again);
        QVERIFY(again.error().contains("already ended"));
    }

    void reattachAndInterrupted()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("runs.sqlite");
        qint64 liveId = 0;
        qint64 deadId = 0;
        RunRecord dead;
        {
            auto store = RunStore::open(path);
            LocalLauncher launcher(&*store);
            liveId = *launcher.start(request(dir.filePath("live"), 100000, 0.05));
            deadId = *launcher.start(request(dir.filePath("dead"), 100000, 0.05));
            dead = *store->run(deadId);
            QTRY_VERIFY_WITH_TIMEOUT(QFile(dead.runDir + "/metrics.jsonl").size() > 0, 30000);
        } // the "studio" exits; both runs go on
        // The dead one's launcher is killed without a chance to write a finish event.
        QCOMPARE(shard::protocol::signalProcess(static_cast<pid_t>(dead.pid), SIGKILL), 0);
        QTRY_VERIFY_WITH_TIMEOUT(!LocalProcess::isAlive(dead.pid, 0), 30000);

        auto store = RunStore::open(path);
        auto alive = LocalLauncher::reconcile(*store);
        QVERIFY2(alive, qPrintable(alive.error()));
        QCOMPARE(*alive, QVector<qint64> {liveId});
        auto d = store->run(deadId);
        QCOMPARE(toString(d->status), QString("interrupted"));
        QVERIFY(*store->metricCount(deadId) >= 1); // what it wrote before dying is kept
        QCOMPARE(toString(store->run(liveId)->status), QString("running"));
        QVERIFY(LocalLauncher(&*store).stop(liveId, 3000));
    }

    void errors()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        LocalLauncher launcher(&*store);
        LaunchRequest r = request(dir.filePath("x"), 3);
        r.workerProgram = dir.filePath("no-such-worker");
        auto missing = launcher.start(r);
        QVERIFY(!missing);
        QVERIFY2(missing.error().contains("shard-worker not found"), qPrintable(missing.error()));

        auto id = launcher.start(request(dir.filePath("used"), 2));
        QVERIFY(id);
        QTRY_VERIFY_WITH_TIMEOUT(QFile(dir.filePath("used/events.jsonl")).size() > 0, 30000);
        auto reuse = launcher.start(request(dir.filePath("used"), 2));
        QVERIFY(!reuse);
        QVERIFY(reuse.error().contains("already holds a run"));
    }
};

QTEST_GUILESS_MAIN(TestLocalLauncher)
#include "tst_local_launcher.moc"
