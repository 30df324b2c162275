// End to end: a real shard-worker run trains 4 steps with checkpoints every 2 steps; its run.json
// is extended to 6 steps and the Monitor page's Resume button (wired by the main window to the
// local launcher) continues it from step 4 in the same folder, where the page sees step 6 arrive.
// And a run whose launcher is SIGKILLed shows as interrupted and resumes the same way.
#include <QtTest>

#include <algorithm>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "protocol/checkpoint_discovery.h"

#include "jobs/run_service.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"
#include "widgets/runs_page.h"

#include "studio_test_util.h"

using namespace shard::widgets;
using shard::test::findWorker;

class TstMonitorResume : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void resumeFromPageContinuesFromLatestCheckpoint()
    {
        const QString worker = findWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker with `launch` and `train` in this build (configure with "
                  "SHARD_BUILD_ENGINE=ON or set SHARD_WORKER)");
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString setUp = shard::test::setUpTinyTask(tmp.path(), worker, 100);
        QVERIFY2(setUp.isEmpty(), qPrintable(setUp));

        // The first run: 4 steps, checkpoints at steps 2 and 4.
        const QString run = tmp.filePath("run");
        const QString trained = shard::test::trainTinyRun(worker, tmp.path(), run,
            {"--steps", "4", "--seq-len", "32", "--micro-batch", "2", "--checkpoint-every", "2"});
        QVERIFY2(trained.isEmpty(), qPrintable(trained));

        // The user extends the run to 6 steps.
        QFile spec(run + "/run.json");
        QVERIFY(spec.open(QIODevice::ReadOnly));
        auto j = nlohmann::json::parse(spec.readAll().toStdString());
        spec.close();
        j["steps"] = 6;
        QVERIFY(spec.open(QIODevice::WriteOnly | QIODevice::Truncate));
        spec.write(QByteArray::fromStdString(j.dump(2)));
        spec.close();

        MainWindow window(tmp.filePath("store.sqlite"));
        window.show();
        MonitorPage* monitor = window.monitorPage();
        monitor->openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 30000);
        QCOMPARE(monitor->pointCount(), 4);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->canResume(), 30000);

        auto* resume = monitor->findChild<QPushButton*>("resumeButton");
        QVERIFY(resume);
        QSignalSpy done(monitor, &MonitorPage::resumeDone);
        QTest::mouseClick(resume, Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 30000);
        QCOMPARE(done.first().first().toString(), QString());
        // The page follows the run again from its start: its folder is known once the store's
        // first update has come back, which a loaded machine delays.
        QTRY_COMPARE_WITH_TIMEOUT(
            QDir(monitor->runDirectory()).absolutePath(), QDir(run).absolutePath(), 30000);

        // The resumed run appends steps 5 and 6 to the same folder; the page sees them.
        QTRY_VERIFY_WITH_TIMEOUT(
            !monitor->run().step.empty() && monitor->run().step.back() == 6.0, 120000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
        const auto& steps = monitor->run().step;
        QCOMPARE(int(steps.size()), 6);
        for (int i = 0; i < 6; ++i)
            QCOMPARE(steps[i], double(i + 1));
        QVERIFY2(monitor->messageText().isEmpty() || monitor->messageText().contains("Resumed"),
            qPrintable(monitor->messageText()));
    }

    // A run whose launcher is killed (SIGKILL: no finish event) is shown as interrupted on the
    // page, which then offers Resume; resuming continues from the latest complete checkpoint.
    void killedRunIsInterruptedAndResumable()
    {
        const QString worker = findWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker with `launch` and `train` in this build");
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString setUp = shard::test::setUpTinyTask(tmp.path(), worker, 100);
        QVERIFY2(setUp.isEmpty(), qPrintable(setUp));

        // A long run (it never ends by itself here), checkpointing every 3 steps.
        const QString run = tmp.filePath("killed");
        QProcess launcher;
        launcher.setProcessChannelMode(QProcess::ForwardedErrorChannel);
        launcher.start(worker,
            {"launch", "--nproc-per-node", "1", "--run-dir", run, "--", "train", "--model",
                tmp.filePath("model"), "--data", tmp.filePath("copy.jsonl"), "--steps", "100000",
                "--seq-len", "32", "--micro-batch", "2", "--checkpoint-every", "3", "--out", run});
        QVERIFY(launcher.waitForStarted(10000));

        MainWindow window(tmp.filePath("store.sqlite"));
        window.show();
        MonitorPage* monitor = window.monitorPage();
        QSignalSpy finished(monitor, &MonitorPage::runFinished);
        monitor->openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(
            shard::test::lastEventStep(monitor->run().events, "checkpoint") > 0, 120000);
        QVERIFY(!monitor->finished());
        launcher.kill(); // SIGKILL: the ranks die with it (PR_SET_PDEATHSIG), nothing is logged
        QVERIFY(launcher.waitForFinished(10000));

        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 30000);
        QCOMPARE(finished.count(), 1);
        QCOMPARE(finished.first().first().toString(), QString("interrupted"));
        QVERIFY2(
            monitor->messageText().contains("ended early"), qPrintable(monitor->messageText()));
        QTRY_VERIFY_WITH_TIMEOUT(monitor->canResume(), 30000);

        // Shorten the run to three steps past its latest complete checkpoint, then resume.
        const auto latest = shard::protocol::latestCompleteCheckpoint(run.toStdString());
        QVERIFY(latest);
        const QString name = QFileInfo(QString::fromStdString(latest->dir)).fileName();
        QVERIFY2(name.startsWith("step-"), qPrintable(name));
        const int saved = name.mid(5).toInt();
        QVERIFY(saved >= 3);
        QFile spec(run + "/run.json");
        QVERIFY(spec.open(QIODevice::ReadOnly));
        auto j = nlohmann::json::parse(spec.readAll().toStdString());
        spec.close();
        j["steps"] = saved + 3;
        QVERIFY(spec.open(QIODevice::WriteOnly | QIODevice::Truncate));
        spec.write(QByteArray::fromStdString(j.dump(2)));
        spec.close();

        QSignalSpy done(monitor, &MonitorPage::resumeDone);
        QTest::mouseClick(monitor->findChild<QPushButton*>("resumeButton"), Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 30000);
        QCOMPARE(done.first().first().toString(), QString());
        QTRY_VERIFY_WITH_TIMEOUT(!monitor->run().step.empty()
                && monitor->run().step.back() == double(saved + 3) && monitor->finished(),
            120000);
        // The resumed part starts right after the checkpoint.
        const auto& steps = monitor->run().step;
        QCOMPARE(steps[steps.size() - 3], double(saved + 1));
        QVERIFY2(
            !monitor->messageText().contains("ended early"), qPrintable(monitor->messageText()));
    }

    // Runs page ▸ Continue: a completed run trains N more steps from its latest checkpoint in
    // the same record, and the Monitor follows it there. Its learning rate after the checkpoint
    // is what the dialog chose (issue 27, item 5): first the finished schedule kept (constant at
    // its end value), then warm-up restarted.
    void continueForMoreSteps()
    {
        const QString worker = findWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker with `launch` and `train` in this build");
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        const QString setUp = shard::test::setUpTinyTask(tmp.path(), worker, 100);
        QVERIFY2(setUp.isEmpty(), qPrintable(setUp));
        const QString run = tmp.filePath("to-continue");
        const QString trained = shard::test::trainTinyRun(worker, tmp.path(), run,
            {"--steps", "4", "--seq-len", "32", "--micro-batch", "2", "--checkpoint-every", "2",
                "--lr", "1e-3", "--warmup", "2", "--min-lr-ratio", "0.1", "--name", "to-continue"});
        QVERIFY2(trained.isEmpty(), qPrintable(trained));

        MainWindow window(tmp.filePath("store.sqlite"));
        window.show();
        RunsPage* runs = window.runsPage();
        QSignalSpy imported(window.store(), &shard::jobs::RunService::runAttached);
        window.store()->attachRunDirectory(run);
        QTRY_COMPARE_WITH_TIMEOUT(imported.count(), 1, 20000);
        const qint64 id = imported.first().at(1).toLongLong();
        QVERIFY2(id > 0, qPrintable(imported.first().at(2).toString()));
        runs->continueRun(id, 2, shard::jobs::ContinueSchedule::Keep);
        MonitorPage* monitor = window.monitorPage();
        QTRY_VERIFY2_WITH_TIMEOUT(
            runs->messageText().contains("continues"), qPrintable(runs->messageText()), 30000);
        QTRY_COMPARE_WITH_TIMEOUT(monitor->storeRunId(), id, 20000);
        QTRY_VERIFY_WITH_TIMEOUT(
            !monitor->run().step.empty() && monitor->run().step.back() == 6.0, 120000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
        // Once the run has ended again, "continues" is no longer true and goes.
        QTRY_VERIFY2_WITH_TIMEOUT(
            !runs->messageText().contains("continues"), qPrintable(runs->messageText()), 30000);
        auto lrAt = [monitor](double step) {
            const auto& s = monitor->run().step;
            const auto at = std::find(s.begin(), s.end(), step);
            return at == s.end() ? -1.0 : monitor->run().lr[at - s.begin()];
        };
        QCOMPARE(lrAt(4), 1e-4); // the cosine's end: 0.1 of 1e-3
        QCOMPARE(lrAt(5), 1e-4);
        QCOMPARE(lrAt(6), 1e-4);

        // Then 2 more with warm-up restarted at the step-6 checkpoint: half, then all of 1e-3.
        runs->continueRun(id, 2, shard::jobs::ContinueSchedule::Restart);
        QTRY_VERIFY_WITH_TIMEOUT(
            !monitor->run().step.empty() && monitor->run().step.back() == 8.0, 120000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
        QCOMPARE(lrAt(7), 5e-4);
        QCOMPARE(lrAt(8), 1e-3);
    }
};

QTEST_MAIN(TstMonitorResume)
#include "tst_monitor_resume.moc"
