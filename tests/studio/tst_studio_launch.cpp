// End to end through the window: a tiny local run started from the Launch page (the real
// shard-worker launching the real engine, recorded in a real store) shows its points arriving on
// the Monitor page while it trains, then appears in the Runs table with its summary.
#include <QtTest>

#include <QFile>
#include <QLineEdit>
#include <QProcess>
#include <QSpinBox>
#include <QTemporaryDir>

#include "widgets/launch_page.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"
#include "widgets/run_table_model.h"
#include "widgets/runs_page.h"

using namespace shard::widgets;

namespace {

// The worker of this build tree, or $SHARD_WORKER; it must have both `launch` and `train`.
QString findWorker()
{
    QString w = qEnvironmentVariable("SHARD_WORKER");
    if (w.isEmpty())
        w = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");
    if (!QFileInfo(w).isExecutable())
        return {};
    QProcess p;
    p.start(w, {"--help"});
    if (!p.waitForFinished(20000))
        return {};
    const QByteArray help = p.readAllStandardOutput();
    return help.contains(" launch") && help.contains(" train") ? w : QString();
}

} // namespace

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
        qputenv("SHARD_WORKER", worker.toUtf8());
        QCoreApplication::setOrganizationName("ShardStudioTest");
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, tmp.filePath("settings"));

        // A tiny model with seeded weights and a learnable copy task, pre-tokenized.
        QProcess init;
        init.start(worker,
            {"init-model", "--preset", "tiny-1m", "--out", tmp.filePath("model"), "--seed", "1"});
        QVERIFY(init.waitForFinished(60000));
        QVERIFY2(init.exitCode() == 0, init.readAllStandardError().constData());
        QFile data(tmp.filePath("copy.jsonl"));
        QVERIFY(data.open(QIODevice::WriteOnly));
        uint32_t rng = 7;
        for (int i = 0; i < 400; ++i) {
            QStringList ids;
            QStringList half;
            for (int k = 0; k < 12; ++k) {
                rng = rng * 1664525u + 1013904223u;
                half << QString::number(10 + (rng >> 16) % 100);
            }
            ids << "1" << half << "2" << half;
            data.write("{\"input_ids\": [" + ids.join(", ").toUtf8() + "]}\n");
        }
        data.close();

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
        QTRY_VERIFY(!launch->commandPreview().contains("Not ready"));
        QVERIFY(launch->commandPreview().contains(worker));

        MonitorPage* monitor = window.monitorPage();
        QSignalSpy arrived(monitor, &MonitorPage::pointsArrived);
        QSignalSpy launched(launch, &LaunchPage::launched);
        launch->start();
        QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 20000);
        // The window follows the new run on the Monitor page.
        QCOMPARE(window.currentPage(), Page::Monitor);
        QCOMPARE(QDir(monitor->runDirectory()).absolutePath(),
            QDir(tmp.filePath("runs/studio-e2e")).absolutePath());
        QTRY_VERIFY_WITH_TIMEOUT(monitor->pointCount() > 0, 120000);
        const bool stillRunning = !monitor->finished();
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 240000);
        QVERIFY2(monitor->messageText().isEmpty(), qPrintable(monitor->messageText()));
        QCOMPARE(monitor->pointCount(), 15);
        // Points came in more than one batch while the run trained, unless it was very fast.
        if (stillRunning)
            QVERIFY(arrived.count() >= 2);
        const auto& loss = monitor->run().loss;
        QVERIFY(loss.back() < loss.front());

        // The run is recorded: the Runs page lists it with its final loss.
        RunsPage* runs = window.runsPage();
        QTRY_VERIFY_WITH_TIMEOUT(
            [&] {
                runs->refresh();
                QTest::qWait(200);
                const auto* r = runs->model()->runAt(0);
                return r && r->status == shard::jobs::RunStatus::Finished && r->finalLoss;
            }(),
            30000);
        QCOMPARE(runs->model()->runAt(0)->name, QString("studio-e2e"));
    }
};

QTEST_MAIN(TstStudioLaunch)
#include "tst_studio_launch.moc"
