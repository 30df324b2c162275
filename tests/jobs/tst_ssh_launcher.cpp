// SshLauncher + RemoteRunWatcher against real sshd servers on 127.0.0.1: a 2-node run that
// streams, survives dropped SSH connections with every point stored exactly once, restarts both
// nodes' ranks after one is killed, stops on request; a hostile run directory name arrives
// literally; each user-facing error message.
#include <csignal>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/local_process.h"
#include "jobs/remote_run_watcher.h"
#include "jobs/ssh_launcher.h"
#include "jobs_test_util.h"
#include "sshd_fixture.h"

using namespace shard::jobs;

namespace {

using shard::test::countLines;
using shard::test::kFakeWorker;

SshHost host(const char* name)
{
    return *SshHost::parse(name);
}

} // namespace

class TestSshLauncher : public QObject {
    Q_OBJECT

    SshdFixture* m_sshd = nullptr;
    QTemporaryDir m_work;
    SshOptions m_options;

private Q_SLOTS:
    void initTestCase()
    {
        m_sshd = new SshdFixture;
        QString why;
        if (!m_sshd->start(2, &why))
            QFAIL(qPrintable(why));
        m_options.configFile = m_sshd->configFile();
        m_options.controlDir = m_work.filePath("cm");
        m_options.connectTimeoutSec = 5;
    }

    void cleanupTestCase()
    {
        SshClient ssh(m_options);
        ssh.closeMaster(host("node0"));
        ssh.closeMaster(host("node1"));
        delete m_sshd;
    }

    void twoNodesStreamAndSurviveDrops()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        QVERIFY(store);
        SshLauncher launcher(&*store, {host("node0"), host("node1")}, SshClient(m_options));
        LaunchRequest req;
        req.name = "two-nodes";
        req.workerProgram = kFakeWorker;
        req.spec.procsPerNode = 2;
        req.runDir = m_work.filePath("remote/two-nodes");
        req.spec.model = "m";
        req.spec.data = {"d.jsonl"};
        req.spec.steps = 150;
        req.env = {"FAKE_STEP_SEC=0.05"};
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        auto run = store->run(*id);
        QCOMPARE(toString(run->target), QString("ssh"));
        QCOMPARE(run->host, QString("node0,node1"));
        QCOMPARE(SshLauncher::nodesOf(*run).size(), 2);

        RemoteRunWatcher watcher(*store, *id, host("node0"), run->runDir, m_options);
        watcher.setProcess(run->pid);
        QSignalSpy points(&watcher, &RunWatcher::pointsAdded);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        QSignalSpy errors(&watcher, &RunWatcher::errorOccurred);
        watcher.start();
        QTRY_VERIFY_WITH_TIMEOUT(points.size() >= 1, 10000);
        // Drop every SSH connection twice while the run goes on.
        for (int drop = 0; drop < 2; ++drop) {
            // Wait for a live connection (the watcher may still be reconnecting), drop it.
            // (A plain loop: QTRY_* evaluates its expression several times.)
            int dropped = 0;
            for (int i = 0; i < 200 && dropped == 0; ++i) {
                dropped = m_sshd->dropConnections(0);
                if (dropped == 0)
                    QTest::qWait(100);
            }
            QVERIFY(dropped > 0);
            const qint64 before = *store->metricCount(*id);
            // New points arrive again: the streams reconnected from the stored offsets.
            QTRY_VERIFY_WITH_TIMEOUT(*store->metricCount(*id) > before + 2, 20000);
        }
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 60000);
        QVERIFY(watcher.reconnects() >= 2);
        QVERIFY(errors.size() >= 1);
        QVERIFY(errors.at(0).at(1).toString().contains("reconnecting"));
        // Exactly the points the remote file holds, each once.
        QCOMPARE(*store->metricCount(*id), qint64(150));
        QCOMPARE(countLines(run->runDir + "/metrics.jsonl"), 150);
        QCOMPARE(*store->ingestOffset(*id, "metrics"),
            qint64(SshdFixture::read(run->runDir + "/metrics.jsonl").size()));
        auto done = store->run(*id);
        QCOMPARE(toString(done->status), QString("finished"));
        QCOMPARE(done->peakMemoryPerRank.size(), 4); // 2 nodes x 2 ranks
        // Node 1 was told where the rendezvous is.
        const QByteArray node1 = SshdFixture::read(run->runDir + "/args-node-1.txt");
        QVERIFY2(node1.contains("--node-rank\n1\n--master-addr\n127.0.0.1\n"), node1.constData());
        QVERIFY(node1.contains("--nnodes\n2\n"));
    }

    // Restart over two SSH nodes (issue 32): the real engine, one rank per node, --max-restarts
    // 1. Node 1's rank is SIGKILLed; node 0 restarts both nodes' ranks from the checkpoint, and
    // the run finishes as one record: one restart event naming node 1's rank, every step once.
    void twoNodesRestartAfterAKilledRank()
    {
        const QString model = m_work.filePath("tiny/model");
        const QString data = m_work.filePath("tiny/data.jsonl");
        QVERIFY(QDir().mkpath(m_work.filePath("tiny")));
        SHARD_REQUIRE_TINY_RUN_INPUTS(model, data);
        auto store = RunStore::open(m_work.filePath("restart.sqlite"));
        QVERIFY(store);
        SshLauncher launcher(&*store, {host("node0"), host("node1")}, SshClient(m_options));
        LaunchRequest req;
        req.name = "two-nodes-restart";
        req.workerProgram = shard::test::kRealWorker;
        const int steps = 30;
        req.spec = shard::test::tinyRunSpec(model, data, steps, 2, 1, 2);
        req.spec.maxRestarts = 1;
        req.runDir = m_work.filePath("remote/two-nodes-restart");
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        auto run = store->run(*id);
        RemoteRunWatcher watcher(*store, *id, host("node0"), run->runDir, m_options);
        watcher.setProcess(run->pid);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start();
        QTRY_VERIFY_WITH_TIMEOUT(countLines(run->runDir + "/metrics.jsonl") >= 5, 120000);
        // Node 1's rank: global rank 1, in node 1's pid file.
        const QList<QByteArray> pid
            = SshdFixture::read(run->runDir + "/launcher-ranks-node1.pids").trimmed().split(' ');
        QVERIFY2(pid.size() == 2 && pid[0] == "1", pid.join(' ').constData());
        QCOMPARE(::kill(static_cast<pid_t>(pid[1].toLongLong()), SIGKILL), 0);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 240000);
        auto done = store->run(*id);
        QVERIFY2(done->status == RunStatus::Finished,
            qPrintable(toString(done->status) + ": " + done->message));
        int restarts = 0;
        for (const auto& e : *store->events(*id))
            if (e.kind == "restart") {
                ++restarts;
                QVERIFY2(e.message.startsWith("node 1: rank 1 (pid "), qPrintable(e.message));
            }
        QCOMPARE(restarts, 1);
        QCOMPARE(*store->metricCount(*id), qint64(steps));
        QCOMPARE(done->lastStep, qint64(steps));
    }

    // "Copy model and data to the host": they arrive in <run>/inputs/ on every node and the
    // launch spec names the copies, not the paths on this machine.
    void inputsAreCopiedToTheHosts()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SshLauncher launcher(&*store, {host("node0"), host("node1")}, SshClient(m_options));
        const QString local = m_work.filePath("local-inputs");
        QVERIFY(QDir().mkpath(local + "/my model"));
        for (const auto& [file, text] :
            {std::pair<QString, QByteArray> {local + "/my model/config.json", "{\"a\": 1}"},
                {local + "/my model/tokenizer.json", "{}"},
                {local + "/train data.jsonl", "{\"text\": \"x\"}\n"}}) {
            QFile f(file);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(text);
        }
        LaunchRequest req;
        req.name = "copied";
        req.workerProgram = kFakeWorker;
        req.runDir = m_work.filePath("remote/copied");
        req.copyInputs = true;
        req.spec.model = (local + "/my model").toStdString();
        req.spec.data = {(local + "/train data.jsonl").toStdString()};
        req.spec.steps = 3;
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        const QString inputs = store->run(*id)->runDir + "/inputs";
        QCOMPARE(SshdFixture::read(inputs + "/my model/config.json"), QByteArray("{\"a\": 1}"));
        QVERIFY(QFileInfo::exists(inputs + "/train data.jsonl"));
        const auto spec = nlohmann::json::parse(
            SshdFixture::read(store->run(*id)->runDir + "/launch-spec.json").toStdString());
        QCOMPARE(QString::fromStdString(spec["model"].get<std::string>()), inputs + "/my model");
        QCOMPARE(QString::fromStdString(spec["data"][0].get<std::string>()),
            inputs + "/train data.jsonl");
        // A missing input is a clear error before anything starts.
        req.runDir = m_work.filePath("remote/not-copied");
        req.spec.model = "/no/such/model";
        req.spec.data = {"d.jsonl"};
        req.spec.steps = 1;
        auto missing = launcher.start(req);
        QVERIFY(!missing);
        QVERIFY2(missing.error().contains("/no/such/model: no such file or folder"),
            qPrintable(missing.error()));
    }

    void stopOnRequest()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SshLauncher launcher(&*store, {host("node0"), host("node1")}, SshClient(m_options));
        LaunchRequest req;
        req.name = "to-stop";
        req.workerProgram = kFakeWorker;
        req.runDir = m_work.filePath("remote/to-stop");
        req.spec.steps = 100000;
        req.env = {"FAKE_STEP_SEC=0.05"};
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        const auto nodes = SshLauncher::nodesOf(*store->run(*id));
        QTRY_VERIFY_WITH_TIMEOUT(countLines(req.runDir + "/metrics.jsonl") >= 3, 10000);
        QVERIFY(launcher.stop(*id, 3000));
        auto run = store->run(*id);
        QCOMPARE(toString(run->status), QString("stopped"));
        QVERIFY(*store->metricCount(*id) >= 3);
        QCOMPARE(*store->metricCount(*id), qint64(countLines(req.runDir + "/metrics.jsonl")));
        for (const auto& n : nodes) // same machine here: the remote pids are visible
            QVERIFY(!LocalProcess::isAlive(n.pid, 0));
    }

    void hostileNameArrivesLiterally()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SshLauncher launcher(&*store, {host("node0")}, SshClient(m_options));
        const QString pwned = m_work.filePath("pwned");
        const QString hostile = QString("x'; touch %1; '").arg(pwned);
        LaunchRequest req;
        req.name = hostile;
        req.workerProgram = kFakeWorker;
        req.runDir = m_work.filePath("remote/") + hostile;
        req.spec.steps = 3;
        req.spec.data = {("$(touch " + pwned + ")").toStdString()};
        req.spec.name = hostile.toStdString();
        req.env = {"FAKE_STEP_SEC=0.01", "SHARD_NOTE=" + hostile};
        auto id = launcher.start(req);
        QVERIFY2(id, qPrintable(id.error()));
        auto run = store->run(*id);
        QCOMPARE(run->runDir, req.runDir);
        QCOMPARE(run->name, hostile);
        QTRY_VERIFY_WITH_TIMEOUT(
            SshdFixture::read(req.runDir + "/events.jsonl").contains("finish"), 10000);
        QVERIFY(!QFile::exists(pwned));
        const QByteArray args = SshdFixture::read(req.runDir + "/args-node-0.txt");
        QVERIFY(args.contains(("--run-dir\n" + req.runDir + "\n").toUtf8()));
        // The hostile values travel in the launch spec and arrive literally.
        const auto sent = nlohmann::json::parse(
            SshdFixture::read(req.runDir + "/launch-spec.json").toStdString());
        QCOMPARE(QString::fromStdString(sent["name"].get<std::string>()), hostile);
        QCOMPARE(
            QString::fromStdString(sent["data"][0].get<std::string>()), "$(touch " + pwned + ")");
        auto caught = RemoteRunWatcher::catchUp(
            *store, *id, SshClient(m_options), host("node0"), run->runDir);
        QVERIFY2(caught, qPrintable(caught.error()));
        QCOMPARE(*store->metricCount(*id), qint64(3));
        QVERIFY(!QFile::exists(pwned));
        // Attaching by that directory finds the same run.
        auto attached = launcher.attach(req.runDir);
        QVERIFY2(attached, qPrintable(attached.error()));
        QCOMPARE(*attached, *id);
    }

    void attachToRunStartedElsewhere()
    {
        QTemporaryDir otherStudio;
        auto first = RunStore::open(otherStudio.filePath("a.sqlite"));
        SshLauncher a(&*first, {host("node0")}, SshClient(m_options));
        LaunchRequest req;
        req.workerProgram = kFakeWorker;
        req.runDir = m_work.filePath("remote/elsewhere");
        req.spec.steps = 5;
        req.env = {"FAKE_STEP_SEC=0.01"};
        QVERIFY(a.start(req));
        QTRY_VERIFY_WITH_TIMEOUT(
            SshdFixture::read(req.runDir + "/events.jsonl").contains("finish"), 10000);
        auto second = RunStore::open(m_work.filePath("attach.sqlite"));
        SshLauncher b(&*second, {host("node0")}, SshClient(m_options));
        auto id = b.attach(req.runDir);
        QVERIFY2(id, qPrintable(id.error()));
        QCOMPARE(*second->metricCount(*id), qint64(5));
        QCOMPARE(toString(second->run(*id)->status), QString("finished"));
        QVERIFY(second->run(*id)->pid > 0);
        auto again = b.attach(req.runDir); // nothing twice
        QCOMPARE(*again, *id);
        QCOMPARE(*second->metricCount(*id), qint64(5));
        auto missing = b.attach(m_work.filePath("remote/none"));
        QVERIFY(!missing);
        QVERIFY(missing.error().contains("has no run directory"));
    }

    void errors_data()
    {
        QTest::addColumn<QString>("hostName");
        QTest::addColumn<QString>("worker");
        QTest::addColumn<QString>("expected");
        // A closed port refuses: that is said as it is, not as an unreachable host.
        QTest::newRow("refused") << "down" << kFakeWorker << "connection refused";
        QTest::newRow("auth refused") << "noauth" << kFakeWorker << "authentication refused";
        QTest::newRow("changed host key")
            << "badkey" << kFakeWorker << "host key verification failed";
        QTest::newRow("worker missing") << "node0"
                                        << "/opt/none/shard-worker"
                                        << "shard-worker is not installed on node0";
    }

    void errors()
    {
        QFETCH(QString, hostName);
        QFETCH(QString, worker);
        QFETCH(QString, expected);
        QTemporaryDir dir;
        SshOptions opts = m_options;
        opts.controlDir = dir.filePath("cm"); // no shared master: each case connects afresh
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        SshLauncher launcher(&*store, {*SshHost::parse(hostName)}, SshClient(opts));
        LaunchRequest req;
        req.workerProgram = worker;
        req.runDir = dir.filePath("r");
        req.spec.steps = 1;
        auto id = launcher.start(req);
        SshClient(opts).closeMaster(*SshHost::parse(hostName));
        QVERIFY(!id);
        QVERIFY2(id.error().contains(expected), qPrintable(id.error()));
        QVERIFY2(!id.error().contains('\n'), "one line");
    }

    void checkHost()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SshLauncher launcher(&*store, {host("node0")}, SshClient(m_options));
        // The fake worker has no --version: its first output line is whatever it prints; a
        // real program is what the Hosts page checks. `sh` has no --version either, so use env.
        auto ok = launcher.checkHost("/usr/bin/env");
        QVERIFY2(ok || ok.error().contains("--version failed"), qPrintable(ok.error()));
        auto missing = launcher.checkHost("/opt/none/shard-worker");
        QVERIFY(!missing);
        QVERIFY(missing.error().contains("shard-worker is not installed on node0"));
        SshOptions fresh = m_options;
        fresh.controlDir = m_work.filePath("cm-check");
        SshLauncher other(&*store, {*SshHost::parse("noauth")}, SshClient(fresh));
        auto refused = other.checkHost();
        QVERIFY(!refused);
        QVERIFY2(refused.error().contains("authentication refused"), qPrintable(refused.error()));
        SshClient(fresh).closeMaster(*SshHost::parse("noauth"));
    }

    void hostParsing()
    {
        auto h = SshHost::parse("alice@gpu-1.example.org:2222");
        QVERIFY(h);
        QCOMPARE(h->user, QString("alice"));
        QCOMPARE(h->host, QString("gpu-1.example.org"));
        QCOMPARE(h->port, 2222);
        QCOMPARE(h->toString(), QString("alice@gpu-1.example.org:2222"));
        QVERIFY(!SshHost::parse("-oProxyCommand=evil"));
        QVERIFY(!SshHost::parse("a;b"));
        QVERIFY(!SshHost::parse("host:99999"));
        QCOMPARE(SshClient::shellQuote("x'; touch /tmp/pwned; '"),
            QString("'x'\\''; touch /tmp/pwned; '\\'''"));
        QCOMPARE(SshClient::shellQuote("plain/path-1.json"), QString("plain/path-1.json"));
        QCOMPARE(SshClient::shellQuote(""), QString("''"));
    }
};

QTEST_GUILESS_MAIN(TestSshLauncher)
#include "tst_ssh_launcher.moc"
