// Compare page: two recorded run folders overlay on the loss and memory charts, the config
// values that differ are listed (and equal ones are not), x axis / smoothing / log scale apply,
// PNG and CSV export write files, and a folder without run.json shows a message.
#include <QtTest>

#include <QLabel>

#include <QImage>

#include <QDir>
#include <QFile>
#include <QTableWidget>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "protocol/records.h"
#include "widgets/compare_page.h"
#include "widgets/live_plot.h"
#include "widgets/qcp.h"

using namespace shard::widgets;
namespace protocol = shard::protocol;

namespace {

QString writeRun(const QString& root, const QString& name, double lr, const char* strategy,
    int records, double lossScale, bool rewards = false)
{
    const QString dir = root + "/" + name;
    QDir().mkpath(dir);
    nlohmann::json spec = {{"name", name.toStdString()}, {"lr", lr}, {"strategy", strategy},
        {"seq_len", 128}, {"steps", records}, {"data", {"demo.jsonl"}}};
    QFile specFile(dir + "/run.json");
    specFile.open(QIODevice::WriteOnly);
    specFile.write(QByteArray::fromStdString(spec.dump()));
    QFile metrics(dir + "/metrics.jsonl");
    metrics.open(QIODevice::WriteOnly);
    for (int i = 1; i <= records; ++i) {
        protocol::MetricRecord r;
        r.step = i;
        r.tokens = i * 512;
        r.loss = lossScale * 4.0 / i;
        r.wallTimeSec = i * 0.5;
        r.memory.push_back({0, 100, 0, 50, 200, 30, 5, 400, 1000 + i});
        r.memory.push_back({1, 100, 0, 50, 200, 30, 5, 400, 2000 + i});
        if (rewards) { // a preference run's statistics
            r.scalars["rewards/margins"] = lossScale * 0.01 * i;
            r.scalars["rewards/accuracies"] = std::min(1.0, 0.02 * i);
        }
        metrics.write(QByteArray::fromStdString(protocol::encodeLine(protocol::toJson(r)) + "\n"));
    }
    return dir;
}

// Appends sample events (step, prompt, completion) to a run's events.jsonl.
void writeSamples(const QString& dir, const std::vector<protocol::SampleEvent>& samples)
{
    QFile events(dir + "/events.jsonl");
    events.open(QIODevice::Append);
    for (const auto& s : samples)
        events.write(QByteArray::fromStdString(
            protocol::encodeLine(protocol::toJson(protocol::toEvent(s, 1.0))) + "\n"));
}

} // namespace

class TstComparePage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void twoRunsOverlayWithDifferences()
    {
        QTemporaryDir tmp;
        const QString a = writeRun(tmp.path(), "run-a", 1e-3, "zero3", 100, 1.0);
        const QString b = writeRun(tmp.path(), "run-b", 3e-4, "ddp", 80, 1.5);
        ComparePage page;
        page.resize(1200, 800);
        page.show();
        QVERIFY(QTest::qWaitForWindowExposed(&page));
        // Nothing added yet: the page says where to start.
        auto* hint = page.findChild<QLabel*>("emptyHint");
        QVERIFY(hint && hint->isVisibleTo(&page));
        QVERIFY2(hint->text().contains("Runs page"), qPrintable(hint->text()));
        QSignalSpy added(&page, &ComparePage::runAdded);
        page.addRunDirectory(a);
        page.addRunDirectory(b);
        QTRY_COMPARE_WITH_TIMEOUT(added.count(), 2, 30000);
        QCOMPARE(page.runCount(), 2);
        QVERIFY(!hint->isVisibleTo(&page));
        page.flushCharts();
        QCOMPARE(page.lossPlot()->seriesCount(), 2);
        QSet<int> counts
            = {page.lossPlot()->drawnPointCount(0), page.lossPlot()->drawnPointCount(1)};
        QCOMPARE(counts, (QSet<int> {100, 80}));
        QCOMPARE(page.memoryPlot()->seriesCount(), 2);

        QTableWidget* diff = page.differencesTable();
        QStringList keys;
        for (int r = 0; r < diff->rowCount(); ++r)
            keys.append(diff->item(r, 0)->text());
        keys.sort();
        QCOMPARE(keys, (QStringList {"lr", "steps", "strategy"}));
        // One column per run after the key, named after the runs.
        QCOMPARE(diff->columnCount(), 3);
        const int strategyRow = int(keys.indexOf("strategy"));
        Q_UNUSED(strategyRow);
        QStringList strategies;
        for (int r = 0; r < diff->rowCount(); ++r)
            if (diff->item(r, 0)->text() == "strategy")
                strategies = {diff->item(r, 1)->text(), diff->item(r, 2)->text()};
        strategies.sort();
        QCOMPARE(strategies, (QStringList {"ddp", "zero3"}));

        // Unchecking a run hides it and removes it from the differences.
        page.setRunChecked(1, false);
        QCOMPARE(diff->rowCount(), 0);
        page.setRunChecked(1, true);
        QCOMPARE(diff->rowCount(), 3);

        // X axis by tokens: keys are tokens now.
        page.setXAxis(XAxisKind::Tokens);
        page.flushCharts();
        QCOMPARE(page.lossPlot()->customPlot()->xAxis->label(), QString("tokens"));
        QVERIFY(page.lossPlot()->customPlot()->xAxis->range().upper >= 100 * 512);
        page.setSmoothing(0.9);
        page.setLogY(true);
        page.flushCharts();
        QCOMPARE(page.lossPlot()->smoothing(), 0.9);
        // Smoothing is every chart's, not the loss's alone (issue 27, item 12).
        QCOMPARE(page.throughputPlot()->smoothing(), 0.9);
        QCOMPARE(page.memoryPlot()->smoothing(), 0.9);
        QVERIFY(page.lossPlot()->logY());

        const QString csv = tmp.filePath("out.csv");
        QCOMPARE(page.exportCsv(csv), QString());
        QFile f(csv);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
        QCOMPARE(lines.size(), 1 + 100 + 80);
        // Every metric recorded.
        QCOMPARE(lines[0],
            QByteArray("run,step,tokens,wall_time,loss,eval_loss,lr,grad_norm,tokens_per_sec,"
                       "step_time,comm_bytes,peak_bytes"));
        const QString png = tmp.filePath("out.png");
        QCOMPARE(page.exportPng(png), QString());
        // The message names each file written (it named the first only).
        QCOMPARE(ComparePage::pngFilesFor(png),
            (QStringList {
                png, tmp.filePath("out-memory.png"), tmp.filePath("out-throughput.png")}));
        QVERIFY(QFileInfo(png).size() > 1000);
        QVERIFY(QFileInfo(tmp.filePath("out-memory.png")).size() > 1000);
        QVERIFY(QFileInfo(tmp.filePath("out-throughput.png")).size() > 1000);
        // A chart written alone carries its legend: it differs from the same chart without one.
        QVERIFY(!page.memoryPlot()->legendVisible()); // as shown, and left so
        const QString bare = tmp.filePath("bare-memory.png");
        const QImage withLegend(tmp.filePath("out-memory.png"));
        QVERIFY(page.memoryPlot()->customPlot()->savePng(
            bare, withLegend.width(), withLegend.height()));
        QVERIFY(QImage(bare) != withLegend);
        // One picture of every chart shown, no smaller than the loss chart on screen.
        const QImage all(png);
        QVERIFY(all.width() >= page.lossPlot()->width() + page.memoryPlot()->width() - 2);
        QVERIFY(all.height() >= page.lossPlot()->height());
        QVERIFY(!page.exportCsv(tmp.filePath("no/such/dir/x.csv")).isEmpty());
    }

    // Preference runs' rewards (a metric record's scalars) are compared on the Scalars tab: the
    // union of the runs' tags, the margin first, one series per run; a run without the tag has
    // an empty series, and runs without any show a note instead.
    void scalarsOfPreferenceRuns()
    {
        QTemporaryDir tmp;
        ComparePage page;
        page.show();
        QSignalSpy added(&page, &ComparePage::runAdded);
        page.addRunDirectory(writeRun(tmp.path(), "plain", 1e-3, "zero3", 10, 1.0));
        QTRY_COMPARE_WITH_TIMEOUT(added.count(), 1, 30000);
        QVERIFY(page.scalarTags().isEmpty());
        page.addRunDirectory(writeRun(tmp.path(), "dpo-a", 1e-3, "zero3", 30, 1.0, true));
        page.addRunDirectory(writeRun(tmp.path(), "dpo-b", 3e-4, "zero3", 20, 2.0, true));
        QTRY_COMPARE_WITH_TIMEOUT(added.count(), 3, 30000);
        QCOMPARE(
            page.scalarTags(), (QStringList {"train/rewards/accuracies", "train/rewards/margins"}));
        page.flushCharts();
        QCOMPARE(page.scalarPlot()->seriesCount(), 3);
        QSet<int> counts;
        for (int k = 0; k < 3; ++k)
            counts.insert(page.scalarPlot()->drawnPointCount(k));
        QCOMPARE(counts, (QSet<int> {0, 30, 20}));
        page.setScalarTag("train/rewards/accuracies");
        page.flushCharts();
        QCOMPARE(page.scalarPlot()->seriesCount(), 3);
    }

    void samplesSideBySide()
    {
        QTemporaryDir tmp;
        const QString a = writeRun(tmp.path(), "base", 1e-3, "zero3", 10, 1.0);
        const QString b = writeRun(tmp.path(), "tuned", 3e-4, "zero3", 10, 1.0);
        writeSamples(a,
            {{5, "Once upon", " a time"}, {10, "Once upon", " a time, a cat"},
                {10, "The dog", " ran"}});
        writeSamples(b, {{10, "Once upon", " a time there was"}, {10, "Hello", " world"}});
        ComparePage page;
        QSignalSpy added(&page, &ComparePage::runAdded);
        page.addRunDirectory(a);
        QTRY_COMPARE_WITH_TIMEOUT(added.count(), 1, 30000);
        page.addRunDirectory(b);
        QTRY_COMPARE_WITH_TIMEOUT(added.count(), 2, 30000);
        QTableWidget* t = page.samplesTable();
        QCOMPARE(t->columnCount(), 3);
        QCOMPARE(t->rowCount(), 3);
        QMap<QString, QStringList> byPrompt;
        for (int r = 0; r < t->rowCount(); ++r)
            byPrompt[t->item(r, 0)->text()]
                = QStringList {t->item(r, 1)->text(), t->item(r, 2)->text()};
        // The latest completion of each run for a prompt; empty where a run has none.
        const int baseCol = t->horizontalHeaderItem(1)->text() == "base" ? 0 : 1;
        QCOMPARE(byPrompt["Once upon"][baseCol], QString(" a time, a cat"));
        QCOMPARE(byPrompt["Once upon"][1 - baseCol], QString(" a time there was"));
        QCOMPARE(byPrompt["The dog"][1 - baseCol], QString());
        QCOMPARE(byPrompt["Hello"][1 - baseCol], QString(" world"));
        page.setRunChecked(1, false);
        QCOMPARE(t->columnCount(), 2);
    }

    // Runs without samples: the tab says where samples come from (it showed a bare header).
    void samplesTabSaysWhereSamplesComeFrom()
    {
        QTemporaryDir tmp;
        const QString a = writeRun(tmp.path(), "base", 1e-3, "zero3", 10, 1.0);
        const QString b = writeRun(tmp.path(), "tuned", 3e-4, "zero3", 10, 1.0);
        ComparePage page;
        QSignalSpy added(&page, &ComparePage::runAdded);
        page.addRunDirectory(a);
        page.addRunDirectory(b);
        QTRY_COMPARE_WITH_TIMEOUT(added.count(), 2, 30000);
        QTableWidget* t = page.samplesTable();
        QCOMPARE(t->rowCount(), 1);
        QVERIFY2(
            t->item(0, 0)->text().contains("--sample-every"), qPrintable(t->item(0, 0)->text()));
    }

    void folderWithoutRunJsonShowsMessage()
    {
        QTemporaryDir tmp;
        ComparePage page;
        page.show();
        QSignalSpy failed(&page, &ComparePage::loadFailed);
        page.addRunDirectory(tmp.path());
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 30000);
        QVERIFY2(page.messageText().contains("no run.json"), qPrintable(page.messageText()));
        QCOMPARE(page.runCount(), 0);
    }
};

QTEST_MAIN(TstComparePage)
#include "tst_compare_page.moc"
