// SlurmLauncher against a real one-node Slurm (slurmctld + slurmd started here): the sbatch
// script, submit / watch / ingest, cancel, a rejected job, Slurm not available, and submission
// through an SSH login node.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/run_import.h"
#include "jobs/slurm_launcher.h"
#include "jobs_test_util.h"
#include "slurm_fixture.h"
#include "sshd_fixture.h"

using namespace shard::jobs;

namespace {

using shard::test::kFakeWorker;

LaunchRequest request(const QString& runDir, int steps, double stepSec)
{
    LaunchRequest r;
    r.name = "slurm-test";
    r.runDir = runDir;
    r.workerProgram = kFakeWorker;
    r.spec.model = "m";
    r.spec.steps = steps;
    r.env = {QString("FAKE_STEP_SEC=%1").arg(stepSec)};
    return r;
}

} // namespace

class TestSlurmLauncher : public QObject {
    Q_OBJECT

    SlurmFixture* m_slurm = nullptr;
    QTemporaryDir m_work;

private Q_SLOTS:
    void initTestCase()
    {
        m_slurm = new SlurmFixture;
        QString why;
        if (!m_slurm->start(&why))
            QFAIL(qPrintable(why));
    }

    void cleanupTestCase() { delete m_slurm; }

    void script()
    {
        LaunchRequest req = request("/scratch/run 1", 5, 0.1);
        req.spec.procsPerNode = 4;
        SlurmOptions o;
        o.nodes = 2;
        o.gpusPerNode = 4;
        o.time = "01:30:00";
        o.partition = "gpu";
        o.account = "proj-7";
        o.env = {"HF_HOME=/data/hf cache", "NOTE=x'; touch /tmp/pwned; '"};
        auto s = SlurmLauncher::sbatchScript(req, o, "/scratch/run 1");
        QVERIFY2(s, qPrintable(s.error()));
        for (const char* line :
            {"#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=1\n", "#SBATCH --gpus-per-node=4\n",
                "#SBATCH --time=01:30:00\n", "#SBATCH --partition=gpu\n",
                "#SBATCH --account=proj-7\n", "export HF_HOME='/data/hf cache'\n",
                "export NOTE='x'\\''; touch /tmp/pwned; '\\'''\n"})
            QVERIFY2(s->contains(line), line);
        QVERIFY(s->contains("srun --kill-on-bad-exit=1 bash -c"));
        QVERIFY(s->contains("--nproc-per-node 4 --nnodes 2 --node-rank @SHARD_NODE_RANK@"));
        // The run directory, quoted, for the launcher and (in the launch spec's path) the ranks.
        QVERIFY(s->contains("--run-dir '/scratch/run 1'"));
        QVERIFY(s->contains("train --config '/scratch/run 1/launch-spec.json'"));
        o.time = "1 day";
        auto bad = SlurmLauncher::sbatchScript(req, o, "/r");
        QVERIFY(!bad);
        QVERIFY(bad.error().contains("time '1 day'"));
        // Characters sbatch takes, but no time limit it reads: said with the forms it does.
        for (const char* t : {"2h", "1:2:3:4", "-5", "1-2-3"}) {
            o.time = t;
            auto wrong = SlurmLauncher::sbatchScript(req, o, "/r");
            QVERIFY2(!wrong, t);
            QVERIFY2(
                wrong.error().contains(QString("time limit '%1' is not one sbatch reads").arg(t))
                    && wrong.error().contains("D-HH:MM:SS"),
                qPrintable(wrong.error()));
        }
        for (const char* t : {"90", "30:00", "02:00:00", "1-12", "1-12:30", "2-00:00:00"}) {
            o.time = t;
            QVERIFY2(SlurmLauncher::sbatchScript(req, o, "/r"), t);
        }
    }

    // The job follows the run spec: its nodes, and on CUDA a GPU per rank of a node (the studio
    // and `shard run --slurm` give no --gpus-per-node of their own); a contradiction is refused.
    void jobFollowsTheRunSpec()
    {
        LaunchRequest req = request("/scratch/gpu-run", 5, 0.1);
        req.spec.nodes = 2;
        req.spec.procsPerNode = 8;
        req.spec.device = "cuda";
        auto s = SlurmLauncher::sbatchScript(req, {}, "/scratch/gpu-run");
        QVERIFY2(s, qPrintable(s.error()));
        QVERIFY2(s->contains("#SBATCH --nodes=2\n"), qPrintable(*s));
        QVERIFY2(s->contains("#SBATCH --gpus-per-node=8\n"), qPrintable(*s));
        QVERIFY(s->contains("--nproc-per-node 8 --nnodes 2"));
        // On the CPU (or "auto") it asks for no GPU.
        req.spec.device = "cpu";
        s = SlurmLauncher::sbatchScript(req, {}, "/scratch/gpu-run");
        QVERIFY2(s && !s->contains("--gpus-per-node"), qPrintable(s ? *s : s.error()));
        // Given options that contradict the spec are refused, saying which.
        req.spec.device = "cuda";
        SlurmOptions o;
        o.gpusPerNode = 4;
        auto few = SlurmLauncher::sbatchScript(req, o, "/r");
        QVERIFY(!few);
        QVERIFY2(
            few.error().contains("8 ranks per node on CUDA need 8 GPUs"), qPrintable(few.error()));
        o = {};
        o.nodes = 3;
        auto nodes = SlurmLauncher::sbatchScript(req, o, "/r");
        QVERIFY(!nodes);
        QVERIFY2(nodes.error().contains("--nodes 3 but the run spec has 2 nodes"),
            qPrintable(nodes.error()));
    }

    void submitWatchIngest()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SlurmLauncher launcher(&*store);
        auto id = launcher.submit(request(m_work.filePath("job1"), 10, 0.05), {});
        QVERIFY2(id, qPrintable(id.error()));
        auto run = store->run(*id);
        QCOMPARE(toString(run->target), QString("slurm"));
        QVERIFY(!run->jobId.isEmpty());
        QVERIFY(QFile::exists(run->runDir + "/job.sbatch"));
        SlurmRunWatcher watcher(*store, *id);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        QSignalSpy status(&watcher, &RunWatcher::statusChanged);
        watcher.start(300);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 30000);
        run = store->run(*id);
        QCOMPARE(toString(run->status), QString("finished"));
        QCOMPARE(*store->metricCount(*id), qint64(10));
        QVERIFY(!status.isEmpty());
        auto st = launcher.jobState(run->jobId, {});
        QVERIFY(st);
        QCOMPARE(st->state, QString("COMPLETED"));
    }

    void cancel()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SlurmLauncher launcher(&*store);
        auto id = launcher.submit(request(m_work.filePath("job2"), 100000, 0.05), {});
        QVERIFY2(id, qPrintable(id.error()));
        const QString runDir = store->run(*id)->runDir;
        QTRY_VERIFY_WITH_TIMEOUT(QFile(runDir + "/metrics.jsonl").size() > 0, 20000);
        QCOMPARE(toString(*launcher.poll(*id)), QString("running"));
        QVERIFY(launcher.cancel(*id));
        auto run = store->run(*id);
        QVERIFY2(run->status == RunStatus::Stopped, qPrintable(toString(run->status)));
        QVERIFY(*store->metricCount(*id) >= 1);
        QVERIFY(launcher.jobState(run->jobId, {})->ended());
    }

    void rejected()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SlurmLauncher launcher(&*store);
        SlurmOptions o;
        o.partition = "nope";
        auto id = launcher.submit(request(m_work.filePath("job3"), 1, 0.01), o);
        QVERIFY(!id);
        QVERIFY2(id.error().contains("job rejected by Slurm") && id.error().contains("partition"),
            qPrintable(id.error()));
    }

    void notAvailable()
    {
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SlurmLauncher launcher(&*store);
        SlurmOptions noSbatch;
        noSbatch.clientEnv = {"PATH=/nonexistent"};
        auto a = launcher.submit(request(m_work.filePath("job4"), 1, 0.01), noSbatch);
        QVERIFY(!a);
        QVERIFY2(a.error().contains("Slurm is not available on this machine (sbatch not found)"),
            qPrintable(a.error()));
        // A controller that does not answer.
        QFile conf(m_slurm->confPath());
        conf.open(QIODevice::ReadOnly);
        QString text = QString::fromUtf8(conf.readAll());
        const ClosedPort closed;
        text.replace(QRegularExpression("SlurmctldPort=\\d+"),
            QString("SlurmctldPort=%1").arg(closed.port()));
        const QString down = m_work.filePath("down.conf");
        SshdFixture::write(down, text.toUtf8());
        SlurmOptions noController;
        noController.clientEnv = {"SLURM_CONF=" + down};
        auto b = launcher.submit(request(m_work.filePath("job5"), 1, 0.01), noController);
        QVERIFY(!b);
        QVERIFY2(
            b.error().startsWith("Slurm is not available on this machine:"), qPrintable(b.error()));
    }

    // A run another tool writes under Slurm, imported and tied to its job (`shard runs import
    // PATH --slurm-job ID`): it takes the job's state, its watcher imports what the job writes
    // and ends with the job (completed: finished; scancel: stopped); bad ids are refused and
    // change nothing (issue 30).
    void importedRunFollowsItsJob()
    {
        auto store = RunStore::open(m_work.filePath("import.sqlite"));
        QVERIFY(store);
        const QString dir = m_work.filePath("hf-job");
        QVERIFY(QDir().mkpath(dir));
        auto writeState = [&](int steps) {
            QString log;
            for (int s = 1; s <= steps; ++s)
                log += QString("%1{\"step\": %2, \"loss\": %3, \"learning_rate\": 0.0001}")
                           .arg(s > 1 ? "," : "")
                           .arg(s)
                           .arg(3.0 / s);
            QFile f(dir + "/trainer_state.json.tmp");
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(QString("{\"global_step\": %1, \"log_history\": [%2]}")
                        .arg(steps)
                        .arg(log)
                        .toUtf8());
            f.close();
            QFile::remove(dir + "/trainer_state.json");
            QVERIFY(f.rename(dir + "/trainer_state.json"));
        };
        writeState(2);
        // The job: waits for the test's go, then ends (the test writes the files meanwhile, as
        // the job's trainer would).
        const QString go = m_work.filePath("hf-job-go");
        QProcess sbatch;
        sbatch.start("sbatch",
            {"--parsable", "--output", m_work.filePath("hf-job.out"), "--wrap",
                QString("while [ ! -e '%1' ]; do sleep 0.2; done").arg(go)});
        QVERIFY(sbatch.waitForFinished(30000));
        const QString jobId = QString::fromUtf8(sbatch.readAllStandardOutput()).trimmed();
        QVERIFY2(sbatch.exitCode() == 0 && !jobId.isEmpty(), sbatch.readAllStandardError());
        auto report = importRuns(*store, dir);
        QVERIFY2(report && report->runs.size() == 1, qPrintable(report.error()));
        const qint64 id = report->runs.front().runId;
        for (const auto& [bad, why] : {std::pair {QString("12; rm -rf /"), "is not a Slurm job id"},
                 {QString("999999"), "Slurm knows no job 999999"}}) {
            auto refused = followSlurmJob(*store, id, bad);
            QVERIFY(!refused);
            QVERIFY2(refused.error().contains(why), qPrintable(refused.error()));
        }
        QVERIFY(store->run(id)->jobId.isEmpty());
        auto tied = followSlurmJob(*store, id, jobId);
        QVERIFY2(tied, qPrintable(tied.error()));
        QTRY_VERIFY_WITH_TIMEOUT(
            followSlurmJob(*store, id, jobId) && store->run(id)->status == RunStatus::Running,
            60000);
        auto watcher = ImportTarget(&*store).watch(*store->run(id), nullptr);
        QVERIFY2(watcher, qPrintable(watcher.error()));
        QSignalSpy finished(watcher.value().get(), &RunWatcher::finished);
        writeState(5); // the job writes on: the watcher imports it, the run stays running
        QTRY_COMPARE_WITH_TIMEOUT(*store->metricCount(id), qint64(5), 30000);
        QCOMPARE(toString(store->run(id)->status), toString(RunStatus::Running));
        QVERIFY(finished.isEmpty());
        writeState(7); // its last steps, then it ends
        QFile(go).open(QIODevice::WriteOnly);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 60000);
        const RunRecord done = *store->run(id);
        QCOMPARE(toString(done.status), toString(RunStatus::Finished));
        QVERIFY2(
            done.message.contains("Slurm job " + jobId + ": COMPLETED"), qPrintable(done.message));
        QCOMPARE(*store->metricCount(id), qint64(7)); // the last steps imported at the end
        // Imported again later: the job's final state stays.
        QVERIFY(importRuns(*store, dir));
        QCOMPARE(toString(store->run(id)->status), toString(RunStatus::Finished));

        // A job cancelled: the run stops with it.
        QProcess again;
        again.start("sbatch",
            {"--parsable", "--output", m_work.filePath("hf-job2.out"), "--wrap", "sleep 300"});
        QVERIFY(again.waitForFinished(30000));
        const QString second = QString::fromUtf8(again.readAllStandardOutput()).trimmed();
        const QString dir2 = m_work.filePath("hf-job2");
        QVERIFY(QDir().mkpath(dir2));
        QVERIFY(QFile::copy(dir + "/trainer_state.json", dir2 + "/trainer_state.json"));
        auto report2 = importRuns(*store, dir2);
        QVERIFY2(report2, qPrintable(report2.error()));
        const qint64 id2 = report2->runs.front().runId;
        QVERIFY(followSlurmJob(*store, id2, second));
        auto watcher2 = ImportTarget(&*store).watch(*store->run(id2), nullptr);
        QVERIFY(watcher2);
        QSignalSpy finished2(watcher2.value().get(), &RunWatcher::finished);
        QProcess::execute("scancel", {second});
        QTRY_COMPARE_WITH_TIMEOUT(finished2.size(), 1, 60000);
        QCOMPARE(toString(store->run(id2)->status), toString(RunStatus::Stopped));
    }

    void submitViaSsh()
    {
        SshdFixture sshd;
        QString why;
        if (!sshd.start(1, &why))
            QFAIL(qPrintable(why));
        SshOptions opts;
        opts.configFile = sshd.configFile();
        opts.controlDir = m_work.filePath("cm");
        auto store = RunStore::open(m_work.filePath("runs.sqlite"));
        SlurmLauncher launcher(&*store, {}, SshClient(opts));
        SlurmOptions o;
        o.via = "node0";
        o.clientEnv = {"SLURM_CONF=" + m_slurm->confPath()};
        auto id = launcher.submit(request(m_work.filePath("job6"), 6, 0.05), o);
        QVERIFY2(id, qPrintable(id.error()));
        QCOMPARE(store->run(*id)->host, QString("node0"));
        SlurmRunWatcher watcher(*store, *id, opts);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start(300);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 30000);
        QCOMPARE(toString(store->run(*id)->status), QString("finished"));
        QCOMPARE(*store->metricCount(*id), qint64(6));
        watcher.stop();
        SshClient(opts).closeMaster(*SshHost::parse("node0"));
    }
};

QTEST_GUILESS_MAIN(TestSlurmLauncher)
#include "tst_slurm_launcher.moc"
