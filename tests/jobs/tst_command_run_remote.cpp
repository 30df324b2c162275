// A command as a run on the other targets, as a user runs it: `shard run --command` with the
// torchrun job of tst_command_run (Debian's PyTorch, two CPU ranks over Gloo) on an SSH host (a
// real sshd on loopback) and through Slurm (a real one-node slurmctld + slurmd): recorded with
// its target, followed to its points, stopped with nothing left (TERM to the supervisor's group;
// scancel), run again in the same record; and the errors a user meets there.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/command_run.h"
#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "jobs_test_util.h"
#include "slurm_fixture.h"
#include "sshd_fixture.h"
#include "torchrun_util.h"

using namespace shard::jobs;
using namespace shard::test;

class TestCommandRunRemote : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    SshdFixture* m_sshd = nullptr;
    SlurmFixture* m_slurm = nullptr;
    bool m_torch = false;

    QProcessEnvironment env() const
    {
        QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
        e.insert("SHARD_STORE", m_dir.filePath("runs.sqlite"));
        e.insert("SHARD_RUNS_DIR", m_dir.filePath("runs"));
        e.insert("SHARD_SSH_CONFIG", m_sshd->configFile());
        e.insert("SLURM_CONF", m_slurm->confPath());
        return e;
    }

    CliOut shard(const QStringList& args, int timeoutMs = 240000) const
    {
        return runShard(env(), args, timeoutMs);
    }

    RunStore store() const
    {
        return std::move(RunStore::open(m_dir.filePath("runs.sqlite"))).value();
    }

    // `shard run [target] --name N --run-dir DIR --env ... --command TORCHRUN`.
    QStringList torchrun(
        const QStringList& target, const QString& runDir, const QStringList& envs) const
    {
        QStringList a = QStringList {"run"} + target;
        a << "--name" << QFileInfo(runDir).fileName() << "--run-dir" << runDir << "--env"
          << "USE_LIBUV=0";
        for (const QString& e : envs)
            a << "--env" << e;
        a << "--command" << torchrunCommand();
        return a;
    }

    static int metricLines(const QString& runDir) { return countLines(runDir + "/metrics.jsonl"); }

    // Starts a long job on `target` detached, waits for its points, stops it with `shard stop`
    // and checks nothing of it is left; then runs it again in its folder for 2 steps: the same
    // record, finished, its steps numbered on.
    void stopAndRunAgain(const QStringList& target, const QString& dir, const QString& kind)
    {
        QStringList args = torchrun(target, dir, {"STEPS=100000", "STEP_SLEEP=0.1"});
        args.insert(1, "--detach");
        const auto o = shard(args);
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        RunStore s = store();
        const qint64 id = s.findRunByDir(kind == "ssh" ? "node0" : QString(), dir).value();
        QVERIFY2(id > 0, qPrintable(o.out));
        QCOMPARE(toString(s.run(id).value().target), kind);
        QTRY_VERIFY_WITH_TIMEOUT(metricLines(dir) >= 3, 180000);
        // The supervisor there, and its process group (the command's processes).
        const qint64 supervisor
            = QString::fromUtf8(SshdFixture::read(dir + "/launcher.pid")).trimmed().toLongLong();
        QVERIFY(supervisor > 0);
        const qint64 group = processGroupOf(supervisor);
        QVERIFY(group > 0);
        QVERIFY(liveInGroup(group) >= 3); // the supervisor, torchrun and its two ranks
        const auto stop = shard({"stop", QString::number(id)});
        QVERIFY2(stop.code == 0, qPrintable(stop.out + stop.err));
        QTRY_COMPARE_WITH_TIMEOUT(
            toString(store().run(id).value().status), toString(RunStatus::Stopped), 60000);
        QTRY_COMPARE_WITH_TIMEOUT(liveInGroup(group), 0, 60000);
        QTRY_VERIFY_WITH_TIMEOUT(store().metricSeries(id).value().size() >= 3, 60000);
        const qint64 before = qint64(store().metricSeries(id).value().step.back());

        QStringList again = torchrun(target, dir, {"STEPS=2"});
        again.insert(1, "--resume");
        const auto r = shard(again);
        QVERIFY2(r.code == 0, qPrintable(r.out + r.err));
        RunStore after = store();
        QCOMPARE(after.findRunByDir(kind == "ssh" ? "node0" : QString(), dir).value(), id);
        QCOMPARE(toString(after.run(id).value().status), toString(RunStatus::Finished));
        QTRY_COMPARE_WITH_TIMEOUT(
            qint64(store().metricSeries(id).value().step.back()), before + 2, 30000);
    }

private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_torch = haveTorch();
        QString why;
        m_sshd = new SshdFixture;
        if (!m_sshd->start(1, &why))
            QFAIL(qPrintable(why));
        m_slurm = new SlurmFixture;
        if (!m_slurm->start(&why))
            QFAIL(qPrintable(why));
    }

    void cleanupTestCase()
    {
        delete m_slurm;
        delete m_sshd;
    }

    // Over SSH: the run folder is made there, the supervisor runs there detached; the CLI
    // follows it over SSH to its end.
    void trainsOverSsh()
    {
        if (!m_torch)
            QSKIP("/usr/bin/python3 has no torch (python3-torch, which setup.sh installs)");
        const QString dir = m_dir.filePath("remote/ssh-train");
        const auto o
            = shard(torchrun({"--host", "node0", "--supervisor", kShard}, dir, {"STEPS=8"}));
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("started (command, ssh on node0)"), qPrintable(o.out));
        QVERIFY2(o.out.contains("finished (the command exited with status 0)"), qPrintable(o.out));
        RunStore s = store();
        const qint64 id = s.findRunByDir("node0", dir).value();
        QVERIFY(id > 0);
        const RunRecord run = s.run(id).value();
        QCOMPARE(toString(run.target), QString("ssh"));
        QVERIFY(isCommandSpec(run.specJson));
        const MetricSeries m = s.metricSeries(id).value();
        QCOMPARE(m.size(), 8);
        QCOMPARE(m.step.back(), 8.0);
        QVERIFY(QFile::exists(dir + "/command.json"));
        QVERIFY(QFile::exists(dir + "/logs/stdout.log"));
    }

    void stopAndRunAgainOverSsh()
    {
        if (!m_torch)
            QSKIP("/usr/bin/python3 has no torch (python3-torch, which setup.sh installs)");
        stopAndRunAgain(
            {"--host", "node0", "--supervisor", kShard}, m_dir.filePath("remote/ssh-long"), "ssh");
    }

    // Through Slurm: job.sbatch runs the supervisor in the batch step with MASTER_ADDR and
    // MASTER_PORT set; the run is the job's (queued, running, finished).
    void trainsThroughSlurm()
    {
        if (!m_torch)
            QSKIP("/usr/bin/python3 has no torch (python3-torch, which setup.sh installs)");
        const QString dir = m_dir.filePath("slurm-train");
        const auto o = shard(torchrun({"--slurm"}, dir, {"STEPS=6"}));
        QVERIFY2(o.code == 0, qPrintable(o.out + o.err));
        QVERIFY2(o.out.contains("Slurm job "), qPrintable(o.out));
        RunStore s = store();
        const qint64 id = s.findRunByDir(QString(), dir).value();
        QVERIFY(id > 0);
        const RunRecord run = s.run(id).value();
        QCOMPARE(toString(run.target), QString("slurm"));
        QVERIFY(!run.jobId.isEmpty());
        QCOMPARE(toString(run.status), toString(RunStatus::Finished));
        QCOMPARE(s.metricSeries(id).value().size(), 6);
        const QByteArray script = SshdFixture::read(dir + "/job.sbatch");
        QVERIFY2(script.contains("supervise-command"), script.constData());
        QVERIFY(script.contains("#SBATCH --nodes=1"));
        QVERIFY(script.contains("export MASTER_ADDR MASTER_PORT="));
        // The job's own output file, beside the command's logs.
        QVERIFY(QFile::exists(dir + "/logs/slurm-" + run.jobId + ".out"));
    }

    void stopAndRunAgainThroughSlurm()
    {
        if (!m_torch)
            QSKIP("/usr/bin/python3 has no torch (python3-torch, which setup.sh installs)");
        stopAndRunAgain({"--slurm"}, m_dir.filePath("slurm-long"), "slurm");
    }

    // --sbatch-script: the batch script as the user edited it is submitted as it is; one that
    // no longer runs the supervisor on the run folder is refused before anything is submitted.
    void editedBatchScript()
    {
        const QString dir = m_dir.filePath("slurm-edited");
        SlurmOptions o;
        QString script = commandSbatchScript("edited", o, kShard, dir, 29512).value();
        script.replace("set -eu\n", "set -eu\necho EDITED-LINE on $SLURM_JOB_NODELIST\n");
        const QString file = m_dir.filePath("edited.sbatch");
        SshdFixture::write(file, script.toUtf8());
        const QString command = "echo \"{'loss': 1.5, 'learning_rate': 0.1}\"";
        auto o1 = shard({"run", "--slurm", "--name", "edited", "--run-dir", dir, "--sbatch-script",
            file, "--command", command});
        QVERIFY2(o1.code == 0, qPrintable(o1.out + o1.err));
        RunStore s = store();
        const RunRecord run = s.run(s.findRunByDir(QString(), dir).value()).value();
        QCOMPARE(toString(run.status), toString(RunStatus::Finished));
        QCOMPARE(s.metricSeries(run.id).value().size(), 1);
        QCOMPARE(SshdFixture::read(dir + "/job.sbatch"), script.toUtf8());
        QTRY_VERIFY(SshdFixture::read(dir + "/logs/slurm-" + run.jobId + ".out")
                        .contains("EDITED-LINE on "));

        SshdFixture::write(file, "#!/bin/bash\nsrun hostname\n");
        const QString other = m_dir.filePath("slurm-edited-bad");
        auto o2 = shard(
            {"run", "--slurm", "--run-dir", other, "--sbatch-script", file, "--command", command});
        QVERIFY(o2.code != 0);
        QVERIFY2(o2.err.contains("no longer runs `shard supervise-command"), qPrintable(o2.err));
        QCOMPARE(store().findRunByDir(QString(), other).value(), qint64(0));
        auto o3 = shard({"run", "--run-dir", other, "--sbatch-script", file, "--command", command});
        QVERIFY(o3.code != 0);
        QVERIFY2(o3.err.contains("add --slurm"), qPrintable(o3.err));
    }

    // The studio's path (the Launch page hands RunService::launchCommand its request, the
    // Monitor's Resume calls resumeRun): a command on the SSH host and through Slurm, followed by
    // the service's own watchers to its end, then run again in the same record from its record
    // alone (target, folder, supervisor).
    void studioPathOverSshAndSlurm()
    {
        qputenv("SHARD_SSH_CONFIG", m_sshd->configFile().toUtf8()); // the service's SSH options
        RunService service(m_dir.filePath("studio.sqlite"));
        QSignalSpy launched(&service, &RunService::launched);
        QSignalSpy resumed(&service, &RunService::resumed);
        QSignalSpy errors(&service, &RunService::errorOccurred);
        const QString command = "for i in 1 2 3; do sleep 0.3; echo \"{'loss': 2.$i, "
                                "'learning_rate': 0.1}\"; done";
        int index = 0;
        for (const LaunchTarget& target :
            {LaunchTarget::ssh({"node0"}), LaunchTarget::onSlurm(SlurmOptions {})}) {
            CommandRunRequest req;
            req.name = QString("studio-%1").arg(index);
            req.runDir = m_dir.filePath(QString("remote/studio-%1").arg(index++));
            req.spec.command = command;
            req.target = target;
            req.supervisor = kShard;
            launched.clear();
            service.launchCommand(req);
            QTRY_VERIFY_WITH_TIMEOUT(launched.count() == 1 || errors.count() > 0, 60000);
            QVERIFY2(errors.isEmpty(),
                qPrintable(errors.isEmpty() ? QString() : errors.first().first().toString()));
            const qint64 id = launched.first().first().toLongLong();
            auto db = RunStore::open(m_dir.filePath("studio.sqlite"));
            QVERIFY(db);
            QCOMPARE(toString(db->run(id)->target), toString(target.kind));
            QTRY_COMPARE_WITH_TIMEOUT(
                toString(db->run(id)->status), toString(RunStatus::Finished), 120000);
            QTRY_COMPARE_WITH_TIMEOUT(db->metricSeries(id)->size(), 3, 30000);
            // Resume: the same command again, on the recorded target, in the same record.
            resumed.clear();
            service.resumeRun(id);
            QTRY_VERIFY_WITH_TIMEOUT(resumed.count() == 1, 60000);
            QVERIFY2(resumed.first().at(2).toString().isEmpty(),
                qPrintable(resumed.first().at(2).toString()));
            QCOMPARE(resumed.first().at(1).toLongLong(), id);
            QTRY_COMPARE_WITH_TIMEOUT(db->metricSeries(id)->size(), 6, 120000);
            QCOMPARE(db->metricSeries(id)->step.back(), 6.0);
            QTRY_COMPARE_WITH_TIMEOUT(
                toString(db->run(id)->status), toString(RunStatus::Finished), 120000);
        }
    }

    // What a user gets wrong there is said before anything runs, and nothing is recorded.
    void badRemoteCommands()
    {
        const QString dir = m_dir.filePath("remote/bad");
        auto o = shard({"run", "--host", "node0", "--supervisor", "/nonexistent/shard", "--run-dir",
            dir, "--command", "true"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("not installed on node0"), qPrintable(o.err));
        QVERIFY2(o.err.contains("--supervisor"), qPrintable(o.err));
        o = shard(
            {"run", "--host", "node0", "--host", "node0", "--run-dir", dir, "--command", "true"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("one SSH host (2 given)"), qPrintable(o.err));
        o = shard({"run", "--host", "node0", "--supervisor", kShard, "--run-dir", dir, "--workdir",
            "/nonexistent/work", "--command", "true"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("--workdir /nonexistent/work: no such folder on node0"),
            qPrintable(o.err));
        o = shard({"run", "--host", "down", "--run-dir", dir, "--command", "true"});
        QVERIFY(o.code != 0);
        QVERIFY2(!o.err.trimmed().isEmpty(), "an unreachable host is said");
        o = shard({"run", "--slurm", "--partition", "bad partition", "--run-dir",
            m_dir.filePath("slurm-bad"), "--command", "true"});
        QVERIFY(o.code != 0);
        QVERIFY2(o.err.contains("characters sbatch does not accept"), qPrintable(o.err));
        RunStore s = store();
        QCOMPARE(s.findRunByDir("node0", dir).value(), qint64(0));
    }

    // The batch script a command run submits, and the preview the Launch page shows.
    void scriptAndPreview()
    {
        SlurmOptions o;
        o.nodes = 4;
        o.gpusPerNode = 8;
        o.partition = "gpu";
        o.env = {"NCCL_DEBUG=WARN"};
        const QString script
            = commandSbatchScript("llama", o, "/opt/shard/bin/shard", "/scratch/run 1", 29501)
                  .value();
        QVERIFY(script.startsWith("#!/bin/bash\n"));
        for (const char* line :
            {"#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu",
                "export NCCL_DEBUG=WARN", "export MASTER_ADDR MASTER_PORT=29501",
                "exec /opt/shard/bin/shard supervise-command '/scratch/run 1'"})
            QVERIFY2(script.contains(line), line);
        CommandRunRequest r;
        r.name = "llama";
        r.runDir = "/scratch/run 1";
        r.spec.command = "srun torchrun --nnodes 4 train.py";
        r.spec.env = {"A=1"};
        r.target = LaunchTarget::onSlurm(o);
        r.supervisor = "/opt/shard/bin/shard";
        const QString text = describeCommandRun(r).value();
        QVERIFY2(
            text.contains("env A=1 \\\n    srun torchrun --nnodes 4 train.py"), qPrintable(text));
        QVERIFY(text.contains("#SBATCH --nodes=4"));
        r.target = LaunchTarget::ssh({"gpu-box"});
        QVERIFY(describeCommandRun(r).value().contains("on gpu-box over SSH"));
    }
};

QTEST_GUILESS_MAIN(TestCommandRunRemote)
#include "tst_command_run_remote.moc"
