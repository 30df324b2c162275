// Ingestor: offset-based, idempotent ingestion of metrics.jsonl / events.jsonl, half-written
// lines, bad lines, remote byte streams that resend bytes, status from finish events, a run
// that ends only with all of its points.
#include <QFile>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "jobs/ingestor.h"
#include "jobs/local_process.h"
#include "jobs/local_run_watcher.h"
#include "protocol/records.h"

using namespace shard::jobs;

namespace {

QByteArray metricLine(int step, double loss)
{
    shard::protocol::MetricRecord r;
    r.step = step;
    r.loss = loss;
    r.tokens = step * 64;
    r.tokensPerSec = 100.0 * step;
    shard::protocol::RankMemory m;
    m.rank = 1;
    m.peakBytes = 1000 + step;
    r.memory = {m};
    return QByteArray::fromStdString(shard::protocol::encodeLine(shard::protocol::toJson(r)))
        + '\n';
}

QByteArray eventLine(const char* kind, const char* reason = nullptr)
{
    shard::protocol::EventRecord e;
    e.kind = kind;
    if (reason)
        e.data = {{"reason", reason}};
    return QByteArray::fromStdString(shard::protocol::encodeLine(shard::protocol::toJson(e)))
        + '\n';
}

void append(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::Append));
    QCOMPARE(f.write(bytes), bytes.size());
}

} // namespace

class TestIngestor : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void idempotentAndHalfWrittenLines()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        QVERIFY(store);
        const qint64 id = *store->createRun({});
        const QString metrics = dir.filePath("metrics.jsonl");
        append(metrics, metricLine(1, 3.0) + metricLine(2, 2.5));
        const QByteArray third = metricLine(3, 2.0);
        append(metrics, third.left(17)); // the writer is mid-line

        Ingestor ingestor(*store);
        auto s1 = ingestor.ingestRunDir(id, dir.path());
        QVERIFY2(s1, qPrintable(s1.error()));
        QCOMPARE(s1->metrics, qint64(2));
        QCOMPARE(*store->metricCount(id), qint64(2));
        const qint64 offset = *store->ingestOffset(id, "metrics");
        QCOMPARE(offset, qint64(metricLine(1, 3.0).size() + metricLine(2, 2.5).size()));

        // Reading again adds nothing; a second ingestor on the same store neither.
        QCOMPARE(ingestor.ingestRunDir(id, dir.path())->metrics, qint64(0));
        Ingestor other(*store);
        QCOMPARE(other.ingestRunDir(id, dir.path())->metrics, qint64(0));
        QCOMPARE(*store->metricCount(id), qint64(2));

        append(metrics, third.mid(17) + "this is not json\n" + metricLine(4, 1.5));
        auto s2 = ingestor.ingestRunDir(id, dir.path());
        QCOMPARE(s2->metrics, qint64(2));
        QCOMPARE(s2->badLines, qint64(1));
        QCOMPARE(s2->lastStep, qint64(4));
        auto series = store->metricSeries(id);
        QCOMPARE(series->loss, (QVector<double> {3.0, 2.5, 2.0, 1.5}));
        auto run = store->run(id);
        QCOMPARE(*run->finalLoss, 1.5);
        QCOMPARE(run->peakMemoryPerRank, (QVector<qint64> {0, 1004}));
    }

    void smallBatches()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        QByteArray all;
        for (int i = 1; i <= 500; ++i)
            all += metricLine(i, 1.0 / i);
        append(dir.filePath("metrics.jsonl"), all);
        Ingestor ingestor(*store, 1000); // forces many transactions
        auto s = ingestor.ingestRunDir(id, dir.path());
        QVERIFY2(s, qPrintable(s.error()));
        QCOMPARE(s->metrics, qint64(500));
        QCOMPARE(*store->ingestOffset(id, "metrics"), qint64(all.size()));
    }

    void streamResendsBytes()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        Ingestor ingestor(*store);
        const QByteArray a = metricLine(1, 3.0);
        const QByteArray b = metricLine(2, 2.0);
        qint64 used = 0;
        auto s = ingestor.ingestBytes(id, IngestFile::Metrics, a + b.left(5), 0, &used);
        QVERIFY(s);
        QCOMPARE(used, qint64(a.size()));
        // A reconnect resends from byte 0: the first line is skipped, not stored twice.
        s = ingestor.ingestBytes(id, IngestFile::Metrics, a + b, 0, &used);
        QVERIFY(s);
        QCOMPARE(s->metrics, qint64(1));
        QCOMPARE(used, qint64(a.size() + b.size()));
        QCOMPARE(*store->metricCount(id), qint64(2));
        // A stream that starts past the stored offset is a gap, an error.
        auto gap = ingestor.ingestBytes(id, IngestFile::Metrics, a, 10000, &used);
        QVERIFY(!gap);
        QVERIFY(gap.error().contains("gap"));
    }

    void statusFromEvents_data()
    {
        QTest::addColumn<QString>("reason");
        QTest::addColumn<QString>("status");
        QTest::newRow("completed") << "completed"
                                   << "finished";
        QTest::newRow("stopped") << "stopped"
                                 << "stopped";
        QTest::newRow("rank died") << "rank_failed"
                                   << "failed";
    }

    void statusFromEvents()
    {
        QFETCH(QString, reason);
        QFETCH(QString, status);
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        append(dir.filePath("events.jsonl"), eventLine("start"));
        Ingestor ingestor(*store);
        QVERIFY(ingestor.ingestRunDir(id, dir.path()));
        QCOMPARE(toString(store->run(id)->status), QString("running"));
        append(dir.filePath("events.jsonl"), eventLine("finish", reason.toUtf8().constData()));
        auto s = ingestor.ingestRunDir(id, dir.path());
        QVERIFY(s->status);
        QCOMPARE(toString(store->run(id)->status), status);
        QVERIFY(store->run(id)->endedAt.isValid());
        QCOMPARE(store->events(id)->size(), 2);
    }

    // The worker writes its finish event after its last metric, but a remote watcher streams
    // the two files apart: an events chunk that ends the run stores the missing metrics first,
    // so no reader of the store sees an ended run without all of its points.
    void runEndsOnlyWithAllItsPoints()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        const QByteArray metrics = metricLine(1, 3.0) + metricLine(2, 2.0) + metricLine(3, 1.0);
        const QByteArray events = eventLine("start") + eventLine("finish", "completed");
        Ingestor ingestor(*store);
        int calls = 0;
        auto catchUp = [&]() -> Result<IngestStats> {
            ++calls;
            // Called before the chunk that ends the run is stored: only the start is there.
            if (isTerminal(store->run(id)->status) || store->events(id)->size() != 1)
                return fail(QStringLiteral("the run ended before its metrics were caught up"));
            qint64 used = 0;
            return ingestor.ingestBytes(id, IngestFile::Metrics, metrics, 0, &used);
        };
        qint64 used = 0;
        // A chunk that does not end the run does not ask for the metrics.
        auto s
            = ingestor.ingestBytes(id, IngestFile::Events, eventLine("start"), 0, &used, catchUp);
        QVERIFY2(s, qPrintable(s.error()));
        QCOMPARE(calls, 0);
        s = ingestor.ingestBytes(id, IngestFile::Events, events, 0, &used, catchUp);
        QVERIFY2(s, qPrintable(s.error()));
        QCOMPARE(calls, 1);
        QCOMPARE(s->metrics, qint64(3));
        QCOMPARE(s->lastStep, qint64(3));
        QCOMPARE(*store->metricCount(id), qint64(3));
        QCOMPARE(toString(store->run(id)->status), QString("finished"));
        // The metrics stream then resends the same bytes: nothing is stored twice.
        s = ingestor.ingestBytes(id, IngestFile::Metrics, metrics, 0, &used);
        QCOMPARE(s->metrics, qint64(0));
        QCOMPARE(*store->metricCount(id), qint64(3));

        // A run folder read in one go counts each point once.
        const qint64 local = *store->createRun({});
        QTemporaryDir runDir;
        append(runDir.filePath("metrics.jsonl"), metrics);
        append(runDir.filePath("events.jsonl"), events);
        auto all = ingestor.ingestRunDir(local, runDir.path());
        QVERIFY2(all, qPrintable(all.error()));
        QCOMPARE(all->metrics, qint64(3));
        QCOMPARE(all->events, qint64(2));
        QCOMPARE(*store->metricCount(local), qint64(3));
        QCOMPARE(toString(store->run(local)->status), QString("finished"));
    }

    void specFromRunJson()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        QFile f(dir.filePath("run.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"model":"m","strategy":"ddp","nodes":1,"procs_per_node":2,"steps":9})");
        f.close();
        QVERIFY(Ingestor(*store).ingestRunDir(id, dir.path()));
        auto r = store->run(id);
        QCOMPARE(r->strategy, QString("ddp"));
        QCOMPARE(r->worldSize, 2);
    }

    void watcherSignalsAndVanishedProcess()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        LocalRunWatcher watcher(*store, id, dir.path());
        QSignalSpy points(&watcher, &RunWatcher::pointsAdded);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        // A pid that certainly does not exist (beyond pid_max): the launcher "vanished".
        watcher.setProcess(1 << 30, 0);
        append(dir.filePath("metrics.jsonl"), metricLine(1, 2.0));
        watcher.start(50);
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 30000);
        QCOMPARE(points.size(), 1);
        QCOMPARE(points.at(0).at(1).toLongLong(), qint64(1));
        auto r = store->run(id);
        QCOMPARE(toString(r->status), QString("interrupted"));
        QVERIFY(!watcher.isActive());
    }

    void watcherFinishEvent()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        LocalRunWatcher watcher(*store, id, dir.path());
        QSignalSpy points(&watcher, &RunWatcher::pointsAdded);
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        // A poll too rare to matter within the waits below: the file-system watcher must deliver
        // (a time bound close to the poll's would fail on a loaded machine for no fault).
        watcher.start(600000);
        QTest::qWait(100); // the first read, of nothing, before the file appears
        append(dir.filePath("metrics.jsonl"), metricLine(1, 2.0));
        QTRY_VERIFY_WITH_TIMEOUT(points.size() >= 1, 30000);
        append(dir.filePath("events.jsonl"), eventLine("finish", "completed"));
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 30000);
        QCOMPARE(toString(store->run(id)->status), QString("finished"));
    }

    // A rank whose peer died can fail its collective and write its own error and finish before
    // the launcher writes which rank died: while the launcher lives, the watcher keeps reading.
    void watcherWaitsForTheLaunchersVerdict()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        QProcess launcher; // stands in for the launcher: a real process that outlives the rank
        launcher.start("sleep", {"30"});
        QVERIFY(launcher.waitForStarted());
        const qint64 pid = launcher.processId();
        LocalRunWatcher watcher(*store, id, dir.path());
        QSignalSpy finished(&watcher, &RunWatcher::finished);
        watcher.setProcess(pid, LocalProcess::startTime(pid));
        watcher.start(50);
        append(dir.filePath("events.jsonl"), eventLine("error") + eventLine("finish", "error"));
        QTRY_COMPARE_WITH_TIMEOUT(toString(store->run(id)->status), QString("failed"), 30000);
        QTest::qWait(300);
        QCOMPARE(finished.size(), 0); // its launcher still runs
        shard::protocol::EventRecord verdict;
        verdict.kind = "error";
        verdict.message = "rank 1 was killed by signal 9";
        verdict.data = {{"rank", 1}};
        append(dir.filePath("events.jsonl"),
            QByteArray::fromStdString(shard::protocol::encodeLine(shard::protocol::toJson(verdict)))
                + '\n' + eventLine("finish", "failed"));
        launcher.kill();
        QVERIFY(launcher.waitForFinished());
        QTRY_COMPARE_WITH_TIMEOUT(finished.size(), 1, 30000);
        int verdicts = 0;
        for (const auto& e : *store->events(id))
            verdicts += e.kind == "error" && e.message.contains("rank 1");
        QCOMPARE(verdicts, 1);
    }
};

QTEST_GUILESS_MAIN(TestIngestor)
#include "tst_ingestor.moc"
