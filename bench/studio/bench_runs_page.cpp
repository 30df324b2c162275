// The Runs page holding 1,000 runs (issue 30: "Shard Studio's store is fast at 1,000 runs: let it
// hold all of a user's runs"; TensorBoard gets sluggish at a few hundred). A real store with
// --runs runs (each with --points metric records, so the summary columns are filled) behind the
// real RunService and RunsPage, offscreen. Measured, median of --repeats:
//  - a refresh: from refresh() to the table shown (the store thread's listing, the rows replaced,
//    the columns fitted), and the part of it spent on the UI thread (its CPU time: what freezes
//    the window);
//  - a filter keystroke and clearing it; a sort by loss and by name; selecting one row.
// Run: QT_QPA_PLATFORM=offscreen build/release/bench/studio/bench_runs_page [--runs N]
#include <algorithm>
#include <ctime>

#include <QElapsedTimer>
#include <QHeaderView>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include "bench_clock.h"
#include <nlohmann/json.hpp>

#include "jobs/run_service.h"
#include "jobs/run_store.h"
#include "protocol/records.h"
#include "widgets/run_table_model.h"
#include "widgets/runs_page.h"

using namespace shard;

using shard::bench::median;
using shard::bench::threadCpuMs;

namespace {

int argValue(const QStringList& args, const QString& name, int fallback)
{
    const int i = args.indexOf(name);
    return i >= 0 && i + 1 < args.size() ? args[i + 1].toInt() : fallback;
}

} // namespace

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    const QStringList args = app.arguments();
    const int runs = argValue(args, "--runs", 1000);
    const int points = argValue(args, "--points", 64);
    const int repeats = argValue(args, "--repeats", 9);
    QTemporaryDir dir;
    const QString path = dir.filePath("runs.sqlite");
    {
        auto store = jobs::RunStore::open(path);
        if (!store) {
            std::fprintf(stderr, "%s\n", qPrintable(store.error()));
            return 1;
        }
        QElapsedTimer fill;
        fill.start();
        const char* models[] = {"llama-3.2-1b", "qwen2.5-0.5b", "tiny-15m", "llama-2-7b"};
        const char* strategies[] = {"ddp", "zero1", "zero2", "zero3", "hybrid"};
        for (int r = 0; r < runs; ++r) {
            jobs::NewRun nr;
            nr.name = QString("sweep-%1-lr%2").arg(r / 50).arg(r % 50);
            nr.specJson = QByteArray::fromStdString(nlohmann::json {{"model", models[r % 4]},
                {"strategy", strategies[r % 5]}, {"procs_per_node", 1 + r % 8}, {"nodes", 1},
                {"steps", points}}.dump());
            nr.runDir = dir.filePath(QString("runs/%1").arg(r));
            auto id = store->createRun(nr);
            std::vector<protocol::MetricRecord> records;
            for (int s = 1; s <= points; ++s) {
                protocol::MetricRecord m;
                m.step = s;
                m.tokens = int64_t(s) * 4096;
                m.loss = 2.0 + 8.0 / (1.0 + s * 0.1) + (r % 17) * 0.01;
                m.lr = 1e-4;
                m.tokensPerSec = 4000 + r;
                m.stepTimeSec = 1.0;
                m.wallTimeSec = s;
                m.memory.push_back({});
                m.memory.back().peakBytes = int64_t(1 + r % 40) << 30;
                records.push_back(m);
            }
            (void)store->appendMetrics(*id, records, 1);
            (void)store->setStatus(*id,
                r % 10 ? jobs::RunStatus::Finished : jobs::RunStatus::Failed,
                r % 10 ? QString() : QString("rank 1 exited with code 1"));
        }
        std::printf("store: %d runs x %d points written in %.1f s\n", runs, points,
            fill.elapsed() / 1000.0);
    }

    jobs::RunService service(path);
    widgets::RunsPage page;
    page.resize(1280, 800);
    page.show();
    page.setStore(&service);
    QSignalSpy refreshed(&page, &widgets::RunsPage::refreshed);
    // A refresh as the page does it, and (side by side, for the ratio) with the columns fitted
    // to every row, Qt's default for up to 1,000 rows.
    auto measureRefresh = [&](std::vector<double>& wall, std::vector<double>& ui) -> bool {
        for (int i = 0; i < repeats + 1; ++i) {
            refreshed.clear();
            QElapsedTimer t;
            t.start();
            const double cpu0 = threadCpuMs();
            page.refresh();
            if (!refreshed.wait(60000) || refreshed.first().at(0).toInt() != runs) {
                std::fprintf(stderr, "the Runs page did not list %d runs\n", runs);
                return false;
            }
            QCoreApplication::processEvents(); // the repaint
            if (i == 0)
                continue; // warm-up: fonts, the first layout
            wall.push_back(t.nsecsElapsed() / 1e6);
            ui.push_back(threadCpuMs() - cpu0);
        }
        return true;
    };
    QHeaderView* header = page.view()->horizontalHeader();
    const int pagePrecision = header->resizeContentsPrecision();
    std::vector<double> wall, ui, wallAll, uiAll;
    header->setResizeContentsPrecision(-1);
    if (!measureRefresh(wallAll, uiAll))
        return 1;
    header->setResizeContentsPrecision(pagePrecision);
    if (!measureRefresh(wall, ui))
        return 1;
    auto timed = [&](auto&& action) {
        std::vector<double> v;
        for (int i = 0; i < repeats; ++i) {
            const double cpu0 = threadCpuMs();
            action(i);
            QCoreApplication::processEvents();
            v.push_back(threadCpuMs() - cpu0);
        }
        return median(v);
    };
    const double filter = timed([&](int i) { page.setFilterText(QString("lr%1").arg(i % 50)); });
    const int matched = page.visibleRowCount();
    const double clear = timed([&](int) {
        page.setFilterText("sweep-3");
        page.setFilterText(QString());
    });
    QTableView* view = page.view();
    const double sortLoss = timed([&](int i) {
        view->sortByColumn(
            widgets::RunTableModel::FinalLoss, i % 2 ? Qt::AscendingOrder : Qt::DescendingOrder);
    });
    const double sortName = timed([&](int i) {
        view->sortByColumn(
            widgets::RunTableModel::Name, i % 2 ? Qt::AscendingOrder : Qt::DescendingOrder);
    });
    const double select = timed([&](int i) { page.selectRows({(i * 97) % runs}); });
    std::printf("Runs page, %d runs (median of %d, ms):\n", runs, repeats);
    std::printf("  refresh, shown             %8.1f wall, %8.1f on the UI thread (columns fitted "
                "to %d rows)\n",
        median(wall), median(ui), pagePrecision);
    std::printf("  refresh, every row fitted  %8.1f wall, %8.1f on the UI thread\n",
        median(wallAll), median(uiAll));
    std::printf("  filter keystroke           %8.1f (%d rows match)\n", filter, matched);
    std::printf("  filter on and cleared      %8.1f\n", clear);
    std::printf("  sort by final loss         %8.1f\n", sortLoss);
    std::printf("  sort by name               %8.1f\n", sortName);
    std::printf("  select a row               %8.1f\n", select);
    return 0;
}
