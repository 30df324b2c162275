// RunStore: runs, summaries, series, compare, migrations from an old schema, and the error
// messages for locked, corrupt, newer and read-only stores.
#include <thread>
#include <vector>

#include <QProcess>
#include <QTemporaryDir>
#include <QTest>
#include <sqlite3.h>
#include <sys/mount.h>

#include "jobs/run_series.h"
#include "jobs/run_store.h"
#include "protocol/memory_categories.h"
#include "protocol/run_pace.h"

using namespace shard::jobs;
using shard::protocol::MetricRecord;
using shard::protocol::RankMemory;

namespace {

MetricRecord metric(int64_t step, double loss, double tps, int64_t peak0 = 0, int64_t peak1 = 0)
{
    MetricRecord r;
    r.step = step;
    r.tokens = step * 100;
    r.loss = loss;
    r.lr = 1e-3;
    r.tokensPerSec = tps;
    r.wallTimeSec = static_cast<double>(step);
    if (peak0 || peak1) {
        RankMemory a;
        a.rank = 0;
        a.peakBytes = peak0;
        a.shardedParamBytes = 10;
        RankMemory b;
        b.rank = 1;
        b.peakBytes = peak1;
        r.memory = {a, b};
    }
    return r;
}

void rawExec(const QString& path, const char* sql)
{
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.toUtf8().constData(), &db), SQLITE_OK);
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
    const QString msg = err ? QString::fromUtf8(err) : QString();
    sqlite3_free(err);
    sqlite3_close(db);
    QVERIFY2(rc == SQLITE_OK, qPrintable(msg));
}

// The schema exactly as version 1 of Shard Studio wrote it (frozen here on purpose).
const char* const kSchemaV1 = R"sql(
CREATE TABLE runs(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL,
    spec TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL DEFAULT 'queued',
    target TEXT NOT NULL DEFAULT 'local', host TEXT NOT NULL DEFAULT '',
    run_dir TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '', created_at INTEGER NOT NULL, started_at INTEGER,
    ended_at INTEGER, last_step INTEGER NOT NULL DEFAULT 0, tokens INTEGER NOT NULL DEFAULT 0,
    final_loss REAL, best_loss REAL, tps_sum REAL NOT NULL DEFAULT 0,
    tps_count INTEGER NOT NULL DEFAULT 0);
CREATE INDEX runs_name ON runs(name);
CREATE TABLE metrics(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL, tokens INTEGER NOT NULL DEFAULT 0, loss REAL, lr REAL, grad_norm REAL,
    tokens_per_sec REAL, step_time REAL, wall_time REAL, eval_loss REAL,
    comm_bytes INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(run_id, step)) WITHOUT ROWID;
CREATE TABLE events(id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, byte_offset INTEGER NOT NULL,
    kind TEXT NOT NULL, step INTEGER NOT NULL DEFAULT -1, wall_time REAL NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '', data TEXT NOT NULL DEFAULT '{}');
CREATE INDEX events_run ON events(run_id, id);
CREATE TABLE ingest_offsets(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    file TEXT NOT NULL, byte_offset INTEGER NOT NULL, PRIMARY KEY(run_id, file)) WITHOUT ROWID;
INSERT INTO runs(name, spec, status, created_at, last_step, final_loss, best_loss)
    VALUES('old-run', '{"model":"tiny-15m","strategy":"zero2","nodes":2,"procs_per_node":4,
    "steps":300}', 'finished', 1700000000000, 300, 1.5, 1.25);
INSERT INTO metrics(run_id, step, loss) VALUES(1, 1, 3.0), (1, 300, 1.5);
PRAGMA user_version = 1;
)sql";

} // namespace

class TestRunStore : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void createListFind()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("sub/runs.sqlite"));
        QVERIFY2(store, qPrintable(store.error()));
        QCOMPARE(store->schemaVersion(), RunStore::kSchemaVersion);
        NewRun nr;
        nr.name = "alpha";
        nr.specJson
            = R"({"model":"tiny","strategy":"zero3","nodes":1,"procs_per_node":2,"steps":50})";
        nr.runDir = "/tmp/alpha";
        auto a = store->createRun(nr);
        QVERIFY(a);
        nr.name = "beta";
        nr.target = TargetKind::Ssh;
        nr.host = "gpu1,gpu2";
        auto b = store->createRun(nr);
        QVERIFY(b);
        QVERIFY(*b > *a);

        auto all = store->listRuns();
        QVERIFY(all);
        QCOMPARE(all->size(), 2);
        QCOMPARE(all->at(0).name, QString("beta")); // newest first
        QVERIFY(all->at(0).specJson.isEmpty());     // listings skip the spec unless asked
        QCOMPARE(all->at(1).model, QString("tiny"));
        QCOMPARE(all->at(1).strategy, QString("zero3"));
        QCOMPARE(all->at(1).worldSize, 2);
        QCOMPARE(all->at(1).totalSteps, qint64(50));
        QCOMPARE(all->at(1).layout, QString()); // data parallel only

        // The model-parallel layout from the spec; a spec that is not JSON lists without one.
        for (const auto& [spec, label] :
            {std::pair {R"({"tensor_parallel":2,"sequence_parallel":true,"pipeline_parallel":2,
                    "virtual_stages":2})",
                 "TP2+SP x PP2 v2"},
                std::pair {R"({"tensor_parallel":4,"sequence_parallel":false})", "TP4"},
                std::pair {R"({"pipeline_parallel":3,"virtual_stages":1})", "PP3"},
                std::pair {"not json", ""}}) {
            NewRun layout;
            layout.name = QString("layout %1").arg(label);
            layout.specJson = spec;
            const auto id = store->createRun(layout);
            QVERIFY2(id, qPrintable(id.error()));
            QCOMPARE(store->run(*id)->layout, QString(label));
            bool listed = false;
            const auto runs = store->listRuns();
            QVERIFY(runs);
            for (const auto& r : *runs)
                listed = listed || (r.id == *id && r.layout == QString(label));
            QVERIFY(listed);
            QVERIFY(store->deleteRun(*id));
        }

        RunQuery q;
        q.text = "GPU2";
        auto filtered = store->listRuns(q);
        QVERIFY(filtered);
        QCOMPARE(filtered->size(), 1);
        QCOMPARE(filtered->at(0).id, *b);

        auto byName = store->findRun("alpha");
        QVERIFY(byName);
        QCOMPARE(byName->id, *a);
        auto missing = store->findRun("nope");
        QVERIFY(!missing);
        QVERIFY(missing.error().contains("no run named 'nope'"));
        QVERIFY(!store->run(999));

        QVERIFY(store->setStatus(*a, RunStatus::Running));
        auto r = store->run(*a);
        QVERIFY(r->startedAt.isValid());
        QVERIFY(!r->endedAt.isValid());
        QVERIFY(store->setStatus(*a, RunStatus::Stopped, "stopped by user"));
        r = store->run(*a);
        QCOMPARE(toString(r->status), toString(RunStatus::Stopped));
        QCOMPARE(r->message, QString("stopped by user"));
        QVERIFY(r->endedAt.isValid());
        QVERIFY(store->setProcess(*a, 4242, R"({"start_time":7})"));
        QVERIFY(store->setJobId(*a, "17"));
        r = store->run(*a);
        QCOMPARE(r->pid, qint64(4242));
        QCOMPARE(r->jobId, QString("17"));

        q = {};
        q.status = RunStatus::Stopped;
        QCOMPARE(store->listRuns(q)->size(), 1);

        QVERIFY(store->deleteRun(*a));
        QCOMPARE(store->listRuns()->size(), 1);
        QVERIFY(!store->deleteRun(*a));
    }

    // One definition of a run's tokens/s and duration (issue 27, item 6): the store adds up what
    // protocol::RunPace does, a step logged again after a resume replaces its first record, and
    // the duration is the run's active time, not started..ended with its idle gaps.
    void paceIsOneDefinition()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        QVERIFY(store);
        const qint64 id = *store->createRun({});
        QVERIFY(store->setStatus(id, RunStatus::Running));
        std::vector<MetricRecord> first;
        for (int step = 1; step <= 4; ++step) {
            first.push_back(metric(step, 3.0, 1000.0 * step));
            first.back().stepTimeSec = 0.5 / step; // 500 tokens each
            first.back().wallTimeSec = 10.0 * step;
        }
        QVERIFY(store->appendMetrics(id, first, 100));
        // Resumed from the step-2 checkpoint (at 20 s): steps 3 and 4 again, then 5.
        std::vector<MetricRecord> resumed;
        for (int step = 3; step <= 5; ++step) {
            resumed.push_back(metric(step, 2.0, 250.0));
            resumed.back().stepTimeSec = 2.0; // 500 tokens each, slower
            resumed.back().wallTimeSec = 20.0 + 2.0 * (step - 2);
        }
        QVERIFY(store->appendMetrics(id, resumed, 200));
        shard::protocol::RunPace pace;
        for (const auto& batch : {first, resumed})
            for (const MetricRecord& r : batch)
                pace.add(r);
        auto r = store->run(id);
        QVERIFY(r);
        QCOMPARE(pace.tokensPerSec(), 2500.0 / (0.5 + 0.25 + 6.0));
        QCOMPARE(r->tokensPerSec, pace.tokensPerSec());
        QCOMPARE(pace.activeSec(), 26.0);
        QCOMPARE(r->activeSec, 26.0);
        // Started a moment ago by the wall clock, 26 s of training by the run's.
        QCOMPARE(r->durationMs(), qint64(26000));
        QCOMPARE(store->listRuns()->front().durationMs(), qint64(26000));
    }

    // One memory vocabulary: the memory table's category columns follow
    // protocol::memoryCategories(). A store without one of them (here frozen_params dropped, as a
    // store made before a new category would be) gets it at open, and every category round-trips
    // through the store, the series and the CSV-facing accessor.
    void memoryCategoryColumnsFollowTheTable()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("runs.sqlite");
        QVERIFY(RunStore::open(path));
        {
            sqlite3* db = nullptr;
            QCOMPARE(sqlite3_open(path.toUtf8().constData(), &db), SQLITE_OK);
            QCOMPARE(sqlite3_exec(db, "ALTER TABLE memory DROP COLUMN frozen_params", nullptr,
                         nullptr, nullptr),
                SQLITE_OK);
            sqlite3_close(db);
        }
        auto store = RunStore::open(path);
        QVERIFY2(store, qPrintable(store.error()));
        const qint64 id = *store->createRun({});
        MetricRecord r = metric(1, 2.0, 10);
        RankMemory m;
        int64_t value = 100;
        for (const shard::protocol::MemoryCategory& c : shard::protocol::memoryCategories())
            m.*c.bytes = value++;
        r.memory = {m};
        QVERIFY(store->appendMetrics(id, {r}, 10));
        auto mem = store->memorySeries(id);
        QVERIFY2(mem, qPrintable(mem.error()));
        value = 100;
        for (const shard::protocol::MemoryCategory& c : shard::protocol::memoryCategories())
            QCOMPARE(mem->at(0).category(c.key), (QVector<double> {double(value++)}));
        QCOMPARE(mem->at(0).category("frozen_params"), (QVector<double> {102}));
        auto series = shard::jobs::loadStoredSeries(*store, id);
        QVERIFY(series);
        QCOMPARE(series->lastMemory.front().frozenParamBytes, int64_t(102));
    }

    void summaryAndSeries()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        QVERIFY(store);
        const qint64 id = *store->createRun({});
        std::vector<MetricRecord> batch1
            = {metric(1, 4.0, 0, 100, 200), metric(2, 3.0, 1000, 150, 120)};
        batch1[1].evalLoss = 3.5;
        batch1[1].stepTimeSec = 1.0; // 1000 tokens
        QVERIFY(store->appendMetrics(id, batch1, 123));
        std::vector<MetricRecord> batch2 = {metric(3, 3.25, 3000, 90, 500)};
        batch2[0].stepTimeSec = 0.1; // 300 tokens
        QVERIFY(store->appendMetrics(id, batch2, 200));
        auto r = store->run(id);
        QCOMPARE(r->lastStep, qint64(3));
        QCOMPARE(*r->finalLoss, 3.25);
        QCOMPARE(*r->bestLoss, 3.0);
        // The steps' tokens over their time (not the mean of their rates, 2000); the step
        // without a rate adds nothing.
        QCOMPARE(r->tokensPerSec, 1300.0 / 1.1);
        QCOMPARE(r->activeSec, 3.0); // the clock at the last step
        QCOMPARE(r->peakMemoryPerRank, (QVector<qint64> {150, 500}));
        QCOMPARE(r->peakMemoryBytes(), qint64(500));
        QCOMPARE(r->tokens, qint64(300));
        QCOMPARE(*store->ingestOffset(id, "metrics"), qint64(200));
        QCOMPARE(*store->ingestOffset(id, "events"), qint64(0));

        auto s = store->metricSeries(id);
        QVERIFY(s);
        QCOMPARE(s->step, (QVector<double> {1, 2, 3}));
        QCOMPARE(s->loss, (QVector<double> {4.0, 3.0, 3.25}));
        QCOMPARE(s->evalStep, (QVector<double> {2}));
        QCOMPARE(s->evalLoss, (QVector<double> {3.5}));
        auto tail = store->metricSeries(id, 2);
        QCOMPARE(tail->step, (QVector<double> {3}));

        auto mem = store->memorySeries(id);
        QVERIFY(mem);
        QCOMPARE(mem->size(), 2);
        QCOMPARE(mem->at(1).rank, 1);
        QCOMPARE(mem->at(1).peak, (QVector<double> {200, 120, 500}));
        QCOMPARE(mem->at(0).category("sharded_params"), (QVector<double> {10, 10, 10}));

        shard::protocol::EventRecord e;
        e.kind = "finish";
        e.data = {{"reason", "completed"}};
        QVERIFY(store->appendEvents(id, {{0, e}, {40, e}}, 80));
        QVERIFY(store->appendEvents(id, {{40, e}}, 80)); // the same offset again: ignored
        QVERIFY(store->addEvent(id, e));
        auto ev = store->events(id);
        QCOMPARE(ev->size(), 3);
        QCOMPARE(ev->at(0).kind, QString("finish"));
        QVERIFY(ev->at(0).dataJson.contains("completed"));
        QCOMPARE(ev->at(2).offset, qint64(-1));
        QCOMPARE(store->events(id, ev->at(0).id)->size(), 2);

        // Deleting a run removes its points too.
        QVERIFY(store->deleteRun(id));
        QCOMPARE(*store->metricCount(id), qint64(0));
        QCOMPARE(store->memorySeries(id)->size(), 0);
    }

    // Every field of a rank's memory record survives the store: LoRA's frozen base, a GPU
    // rank's caching allocator and offloaded host bytes, as the Monitor reads them back
    // (loadStoredSeries).
    void gpuAndFrozenMemoryFieldsAreKept()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        QVERIFY(store);
        const qint64 id = *store->createRun({});
        MetricRecord r = metric(1, 2.0, 100, 5000, 6000);
        RankMemory& gpu = r.memory[1];
        gpu.frozenParamBytes = 777;
        gpu.cuda = true;
        gpu.cudaAllocatedBytes = 4000;
        gpu.cudaAllocatedPeakBytes = 6000;
        gpu.cudaReservedBytes = 8192;
        gpu.cudaReservedPeakBytes = 16384;
        gpu.cudaAllocRetries = 3;
        gpu.cudaOoms = 1;
        gpu.offloadedBytes = 123456;
        QVERIFY(store->appendMetrics(id, {r}, 10));
        auto series = loadStoredSeries(*store, id);
        QVERIFY2(series, qPrintable(series.error()));
        QCOMPARE(int(series->lastMemory.size()), 2);
        const RankMemory& cpu = series->lastMemory[0];
        QVERIFY(!cpu.cuda);
        QCOMPARE(cpu.cudaReservedPeakBytes, int64_t(0));
        const RankMemory& back = series->lastMemory[1];
        QCOMPARE(back.rank, 1);
        QCOMPARE(back.frozenParamBytes, int64_t(777));
        QVERIFY(back.cuda);
        QCOMPARE(back.cudaAllocatedBytes, int64_t(4000));
        QCOMPARE(back.cudaAllocatedPeakBytes, int64_t(6000));
        QCOMPARE(back.cudaReservedBytes, int64_t(8192));
        QCOMPARE(back.cudaReservedPeakBytes, int64_t(16384));
        QCOMPARE(back.cudaAllocRetries, int64_t(3));
        QCOMPARE(back.cudaOoms, int64_t(1));
        QCOMPARE(back.offloadedBytes, int64_t(123456));
        QCOMPARE(cpu.offloadedBytes, int64_t(0));
    }

    void compare()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        NewRun a;
        a.specJson = R"({"model":"m","lr":0.001,"strategy":"zero3","data":["a.jsonl"]})";
        NewRun b;
        b.specJson = R"({"model":"m","lr":0.0003,"strategy":"zero3","data":["b.jsonl"],"seed":3})";
        const qint64 ia = *store->createRun(a);
        const qint64 ib = *store->createRun(b);
        auto diff = store->compareConfigs({ia, ib});
        QVERIFY(diff);
        QStringList keys;
        for (const auto& d : *diff)
            keys << d.key;
        QCOMPARE(keys, (QStringList {"data", "lr", "seed"}));
        QCOMPARE(diff->at(1).values, (QStringList {"0.001", "0.0003"}));
        // Compared on resolved specs: a seed left out is the default seed 0.
        QCOMPARE(diff->at(2).values, (QStringList {"0", "3"}));
        QVERIFY(!store->compareConfigs({ia, 12345}));
    }

    void migratesOldSchema()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("old.sqlite");
        rawExec(path, kSchemaV1);
        auto store = RunStore::open(path);
        QVERIFY2(store, qPrintable(store.error()));
        QCOMPARE(store->schemaVersion(), RunStore::kSchemaVersion); // every step up to today's
        auto r = store->findRun("old-run");
        QVERIFY2(r, qPrintable(r.error()));
        QCOMPARE(toString(r->status), toString(RunStatus::Finished));
        QCOMPARE(r->model, QString("tiny-15m"));
        QCOMPARE(r->worldSize, 8);
        QCOMPARE(r->totalSteps, qint64(300));
        QCOMPARE(*r->bestLoss, 1.25);
        QCOMPARE(store->metricSeries(r->id)->size(), 2);
        // New-version features work on the migrated file.
        QVERIFY(store->appendMetrics(r->id, {metric(301, 1.0, 10, 5, 6)}, 10));
        QCOMPARE(store->memorySeries(r->id)->size(), 2);
        QVERIFY(store->setNotes(r->id, "baseline for the lr sweep"));
        QCOMPARE(store->run(r->id)->notes, QString("baseline for the lr sweep"));
    }

    void renameAndNotes()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        NewRun a;
        a.name = "first name";
        const qint64 id = *store->createRun(a);
        QVERIFY(store->renameRun(id, "  better name "));
        QCOMPARE(store->run(id)->name, QString("better name"));
        QVERIFY(!store->renameRun(id, "   "));
        QVERIFY(!store->renameRun(12345, "x"));
        QVERIFY(store->setNotes(id, "two\nlines"));
        QCOMPARE(store->listRuns()->front().notes, QString("two\nlines"));

        // A name another run has is refused (a name finds a run), the run's own is not.
        NewRun b;
        b.name = "taken";
        const qint64 other = *store->createRun(b);
        auto clash = store->renameRun(id, " taken ");
        QVERIFY(!clash);
        QVERIFY2(clash.error().contains(QString("run %1 is already called 'taken'").arg(other)),
            qPrintable(clash.error()));
        QCOMPARE(store->run(id)->name, QString("better name"));
        QVERIFY(store->renameRun(other, "taken"));
    }

    // A run that goes live again (resumed, continued) sheds how it last ended; a live run keeps
    // what it was told while live.
    void liveAgainClearsTheEndMessage()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        const qint64 id = *store->createRun({});
        QVERIFY(store->setStatus(id, RunStatus::Running));
        QVERIFY(store->setStatus(
            id, RunStatus::Interrupted, "the launcher process ended without a finish event"));
        QCOMPARE(
            store->run(id)->message, QString("the launcher process ended without a finish event"));
        QVERIFY(store->setStatus(id, RunStatus::Queued));
        QCOMPARE(store->run(id)->message, QString());
        QVERIFY(store->setStatus(id, RunStatus::Running, "waiting for the ranks"));
        QVERIFY(store->setStatus(id, RunStatus::Running));
        QCOMPARE(store->run(id)->message, QString("waiting for the ranks"));
        QVERIFY(store->setStatus(id, RunStatus::Failed, "rank 1 exited with code 1"));
        QVERIFY(store->setStatus(id, RunStatus::Failed));
        QCOMPARE(store->run(id)->message, QString("rank 1 exited with code 1"));
    }

    // Another connection's commit is seen in the change counter; this connection's own is not.
    void changeCounterSeesOtherWriters()
    {
        QTemporaryDir dir;
        auto mine = RunStore::open(dir.filePath("runs.sqlite"));
        auto before = mine->changeCounter();
        QVERIFY2(before, qPrintable(before.error()));
        QVERIFY(mine->createRun({}));
        QCOMPARE(*mine->changeCounter(), *before);
        {
            auto cli = RunStore::open(dir.filePath("runs.sqlite"));
            QVERIFY(cli->createRun({}));
        }
        QVERIFY(*mine->changeCounter() != *before);
    }

    void concurrentFirstOpen()
    {
        // The studio and several CLIs may open a new (or old-schema) store at the same moment:
        // each upgrade step runs once; nobody fails with "table runs already exists".
        for (int round = 0; round < 6; ++round) {
            QTemporaryDir dir;
            const QString path = dir.filePath("shared.sqlite");
            if (round % 2 == 1)
                rawExec(path, kSchemaV1);
            QVector<QString> failures(8);
            std::vector<std::thread> openers;
            for (int i = 0; i < failures.size(); ++i)
                openers.emplace_back([&path, &failures, i] {
                    auto store = RunStore::open(path);
                    if (!store)
                        failures[i] = store.error();
                    else if (store->schemaVersion() != RunStore::kSchemaVersion)
                        failures[i] = QString("schema %1").arg(store->schemaVersion());
                });
            for (auto& t : openers)
                t.join();
            for (const QString& f : failures)
                QVERIFY2(f.isEmpty(), qPrintable(QString("round %1: %2").arg(round).arg(f)));
        }
    }

    void errors()
    {
        QTemporaryDir dir;
        // Newer schema.
        const QString newer = dir.filePath("newer.sqlite");
        rawExec(newer, "CREATE TABLE t(x); PRAGMA user_version = 99;");
        auto s1 = RunStore::open(newer);
        QVERIFY(!s1);
        QVERIFY2(s1.error().contains("newer Shard Studio"), qPrintable(s1.error()));

        // Corrupt: not a database.
        const QString corrupt = dir.filePath("corrupt.sqlite");
        QFile f(corrupt);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(8192, 'x'));
        f.close();
        auto s2 = RunStore::open(corrupt);
        QVERIFY(!s2);
        QVERIFY2(
            s2.error().contains("corrupt") && s2.error().contains(corrupt), qPrintable(s2.error()));
        QString warning;
        QVERIFY(!RunStore::openBestEffort(corrupt, &warning));

        // Read-only open of a store that does not exist.
        auto s3 = RunStore::open(dir.filePath("none.sqlite"), OpenMode::ReadOnly);
        QVERIFY(!s3);
        QVERIFY(s3.error().contains("does not exist"));

        // Locked: another connection holds an exclusive lock on a store that needs upgrading.
        const QString locked = dir.filePath("locked.sqlite");
        rawExec(locked, kSchemaV1);
        sqlite3* other = nullptr;
        QCOMPARE(sqlite3_open(locked.toUtf8().constData(), &other), SQLITE_OK);
        QCOMPARE(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
        auto s4 = RunStore::open(locked, OpenMode::ReadWrite, 100);
        QVERIFY(!s4);
        QVERIFY2(s4.error().contains("locked by another process"), qPrintable(s4.error()));
        sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
        sqlite3_close(other);
        QVERIFY(RunStore::open(locked));

        // A writer holding the write lock on a current store: reads go on, writes say locked.
        auto main = RunStore::open(locked, OpenMode::ReadWrite, 100);
        QVERIFY(main);
        QCOMPARE(sqlite3_open(locked.toUtf8().constData(), &other), SQLITE_OK);
        QCOMPARE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
        QVERIFY(main->listRuns());
        auto w = main->createRun({});
        QVERIFY(!w);
        QVERIFY2(w.error().contains("locked"), qPrintable(w.error()));
        sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
        sqlite3_close(other);
        QVERIFY(main->createRun({}));

        // Read-only mode refuses writes with a clear message.
        auto ro = RunStore::open(locked, OpenMode::ReadOnly);
        QVERIFY(ro);
        QVERIFY(ro->isReadOnly());
        QVERIFY(ro->listRuns());
        auto w2 = ro->createRun({});
        QVERIFY(!w2);
        QVERIFY(w2.error().contains("read-only"));
    }

    void readOnlyDisk()
    {
        QTemporaryDir src;
        QTemporaryDir mnt;
        {
            auto store = RunStore::open(src.filePath("runs.sqlite"));
            QVERIFY(store);
            NewRun nr;
            nr.name = "kept";
            QVERIFY(store->createRun(nr));
        }
        // A real read-only file system: a read-only bind mount (needs root, as in CI here).
        if (::mount(src.path().toUtf8().constData(), mnt.path().toUtf8().constData(), nullptr,
                MS_BIND, nullptr)
            != 0)
            QSKIP("cannot bind-mount here (not root)");
        const int rc = ::mount(nullptr, mnt.path().toUtf8().constData(), nullptr,
            MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr);
        auto cleanup = qScopeGuard([&] { ::umount(mnt.path().toUtf8().constData()); });
        QCOMPARE(rc, 0);
        const QString path = mnt.filePath("runs.sqlite");
        auto rw = RunStore::open(path);
        QVERIFY(!rw);
        QVERIFY2(rw.error().contains("read-only"), qPrintable(rw.error()));
        QString warning;
        auto best = RunStore::openBestEffort(path, &warning);
        QVERIFY2(best, qPrintable(best.error()));
        QVERIFY(best->isReadOnly());
        QVERIFY(warning.contains("read-only"));
        auto runs = best->listRuns();
        QVERIFY2(runs, qPrintable(runs.error()));
        QCOMPARE(runs->size(), 1);
        QCOMPARE(runs->at(0).name, QString("kept"));
    }

    void manyRunsListFast()
    {
        QTemporaryDir dir;
        auto store = RunStore::open(dir.filePath("runs.sqlite"));
        for (int i = 0; i < 1000; ++i) {
            NewRun nr;
            nr.name = QString("run-%1").arg(i);
            nr.specJson = R"({"model":"tiny","strategy":"zero3"})";
            const qint64 id = *store->createRun(nr);
            QVERIFY(store->appendMetrics(id, {metric(1, 2.0, 10, 1, 2)}, 1));
        }
        QElapsedTimer t;
        t.start();
        auto runs = store->listRuns();
        const qint64 ms = t.elapsed();
        QVERIFY(runs);
        QCOMPARE(runs->size(), 1000);
        qInfo("listing 1000 runs: %lld ms", ms);
        QVERIFY2(ms < 200, "listing 1,000 runs must stay interactive");
    }
};

QTEST_GUILESS_MAIN(TestRunStore)
#include "tst_run_store.moc"
