// Runs page over a real SQLite store with 1,000 runs: listing arrives from the store thread
// without blocking the UI, sorting is numeric, filtering narrows the rows, and a store that
// cannot be opened gives a message.
#include <QtTest>

#include <QDir>
#include <QPushButton>
#include <QTableView>
#include <QTemporaryDir>

#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "widgets/run_table_model.h"
#include "widgets/runs_page.h"

using namespace shard::widgets;
namespace jobs = shard::jobs;

class TstRunsPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void thousandRuns()
    {
        QTemporaryDir tmp;
        const QString path = tmp.filePath("runs.sqlite");
        {
            auto store = jobs::RunStore::open(path);
            QVERIFY2(store, qPrintable(store.error()));
            for (int i = 0; i < 1000; ++i) {
                jobs::NewRun nr;
                nr.name = QString("run-%1").arg(i, 4, 10, QChar('0'));
                nr.specJson = QByteArray::fromStdString(nlohmann::json {
                    {"model", i % 3 ? "tiny-1m" : "tiny-15m"},
                    {"strategy", i % 2 ? "zero3" : "ddp"}, {"procs_per_node", 1 + i % 4},
                    {"steps", 10}}.dump());
                nr.runDir = tmp.filePath(nr.name);
                auto id = store->createRun(nr);
                QVERIFY2(id, qPrintable(id.error()));
                if (i < 50) {
                    shard::protocol::MetricRecord r;
                    r.step = 1;
                    r.loss = 10.0 - i * 0.1;
                    auto ok = store->appendMetrics(*id, {r}, 100);
                    QVERIFY2(ok, qPrintable(ok.error()));
                }
            }
        }
        RunsPage page;
        page.resize(1200, 700);
        page.show();
        shard::jobs::RunService service(path);
        QSignalSpy refreshed(&page, &RunsPage::refreshed);
        QElapsedTimer t;
        t.start();
        page.setStore(&service);
        // setStore returns before the listing: it comes from the store's thread, later.
        QCOMPARE(refreshed.count(), 0);
        QCOMPARE(page.visibleRowCount(), 0);
        QTRY_COMPARE_WITH_TIMEOUT(refreshed.count(), 1, 30000);
        qInfo("1000 runs listed and shown in %lld ms", qint64(t.elapsed()));
        QCOMPARE(refreshed.first().first().toInt(), 1000);
        QCOMPARE(page.visibleRowCount(), 1000);

        // Filter narrows by any column; sort is numeric on loss.
        page.setFilterText("tiny-15m");
        QCOMPARE(page.visibleRowCount(), 334);
        page.setFilterText("");
        page.view()->sortByColumn(RunTableModel::BestLoss, Qt::AscendingOrder);
        const QModelIndex first = page.view()->model()->index(0, RunTableModel::BestLoss);
        QCOMPARE(first.data().toString(), QString("5.1000"));
        page.selectRows({0, 1});
        QCOMPARE(page.selectedRunIds().size(), 2);
        QSignalSpy compare(&page, &RunsPage::compareRequested);
        for (auto* b : page.findChildren<QPushButton*>())
            if (b->text().contains("Compare"))
                b->click();
        QCOMPARE(compare.count(), 1);
        QCOMPARE(compare.first().first().value<QVector<qint64>>().size(), 2);
    }

    // Rename, notes, and delete (record and folder; refused while the run is live), with the id,
    // message and notes columns.
    void renameNotesAndDelete()
    {
        QTemporaryDir tmp;
        const QString path = tmp.filePath("runs.sqlite");
        qint64 done = 0, live = 0;
        const QString folder = tmp.filePath("finished-run");
        QVERIFY(QDir().mkpath(folder + "/logs"));
        {
            auto store = jobs::RunStore::open(path);
            jobs::NewRun a;
            a.name = "finished";
            a.runDir = folder;
            done = *store->createRun(a);
            QVERIFY(store->setStatus(done, jobs::RunStatus::Failed, "rank 1 exited with code 1"));
            // Queued and not started yet: live (the store's reconciliation leaves it be).
            jobs::NewRun b;
            b.name = "about to start";
            b.runDir = tmp.filePath("live-run");
            b.status = jobs::RunStatus::Queued;
            live = *store->createRun(b);
        }
        RunsPage page;
        page.show();
        shard::jobs::RunService service(path);
        QSignalSpy refreshed(&page, &RunsPage::refreshed);
        page.setStore(&service);
        QTRY_VERIFY_WITH_TIMEOUT(refreshed.count() > 0, 30000);
        auto rowOf = [&](qint64 id) {
            for (int r = 0; r < page.model()->rowCount(); ++r)
                if (page.model()->runAt(r)->id == id)
                    return r;
            return -1;
        };
        auto cell = [&](qint64 id, int column) {
            return page.model()
                ->data(page.model()->index(rowOf(id), column), Qt::DisplayRole)
                .toString();
        };
        QCOMPARE(cell(done, RunTableModel::Id), QString::number(done));
        QCOMPARE(cell(done, RunTableModel::Message), QString("rank 1 exited with code 1"));

        page.renameRun(done, "lr 3e-4 baseline");
        page.setNotes(done, "diverged at step 40");
        QTRY_VERIFY_WITH_TIMEOUT(cell(done, RunTableModel::Name) == "lr 3e-4 baseline"
                && cell(done, RunTableModel::Notes) == "diverged at step 40",
            10000);

        // A live run is not deleted: it must be stopped first.
        page.deleteRuns({live}, true);
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("stop it"), 30000);
        QVERIFY(rowOf(live) >= 0);
        // A finished one goes, with its folder when asked.
        page.deleteRuns({done}, true);
        QTRY_VERIFY_WITH_TIMEOUT(rowOf(done) < 0, 30000);
        QVERIFY(!QDir(folder).exists());
        auto store = jobs::RunStore::open(path, jobs::OpenMode::ReadOnly);
        QVERIFY(!store->run(done));
        QVERIFY(store->run(live));
    }

    void unopenableStoreShowsMessage()
    {
        QTemporaryDir tmp;
        // A folder where the store file should be.
        const QString path = tmp.filePath("store-is-a-folder");
        QVERIFY(QDir().mkpath(path));
        RunsPage page;
        page.show();
        shard::jobs::RunService service(path);
        QSignalSpy failed(&service, &shard::jobs::RunService::openFailed);
        page.setStore(&service);
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 30000);
        QTRY_VERIFY(!page.messageText().isEmpty());
        QVERIFY2(page.messageText().contains(path), qPrintable(page.messageText()));
    }
};

QTEST_MAIN(TstRunsPage)
#include "tst_runs_page.moc"
