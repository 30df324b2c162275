// One local run reaching the Monitor both ways: launched by the studio (followed by its store id)
// and, while it runs, opened again as a folder from the menu (attached: the same record). Each
// metric point the process writes is read into the store once and shown once, in order, and the
// run ends as finished in both the store and the page.
#include <QtTest>

#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>

#include "jobs/launch_request.h"
#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "widgets/live_plot.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"

#include "../jobs/jobs_test_util.h"
#include "studio_test_util.h"

using namespace shard::widgets;

class TstMonitorFollow : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        shard::test::isolateSettings(m_tmp.path());
    }

    void runOpenedBothWaysIsReadAndShownOnce()
    {
        const int steps = 120;
        const QString runDir = m_tmp.filePath("both-ways");
        MainWindow window(m_tmp.filePath("store.sqlite"));
        window.show();
        MonitorPage* monitor = window.monitorPage();

        // Launched by the studio: the window follows it by the id the store gave it.
        shard::jobs::LaunchRequest request
            = shard::test::fakeRunRequest("both-ways", runDir, steps, 0.05);
        // The run holds before step 20 until the test lets it go: it is still writing when the
        // folder is opened, however slow the machine.
        const QString hold = m_tmp.filePath("both-ways-go");
        request.env << "FAKE_HOLD_AT=20"
                    << "FAKE_HOLD_FILE=" + hold;
        QSignalSpy launched(window.store(), &shard::jobs::RunService::launched);
        window.store()->launch(request);
        QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 20000);
        const qint64 id = launched.first().first().toLongLong();
        QTRY_COMPARE_WITH_TIMEOUT(monitor->storeRunId(), id, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->pointCount() >= 10, 30000);
        QVERIFY(!monitor->finished());

        // Opened again as a folder while it writes: attached to the same record, not a second
        // one, and followed from its start again.
        window.monitorRun(runDir);
        QCOMPARE(monitor->storeRunId(), qint64(0)); // attaching
        QTRY_COMPARE_WITH_TIMEOUT(monitor->storeRunId(), id, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->pointCount() >= 10, 30000);
        QVERIFY(!monitor->finished());
        QFile go(hold);
        QVERIFY(go.open(QIODevice::WriteOnly));
        go.close();
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
        QTRY_COMPARE_WITH_TIMEOUT(monitor->pointCount(), steps, 30000);

        // Shown once: the page's points and the loss chart's raw line are steps 1..N, in order.
        const shard::jobs::RunSeries& shown = monitor->run();
        const shard::widgets::SeriesBuffer& line = monitor->lossPlot()->series(0);
        QCOMPARE(int(line.size()), steps);
        for (int i = 0; i < steps; ++i) {
            QCOMPARE(shown.step[i], double(i + 1));
            QCOMPARE(line.keys()[i], double(i + 1));
        }

        // Read once: the store holds one record of the folder with each line of metrics.jsonl.
        QCOMPARE(shard::test::countLines(runDir + "/metrics.jsonl"), steps);
        auto store = shard::jobs::RunStore::open(m_tmp.filePath("store.sqlite"));
        QVERIFY(store);
        QCOMPARE(store->metricCount(id).valueOr(0), qint64(steps));
        QCOMPARE(store->findRunByDir(QString(), runDir).valueOr(0), id);
        shard::jobs::RunQuery all;
        QCOMPARE(store->listRuns(all)->size(), 1);
        QCOMPARE(shard::jobs::toString(store->run(id)->status), QString("finished"));
    }

private:
    QTemporaryDir m_tmp;
};

QTEST_MAIN(TstMonitorFollow)
#include "tst_monitor_follow.moc"
