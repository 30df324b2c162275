// Run-store benchmark: metric points ingested per second from metrics.jsonl (side by side with
// parsing the same lines without storing them), and the time to load 20 runs x 50k points for a
// comparison. Prints a Markdown section for BENCHMARKS.md.
#include <cstdio>
#include <ctime>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>

#include "jobs/ingestor.h"
#include "jobs/run_store.h"
#include "protocol/jsonl_reader.h"
#include "protocol/records.h"

using namespace shard;

namespace {

// This thread's CPU seconds: on a shared, loaded machine wall time overstates our cost.
double cpuSec()
{
    timespec ts {};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

QByteArray makeLines(int n, int ranks)
{
    QByteArray out;
    for (int i = 1; i <= n; ++i) {
        protocol::MetricRecord r;
        r.step = i;
        r.tokens = int64_t(i) * 4096;
        r.loss = 4.0 / (1.0 + 0.001 * i);
        r.lr = 3e-4;
        r.gradNorm = 1.25;
        r.tokensPerSec = 12345.6;
        r.stepTimeSec = 0.33;
        r.wallTimeSec = 0.33 * i;
        r.commBytes = 123456789;
        for (int k = 0; k < ranks; ++k) {
            protocol::RankMemory m;
            m.rank = k;
            m.shardedParamBytes = 1 << 30;
            m.gatheredParamBytes = 1 << 28;
            m.gradBytes = 1 << 29;
            m.optimizerBytes = 1LL << 31;
            m.activationBytes = 1 << 27;
            m.otherBytes = 1 << 20;
            m.currentBytes = 4LL << 30;
            m.peakBytes = (5LL << 30) + i;
            r.memory.push_back(m);
        }
        out += QByteArray::fromStdString(protocol::encodeLine(protocol::toJson(r))) + '\n';
    }
    return out;
}

} // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const int points = argc > 1 ? std::atoi(argv[1]) : 100000;
    const int ranks = 2;
    QTemporaryDir dir;
    const QByteArray lines = makeLines(points, ranks);
    {
        QFile f(dir.filePath("metrics.jsonl"));
        f.open(QIODevice::WriteOnly);
        f.write(lines);
    }

    // Parse only (the JSON decoding part of ingestion).
    QElapsedTimer t;
    t.start();
    double c0 = cpuSec();
    int64_t parsed = 0;
    protocol::consumeJsonl(lines.toStdString(),
        [&](const nlohmann::json& j, int64_t) { parsed += protocol::metricFromJson(j).step > 0; });
    const double parseSec = t.nsecsElapsed() / 1e9;
    const double parseCpu = cpuSec() - c0;

    // Full ingestion into SQLite (WAL, one transaction per 8 MiB batch).
    auto store = jobs::RunStore::open(dir.filePath("runs.sqlite"));
    if (!store) {
        std::fprintf(stderr, "%s\n", qPrintable(store.error()));
        return 1;
    }
    const qint64 id = *store->createRun({});
    jobs::Ingestor ingestor(*store);
    t.restart();
    c0 = cpuSec();
    auto stats = ingestor.ingestRunDir(id, dir.path());
    const double ingestSec = t.nsecsElapsed() / 1e9;
    const double ingestCpu = cpuSec() - c0;
    if (!stats || stats->metrics != points) {
        std::fprintf(stderr, "ingestion failed\n");
        return 1;
    }
    // Re-ingesting the same file: idempotent and cheap.
    t.restart();
    auto again = ingestor.ingestRunDir(id, dir.path());
    const double againMs = t.nsecsElapsed() / 1e6;

    // 20 runs x 50k points, loaded as vectors for a comparison view.
    const int runs = 20;
    const int perRun = 50000;
    const QByteArray runLines = makeLines(perRun, ranks);
    QVector<qint64> ids;
    for (int r = 0; r < runs; ++r) {
        QTemporaryDir rd;
        QFile f(rd.filePath("metrics.jsonl"));
        f.open(QIODevice::WriteOnly);
        f.write(runLines);
        f.close();
        const qint64 rid = *store->createRun({});
        if (!ingestor.ingestRunDir(rid, rd.path())) {
            std::fprintf(stderr, "ingestion failed\n");
            return 1;
        }
        ids << rid;
    }
    // Fresh connection: nothing cached by this one.
    auto reader = jobs::RunStore::open(dir.filePath("runs.sqlite"), jobs::OpenMode::ReadOnly);
    t.restart();
    c0 = cpuSec();
    qint64 loaded = 0;
    for (qint64 rid : ids)
        loaded += reader->metricSeries(rid)->size();
    const double loadMetricsMs = t.nsecsElapsed() / 1e6;
    const double loadMetricsCpuMs = (cpuSec() - c0) * 1e3;
    t.restart();
    c0 = cpuSec();
    qint64 memLoaded = 0;
    for (qint64 rid : ids)
        for (const auto& m : *reader->memorySeries(rid))
            memLoaded += m.step.size();
    const double loadMemoryMs = t.nsecsElapsed() / 1e6;
    const double loadMemoryCpuMs = (cpuSec() - c0) * 1e3;
    t.restart();
    auto list = reader->listRuns();
    const double listMs = t.nsecsElapsed() / 1e6;

    std::printf("| measurement | wall | CPU (this thread) |\n|---|---|---|\n");
    std::printf("| metric records in the file | %d (%d ranks of memory each, %.1f MB) | |\n",
        points, ranks, lines.size() / 1e6);
    std::printf("| parse only (JSON -> records) | %.0f records/s | %.0f records/s |\n",
        points / parseSec, points / parseCpu);
    std::printf("| ingest into SQLite (parse + store + offsets) | %.0f records/s (%.1f MB/s) | "
                "%.0f records/s |\n",
        points / ingestSec, lines.size() / 1e6 / ingestSec, points / ingestCpu);
    std::printf(
        "| ingest / parse-only | %.2fx | %.2fx |\n", ingestSec / parseSec, ingestCpu / parseCpu);
    std::printf("| re-ingest of the same file (idempotent) | %.2f ms, %lld new records | |\n",
        againMs, static_cast<long long>(again->metrics));
    std::printf("| load %d runs x %d metric points as vectors | %.0f ms | %.0f ms (%.1f M "
                "points/s) |\n",
        runs, perRun, loadMetricsMs, loadMetricsCpuMs, loaded / loadMetricsCpuMs / 1e3);
    std::printf("| load their per-rank memory series (%lld points) | %.0f ms | %.0f ms |\n",
        static_cast<long long>(memLoaded), loadMemoryMs, loadMemoryCpuMs);
    std::printf("| list %lld runs with summaries | %.2f ms | |\n",
        static_cast<long long>(list->size()), listMs);
    return 0;
}
