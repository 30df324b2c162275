// The SSH paths of the `shard` CLI as a user runs them: the real `shard` binary against real
// sshd servers on 127.0.0.1 (SshdFixture; the CLI takes the fixture's client config from
// $SHARD_SSH_CONFIG or --ssh-config), the shell workload speaking `shard-worker launch` on the
// "remote" side: run --host --detach / runs list|show / attach RUN to the end; a foreground run,
// two nodes, a run.json; attach HOST:RUNDIR to a run started with plain ssh (twice: nothing
// stored twice), also as the run ends; stop of an adopted run; a killed CLI and Ctrl-C (the run
// goes on, re-attach stores every point once); a launcher gone without a finish event
// (interrupted); stop RUN remotely, also while the host is down; the errors a user meets.
#include <csignal>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/local_process.h"
#include "jobs/run_store.h"
#include "jobs/ssh_client.h"
#include "jobs_test_util.h"
#include "protocol/process_signal.h"
#include "sshd_fixture.h"

using namespace shard::jobs;

namespace {

using shard::test::countLines;
using shard::test::kFakeWorker;
using shard::test::kShard;
using Out = shard::test::CliOut;

} // namespace

class TestCliSsh : public QObject {
    Q_OBJECT

    SshdFixture* m_sshd = nullptr;
    QTemporaryDir m_dir;

    QString remoteDir(const QString& name) const { return m_dir.filePath("remote/" + name); }

    QProcessEnvironment env() const
    {
        QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
        e.insert("SHARD_STORE", m_dir.filePath("runs.sqlite"));
        e.insert("SHARD_RUNS_DIR", m_dir.filePath("runs"));
        e.insert("SHARD_SSH_CONFIG", m_sshd->configFile()); // SshOptions::fromEnvironment
        return e;
    }

    Out shard(const QStringList& args, int timeoutMs = 60000) const
    {
        return shardIn(env(), args, timeoutMs);
    }

    Out shardIn(
        const QProcessEnvironment& env, const QStringList& args, int timeoutMs = 60000) const
    {
        return shard::test::runShard(env, args, timeoutMs);
    }

    // `shard run --host node0 --name NAME` in the foreground (in `cli`, run dir remoteDir(NAME)),
    // until the store holds `points` of its points; *id is its run id.
    // The run holds before step points + 1 until holdFile(name) exists, so it cannot end before
    // the test has done what it wants to the CLI (a short run used to end first on a slow
    // machine: the CLI had exited and its pid was 0).
    void startForeground(QProcess& cli, RunStore& s, const QString& name, const QString& stepSec,
        const QString& steps, int points, qint64* id) const
    {
        cli.setProcessEnvironment(env());
        cli.start(kShard,
            {"run", "--host", "node0", "--name", name, "--worker", kFakeWorker, "--run-dir",
                remoteDir(name), "--env", "FAKE_STEP_SEC=" + stepSec, "--env",
                QString("FAKE_HOLD_AT=%1").arg(points + 1), "--env",
                "FAKE_HOLD_FILE=" + holdFile(name), "--", "--steps", steps});
        QVERIFY(cli.waitForStarted());
        QTRY_VERIFY_WITH_TIMEOUT((*id = s.findRun(name).valueOr({}).id) > 0, 10000);
        QTRY_VERIFY_WITH_TIMEOUT(*s.metricCount(*id) >= points, 10000);
        QVERIFY2(cli.state() == QProcess::Running,
            qPrintable("the CLI ended early: " + cli.readAllStandardError()));
    }

    QString holdFile(const QString& name) const { return m_dir.filePath("hold-" + name); }

    void release(const QString& name) const { SshdFixture::write(holdFile(name), "go\n"); }

    // The CLI's multiplexing masters (default control folder). The aliases noauth and badkey
    // name node0's host, port and user, so OpenSSH would reuse node0's (%C).
    void closeMaster(bool both = false) const
    {
        SshOptions o;
        o.configFile = m_sshd->configFile();
        SshClient(o).closeMaster(*SshHost::parse("node0"));
        if (both)
            SshClient(o).closeMaster(*SshHost::parse("node1"));
    }

    RunStore store() const
    {
        return std::move(RunStore::open(m_dir.filePath("runs.sqlite"))).value();
    }

    // The run ids `shard runs list --json` prints, by run directory.
    QJsonArray listed() const
    {
        const auto o = shard({"runs", "list", "--json"});
        return QJsonDocument::fromJson(o.out.toUtf8()).array();
    }

    static QJsonObject byDir(const QJsonArray& runs, const QString& dir, int* count = nullptr)
    {
        QJsonObject found;
        int n = 0;
        for (const auto& v : runs)
            if (v.toObject()["run_dir"].toString() == dir) {
                found = v.toObject();
                ++n;
            }
        if (count)
            *count = n;
        return found;
    }

    // Starts the workload on node0 with plain ssh (not through Shard): `steps` steps, 30 ms each.
    bool startWithPlainSsh(const QString& dir, int steps) const
    {
        const QString script
            = QString("mkdir -p %1 && cd %1 || exit 1; FAKE_STEP_SEC=0.03 setsid sh %2 "
                      "launch --nproc-per-node 1 --run-dir %1 --steps %3 "
                      "> %1/launcher.out 2>&1 < /dev/null &")
                  .arg(SshClient::shellQuote(dir))
                  .arg(SshClient::shellQuote(kFakeWorker))
                  .arg(steps);
        QProcess ssh;
        // Through the CLI's connection when there is one (quicker), else a connection of its own.
        ssh.start("ssh",
            {"-F", m_sshd->configFile(), "-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o",
                QString("ControlPath=/tmp/shard-ssh-%1/%C").arg(::getuid()), "node0", script});
        if (!ssh.waitForFinished(20000) || ssh.exitCode() != 0) {
            qWarning("plain ssh failed: %s", ssh.readAllStandardError().constData());
            return false;
        }
        return true;
    }

    // Local processes (same machine as the "remote" host) whose command line mentions `text`.
    static int processesMentioning(const QString& text)
    {
        int n = 0;
        for (const QString& entry : QDir("/proc").entryList(QDir::Dirs)) {
            QByteArray cmd = SshdFixture::read("/proc/" + entry + "/cmdline");
            if (cmd.replace('\0', ' ').contains(text.toUtf8()))
                ++n;
        }
        return n;
    }

    static qint64 startedId(const QString& out)
    {
        // "run <id> '<name>' started (ssh on node0): <dir>"
        const QStringList words = out.split(' ');
        return words.size() > 1 && words[0] == "run" ? words[1].toLongLong() : 0;
    }

private Q_SLOTS:
    void initTestCase()
    {
        m_sshd = new SshdFixture;
        QString why;
        if (!m_sshd->start(2, &why))
            QFAIL(qPrintable(why));
    }

    void cleanupTestCase()
    {
        // A failed case may leave its workload running: end the ones this test started (the
        // pid a run directory names, while its command line still names that directory).
        for (const QString& name :
            QDir(remoteDir(".")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
            const QString dir = remoteDir(name);
            const QByteArray pid = SshdFixture::read(dir + "/launcher.pid").trimmed();
            if (!pid.isEmpty()
                && SshdFixture::read("/proc/" + pid + "/cmdline").contains(dir.toUtf8()))
                shard::protocol::signalProcess(static_cast<pid_t>(pid.toLongLong()), SIGKILL);
        }
        closeMaster(true);
        delete m_sshd;
    }

    // `shard doctor --host`: the Hosts page's checks run on a host over SSH (exit 0), a worker
    // missing there (exit 1, with the fix), and a host that cannot be reached (exit 2).
    void doctorOverSsh()
    {
        QString worker = qEnvironmentVariable("SHARD_WORKER");
        if (worker.isEmpty())
            worker = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");
        if (!QFileInfo(worker).isExecutable())
            QSKIP("no shard-worker in this build");
        auto o = shard({"doctor", "--host", "node0", "--worker", worker, "--json"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        const QJsonArray checks = QJsonDocument::fromJson(o.out.toUtf8())["checks"].toArray();
        QStringList ok;
        for (const QJsonValue& c : checks)
            if (c["status"].toString() == "ok")
                ok << c["name"].toString();
        QVERIFY2(ok.contains("shard-worker") && ok.contains("system") && ok.contains("ssh"),
            qPrintable(o.out));
        o = shard({"doctor", "--host", "node0", "--worker", "/nonexistent/shard-worker"});
        QCOMPARE(o.code, 1);
        QVERIFY2(o.out.contains("MISSING shard-worker"), qPrintable(o.out));
        o = shard({"doctor", "--host", "nobody@127.0.0.1:1"});
        QCOMPARE(o.code, 2);
        QVERIFY2(o.err.startsWith("shard doctor: "), qPrintable(o.err));
    }

    void runDetachedThenAttach()
    {
        const QString dir = remoteDir("alpha");
        auto o = shard({"run", "--host", "node0", "--detach", "--name", "alpha", "--worker",
            kFakeWorker, "--run-dir", dir, "--nproc", "2", "--env", "FAKE_STEP_SEC=0.03", "--",
            "--model", "m", "--steps", "40"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("'alpha' started (ssh on node0): " + dir), qPrintable(o.out));
        QVERIFY(o.out.contains("detached"));
        const qint64 id = startedId(o.out);
        QVERIFY(id > 0);

        // Listed and shown with its SSH target while it runs.
        const QJsonObject listedRun = byDir(listed(), dir);
        QCOMPARE(listedRun["id"].toInteger(), id);
        QCOMPARE(listedRun["target"].toString(), QString("ssh"));
        QCOMPARE(listedRun["host"].toString(), QString("node0"));
        QCOMPARE(listedRun["status"].toString(), QString("running"));
        o = shard({"runs", "list"});
        QVERIFY(o.out.contains("alpha") && o.out.contains(" ssh "));
        o = shard({"runs", "show", "alpha"});
        QVERIFY2(o.code == 0, qPrintable(o.err));
        QVERIFY2(o.out.contains("target ssh"), qPrintable(o.out));
        QVERIFY(o.out.contains("run directory: node0:" + dir));
        QVERIFY(o.out.contains("launcher pid"));

        // Follow it to the end over SSH.
        o = shard({"attach", QString::number(id)});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("attached to run " + QString::number(id)), qPrintable(o.out));
        QVERIFY2(o.out.contains("finished"), qPrintable(o.out));
        QVERIFY(o.out.contains("steps 40, final loss"));
        auto s = store();
        QCOMPARE(toString(s.run(id)->status), QString("finished"));
        QCOMPARE(*s.metricCount(id), qint64(40));
        QCOMPARE(countLines(dir + "/metrics.jsonl"), 40);
        QCOMPARE(*s.ingestOffset(id, "metrics"), QFile(dir + "/metrics.jsonl").size());
        QCOMPARE(*s.ingestOffset(id, "events"), QFile(dir + "/events.jsonl").size());
        QCOMPARE(s.run(id)->peakMemoryPerRank.size(), 2);
        // The worker got what the CLI was given: the rank count, and the train flags in its spec.
        const QByteArray args = SshdFixture::read(dir + "/args-node-0.txt");
        QVERIFY2(args.contains("--nproc-per-node\n2\n"), args.constData());
        const auto sent
            = nlohmann::json::parse(SshdFixture::read(dir + "/launch-spec.json").toStdString());
        QCOMPARE(QString::fromStdString(sent["model"].get<std::string>()), QString("m"));

        o = shard({"attach", QString::number(id)}); // an ended run: nothing twice
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QCOMPARE(*s.metricCount(id), qint64(40));
    }

    void runInForegroundFollows()
    {
        const QString dir = remoteDir("beta");
        auto o = shard({"run", "--host", "node0", "--name", "beta", "--worker", kFakeWorker,
            "--run-dir", dir, "--env", "FAKE_STEP_SEC=0.01", "--", "--steps", "20"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(o.out.contains("started (ssh on node0)"));
        QVERIFY2(o.out.contains("finished (completed)") || o.out.contains(": finished"),
            qPrintable(o.out));
        auto s = store();
        const qint64 id = startedId(o.out);
        QCOMPARE(toString(s.run(id)->status), QString("finished"));
        QCOMPARE(*s.metricCount(id), qint64(20));
    }

    void twoNodesWithSshConfigFlag()
    {
        // --host twice: one launcher per host, rendezvous on the first; the client config given
        // with --ssh-config instead of $SHARD_SSH_CONFIG.
        QProcessEnvironment e = env();
        e.remove("SHARD_SSH_CONFIG");
        const QString dir = remoteDir("two-nodes");
        auto o = shardIn(e,
            {"run", "--ssh-config", m_sshd->configFile(), "--host", "node0", "--host", "node1",
                "--name", "two-nodes", "--nproc", "2", "--worker", kFakeWorker, "--run-dir", dir,
                "--env", "FAKE_STEP_SEC=0.02", "--", "--steps", "20"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("'two-nodes' started (ssh on node0,node1)"), qPrintable(o.out));
        QVERIFY(o.out.contains("run directory: node0:" + dir));
        auto s = store();
        const RunRecord r = *s.findRun("two-nodes");
        QCOMPARE(toString(r.status), QString("finished"));
        QCOMPARE(r.host, QString("node0,node1"));
        QCOMPARE(*s.metricCount(r.id), qint64(20));
        QCOMPARE(r.peakMemoryPerRank.size(), 4); // 2 nodes x 2 ranks
        const QByteArray node1 = SshdFixture::read(dir + "/args-node-1.txt");
        QVERIFY2(node1.contains("--nnodes\n2\n--node-rank\n1\n--master-addr\n127.0.0.1\n"),
            node1.constData());
    }

    void specFileOverSsh()
    {
        // A run.json on this machine: validated here, sent over ssh, the worker reads it there.
        QFile spec(m_dir.filePath("zeta.json"));
        QVERIFY(spec.open(QIODevice::WriteOnly));
        spec.write(R"({"name":"zeta","model":"m","data":["d.jsonl"],"steps":12,"lr":0.003,
            "strategy":"zero3","procs_per_node":2})");
        spec.close();
        const QString dir = remoteDir("zeta");
        auto o = shard({"run", "--host", "node0", "--worker", kFakeWorker, "--run-dir", dir,
            "--env", "FAKE_STEP_SEC=0.01", spec.fileName()});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY(o.out.contains("'zeta' started (ssh on node0)"));
        auto s = store();
        const RunRecord r = *s.findRun("zeta");
        QCOMPARE(toString(r.target), QString("ssh"));
        QCOMPARE(r.strategy, QString("zero3"));
        QCOMPARE(r.worldSize, 2);
        QCOMPARE(toString(r.status), QString("finished"));
        QCOMPARE(*s.metricCount(r.id), qint64(12));
        const QByteArray sent = SshdFixture::read(dir + "/launch-spec.json");
        QVERIFY2(sent.contains(("\"out\": \"" + dir + "\"").toUtf8()), sent.constData());
        QVERIFY(SshdFixture::read(dir + "/args-node-0.txt").contains("--config\n" + dir.toUtf8()));
    }

    void attachRemoteDirStartedElsewhere()
    {
        // Started on the host with plain ssh, unknown to this store.
        const QString dir = remoteDir("elsewhere");
        QVERIFY(startWithPlainSsh(dir, 30));
        QTRY_VERIFY_WITH_TIMEOUT(countLines(dir + "/metrics.jsonl") >= 3, 10000);
        QVERIFY(!byDir(listed(), dir).contains("id"));

        const QString target = "node0:" + dir;
        auto o = shard({"attach", target});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("attached to run"), qPrintable(o.out));
        QVERIFY2(o.out.contains("finished"), qPrintable(o.out));
        int count = 0;
        const QJsonObject run = byDir(listed(), dir, &count);
        QCOMPARE(count, 1);
        const qint64 id = run["id"].toInteger();
        QCOMPARE(run["target"].toString(), QString("ssh"));
        QCOMPARE(run["host"].toString(), QString("node0"));
        QCOMPARE(run["status"].toString(), QString("finished"));
        auto s = store();
        QCOMPARE(*s.metricCount(id), qint64(30));
        QCOMPARE(countLines(dir + "/metrics.jsonl"), 30);
        const qint64 events = s.events(id)->size();

        o = shard({"attach", target}); // again: the same run, nothing stored twice
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("attached to run " + QString::number(id)), qPrintable(o.out));
        byDir(listed(), dir, &count);
        QCOMPARE(count, 1);
        QCOMPARE(*s.metricCount(id), qint64(30));
        QCOMPARE(qint64(s.events(id)->size()), events);
    }

    void attachAsTheRunEnds()
    {
        // Attaching while the run writes its last records: the finish event must not be read
        // without the metrics written before it (it was: ~half of such attaches lost points).
        for (int i = 0; i < 3; ++i) {
            const QString dir = remoteDir(QString("ending-%1").arg(i));
            const int steps = 12 + i;
            QVERIFY(startWithPlainSsh(dir, steps));
            QTRY_VERIFY_WITH_TIMEOUT(countLines(dir + "/metrics.jsonl") >= 1, 10000);
            auto o = shard({"attach", "node0:" + dir});
            QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
            const QJsonObject run = byDir(listed(), dir);
            QCOMPARE(run["status"].toString(), QString("finished"));
            QCOMPARE(*store().metricCount(run["id"].toInteger()), qint64(steps));
        }
    }

    void stopAttachedRun()
    {
        // attach HOST:RUNDIR records the launcher it finds, so `shard stop` can stop it.
        const QString dir = remoteDir("adopted");
        QVERIFY(startWithPlainSsh(dir, 100000));
        QTRY_VERIFY_WITH_TIMEOUT(countLines(dir + "/metrics.jsonl") >= 2, 10000);
        auto o = shard({"attach", "--no-follow", "node0:" + dir});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        const QJsonObject run = byDir(listed(), dir);
        QCOMPARE(run["status"].toString(), QString("running"));
        const qint64 id = run["id"].toInteger();
        auto s = store();
        const qint64 pid = s.run(id)->pid;
        QCOMPARE(pid, SshdFixture::read(dir + "/launcher.pid").trimmed().toLongLong());
        o = shard({"stop", QString::number(id), "--grace", "3"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QCOMPARE(toString(s.run(id)->status), QString("stopped"));
        QTRY_VERIFY_WITH_TIMEOUT(!LocalProcess::isAlive(pid, 0), 5000);
        QCOMPARE(*s.metricCount(id), qint64(countLines(dir + "/metrics.jsonl")));
    }

    void killedCliThenReattach()
    {
        const QString dir = remoteDir("gamma");
        QProcess cli;
        auto s = store();
        qint64 id = 0;
        startForeground(cli, s, "gamma", "0.03", "40", 5, &id);
        if (QTest::currentTestFailed())
            return;
        // The CLI dies mid-run.
        QCOMPARE(shard::protocol::signalProcess(static_cast<pid_t>(cli.processId()), SIGKILL), 0);
        cli.waitForFinished();
        const qint64 pid = s.run(id)->pid;
        QTest::qWait(500); // long enough for anything that would take the run with the CLI
        QVERIFY(LocalProcess::isAlive(pid, 0)); // the run goes on
        release("gamma");
        QTRY_VERIFY_WITH_TIMEOUT(!LocalProcess::isAlive(pid, 0), 20000);
        QCOMPARE(toString(s.run(id)->status), QString("running")); // nobody watched the end
        QVERIFY(*s.metricCount(id) < 40);
        // The dead CLI's ssh streams end once the run writes its last records.
        QTRY_COMPARE_WITH_TIMEOUT(processesMentioning(dir + "/"), 0, 10000);

        auto o = shard({"attach", "gamma"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("finished"), qPrintable(o.out));
        QCOMPARE(*s.metricCount(id), qint64(40));
        QCOMPARE(*s.ingestOffset(id, "metrics"), QFile(dir + "/metrics.jsonl").size());
    }

    void ctrlCDetaches()
    {
        const QString dir = remoteDir("delta");
        QProcess cli;
        auto s = store();
        qint64 id = 0;
        startForeground(cli, s, "delta", "0.05", "100000", 3, &id);
        if (QTest::currentTestFailed())
            return;
        QCOMPARE(shard::protocol::signalProcess(static_cast<pid_t>(cli.processId()), SIGINT), 0);
        QVERIFY(cli.waitForFinished(10000));
        const QString out = QString::fromUtf8(cli.readAllStandardOutput());
        QCOMPARE(cli.exitCode(), 0);
        QVERIFY2(
            out.contains(QString("detached from run %1; it goes on").arg(id)), qPrintable(out));
        QVERIFY(LocalProcess::isAlive(s.run(id)->pid, 0));
        release("delta");
        // The CLI ended its streams on the way out.
        QTRY_COMPARE_WITH_TIMEOUT(processesMentioning(dir + "/metrics.jsonl"), 0, 5000);
        auto o = shard({"stop", "delta", "--grace", "3"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QCOMPARE(toString(s.run(id)->status), QString("stopped"));
    }

    void launcherVanishedIsInterrupted()
    {
        const QString dir = remoteDir("epsilon");
        auto o = shard(
            {"run", "--host", "node0", "--detach", "--name", "epsilon", "--worker", kFakeWorker,
                "--run-dir", dir, "--env", "FAKE_STEP_SEC=0.05", "--", "--steps", "100000"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        auto s = store();
        const qint64 id = startedId(o.out);
        const qint64 pid = s.run(id)->pid;
        QTRY_VERIFY_WITH_TIMEOUT(countLines(dir + "/metrics.jsonl") >= 3, 10000);
        shard::protocol::signalProcess(static_cast<pid_t>(pid), SIGKILL); // no finish event
        QTRY_VERIFY_WITH_TIMEOUT(!LocalProcess::isAlive(pid, 0), 5000);
        o = shard({"attach", "epsilon"});
        QCOMPARE(o.code, 2);
        QVERIFY2(o.out.contains("interrupted"), qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("ended without a finish event"), qPrintable(o.out));
        QCOMPARE(toString(s.run(id)->status), QString("interrupted"));
        QCOMPARE(*s.metricCount(id), qint64(countLines(dir + "/metrics.jsonl")));
    }

    void stopRemoteRun()
    {
        const QString dir = remoteDir("long");
        auto o = shard(
            {"run", "--host", "node0", "--detach", "--name", "long", "--worker", kFakeWorker,
                "--run-dir", dir, "--env", "FAKE_STEP_SEC=0.05", "--", "--steps", "100000"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        const qint64 id = startedId(o.out);
        auto s = store();
        const qint64 pid = s.run(id)->pid;
        QVERIFY(pid > 0);
        QTRY_VERIFY_WITH_TIMEOUT(countLines(dir + "/metrics.jsonl") >= 3, 10000);
        QVERIFY(LocalProcess::isAlive(pid, 0)); // same machine: the remote pid is visible

        // node0 unreachable for now (the same alias pointing at a closed port): one line, the
        // run goes on; once it is reachable again the stop goes through.
        QByteArray config = SshdFixture::read(m_sshd->configFile());
        config.replace(QString("Port %1\n").arg(m_sshd->port(0)).toUtf8(),
            QString("Port %1\n").arg(m_sshd->closedPort()).toUtf8());
        SshdFixture::write(m_dir.filePath("node0_down_config"), config);
        QProcess down;
        QProcessEnvironment e = env();
        e.insert("SHARD_SSH_CONFIG", m_dir.filePath("node0_down_config"));
        down.setProcessEnvironment(e);
        down.start(kShard, {"stop", "long", "--grace", "3"});
        QVERIFY(down.waitForFinished(30000));
        const QString err = QString::fromUtf8(down.readAllStandardError());
        QCOMPARE(down.exitCode(), 1);
        QVERIFY2(err.startsWith(QString("shard: error: cannot stop run %1 ('long'): ssh node0: "
                                        "connection refused")
                                    .arg(id)),
            qPrintable(err));
        QVERIFY2(err.count("connection refused") == 1 && err.trimmed().count('\n') == 0,
            qPrintable(err));
        QCOMPARE(toString(s.run(id)->status), QString("running"));
        QVERIFY(LocalProcess::isAlive(pid, 0));

        o = shard({"stop", "long", "--grace", "3"});
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("stopped"), qPrintable(o.out));
        QCOMPARE(toString(s.run(id)->status), QString("stopped"));
        QTRY_VERIFY_WITH_TIMEOUT(!LocalProcess::isAlive(pid, 0), 5000);
        QVERIFY(*s.metricCount(id) >= 3);
        QCOMPARE(*s.metricCount(id), qint64(countLines(dir + "/metrics.jsonl")));
        o = shard({"stop", "long"}); // already ended
        QCOMPARE(o.code, 0);
        QVERIFY2(o.out.contains("already ended"), qPrintable(o.out));
    }

    void errors_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        const QString closed = QString("127.0.0.1:%1").arg(m_sshd->closedPort());
        auto run = [&](const QString& host, const QString& worker, const QString& dir) {
            return QStringList {"run", "--host", host, "--detach", "--worker", worker, "--run-dir",
                remoteDir(dir), "--", "--steps", "1"};
        };
        QTest::newRow("run: unreachable port")
            << run(closed, kFakeWorker, "e1") << "connection refused";
        QTest::newRow("run: unreachable alias")
            << run("down", kFakeWorker, "e2") << "connection refused";
        QTest::newRow("run: auth refused")
            << run("noauth", kFakeWorker, "e3") << "authentication refused";
        QTest::newRow("run: changed host key")
            << run("badkey", kFakeWorker, "e4") << "host key verification failed";
        QTest::newRow("run: worker missing") << run("node0", "/opt/none/shard-worker", "e5")
                                             << "shard-worker is not installed on node0";
        QTest::newRow("attach: unreachable")
            << QStringList {"attach", closed + ":/tmp/x"} << "connection refused";
        QTest::newRow("attach: no such dir") << QStringList {"attach", "node0:/no/such/dir"}
                                             << "node0 has no run directory /no/such/dir";
        QDir().mkpath(remoteDir("not-a-run"));
        QTest::newRow("attach: not a run dir")
            << QStringList {"attach", "node0:" + remoteDir("not-a-run")}
            << "node0:" + remoteDir("not-a-run") + " is not a run directory";
        QTest::newRow("attach: bad host")
            << QStringList {"attach", "a;b:/tmp/x"} << "is not a host name";
    }

    void errors()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const int before = static_cast<int>(listed().size());
        closeMaster(); // each case connects afresh
        auto o = shard(args);
        closeMaster();
        qInfo("%s", qPrintable(o.err.trimmed()));
        QVERIFY2(o.code == 1, qPrintable(QString::number(o.code) + ": " + o.out + o.err));
        QVERIFY2(o.err.contains(message), qPrintable(o.err));
        QVERIFY2(o.err.trimmed().count('\n') == 0, qPrintable("one line: " + o.err));
        QVERIFY2(o.err.startsWith("shard: error: "), qPrintable(o.err));
        // Nothing half-made is left running in the store.
        for (const auto& v : listed())
            QVERIFY(v.toObject()["status"].toString() != "running");
        QVERIFY(listed().size() >= before);
    }
};

QTEST_GUILESS_MAIN(TestCliSsh)
#include "tst_cli_ssh.moc"
