// End to end through the window: a tiny local run started from the Launch page (the real
// shard-worker launching the real engine, recorded in a real store) shows its points arriving on
// the Monitor page while it trains, then appears in the Runs table with its summary.
#include <QtTest>

#include <QFile>
#include <QLineEdit>
#include <QProcess>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTreeWidget>

#include "widgets/launch_page.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"
#include "widgets/run_table_model.h"
#include "widgets/runs_page.h"

#include "studio_test_util.h"

using namespace shard::widgets;
using shard::test::findWorker;

class TstStudioLaunch : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void launchFromLaunchPageShowsPointsOnMonitor()
    {
        const QString worker = findWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker with `launch` and `train` in this build (configure with "
                  "SHARD_BUILD_ENGINE=ON or set SHARD_WORKER)");
        QTemporaryDir tmp;
        // A tiny model with seeded weights and a learnable copy task, pre-tokenized.
        const QString setUp = shard::test::setUpTinyTask(tmp.path(), worker, 400);
        QVERIFY2(setUp.isEmpty(), qPrintable(setUp));

        MainWindow window(tmp.filePath("store.sqlite"));
        window.resize(1280, 800);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        LaunchPage* launch = window.launchPage();
        window.showPage(Page::Launch);
        launch->setModelFolder(tmp.filePath("model"));
        launch->setDataFiles({tmp.filePath("copy.jsonl")});
        launch->setRunsRoot(tmp.filePath("runs"));
        launch->setRunName("studio-e2e");
        launch->setSteps(15);
        launch->findChild<QSpinBox*>("seqLen")->setValue(32);
        launch->findChild<QSpinBox*>("microBatch")->setValue(4);
        launch->findChild<QLineEdit*>("lr")->setText("3e-3");
        // Sample prompts typed on the Launch page come back as the run's samples.
        {
            QFile prompts(tmp.filePath("prompts.txt"));
            QVERIFY(prompts.open(QIODevice::WriteOnly));
            prompts.write("abc\n");
        }
        launch->findChild<QLineEdit*>("samplePrompts")->setText(tmp.filePath("prompts.txt"));
        launch->findChild<QSpinBox*>("sampleEvery")->setValue(10);
        QTRY_VERIFY(!launch->commandPreview().contains("Not ready"));
        QVERIFY(launch->commandPreview().contains(worker));

        MonitorPage* monitor = window.monitorPage();
        QSignalSpy arrived(monitor, &MonitorPage::pointsArrived);
        QSignalSpy launched(launch, &LaunchPage::launched);
        launch->start();
        QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 20000);
        // The window follows the new run on the Monitor page. Its folder is known once the
        // store's first update has come back, which a loaded machine delays: waited for.
        QTRY_COMPARE_WITH_TIMEOUT(window.currentPage(), Page::Monitor, 30000);
        QCOMPARE(monitor->storeRunId(), launched.first().first().toLongLong());
        QTRY_COMPARE_WITH_TIMEOUT(QDir(monitor->runDirectory()).absolutePath(),
            QDir(tmp.filePath("runs/studio-e2e")).absolutePath(), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->pointCount() > 0, 120000);
        // Still training when the first points arrived: more batches follow (at least the one
        // that brings the rest), unless every point came in that first batch.
        const bool morePointsToCome = monitor->pointCount() < 15;
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 240000);
        QVERIFY2(monitor->messageText().isEmpty(), qPrintable(monitor->messageText()));
        QCOMPARE(monitor->pointCount(), 15);
        if (morePointsToCome)
            QVERIFY(arrived.count() >= 2);
        const auto& loss = monitor->run().loss;
        QVERIFY(loss.back() < loss.front());
        // At step 10 and at the end (15), each with its prompt.
        auto* samples = monitor->findChild<QTreeWidget*>("samples");
        QTRY_COMPARE_WITH_TIMEOUT(samples->topLevelItemCount(), 2, 30000);
        QCOMPARE(samples->topLevelItem(0)->text(1), QString("abc"));

        // The run is recorded: the Runs page lists it with its final loss.
        RunsPage* runs = window.runsPage();
        // A listing comes back from the store's thread: another is asked for only once the
        // previous one has arrived.
        QSignalSpy refreshed(runs, &RunsPage::refreshed);
        bool asked = false;
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                const auto* r = runs->model()->runAt(0);
                if (r && r->status == shard::jobs::RunStatus::Finished && r->finalLoss)
                    return true;
                if (!asked || refreshed.count() > 0) {
                    refreshed.clear();
                    runs->refresh();
                    asked = true;
                }
                return false;
            }(),
            60000);
        QCOMPARE(runs->model()->runAt(0)->name, QString("studio-e2e"));
    }
};

QTEST_MAIN(TstStudioLaunch)
#include "tst_studio_launch.moc"
