// Runs page over a real SQLite store with 1,000 runs: listing arrives from the store thread
// without blocking the UI, sorting is numeric, filtering narrows the rows, and a store that
// cannot be opened gives a message.
#include <QComboBox>
#include <QDialog>
#include <QLineEdit>
#include <QProgressBar>
#include <QRadioButton>
#include <QSpinBox>
#include <QtTest>

#include <QApplication>
#include <QDir>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QTableView>
#include <QTemporaryDir>
#include <QTimer>

#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "tbio/event_writer.h"
#include "widgets/export_dialog.h"
#include "widgets/import_dialog.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"
#include "widgets/run_table_model.h"
#include "widgets/runs_page.h"

#include "studio_test_util.h"

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

        auto* hint = page.findChild<QLabel*>("emptyHint");
        QVERIFY(hint && !hint->isVisibleTo(&page));
        // Filter narrows by any column; sort is numeric on loss.
        page.setFilterText("no such run");
        QVERIFY(hint->isVisibleTo(&page));
        QVERIFY2(hint->text().contains("No run matches"), qPrintable(hint->text()));
        page.setFilterText("tiny-15m");
        QVERIFY(!hint->isVisibleTo(&page));
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
            a.specJson = R"({"strategy":"zero3","tensor_parallel":2,"sequence_parallel":true,
                "pipeline_parallel":2})";
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
        QCOMPARE(cell(done, RunTableModel::Strategy), QString("zero3"));
        QCOMPARE(cell(done, RunTableModel::Layout), QString("TP2+SP x PP2"));
        QCOMPARE(cell(live, RunTableModel::Layout), QString()); // data parallel only
        QCOMPARE(page.model()
                     ->headerData(RunTableModel::Layout, Qt::Horizontal, Qt::DisplayRole)
                     .toString(),
            QString("Layout"));

        // The edited run stays selected when the rows come back.
        auto viewRowOf = [&](qint64 id) {
            for (int r = 0; r < page.visibleRowCount(); ++r)
                if (page.view()->model()->index(r, 0).data(RunTableModel::kIdRole).toLongLong()
                    == id)
                    return r;
            return -1;
        };
        page.selectRows({viewRowOf(done)});
        QCOMPARE(page.selectedRunIds(), QVector<qint64> {done});
        page.renameRun(done, "lr 3e-4 baseline");
        page.setNotes(done, "diverged at step 40\nlr too high?");
        // Every line of the notes, on one row.
        QTRY_VERIFY_WITH_TIMEOUT(cell(done, RunTableModel::Name) == "lr 3e-4 baseline"
                && cell(done, RunTableModel::Notes) == "diverged at step 40 ⏎ lr too high?",
            30000);
        QCOMPARE(page.selectedRunIds(), QVector<qint64> {done});
        QCOMPARE(page.model()
                     ->data(page.model()->index(rowOf(done), RunTableModel::Notes), Qt::ToolTipRole)
                     .toString(),
            QString("diverged at step 40\nlr too high?"));

        // Another run's name is refused, and the name stays.
        page.renameRun(live, "lr 3e-4 baseline");
        QVERIFY2(page.messageText().contains("already called"), qPrintable(page.messageText()));
        QCOMPARE(cell(live, RunTableModel::Name), QString("about to start"));

        // A run recorded by another process (`shard run`) is listed without a Refresh.
        qint64 fromCli = 0;
        {
            auto other = jobs::RunStore::open(path);
            jobs::NewRun c;
            c.name = "from the CLI";
            c.runDir = tmp.filePath("cli-run");
            fromCli = *other->createRun(c);
        }
        QTRY_VERIFY_WITH_TIMEOUT(rowOf(fromCli) >= 0, 30000);
        QCOMPARE(page.selectedRunIds(), QVector<qint64> {done});

        // A live run is not deleted: it must be stopped first.
        page.deleteRuns({live}, true);
        QTRY_VERIFY_WITH_TIMEOUT(page.messageText().contains("stop it"), 30000);
        QVERIFY(rowOf(live) >= 0);
        // Delete asks about each run by id, name and status.
        const QString both = page.deleteQuestion({done, live});
        QVERIFY2(both.contains("these 2 runs"), qPrintable(both));
        QVERIFY2(both.contains(QString("run %1 “lr 3e-4 baseline” (failed").arg(done)),
            qPrintable(both));
        QVERIFY2(
            both.contains(QString("run %1 “about to start” (queued").arg(live)), qPrintable(both));
        // A finished one goes, with its folder when asked.
        page.deleteRuns({done}, true);
        QTRY_VERIFY_WITH_TIMEOUT(rowOf(done) < 0, 30000);
        QVERIFY(!QDir(folder).exists());
        auto store = jobs::RunStore::open(path, jobs::OpenMode::ReadOnly);
        QVERIFY(!store->run(done));
        QVERIFY(store->run(live));
    }

    // Delete from the window: the confirmation names the run it deletes; the Monitor, which
    // showed that run, lets it go, and nothing complains afterwards that the run is missing.
    void deleteNamesTheRunAndTheMonitorLetsItGo()
    {
        QTemporaryDir tmp;
        shard::test::isolateSettings(tmp.filePath("settings"));
        const QString path = tmp.filePath("runs.sqlite");
        qint64 keep = 0, doomed = 0;
        {
            auto store = jobs::RunStore::open(path);
            jobs::NewRun a;
            a.name = "keep me";
            a.runDir = tmp.filePath("keep");
            keep = *store->createRun(a);
            jobs::NewRun b;
            b.name = "delete me";
            b.runDir = tmp.filePath("doomed");
            doomed = *store->createRun(b);
            for (qint64 id : {keep, doomed})
                QVERIFY(store->setStatus(id, jobs::RunStatus::Finished));
        }
        MainWindow window(path);
        window.show();
        RunsPage* runs = window.runsPage();
        MonitorPage* monitor = window.monitorPage();
        QTRY_COMPARE_WITH_TIMEOUT(runs->visibleRowCount(), 2, 30000);
        window.monitorRun(QString::number(doomed));
        QTRY_VERIFY_WITH_TIMEOUT(
            monitor->finished() && monitor->runDirectory() == tmp.filePath("doomed"), 30000);

        window.showPage(Page::Runs);
        int row = -1;
        for (int r = 0; r < runs->visibleRowCount(); ++r)
            if (runs->view()->model()->index(r, 0).data(RunTableModel::kIdRole).toLongLong()
                == doomed)
                row = r;
        QVERIFY(row >= 0);
        runs->selectRows({row});
        QSignalSpy errors(window.store(), &jobs::RunService::errorOccurred);
        QSignalSpy deleted(window.store(), &jobs::RunService::runDeleted);
        // The test answers the confirmation: it reads the question, then presses Delete.
        QString asked;
        QTimer answer;
        answer.setInterval(20);
        connect(&answer, &QTimer::timeout, this, [&] {
            for (QWidget* w : QApplication::topLevelWidgets())
                if (auto* box = qobject_cast<QMessageBox*>(w);
                    box && box->isVisible() && box->objectName() == "deleteConfirmation") {
                    answer.stop();
                    asked = box->text();
                    for (QAbstractButton* b : box->buttons())
                        if (box->buttonRole(b) == QMessageBox::DestructiveRole)
                            b->click();
                }
        });
        answer.start();
        QPushButton* del = nullptr;
        for (auto* b : runs->findChildren<QPushButton*>())
            if (b->text().contains("Delete"))
                del = b;
        QVERIFY(del);
        del->click(); // returns when the confirmation is answered
        QVERIFY2(
            asked.contains(QString("run %1 “delete me” (finished").arg(doomed)), qPrintable(asked));
        QVERIFY2(!asked.contains("keep me"), qPrintable(asked));
        QTRY_COMPARE_WITH_TIMEOUT(deleted.count(), 1, 30000);
        QCOMPARE(deleted.first().first().toLongLong(), doomed);

        // The Monitor no longer shows it, and says why.
        QTRY_COMPARE_WITH_TIMEOUT(monitor->storeRunId(), qint64(0), 30000);
        QVERIFY2(
            monitor->messageText().contains("was deleted"), qPrintable(monitor->messageText()));
        QVERIFY(monitor->runDirectory().isEmpty());
        QCOMPARE(monitor->pointCount(), 0);
        QVERIFY(!monitor->finished());
        // Nothing asked the store about the deleted run: no error, no red "no run with id" on
        // the Runs page (an error would have reached the window before the deletion did).
        QTRY_COMPARE_WITH_TIMEOUT(runs->visibleRowCount(), 1, 30000);
        QVERIFY2(errors.isEmpty(),
            qPrintable(errors.isEmpty() ? QString() : errors.first().first().toString()));
        QVERIFY2(!runs->messageText().contains("no run with id"), qPrintable(runs->messageText()));
        Q_UNUSED(keep);
    }

    // Continue says that a decaying schedule is stretched to the new length (the learning rate
    // rises again after the checkpoint); a constant one is not mentioned.
    void continueSaysTheScheduleIsStretched()
    {
        QTemporaryDir tmp;
        const QString path = tmp.filePath("runs.sqlite");
        qint64 cosine = 0, constant = 0;
        {
            auto store = jobs::RunStore::open(path);
            jobs::NewRun a;
            a.name = "cosine";
            a.specJson = R"({"schedule":"cosine","steps":300,"lr":0.0003,"warmup":10,)"
                         R"("min_lr_ratio":0.1})";
            cosine = *store->createRun(a);
            jobs::NewRun b;
            b.name = "constant";
            b.specJson = R"({"schedule":"constant","steps":300})";
            constant = *store->createRun(b);
        }
        RunsPage page;
        shard::jobs::RunService service(path);
        QSignalSpy refreshed(&page, &RunsPage::refreshed);
        page.setStore(&service);
        QTRY_COMPARE_WITH_TIMEOUT(refreshed.count(), 1, 30000);
        const QString asked = page.continueQuestion(cosine);
        QVERIFY2(asked.contains("cosine learning-rate schedule decayed over 300 steps to 3e-05"),
            qPrintable(asked));
        // The three things the engine can do after the checkpoint (issue 27, item 5), stretch
        // (what it did before) first.
        QDialog* dialog = page.continueDialog(cosine);
        auto* stretch = dialog->findChild<QRadioButton*>("scheduleStretch");
        auto* keep = dialog->findChild<QRadioButton*>("scheduleKeep");
        auto* restart = dialog->findChild<QRadioButton*>("scheduleRestart");
        QVERIFY(stretch && keep && restart);
        QVERIFY(stretch->isChecked() && stretch->text().contains("rises again"));
        QVERIFY2(keep->isEnabled() && keep->text().contains("constant at its end value (3e-05)"),
            qPrintable(keep->text()));
        QVERIFY2(restart->text().contains("warm-up (10 steps)"), qPrintable(restart->text()));
        QVERIFY(dialog->findChild<QSpinBox*>("moreSteps"));
        delete dialog;
        const QString plain = page.continueQuestion(constant);
        QVERIFY2(plain.contains("more steps") && !plain.contains("decayed"), qPrintable(plain));
        dialog = page.continueDialog(constant);
        QVERIFY(!dialog->findChild<QRadioButton*>("scheduleKeep")); // nothing to choose
        delete dialog;
    }

    // Import logs…: where the logs are (this machine, an SSH host, a Slurm cluster here or
    // through its login node) makes the path importRuns gets; a path or job id that cannot work
    // keeps Import disabled with the reason; importing a folder of event files records its run
    // and says so; a job id Slurm does not know is said, the run kept.
    void importDialogImportsLogs()
    {
        QTemporaryDir tmp;
        RunsPage page;
        page.show();
        shard::jobs::RunService service(tmp.filePath("import.sqlite"));
        QSignalSpy refreshed(&page, &RunsPage::refreshed);
        page.setStore(&service);
        QTRY_COMPARE_WITH_TIMEOUT(refreshed.count(), 1, 30000);
        HostEntry ssh;
        ssh.name = "gpu box";
        ssh.address = "node0";
        ssh.user = "me";
        ssh.port = 2222;
        HostEntry localSlurm;
        localSlurm.name = "here";
        localSlurm.kind = "slurm";
        HostEntry cluster;
        cluster.name = "cluster";
        cluster.kind = "slurm";
        cluster.address = "login";
        page.setHosts({ssh, localSlurm, cluster});

        auto* dialog = qobject_cast<ImportDialog*>(page.importDialog());
        QVERIFY(dialog);
        auto* where = dialog->findChild<QComboBox*>("importWhere");
        QCOMPARE(where->count(), 4);
        QCOMPARE(where->itemText(1), QString("SSH: gpu box"));
        QCOMPARE(where->itemText(3), QString("Slurm: cluster"));
        auto importEnabled = [dialog] {
            for (auto* b : dialog->findChildren<QPushButton*>())
                if (b->text() == "&Import")
                    return b->isEnabled();
            return false;
        };
        QVERIFY(!importEnabled());
        QVERIFY(dialog->problem().contains("Give the folder"));
        dialog->setWhere(1);
        dialog->setPath("runs/hf");
        QVERIFY(!importEnabled());
        QVERIFY2(dialog->problem().contains("from / or from ~/"), qPrintable(dialog->problem()));
        dialog->setPath("/scratch/runs/hf");
        QVERIFY(importEnabled());
        QCOMPARE(dialog->importPath(), QString("me@node0:2222:/scratch/runs/hf"));
        dialog->setWhere(3);
        QCOMPARE(dialog->importPath(), QString("login:/scratch/runs/hf"));
        dialog->setSlurmJob("123x");
        QVERIFY(!importEnabled());
        QVERIFY2(dialog->problem().contains("not a Slurm job id"), qPrintable(dialog->problem()));
        dialog->setSlurmJob("4242_7");
        QVERIFY(importEnabled());
        auto* preview = dialog->findChild<QLabel*>("importPreview");
        QVERIFY2(
            preview->text().contains("over ssh") && preview->text().contains("Slurm job 4242_7"),
            qPrintable(preview->text()));
        dialog->setWhere(2); // a Slurm cluster on this machine: a path here
        QCOMPARE(dialog->importPath(), QString("/scratch/runs/hf"));
        dialog->reject();

        // A folder of event files on this machine.
        const QString logs = tmp.filePath("tb/run-a");
        {
            QDir().mkpath(logs);
            shard::tbio::EventFileWriter w(logs.toStdString());
            for (int step = 1; step <= 5; ++step)
                w.write(1000 + step, step, {{"train/loss", 3.0f - 0.1f * step}});
        }
        dialog = qobject_cast<ImportDialog*>(page.importDialog());
        dialog->setPath(tmp.filePath("tb"));
        dialog->accept();
        QTRY_COMPARE_WITH_TIMEOUT(page.visibleRowCount(), 1, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(
            page.messageText().contains("Imported " + tmp.filePath("tb")), 30000);
        QCOMPARE(page.model()->runAt(0)->lastStep, qint64(5));
        // Its source: the tool, and on hover where its files are.
        const QModelIndex source = page.model()->index(0, RunTableModel::Source);
        QCOMPARE(source.data().toString(), QString("imported: Shard Studio")); // its writer
        QVERIFY2(source.data(Qt::ToolTipRole).toString().startsWith("Imported from " + logs),
            qPrintable(source.data(Qt::ToolTipRole).toString()));
        page.setFilterText("imported");
        QCOMPARE(page.visibleRowCount(), 1);
        page.setFilterText("");

        // A job Slurm does not know (or no Slurm here): said; the run stays imported, untied.
        page.importLogs(tmp.filePath("tb"), "999999999");
        QTRY_VERIFY_WITH_TIMEOUT(
            page.messageText().contains("not tied to Slurm job 999999999"), 60000);
        QCOMPARE(page.visibleRowCount(), 1);
        QVERIFY(page.model()->runAt(0)->jobId.isEmpty());
    }

    // An empty store: the page says where runs come from instead of showing an empty grid.
    void emptyStoreSaysWhereToStart()
    {
        QTemporaryDir tmp;
        RunsPage page;
        page.show();
        shard::jobs::RunService service(tmp.filePath("empty.sqlite"));
        QSignalSpy refreshed(&page, &RunsPage::refreshed);
        page.setStore(&service);
        QTRY_COMPARE_WITH_TIMEOUT(refreshed.count(), 1, 30000);
        auto* hint = page.findChild<QLabel*>("emptyHint");
        QVERIFY(hint && hint->isVisibleTo(&page));
        QVERIFY2(hint->text().contains("Launch page") && hint->text().contains("shard run"),
            qPrintable(hint->text()));
    }

    // Export model…: a finished local run to GGUF through the real worker, with the progress bar
    // counting tensors and the file and Modelfile on disk; then the failures it explains.
    void exportRunToGguf()
    {
        const QString worker = shard::test::findWorker();
        if (worker.isEmpty())
            QSKIP("shard-worker of this build not found (build the shard-worker target)");
        QTemporaryDir tmp;
        const QString error = shard::test::setUpTinyTask(tmp.path(), worker, 8);
        QVERIFY2(error.isEmpty(), qPrintable(error));
        const QString runDir = tmp.filePath("run");
        const QString trained = shard::test::trainTinyRun(worker, tmp.path(), runDir,
            {"--data-format", "tokenized", "--steps", "2", "--micro-batch", "1", "--seq-len",
                "16"});
        QVERIFY2(trained.isEmpty(), qPrintable(trained));

        ExportDialog dialog(runDir, "tiny run");
        dialog.setWorkerProgram(worker);
        dialog.show();
        shard::test::selectData(shard::test::field<QComboBox>(dialog, "exportFormat"), "gguf");
        shard::test::selectData(shard::test::field<QComboBox>(dialog, "exportType"), "q8_0");
        const QString out = shard::test::field<QLineEdit>(dialog, "exportOut")->text();
        QCOMPARE(out, runDir + "/export/tiny-run-q8_0.gguf");
        QVERIFY(dialog.workerArguments().contains(runDir + "/model")); // the final model
        QSignalSpy finished(&dialog, &ExportDialog::finished);
        dialog.start();
        QVERIFY(dialog.isRunning());
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 120000);
        QVERIFY2(finished.at(0).at(0).toBool(), qPrintable(dialog.statusText()));
        QVERIFY(QFileInfo(out).size() > 0);
        QVERIFY(QFileInfo::exists(runDir + "/export/tiny-run-q8_0.Modelfile"));
        auto* progress = shard::test::field<QProgressBar>(dialog, "exportProgress");
        QCOMPARE(progress->value(), progress->maximum());
        QVERIFY2(dialog.statusText().contains("ollama create"), qPrintable(dialog.statusText()));
        if (qEnvironmentVariableIsSet("SHARD_LAYOUT_PNG")) // to look at it
            dialog.grab().save(qEnvironmentVariable("SHARD_LAYOUT_PNG") + "/export-dialog.png");

        // The same name again: refused before the worker starts.
        dialog.start();
        QVERIFY(!dialog.isRunning());
        QVERIFY2(dialog.statusText().contains("already exists"), qPrintable(dialog.statusText()));
        // A Hugging Face folder needs a checkpoint, and this run wrote none: the worker's reason.
        shard::test::selectData(shard::test::field<QComboBox>(dialog, "exportFormat"), "hf");
        dialog.start();
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 2, 120000);
        QVERIFY(!finished.at(1).at(0).toBool());
        QVERIFY2(dialog.statusText().startsWith("The export failed: ")
                && dialog.statusText().contains("checkpoint"),
            qPrintable(dialog.statusText()));
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
