// Runs that come back under Slurm (issue 32), with the real shard-worker on a one-node Slurm
// started here: SIGUSR1 sent to a running job (what --signal=USR1@N sends before a time limit)
// makes the ranks write a checkpoint and exit 75, the batch script requeues the job, and its
// launcher continues from that checkpoint; `scontrol requeue` of a running job continues from
// the latest periodic checkpoint; a dead rank restarts inside the job (max_restarts); `scancel`
// stops the run for good. Each time the studio's
// watcher follows one run record to its end, every step recorded once.
#include <csignal>

#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/ingestor.h"
#include "jobs/run_service.h"
#include "jobs/slurm_launcher.h"
#include "jobs_test_util.h"
#include "slurm_fixture.h"

using namespace shard::jobs;

namespace {

using shard::test::kRealWorker;

QStringList eventKinds(RunStore& store, qint64 id)
{
    QStringList kinds;
    if (auto events = store.events(id))
        for (const auto& e : *events)
            kinds << e.kind;
    return kinds;
}

// Restarts=N of `scontrol show job`.
int restartCount(const QString& jobId)
{
    const QString out = SlurmFixture::run("scontrol show job " + jobId);
    const auto m = QRegularExpression("Restarts=(\\d+)").match(out);
    return m.hasMatch() ? m.captured(1).toInt() : -1;
}

} // namespace

class TestSlurmRequeue : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    QString m_model;
    QString m_data;
    SlurmFixture* m_slurm = nullptr;

    struct Followed {
        qint64 id = 0;
        QString jobId;
        QString runDir;
    };

    Followed submit(
        RunStore& store, const QString& name, int steps, int checkpointEvery, int maxRestarts = 0)
    {
        SlurmLauncher launcher(&store);
        LaunchRequest req;
        req.name = name;
        req.spec = shard::test::tinyRunSpec(m_model, m_data, steps, 1, 2, checkpointEvery);
        req.spec.maxRestarts = maxRestarts;
        req.runDir = m_dir.filePath(name);
        req.workerProgram = kRealWorker;
        auto id = launcher.submit(req, {});
        if (!id)
            qFatal("submit: %s", qPrintable(id.error()));
        auto run = store.run(*id);
        return {*id, run->jobId, run->runDir};
    }

    // The last step in metrics.jsonl.
    static qint64 lastStep(const QString& runDir)
    {
        QFile f(runDir + "/metrics.jsonl");
        if (!f.open(QIODevice::ReadOnly))
            return 0;
        const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
        const auto m = QRegularExpression("\"step\":(\\d+)").match(QString::fromUtf8(lines.last()));
        return m.hasMatch() ? m.captured(1).toLongLong() : 0;
    }

private Q_SLOTS:
    void initTestCase()
    {
        m_model = m_dir.filePath("model");
        m_data = m_dir.filePath("data.jsonl");
        SHARD_REQUIRE_TINY_RUN_INPUTS(m_model, m_data);
        QString why;
        m_slurm = new SlurmFixture;
        if (!m_slurm->start(&why))
            QFAIL(qPrintable(why));
    }

    void cleanupTestCase() { delete m_slurm; }

    // The script asks Slurm for the signal, a requeueable job and appended output, and
    // requeues on the preemption's exit status only.
    void script()
    {
        LaunchRequest req;
        req.spec = shard::test::tinyRunSpec(m_model, m_data, 10, 1, 2);
        req.workerProgram = kRealWorker;
        auto s = SlurmLauncher::sbatchScript(req, {}, "/r");
        QVERIFY2(s, qPrintable(s.error()));
        for (const char* line : {"#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
                 "#SBATCH --signal=USR1@120\n", "|| rc=$?\n", "if [ \"$rc\" -eq 75 ]; then\n",
                 "    scontrol requeue \"$SLURM_JOB_ID\"\n", "exit \"$rc\"\n"})
            QVERIFY2(s->contains(line), line);
        SlurmOptions o;
        o.preemptSignalSec = 0;
        s = SlurmLauncher::sbatchScript(req, o, "/r");
        QVERIFY2(s && !s->contains("--signal="), qPrintable(s ? *s : s.error()));
        o.preemptSignalSec = -5;
        s = SlurmLauncher::sbatchScript(req, o, "/r");
        QVERIFY(!s);
        QVERIFY2(s.error().contains("preemption signal"), qPrintable(s.error()));
    }

    // SIGUSR1 to the job: checkpoint, exit 75, requeue, continue; one record, every step once.
    void preemptionSignalRequeues()
    {
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        const int steps = 60;
        const Followed f = submit(*store, "usr1", steps, 0); // no periodic checkpoints
        SlurmRunWatcher watcher(*store, f.id);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        QStringList seen; // the statuses the watcher reported, in order
        connect(&watcher, &RunWatcher::statusChanged, this,
            [&seen](qint64, RunStatus st, const QString&) { seen << toString(st); });
        watcher.start(300);
        QTRY_VERIFY_WITH_TIMEOUT(lastStep(f.runDir) >= 5, 120000);
        QCOMPARE(
            SlurmFixture::run("scancel -s USR1 " + f.jobId + " && echo sent"), QString("sent"));
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 200000);
        auto run = store->run(f.id);
        QVERIFY2(run->status == RunStatus::Finished,
            qPrintable(toString(run->status) + ": " + run->message));
        const QStringList kinds = eventKinds(*store, f.id);
        QVERIFY2(
            kinds.contains("preempted") && kinds.contains("requeued"), qPrintable(kinds.join(',')));
        QVERIFY2(
            kinds.indexOf("preempted") < kinds.indexOf("requeued"), qPrintable(kinds.join(',')));
        QCOMPARE(*store->metricCount(f.id), qint64(steps));
        QCOMPARE(run->lastStep, qint64(steps));
        QCOMPARE(restartCount(f.jobId), 1);
        // The watcher said so on the way: interrupted (preempted), queued or running again.
        QVERIFY2(seen.contains("interrupted"), qPrintable(seen.join(',')));
        QVERIFY2(
            seen.lastIndexOf("running") > seen.indexOf("interrupted"), qPrintable(seen.join(',')));
        // The requeued job continued from the preemption's checkpoint (not from step 0).
        auto events = store->events(f.id);
        for (const auto& e : *events)
            if (e.kind == "requeued")
                QVERIFY2(e.step >= 5, qPrintable(e.message));
        const QString out
            = SlurmFixture::run("cat " + f.runDir + "/logs/slurm-" + f.jobId + ".out");
        QVERIFY2(out.contains("preempted; requeueing job " + f.jobId), qPrintable(out));
    }

    // The studio was closed while Slurm preempted the run (the store last saw "interrupted"):
    // opened in the Monitor (RunService::followRun), the run is followed back through its
    // requeued job to its end.
    void studioFollowsAPreemptedRunBack()
    {
        const QString path = m_dir.filePath("studio.sqlite");
        const int steps = 40;
        Followed f;
        {
            auto store = RunStore::open(path);
            f = submit(*store, "closed-studio", steps, 0);
            QTRY_VERIFY_WITH_TIMEOUT(lastStep(f.runDir) >= 3, 120000);
            QCOMPARE(
                SlurmFixture::run("scancel -s USR1 " + f.jobId + " && echo sent"), QString("sent"));
            QTRY_VERIFY_WITH_TIMEOUT(
                SlurmFixture::run("cat " + f.runDir + "/events.jsonl").contains("\"preempted\""),
                120000);
            QVERIFY(Ingestor(*store).ingestRunDir(f.id, f.runDir));
            QCOMPARE(toString(store->run(f.id)->status), QString("interrupted"));
        }
        RunService service(path);
        service.followRun(f.id, 1);
        auto db = RunStore::open(path);
        QTRY_COMPARE_WITH_TIMEOUT(toString(db->run(f.id)->status), QString("finished"), 200000);
        QCOMPARE(*db->metricCount(f.id), qint64(steps));
        QVERIFY2(eventKinds(*db, f.id).contains("requeued"),
            qPrintable(eventKinds(*db, f.id).join(',')));
    }

    // `scontrol requeue` of a running job (what Slurm's own preemption does): the launcher is
    // stopped, the job comes back and continues from the latest periodic checkpoint.
    void scontrolRequeueContinues()
    {
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        const int steps = 60;
        const Followed f = submit(*store, "requeue", steps, 4);
        SlurmRunWatcher watcher(*store, f.id);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start(300);
        QTRY_VERIFY_WITH_TIMEOUT(lastStep(f.runDir) >= 9, 120000);
        QCOMPARE(SlurmFixture::run("scontrol requeue " + f.jobId + " && echo ok"), QString("ok"));
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 200000);
        auto run = store->run(f.id);
        QVERIFY2(run->status == RunStatus::Finished,
            qPrintable(toString(run->status) + ": " + run->message));
        QVERIFY2(eventKinds(*store, f.id).contains("requeued"),
            qPrintable(eventKinds(*store, f.id).join(',')));
        QCOMPARE(*store->metricCount(f.id), qint64(steps));
        QCOMPARE(restartCount(f.jobId), 1);
    }

    // A rank that dies inside the job, with max_restarts: the job's launcher restarts its ranks
    // from the checkpoint (srun's --kill-on-bad-exit sees no exit), the job never leaves
    // RUNNING and Slurm does not requeue it; one record, one restart event, every step once.
    void deadRankRestartsInsideTheJob()
    {
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        const int steps = 40;
        const Followed f = submit(*store, "restart-in-job", steps, 4, 1);
        SlurmRunWatcher watcher(*store, f.id);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.start(300);
        QTRY_VERIFY_WITH_TIMEOUT(lastStep(f.runDir) >= 6, 120000);
        QFile pids(f.runDir + "/launcher-ranks.pids");
        QVERIFY(pids.open(QIODevice::ReadOnly));
        qint64 rank1 = 0;
        for (const QByteArray& line : pids.readAll().split('\n'))
            if (line.startsWith("1 "))
                rank1 = line.mid(2).toLongLong();
        QVERIFY(rank1 > 0);
        QCOMPARE(::kill(static_cast<pid_t>(rank1), SIGKILL), 0);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 200000);
        auto run = store->run(f.id);
        QVERIFY2(run->status == RunStatus::Finished,
            qPrintable(toString(run->status) + ": " + run->message));
        const QStringList kinds = eventKinds(*store, f.id);
        QCOMPARE(kinds.count("restart"), 1);
        QVERIFY2(!kinds.contains("requeued"), qPrintable(kinds.join(',')));
        QCOMPARE(*store->metricCount(f.id), qint64(steps));
        QCOMPARE(restartCount(f.jobId), 0);
    }

    // A job the user cancels is not requeued: the run stops, Slurm ends the job.
    void cancelDoesNotRequeue()
    {
        auto store = RunStore::open(m_dir.filePath("runs.sqlite"));
        const Followed f = submit(*store, "cancel", 100000, 4);
        QTRY_VERIFY_WITH_TIMEOUT(lastStep(f.runDir) >= 2, 120000);
        SlurmLauncher launcher(&*store);
        QVERIFY(launcher.cancel(f.id));
        QTest::qWait(1500); // a requeue would have put it back in the queue by now
        auto st = launcher.jobState(f.jobId, {});
        QVERIFY(st);
        QVERIFY2(st->state.startsWith("CANCELLED"), qPrintable(st->state));
        QCOMPARE(restartCount(f.jobId), 0);
        QCOMPARE(toString(store->run(f.id)->status), QString("stopped"));
    }
};

QTEST_GUILESS_MAIN(TestSlurmRequeue)
#include "tst_slurm_requeue.moc"
