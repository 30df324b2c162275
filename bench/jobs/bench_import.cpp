// TensorBoard import speed (issue 30): event files of growing size, written by the engine's own
// writer (one event per step with 8 scalars, as a training run logs), read by the reader alone
// and imported end to end into a fresh run store (reader, tag mapping, SQLite); then a store of
// 1,000 imported runs: listing every run (the Runs page's query) and loading 20 runs' metric
// series (a Compare of 20). Every point is kept (no reservoir, unlike TensorBoard's 1,000 per
// tag). Each size's peak memory is sampled while it reads and imports (anonymous memory above
// what the process held before): the reader and the importer stream, so it stays flat as the
// file grows. Usage:
// bench_jobs_import [--max-mb 100] [--runs 1000]   (--max-mb 1000 for a 1 GB file)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <QCoreApplication>
#include <QTemporaryDir>

#include "jobs/run_import.h"
#include "jobs/run_store.h"
#include "peak_memory.h"
#include "tbio/event_reader.h"
#include "tbio/event_writer.h"

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

double secondsSince(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A run folder with one event file of about `bytes` bytes; returns the points written.
long long writeRun(const std::string& dir, double bytes)
{
    fs::create_directories(dir);
    shard::tbio::EventFileWriter w(dir);
    long long points = 0;
    for (long long step = 1;; ++step) {
        const float x = static_cast<float>(step);
        w.write(1.7e9 + step, step,
            {{"train/loss", 10.0f / (1.0f + x * 1e-3f)}, {"train/learning_rate", 3e-4f},
                {"train/grad_norm", 1.0f + 1.0f / x}, {"train/tokens_per_sec", 12000.0f},
                {"train/step_time", 0.5f}, {"train/num_input_tokens_seen", x * 4096},
                {"memory/peak(GiB)", 20.4f}, {"custom/perplexity", 2.0f + 1.0f / x}});
        points += 8;
        if (step % 256 == 0 && static_cast<double>(fs::file_size(w.path())) >= bytes)
            return points;
    }
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    double maxMb = 100;
    int runs = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--max-mb"))
            maxMb = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--runs"))
            runs = std::atoi(argv[i + 1]);
    }
    QTemporaryDir tmp;
    const std::string root = tmp.path().toStdString();
    std::printf("| file | points | read: MB/s | read: points/s | import: MB/s | import: points/s | "
                "read: peak memory | import: peak memory |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (double mb = 1; mb <= maxMb; mb *= 10) {
        const std::string dir = root + "/size-" + std::to_string(static_cast<int>(mb));
        const long long points = writeRun(dir, mb * 1e6);
        std::string file;
        for (const auto& e : fs::directory_iterator(dir))
            file = e.path().string();
        const double size = static_cast<double>(fs::file_size(file));
        auto t0 = Clock::now();
        const double baseMiB = shard::testing::anonMiB();
        long long read = 0;
        const double readPeak = shard::testing::peakAnonMiB([&] {
            shard::tbio::readEventFile(file, 0, [&](const shard::tbio::ScalarPoint&) { ++read; });
        });
        const double readSec = secondsSince(t0);
        if (read != points)
            return std::fprintf(stderr, "read %lld points of %lld\n", read, points), 1;
        const std::string storeDir = dir + "-store";
        fs::create_directories(storeDir);
        auto store = shard::jobs::RunStore::open(QString::fromStdString(storeDir + "/s.sqlite"));
        t0 = Clock::now();
        shard::jobs::Result<shard::jobs::ImportReport> report = shard::jobs::fail("not run");
        const double importPeak = shard::testing::peakAnonMiB(
            [&] { report = shard::jobs::importRuns(*store, QString::fromStdString(dir)); });
        const double import = secondsSince(t0);
        if (!report)
            return std::fprintf(stderr, "%s\n", qPrintable(report.error())), 1;
        std::printf("| %.1f MB | %lld | %.0f | %.2fM | %.1f | %.0fK | +%.1f MiB | +%.1f MiB |\n",
            size / 1e6, points, size / 1e6 / readSec, points / readSec / 1e6, size / 1e6 / import,
            points / import / 1e3, readPeak - baseMiB, importPeak - baseMiB);
        std::fflush(stdout);
        fs::remove_all(dir); // a 1 GB file and its store: only one size on disk at a time
        store = shard::jobs::RunStore::open(QString::fromStdString(root + "/closed.sqlite"));
        fs::remove_all(storeDir);
    }

    // A store of `runs` imported runs, about 1,000 steps each.
    const std::string many = root + "/many";
    for (int r = 0; r < runs; ++r)
        writeRun(many + "/run-" + std::to_string(r), 1000 * 93.0); // about 1,000 steps
    auto store = shard::jobs::RunStore::open(QString::fromStdString(root + "/many.sqlite"));
    auto t0 = Clock::now();
    auto report = shard::jobs::importRuns(*store, QString::fromStdString(many));
    const double importAll = secondsSince(t0);
    if (!report)
        return std::fprintf(stderr, "%s\n", qPrintable(report.error())), 1;
    t0 = Clock::now();
    auto listed = store->listRuns();
    const double list = secondsSince(t0);
    t0 = Clock::now();
    qint64 loaded = 0;
    const int compared = std::min(20, int(listed->size()));
    for (int i = 0; i < compared; ++i)
        loaded += store->metricSeries((*listed)[i].id)->size();
    const double compare = secondsSince(t0);
    std::printf("\n%d runs imported in %.1f s (%lld steps each); list all runs: %.1f ms; metric "
                "series of %d runs (%lld points): %.1f ms\n",
        int(report->runs.size()), importAll, loaded / std::max(1, compared), list * 1e3, compared,
        loaded, compare * 1e3);
    return 0;
}
