// The Monitor page follows a run through the run store when its folder is on another host: a real
// shard-worker run started over SSH (a real sshd on 127.0.0.1) streams its points, events and the
// tail of its log to the page; Stop ends it on the host; Resume starts it again there from its
// latest complete checkpoint, in the same run record, and the page follows it to its end. Runs
// started by the CLI or as Slurm jobs open by id the same way. A run on a host that refuses the
// connection shows a message.
#include <QtTest>

#include <QPushButton>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "protocol/checkpoint_discovery.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"

#include "../jobs/jobs_test_util.h"
#include "../jobs/slurm_fixture.h"
#include "../jobs/sshd_fixture.h"
#include "studio_test_util.h"

using namespace shard::widgets;

using shard::test::kFakeWorker;

class TstMonitorRemote : public QObject {
    Q_OBJECT

    SshdFixture m_sshd;
    QTemporaryDir m_tmp;
    QString m_worker;

private Q_SLOTS:
    void initTestCase()
    {
        m_worker = shard::test::findWorker();
        if (m_worker.isEmpty())
            QSKIP("no shard-worker with `launch` and `train` in this build");
        QString why;
        if (!m_sshd.start(1, &why))
            QFAIL(qPrintable(why));
        // The studio's SSH client reads its config file from here (the user's own otherwise).
        qputenv("SHARD_SSH_CONFIG", m_sshd.configFile().toUtf8());
        const QString setUp = shard::test::setUpTinyTask(m_tmp.path(), m_worker, 100);
        QVERIFY2(setUp.isEmpty(), qPrintable(setUp));
    }

    void remoteRunStopAndResume()
    {
        MainWindow window(m_tmp.filePath("store.sqlite"));
        window.show();
        MonitorPage* monitor = window.monitorPage();

        const nlohmann::json spec
            = {{"name", "remote-e2e"}, {"model", m_tmp.filePath("model").toStdString()},
                {"data", m_tmp.filePath("copy.jsonl").toStdString()}, {"steps", 100000},
                {"seq_len", 32}, {"micro_batch", 2}, {"checkpoint_every", 5}, {"lr", 3e-3}};
        shard::jobs::LaunchRequest request;
        request.name = "remote-e2e";
        request.spec = shard::protocol::runSpecFromJson(spec);
        request.runDir = m_tmp.filePath("remote-run");
        request.workerProgram = m_worker;
        window.store()->launch(request, shard::jobs::LaunchTarget::ssh({"node0"}));

        // The window follows the new remote run through the store.
        QTRY_VERIFY_WITH_TIMEOUT(monitor->storeRunId() != 0, 30000);
        QCOMPARE(window.currentPage(), Page::Monitor);
        const qint64 first = monitor->storeRunId();
        QTRY_VERIFY_WITH_TIMEOUT(monitor->pointCount() > 0, 120000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->runDirectory().startsWith("node0:"), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(
            shard::test::lastEventStep(monitor->run().events, "checkpoint") > 0, 120000);
        // The tail of rank 0's log, fetched over SSH.
        QTRY_VERIFY_WITH_TIMEOUT(!monitor->logText().isEmpty(), 20000);
        QVERIFY(!monitor->finished());
        QVERIFY(!monitor->canResume());

        // Stop on the host; the store records why it ended and offers Resume.
        QSignalSpy ended(monitor, &MonitorPage::runFinished);
        auto* stop = monitor->findChild<QPushButton*>("stopButton");
        QVERIFY(stop && stop->isEnabled());
        QTest::mouseClick(stop, Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->canResume(), 20000);
        QVERIFY(ended.count() >= 1);
        // Resume starts from the newest complete checkpoint in the run's folder. A stop can end
        // the rank after a checkpoint is complete and before its event is written, so the
        // folder (on this machine: the host is loopback), not the events, says which one.
        const auto latest
            = shard::protocol::latestCompleteCheckpoint(m_tmp.filePath("remote-run").toStdString());
        QVERIFY(latest);
        const qint64 saved = latest->step;
        QVERIFY(saved >= 5);
        QVERIFY(saved >= shard::test::lastEventStep(monitor->run().events, "checkpoint"));
        const qint64 last = saved + 4;
        {
            auto store = shard::jobs::RunStore::open(m_tmp.filePath("store.sqlite"));
            QVERIFY(store);
            auto run = store->run(first);
            QVERIFY(run);
            QVERIFY2(run->status == shard::jobs::RunStatus::Stopped,
                qPrintable(shard::jobs::toString(run->status)));
            // The user shortens the run to four steps past its latest checkpoint (the spec the
            // resume starts from is the recorded one).
            auto j = nlohmann::json::parse(run->specJson.toStdString());
            j["steps"] = last;
            QVERIFY(store->setSpec(first, QByteArray::fromStdString(j.dump())));
        }

        // Resume: the run starts again in the same folder on the same host, followed to its end.
        QSignalSpy resumed(monitor, &MonitorPage::resumeDone);
        QTest::mouseClick(monitor->findChild<QPushButton*>("resumeButton"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(resumed.count(), 1, 30000);
        QCOMPARE(resumed.first().first().toString(), QString());
        // The same run continues: one record, its history kept, the re-run steps replaced.
        QCOMPARE(monitor->storeRunId(), first);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished() && !monitor->run().step.empty()
                && monitor->run().step.back() == double(last),
            240000);
        QVERIFY2(monitor->messageText().isEmpty() || monitor->messageText().contains("Resumed"),
            qPrintable(monitor->messageText()));
        QCOMPARE(monitor->run().step.back(), double(last));
        // The resumed part starts right after the checkpoint; the earlier history is kept.
        const auto& steps = monitor->run().step;
        QCOMPARE(steps.front(), 1.0);
        QCOMPARE(steps[steps.size() - 4], double(saved + 1));
        bool resumedEvent = false;
        for (const auto& e : monitor->run().events)
            resumedEvent = resumedEvent || e.message.find("resumed from") != std::string::npos;
        QVERIFY(resumedEvent);
        // The store records the end when the run's process has gone, which may come after the
        // Monitor has read the last step: wait for it rather than assume the order.
        const auto stored = [&](bool target) -> QString {
            auto store = shard::jobs::RunStore::open(
                m_tmp.filePath("store.sqlite"), shard::jobs::OpenMode::ReadOnly);
            if (!store)
                return QString();
            auto run = store->run(monitor->storeRunId());
            if (!run)
                return QString();
            return target ? toString(run->target) : shard::jobs::toString(run->status);
        };
        QTRY_COMPARE_WITH_TIMEOUT(stored(false), QString("finished"), 30000);
        QCOMPARE(stored(true), QString("ssh"));
    }

    // Runs started elsewhere — by the `shard` CLI on this machine, and as a Slurm job submitted
    // through a login node over SSH — open by id and are watched the same way to their end.
    void runsStartedElsewhereOpenById()
    {
        SlurmFixture slurm;
        QString why;
        if (!slurm.start(&why))
            QFAIL(qPrintable(why));
        const QString storePath = m_tmp.filePath("elsewhere.sqlite");
        auto cli = [&](const QStringList& args) {
            QProcess p;
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            env.insert("SHARD_STORE", storePath);
            env.insert("SHARD_RUNS_DIR", m_tmp.filePath("elsewhere-runs"));
            env.insert("SHARD_WORKER", kFakeWorker);
            env.insert("SLURM_CONF", slurm.confPath());
            p.setProcessEnvironment(env);
            p.start(shard::test::kShard, args);
            const bool ended = p.waitForFinished(60000);
            return ended && p.exitCode() == 0 ? QString()
                                              : QString::fromUtf8(p.readAllStandardError());
        };
        // The fake worker trains no model: started without the preflight of model and data.
        QString err = cli({"run", "--no-preflight", "--detach", "--name", "cli-run", "--env",
            "FAKE_STEP_SEC=0.05", "--", "--steps", "30"});
        QVERIFY2(err.isEmpty(), qPrintable(err));
        err = cli({"run", "--slurm", "--via", "node0", "--detach", "--name", "slurm-run",
            "--worker", kFakeWorker, "--run-dir", m_tmp.filePath("slurm-run"), "--env",
            "FAKE_STEP_SEC=0.05", "--", "--steps", "20"});
        QVERIFY2(err.isEmpty(), qPrintable(err));

        MainWindow window(storePath);
        window.show();
        MonitorPage* monitor = window.monitorPage();
        struct Case {
            QString id, where;
            int steps;
        };
        for (const Case& c : {Case {"1", m_tmp.filePath("elsewhere-runs"), 30},
                 Case {"2", "node0:" + m_tmp.filePath("slurm-run"), 20}}) {
            window.monitorRun(c.id);
            QCOMPARE(window.currentPage(), Page::Monitor);
            QCOMPARE(monitor->storeRunId(), c.id.toLongLong());
            QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
            QVERIFY2(
                monitor->runDirectory().startsWith(c.where), qPrintable(monitor->runDirectory()));
            // A Slurm run's end can be known (sacct) before its last lines are read back.
            QTRY_COMPARE_WITH_TIMEOUT(monitor->pointCount(), c.steps, 30000);
            QCOMPARE(monitor->run().step.back(), double(c.steps));
            QVERIFY2(monitor->messageText().isEmpty(), qPrintable(monitor->messageText()));
        }
    }

    void unreachableHostShowsMessage()
    {
        // A run recorded on a host whose port refuses: the page says so instead of waiting.
        {
            auto store = shard::jobs::RunStore::open(m_tmp.filePath("refused.sqlite"));
            QVERIFY(store);
            shard::jobs::NewRun nr;
            nr.name = "lost";
            nr.target = shard::jobs::TargetKind::Ssh;
            nr.host = "down"; // the fixture's alias for a closed loopback port
            nr.runDir = "/nonexistent/run";
            nr.status = shard::jobs::RunStatus::Running;
            QVERIFY(store->createRun(nr));
        }
        MainWindow window(m_tmp.filePath("refused.sqlite"));
        window.show();
        QSignalSpy errors(window.store(), &shard::jobs::RunService::errorOccurred);
        window.monitorRun("1");
        QTRY_VERIFY_WITH_TIMEOUT(!errors.isEmpty(), 30000);
        const QString message = errors.first().first().toString();
        QVERIFY2(message.contains("connection refused"), qPrintable(message));
        QTRY_VERIFY_WITH_TIMEOUT(
            monitor(window)->messageText().contains("connection refused"), 30000);
    }

private:
    static MonitorPage* monitor(MainWindow& w) { return w.monitorPage(); }
};

QTEST_MAIN(TstMonitorRemote)
#include "tst_monitor_remote.moc"
