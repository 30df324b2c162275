// RunStore over SQLite (see run_store.h). Schema history lives in kMigrations: a store written
// by any older version is upgraded step by step when opened read-write.
#include "jobs/run_store.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <QDir>
#include <QElapsedTimer>
#include <QFileInfo>
#include <QStandardPaths>
#include <QThread>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "jobs/sqlite_db.h"
#include "protocol/config_diff.h"
#include "protocol/memory_categories.h"

namespace shard::jobs {

namespace {

// Each entry upgrades the schema from version i to i + 1. Never edit a shipped entry: add one.
const char* const kMigrations[] = {
    // v1: runs, metric points, events, ingestion offsets.
    R"sql(
CREATE TABLE runs(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    spec TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL DEFAULT 'queued',
    target TEXT NOT NULL DEFAULT 'local',
    host TEXT NOT NULL DEFAULT '',
    run_dir TEXT NOT NULL DEFAULT '',
    pid INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER,
    last_step INTEGER NOT NULL DEFAULT 0,
    tokens INTEGER NOT NULL DEFAULT 0,
    final_loss REAL,
    best_loss REAL,
    tps_sum REAL NOT NULL DEFAULT 0,
    tps_count INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX runs_name ON runs(name);
CREATE TABLE metrics(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    tokens INTEGER NOT NULL DEFAULT 0,
    loss REAL,
    lr REAL,
    grad_norm REAL,
    tokens_per_sec REAL,
    step_time REAL,
    wall_time REAL,
    eval_loss REAL,
    comm_bytes INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(run_id, step)
) WITHOUT ROWID;
CREATE TABLE events(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    byte_offset INTEGER NOT NULL,
    kind TEXT NOT NULL,
    step INTEGER NOT NULL DEFAULT -1,
    wall_time REAL NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_run ON events(run_id, id);
CREATE TABLE ingest_offsets(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    file TEXT NOT NULL,
    byte_offset INTEGER NOT NULL,
    PRIMARY KEY(run_id, file)
) WITHOUT ROWID;
)sql",
    // v2: per-rank memory points, Slurm job ids, launcher details, denormalised spec columns
    // for fast listing, per-rank peak memory summary; events made by launchers (offset -1)
    // are allowed several per run, events read from a file at most once per offset.
    R"sql(
CREATE TABLE memory(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    sharded_params INTEGER NOT NULL DEFAULT 0,
    gathered_params INTEGER NOT NULL DEFAULT 0,
    grads INTEGER NOT NULL DEFAULT 0,
    optimizer INTEGER NOT NULL DEFAULT 0,
    activations INTEGER NOT NULL DEFAULT 0,
    other INTEGER NOT NULL DEFAULT 0,
    current INTEGER NOT NULL DEFAULT 0,
    peak INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(run_id, rank, step)
) WITHOUT ROWID;
ALTER TABLE runs ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN launch_info TEXT NOT NULL DEFAULT '{}';
ALTER TABLE runs ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN strategy TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN world_size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN total_steps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN peak_memory TEXT NOT NULL DEFAULT '[]';
CREATE UNIQUE INDEX events_offset ON events(run_id, byte_offset) WHERE byte_offset >= 0;
UPDATE runs SET
    model = coalesce(json_extract(spec, '$.model'), ''),
    strategy = coalesce(json_extract(spec, '$.strategy'), ''),
    world_size = coalesce(json_extract(spec, '$.nodes'), 1)
        * coalesce(json_extract(spec, '$.procs_per_node'), 1),
    total_steps = coalesce(json_extract(spec, '$.steps'), 0)
    WHERE json_valid(spec);
)sql",
    // v3: the user's notes on a run (Runs page).
    R"sql(
ALTER TABLE runs ADD COLUMN notes TEXT NOT NULL DEFAULT '';
)sql",
    // v4: every field of a rank's memory record: LoRA's frozen base, and a GPU rank's caching
    // allocator (cuda = 1; allocated and reserved bytes with their peaks, retries, OOMs).
    R"sql(
ALTER TABLE memory ADD COLUMN frozen_params INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory ADD COLUMN cuda INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory ADD COLUMN cuda_allocated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory ADD COLUMN cuda_allocated_peak INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory ADD COLUMN cuda_reserved INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory ADD COLUMN cuda_reserved_peak INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory ADD COLUMN cuda_alloc_retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memory ADD COLUMN cuda_ooms INTEGER NOT NULL DEFAULT 0;
)sql",
    // v5: an offloading rank's state in host memory.
    R"sql(
ALTER TABLE memory ADD COLUMN offloaded INTEGER NOT NULL DEFAULT 0;
)sql",
    // v6: one definition of a run's throughput and duration (protocol::RunPace): the tokens of
    // its steps over their step time, and the active time at its last step (tps_sum/tps_count,
    // a mean of per-step rates, are no longer read).
    R"sql(
ALTER TABLE runs ADD COLUMN step_tokens REAL NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN step_sec REAL NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN active_sec REAL NOT NULL DEFAULT 0;
UPDATE runs SET
    step_tokens = (SELECT total(tokens_per_sec * step_time) FROM metrics m
        WHERE m.run_id = runs.id AND tokens_per_sec > 0 AND step_time > 0),
    step_sec = (SELECT total(step_time) FROM metrics m
        WHERE m.run_id = runs.id AND tokens_per_sec > 0 AND step_time > 0),
    active_sec = coalesce((SELECT wall_time FROM metrics m WHERE m.run_id = runs.id
        ORDER BY step DESC LIMIT 1), 0);
)sql",
    // v7: runs imported from other tools' logs (TensorBoard event files, trainer_state.json):
    // where they came from, and every scalar under its own tag.
    R"sql(
ALTER TABLE runs ADD COLUMN source TEXT NOT NULL DEFAULT '';
CREATE TABLE scalars(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    step INTEGER NOT NULL,
    wall_time REAL NOT NULL DEFAULT 0,
    value REAL,
    PRIMARY KEY(run_id, tag, step)
) WITHOUT ROWID;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == RunStore::kSchemaVersion);

const char* const kRunColumns
    = "id, name, status, target, host, run_dir, pid, job_id, launch_info, message, created_at, "
      "started_at, ended_at, model, strategy, world_size, total_steps, last_step, tokens, "
      "final_loss, best_loss, tps_sum, tps_count, peak_memory, spec, notes, step_tokens, "
      "step_sec, active_sec, source, "
      // The layout from the spec, when it is JSON (an imported or old row's may not be).
      "CASE WHEN json_valid(spec) THEN json_extract(spec, '$.tensor_parallel') END, "
      "CASE WHEN json_valid(spec) THEN json_extract(spec, '$.sequence_parallel') END, "
      "CASE WHEN json_valid(spec) THEN json_extract(spec, '$.pipeline_parallel') END, "
      "CASE WHEN json_valid(spec) THEN json_extract(spec, '$.virtual_stages') END";

qint64 nowMs()
{
    return QDateTime::currentMSecsSinceEpoch();
}

QDateTime fromMs(const SqliteDb::Statement& st, int col)
{
    if (st.isNull(col))
        return {};
    return QDateTime::fromMSecsSinceEpoch(st.int64(col));
}

QVector<qint64> parsePeaks(const QByteArray& json)
{
    QVector<qint64> out;
    auto j
        = nlohmann::json::parse(json.constData(), json.constData() + json.size(), nullptr, false);
    if (j.is_array())
        for (const auto& v : j)
            out.push_back(v.is_number() ? v.get<qint64>() : 0);
    return out;
}

QByteArray encodePeaks(const QVector<qint64>& peaks)
{
    nlohmann::json j = nlohmann::json::array();
    for (qint64 p : peaks)
        j.push_back(p);
    return QByteArray::fromStdString(j.dump());
}

RunRecord readRun(const SqliteDb::Statement& st, bool includeSpec)
{
    RunRecord r;
    r.id = st.int64(0);
    r.name = st.text(1);
    r.status = runStatusFromString(st.text(2)).value_or(RunStatus::Failed);
    // A kind this build does not know (a newer studio's) is shown and followed by its files,
    // never started or stopped.
    r.target = targetKindFromString(st.text(3)).value_or(TargetKind::Import);
    r.host = st.text(4);
    r.runDir = st.text(5);
    r.pid = st.int64(6);
    r.jobId = st.text(7);
    r.launchInfo = st.blob(8);
    r.message = st.text(9);
    r.createdAt = fromMs(st, 10);
    r.startedAt = fromMs(st, 11);
    r.endedAt = fromMs(st, 12);
    r.model = st.text(13);
    r.strategy = st.text(14);
    r.worldSize = static_cast<int>(st.int64(15));
    r.totalSteps = st.int64(16);
    r.lastStep = st.int64(17);
    r.tokens = st.int64(18);
    r.finalLoss = st.optReal(19);
    r.bestLoss = st.optReal(20);
    const double stepTokens = st.real(26);
    const double stepSec = st.real(27);
    r.tokensPerSec = stepSec > 0 ? stepTokens / stepSec : 0.0;
    r.activeSec = st.real(28);
    r.peakMemoryPerRank = parsePeaks(st.blob(23));
    if (includeSpec)
        r.specJson = st.blob(24);
    r.notes = st.text(25);
    r.source = st.blob(29);
    const auto count = [&](int col) { return st.isNull(col) ? 1 : st.int64(col); };
    r.layout = layoutLabel(count(30), !st.isNull(31) && st.int64(31) != 0, count(32), count(33));
    return r;
}

struct SpecColumns {
    QString model, strategy;
    int worldSize = 0;
    qint64 totalSteps = 0;
};

SpecColumns specColumns(const QByteArray& specJson)
{
    SpecColumns c;
    auto j = nlohmann::json::parse(
        specJson.constData(), specJson.constData() + specJson.size(), nullptr, false);
    if (!j.is_object())
        return c;
    auto str = [&](const char* key) {
        auto it = j.find(key);
        return it != j.end() && it->is_string() ? QString::fromStdString(it->get<std::string>())
                                                : QString();
    };
    auto num = [&](const char* key, qint64 fallback) {
        auto it = j.find(key);
        return it != j.end() && it->is_number_integer() ? it->get<qint64>() : fallback;
    };
    c.model = str("model");
    c.strategy = str("strategy");
    c.worldSize = static_cast<int>(num("nodes", 1) * num("procs_per_node", 1));
    c.totalSteps = num("steps", 0);
    return c;
}

} // namespace

QString layoutLabel(
    qint64 tensorParallel, bool sequenceParallel, qint64 pipelineParallel, qint64 virtualStages)
{
    QStringList parts;
    if (tensorParallel > 1)
        parts << QStringLiteral("TP%1").arg(tensorParallel)
                + (sequenceParallel ? QStringLiteral("+SP") : QString());
    if (pipelineParallel > 1)
        parts << QStringLiteral("PP%1").arg(pipelineParallel)
                + (virtualStages > 1 ? QStringLiteral(" v%1").arg(virtualStages) : QString());
    return parts.join(QStringLiteral(" x "));
}

QString toString(RunStatus status)
{
    switch (status) {
    case RunStatus::Queued:
        return QStringLiteral("queued");
    case RunStatus::Running:
        return QStringLiteral("running");
    case RunStatus::Finished:
        return QStringLiteral("finished");
    case RunStatus::Failed:
        return QStringLiteral("failed");
    case RunStatus::Interrupted:
        return QStringLiteral("interrupted");
    case RunStatus::Stopped:
        return QStringLiteral("stopped");
    }
    return QStringLiteral("failed");
}

std::optional<RunStatus> runStatusFromString(const QString& text)
{
    for (RunStatus s : {RunStatus::Queued, RunStatus::Running, RunStatus::Finished,
             RunStatus::Failed, RunStatus::Interrupted, RunStatus::Stopped})
        if (toString(s) == text)
            return s;
    return std::nullopt;
}

QString toString(TargetKind kind)
{
    switch (kind) {
    case TargetKind::Local:
        return QStringLiteral("local");
    case TargetKind::Ssh:
        return QStringLiteral("ssh");
    case TargetKind::Slurm:
        return QStringLiteral("slurm");
    case TargetKind::Import:
        return QStringLiteral("import");
    }
    return QStringLiteral("local");
}

std::optional<TargetKind> targetKindFromString(const QString& text)
{
    for (TargetKind k : {TargetKind::Local, TargetKind::Ssh, TargetKind::Slurm, TargetKind::Import})
        if (toString(k) == text)
            return k;
    return std::nullopt;
}

bool isTerminal(RunStatus status)
{
    return status != RunStatus::Queued && status != RunStatus::Running;
}

qint64 RunRecord::peakMemoryBytes() const
{
    qint64 m = 0;
    for (qint64 p : peakMemoryPerRank)
        m = std::max(m, p);
    return m;
}

qint64 RunRecord::durationMs() const
{
    if (activeSec > 0)
        return qint64(std::llround(activeSec * 1000.0));
    if (!startedAt.isValid())
        return 0;
    const QDateTime end = endedAt.isValid() ? endedAt : QDateTime::currentDateTime();
    return std::max<qint64>(0, startedAt.msecsTo(end));
}

struct RunStore::Impl {
    SqliteDb db;
    QString path;
    bool readOnly = false;
    int version = 0;

    // One line for the user, naming the store and what to do.
    QString describe(const QString& doing) const
    {
        const int code = db.lastCode();
        const QString detail = db.message();
        switch (code) {
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
            return QStringLiteral(
                "run store %1 is locked by another process while %2 (SQLite: %3); "
                "close the other Shard Studio or shard command and retry")
                .arg(path, doing, detail);
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
            return QStringLiteral(
                "run store %1 is corrupt or not a Shard Studio store (SQLite: %2); "
                "move it aside and a new store will be created, or pass --store")
                .arg(path, detail);
        case SQLITE_READONLY:
            return QStringLiteral("run store %1 is read-only while %2 (SQLite: %3); it can be "
                                  "browsed but not written; use --store or $SHARD_STORE for a "
                                  "writable location")
                .arg(path, doing, detail);
        case SQLITE_CANTOPEN:
        case SQLITE_PERM:
        case SQLITE_AUTH:
            return QStringLiteral("cannot open run store %1 (SQLite: %2); check that its folder "
                                  "exists and is writable, or pass --store")
                .arg(path, detail);
        case SQLITE_FULL:
            return QStringLiteral("run store %1: disk full while %2; free space and retry")
                .arg(path, doing);
        default:
            return QStringLiteral("run store %1: %2 failed (SQLite: %3)").arg(path, doing, detail);
        }
    }

    Status execOrFail(const char* sql, const QString& doing)
    {
        if (db.exec(sql) != SQLITE_OK)
            return fail(describe(doing));
        return {};
    }

    Status done(SqliteDb::Statement& st, const QString& doing)
    {
        if (!st.valid())
            return fail(describe(doing));
        const int rc = st.exec();
        if (rc != SQLITE_DONE)
            return fail(describe(doing));
        return {};
    }

    // A memory category added to protocol::memoryCategories() gets its column in the memory table
    // here (0 for the points stored before): no migration is written for it. Under the write lock,
    // so two processes opening the store at once add it once.
    Status addCategoryColumns()
    {
        auto missing = [this] {
            std::set<std::string> have;
            auto info = db.prepare("PRAGMA table_info(memory)");
            while (info.valid() && info.step())
                have.insert(info.text(1).toStdString());
            std::vector<const char*> out;
            for (const protocol::MemoryCategory& c : protocol::memoryCategories())
                if (!have.count(c.key))
                    out.push_back(c.key);
            return out;
        };
        if (missing().empty())
            return {};
        const QString doing = QStringLiteral("adding memory category columns");
        Tx tx(this);
        if (auto st = tx.begin(doing); !st)
            return st;
        for (const char* key : missing()) {
            const QByteArray sql = QByteArray("ALTER TABLE memory ADD COLUMN ") + key
                + " INTEGER NOT NULL DEFAULT 0";
            if (auto st = execOrFail(sql.constData(), doing); !st)
                return st;
        }
        return tx.commit(doing);
    }

    SqliteDb::Statement prep(const char* sql) const
    {
        return const_cast<SqliteDb&>(db).prepare(sql);
    }

    // A transaction that rolls back unless committed.
    struct Tx {
        Impl* impl;
        bool open = false;
        explicit Tx(Impl* i)
            : impl(i)
        {
        }
        Status begin(const QString& doing)
        {
            if (impl->readOnly)
                return fail(QStringLiteral("run store %1 is open read-only; %2 needs a writable "
                                           "store")
                                .arg(impl->path, doing));
            if (impl->db.exec("BEGIN IMMEDIATE") != SQLITE_OK)
                return fail(impl->describe(doing));
            open = true;
            return {};
        }
        Status commit(const QString& doing)
        {
            if (impl->db.exec("COMMIT") != SQLITE_OK)
                return fail(impl->describe(doing));
            open = false;
            return {};
        }
        ~Tx()
        {
            if (open)
                impl->db.exec("ROLLBACK");
        }
    };

    Status simpleUpdate(const char* sql, qint64 id, const QString& doing,
        const std::function<void(SqliteDb::Statement&)>& binder)
    {
        Tx tx(this);
        if (auto s = tx.begin(doing); !s)
            return s;
        auto st = db.prepare(sql);
        if (!st.valid())
            return fail(describe(doing));
        binder(st);
        if (auto s = done(st, doing); !s)
            return s;
        if (db.changes() == 0)
            return fail(QStringLiteral("no run with id %1 in %2").arg(id).arg(path));
        return tx.commit(doing);
    }
};

RunStore::RunStore(std::unique_ptr<Impl> impl)
    : d(std::move(impl))
{
}
RunStore::RunStore(RunStore&&) noexcept = default;
RunStore& RunStore::operator=(RunStore&&) noexcept = default;
RunStore::~RunStore() = default;

QString RunStore::defaultPath()
{
    const QByteArray env = qgetenv("SHARD_STORE");
    if (!env.isEmpty())
        return QString::fromLocal8Bit(env);
    QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    if (dir.isEmpty())
        dir = QDir::homePath() + QStringLiteral("/.local/share/shard-studio");
    return dir + QStringLiteral("/runs.sqlite");
}

Result<RunStore> RunStore::open(const QString& path, OpenMode mode, int busyTimeoutMs)
{
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->readOnly = mode == OpenMode::ReadOnly;
    const QFileInfo info(path);
    if (impl->readOnly && !info.exists())
        return fail(QStringLiteral("run store %1 does not exist yet (start a run, or pass "
                                   "--store with an existing store)")
                        .arg(path));
    if (!impl->readOnly && !info.exists() && !QDir().mkpath(info.absolutePath()))
        return fail(QStringLiteral("cannot create the folder %1 for the run store; pass --store "
                                   "or set $SHARD_STORE to a writable location")
                        .arg(info.absolutePath()));
    if (impl->db.open(path, impl->readOnly, busyTimeoutMs) != SQLITE_OK)
        return fail(impl->describe(QStringLiteral("opening")));
    if (!impl->readOnly && impl->db.fileIsReadOnly())
        return fail(QStringLiteral("run store %1 is on a read-only disk or not writable; it can "
                                   "be browsed read-only; use --store or $SHARD_STORE for a "
                                   "writable location")
                        .arg(path));

    // Series reads scan many pages: a larger cache and memory-mapped reads keep them fast.
    impl->db.exec("PRAGMA cache_size = -65536");
    impl->db.exec("PRAGMA mmap_size = 268435456");

    // Reading the schema version touches the header: a non-database file fails here.
    auto st = impl->db.prepare("PRAGMA user_version");
    if (impl->readOnly && (!st.valid() || !st.step()) && impl->db.lastCode() == SQLITE_CANTOPEN) {
        // A WAL store on read-only media: no -shm can be created; nobody can write it either.
        st = {};
        if (impl->db.open(path, true, busyTimeoutMs, true) != SQLITE_OK)
            return fail(impl->describe(QStringLiteral("opening")));
        st = impl->db.prepare("PRAGMA user_version");
    } else if (st.valid()) {
        st.reset();
    }
    if (!st.valid() || !st.step())
        return fail(impl->describe(QStringLiteral("reading the schema version")));
    impl->version = static_cast<int>(st.int64(0));
    st = {};
    if (impl->version > kSchemaVersion)
        return fail(QStringLiteral("run store %1 was written by a newer Shard Studio (schema %2, "
                                   "this build knows %3); update Shard Studio or pass --store")
                        .arg(path)
                        .arg(impl->version)
                        .arg(kSchemaVersion));
    if (impl->readOnly) {
        if (impl->version < kSchemaVersion)
            return fail(QStringLiteral("run store %1 has the older schema %2 and is opened "
                                       "read-only; open it once read-write to upgrade it")
                            .arg(path)
                            .arg(impl->version));
        impl->db.exec("PRAGMA query_only = ON");
        return RunStore(std::move(impl));
    }

    // Switching a new file to WAL needs it exclusively; SQLite reports BUSY at once (no busy
    // handler) when another process opening it at the same moment holds a lock: retry a while.
    QElapsedTimer walClock;
    walClock.start();
    while (impl->db.exec("PRAGMA journal_mode = WAL") != SQLITE_OK) {
        if ((impl->db.lastCode() & 0xff) != SQLITE_BUSY || walClock.elapsed() > busyTimeoutMs)
            return fail(impl->describe(QStringLiteral("switching to WAL")));
        QThread::msleep(5);
    }
    impl->db.exec("PRAGMA synchronous = NORMAL");
    if (auto s = impl->execOrFail("PRAGMA foreign_keys = ON", QStringLiteral("enabling keys")); !s)
        return s.error().isEmpty() ? fail(QStringLiteral("foreign keys")) : fail(s.error());
    while (impl->version < kSchemaVersion) {
        const int v = impl->version;
        Impl::Tx tx(impl.get());
        const QString doing = QStringLiteral("upgrading the schema to version %1").arg(v + 1);
        if (auto s = tx.begin(doing); !s)
            return fail(s.error());
        // Another process (the studio, a second CLI) may have upgraded it since the version was
        // read above: read it again under the write lock and apply only what is still missing.
        auto now = impl->db.prepare("PRAGMA user_version");
        if (!now.valid() || !now.step())
            return fail(impl->describe(doing));
        const int current = static_cast<int>(now.int64(0));
        now = {};
        if (current != v) {
            if (current < v || current > kSchemaVersion)
                return fail(QStringLiteral("run store %1 changed its schema to version %2 while "
                                           "opening; try again")
                                .arg(path)
                                .arg(current));
            impl->version = current; // the transaction rolls back: nothing to do in it
            continue;
        }
        if (auto s = impl->execOrFail(kMigrations[v], doing); !s)
            return fail(s.error());
        const QByteArray pragma = "PRAGMA user_version = " + QByteArray::number(v + 1);
        if (auto s = impl->execOrFail(pragma.constData(), doing); !s)
            return fail(s.error());
        if (auto s = tx.commit(doing); !s)
            return fail(s.error());
        impl->version = v + 1;
    }
    if (auto st = impl->addCategoryColumns(); !st)
        return fail(st.error());
    return RunStore(std::move(impl));
}

Result<RunStore> RunStore::openBestEffort(const QString& path, QString* warning)
{
    auto rw = open(path, OpenMode::ReadWrite);
    if (rw)
        return rw;
    auto ro = open(path, OpenMode::ReadOnly);
    if (!ro)
        return fail(rw.error());
    if (warning)
        *warning = rw.error() + QStringLiteral(" (opened read-only)");
    return ro;
}

QString RunStore::path() const
{
    return d->path;
}
bool RunStore::isReadOnly() const
{
    return d->readOnly;
}
int RunStore::schemaVersion() const
{
    return d->version;
}

Result<qint64> RunStore::createRun(const NewRun& run)
{
    const QString doing = QStringLiteral("recording a new run");
    Impl::Tx tx(d.get());
    if (auto s = tx.begin(doing); !s)
        return fail(s.error());
    const SpecColumns c = specColumns(run.specJson);
    auto st = d->db.prepare(
        "INSERT INTO runs(name, spec, status, target, host, run_dir, created_at, model, strategy, "
        "world_size, total_steps, started_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
        "?11, ?12)");
    if (!st.valid())
        return fail(d->describe(doing));
    const qint64 now = nowMs();
    st.bind(1, run.name)
        .bind(2, run.specJson)
        .bind(3, toString(run.status))
        .bind(4, toString(run.target))
        .bind(5, run.host)
        .bind(6, run.runDir)
        .bind(7, now)
        .bind(8, c.model)
        .bind(9, c.strategy)
        .bind(10, c.worldSize)
        .bind(11, c.totalSteps);
    if (run.status == RunStatus::Running)
        st.bind(12, now);
    else
        st.bindNull(12);
    if (auto s = d->done(st, doing); !s)
        return fail(s.error());
    const qint64 id = d->db.lastInsertId();
    if (auto s = tx.commit(doing); !s)
        return fail(s.error());
    return id;
}

Result<RunRecord> RunStore::run(qint64 id) const
{
    const QByteArray sql = QByteArray("SELECT ") + kRunColumns + " FROM runs WHERE id = ?1";
    auto st = d->prep(sql.constData());
    if (!st.valid())
        return fail(d->describe(QStringLiteral("reading run %1").arg(id)));
    st.bind(1, id);
    if (!st.step()) {
        if (st.lastCode() != SQLITE_DONE)
            return fail(d->describe(QStringLiteral("reading run %1").arg(id)));
        return fail(
            QStringLiteral("no run with id %1 in %2 (see `shard runs list`)").arg(id).arg(d->path));
    }
    return readRun(st, true);
}

Result<RunRecord> RunStore::findRun(const QString& idOrName) const
{
    bool isNumber = false;
    const qint64 id = idOrName.toLongLong(&isNumber);
    if (isNumber)
        return run(id);
    auto st = d->prep("SELECT id FROM runs WHERE name = ?1 ORDER BY id DESC LIMIT 1");
    if (!st.valid())
        return fail(d->describe(QStringLiteral("looking up run '%1'").arg(idOrName)));
    st.bind(1, idOrName);
    if (!st.step())
        return fail(QStringLiteral("no run named '%1' in %2 (see `shard runs list`)")
                        .arg(idOrName, d->path));
    return run(st.int64(0));
}

Result<QVector<RunRecord>> RunStore::listRuns(const RunQuery& query) const
{
    QByteArray sql = QByteArray("SELECT ") + kRunColumns
        + " FROM runs WHERE (?1 = '' OR instr(lower(name || ' ' || model || ' ' || strategy || ' ' "
          "|| host || ' ' || run_dir), lower(?1)) > 0) AND (?2 = '' OR status = ?2) "
          "ORDER BY id DESC LIMIT ?3";
    auto st = d->prep(sql.constData());
    if (!st.valid())
        return fail(d->describe(QStringLiteral("listing runs")));
    st.bind(1, query.text)
        .bind(2, query.status ? toString(*query.status) : QString())
        .bind(3, static_cast<int64_t>(query.limit));
    QVector<RunRecord> out;
    while (st.step())
        out.push_back(readRun(st, query.includeSpec));
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(QStringLiteral("listing runs")));
    return out;
}

Result<qint64> RunStore::findRunByDir(const QString& host, const QString& runDir) const
{
    auto st = d->prep("SELECT id FROM runs WHERE host = ?1 AND run_dir = ?2 ORDER BY id DESC "
                      "LIMIT 1");
    if (!st.valid())
        return fail(d->describe(QStringLiteral("looking up run directory %1").arg(runDir)));
    st.bind(1, host).bind(2, runDir);
    if (st.step())
        return static_cast<qint64>(st.int64(0));
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(QStringLiteral("looking up run directory %1").arg(runDir)));
    return qint64(0);
}

Status RunStore::renameRun(qint64 id, const QString& name)
{
    if (name.trimmed().isEmpty())
        return fail(QStringLiteral("a run needs a name"));
    // A name finds a run (`shard runs show NAME`, the Runs page's filter): two runs of one name
    // would be told apart by their ids only.
    auto same = d->prep("SELECT id FROM runs WHERE name = ?1 AND id <> ?2 LIMIT 1");
    if (!same.valid())
        return fail(d->describe(QStringLiteral("renaming run %1").arg(id)));
    same.bind(1, name.trimmed()).bind(2, id);
    if (same.step())
        return fail(QStringLiteral("run %1 is already called '%2': choose another name")
                        .arg(same.int64(0))
                        .arg(name.trimmed()));
    same = {};
    return d->simpleUpdate("UPDATE runs SET name = ?2 WHERE id = ?1", id,
        QStringLiteral("renaming run %1").arg(id),
        [&](auto& st) { st.bind(1, id).bind(2, name.trimmed()); });
}

Status RunStore::setNotes(qint64 id, const QString& notes)
{
    return d->simpleUpdate("UPDATE runs SET notes = ?2 WHERE id = ?1", id,
        QStringLiteral("saving the notes of run %1").arg(id),
        [&](auto& st) { st.bind(1, id).bind(2, notes); });
}

Result<qint64> RunStore::changeCounter() const
{
    auto st = d->prep("PRAGMA data_version");
    if (!st.valid() || !st.step())
        return fail(d->describe(QStringLiteral("reading the store's change counter")));
    return static_cast<qint64>(st.int64(0));
}

Status RunStore::deleteRun(qint64 id)
{
    return d->simpleUpdate("DELETE FROM runs WHERE id = ?1", id,
        QStringLiteral("deleting run %1").arg(id), [&](auto& st) { st.bind(1, id); });
}

Result<qint64> RunStore::reopenOrCreateRun(const NewRun& run)
{
    auto existing = findRunByDir(run.host, run.runDir);
    if (!existing)
        return existing;
    if (*existing == 0)
        return createRun(run);
    if (auto s = setSpec(*existing, run.specJson); !s)
        return fail(s.error());
    if (auto s = setStatus(*existing, RunStatus::Queued); !s)
        return fail(s.error());
    return *existing;
}

Status RunStore::setStatus(qint64 id, RunStatus status, const QString& message)
{
    const qint64 now = nowMs();
    return d->simpleUpdate(
        // A run that goes live again (resumed, continued) sheds the message of how it last
        // ended ("the launcher process ended without a finish event").
        "UPDATE runs SET status = ?2, message = CASE WHEN ?3 <> '' THEN ?3 WHEN ?6 THEN message "
        "WHEN status IN ('queued', 'running') THEN message ELSE '' END, "
        "started_at = CASE WHEN ?4 AND started_at IS NULL THEN ?5 ELSE started_at END, "
        "ended_at = CASE WHEN ?6 THEN coalesce(ended_at, ?5) ELSE NULL END WHERE id = ?1",
        id, QStringLiteral("updating the status of run %1").arg(id), [&](auto& st) {
            st.bind(1, id)
                .bind(2, toString(status))
                .bind(3, message)
                .bind(4, static_cast<int64_t>(status != RunStatus::Queued))
                .bind(5, now)
                .bind(6, static_cast<int64_t>(isTerminal(status)));
        });
}

Status RunStore::setProcess(qint64 id, qint64 pid, const QByteArray& launchInfo)
{
    return d->simpleUpdate("UPDATE runs SET pid = ?2, launch_info = ?3 WHERE id = ?1", id,
        QStringLiteral("recording the process of run %1").arg(id),
        [&](auto& st) { st.bind(1, id).bind(2, pid).bind(3, launchInfo); });
}

Status RunStore::setJobId(qint64 id, const QString& jobId)
{
    return d->simpleUpdate("UPDATE runs SET job_id = ?2 WHERE id = ?1", id,
        QStringLiteral("recording the job id of run %1").arg(id),
        [&](auto& st) { st.bind(1, id).bind(2, jobId); });
}

Status RunStore::setRunDir(qint64 id, const QString& runDir)
{
    return d->simpleUpdate("UPDATE runs SET run_dir = ?2 WHERE id = ?1", id,
        QStringLiteral("recording the run directory of run %1").arg(id),
        [&](auto& st) { st.bind(1, id).bind(2, runDir); });
}

Status RunStore::setSpec(qint64 id, const QByteArray& specJson)
{
    const SpecColumns c = specColumns(specJson);
    return d->simpleUpdate("UPDATE runs SET spec = ?2, model = ?3, strategy = ?4, world_size = "
                           "?5, total_steps = ?6 WHERE id = ?1",
        id, QStringLiteral("recording the spec of run %1").arg(id), [&](auto& st) {
            st.bind(1, id)
                .bind(2, specJson)
                .bind(3, c.model)
                .bind(4, c.strategy)
                .bind(5, c.worldSize)
                .bind(6, c.totalSteps);
        });
}

Result<MetricSeries> RunStore::metricSeries(qint64 runId, qint64 afterStep) const
{
    auto st = d->prep("SELECT step, tokens, wall_time, loss, lr, grad_norm, tokens_per_sec, "
                      "step_time, comm_bytes, eval_loss FROM metrics WHERE run_id = ?1 AND step > "
                      "?2 ORDER BY step");
    if (!st.valid())
        return fail(d->describe(QStringLiteral("reading the metrics of run %1").arg(runId)));
    st.bind(1, runId).bind(2, afterStep);
    MetricSeries s;
    if (auto n = metricCount(runId); n && *n > 0) {
        for (QVector<double>* v : {&s.step, &s.tokens, &s.wallTime, &s.loss, &s.lr, &s.gradNorm,
                 &s.tokensPerSec, &s.stepTime, &s.commBytes})
            v->reserve(*n);
    }
    while (st.step()) {
        const double step = static_cast<double>(st.int64(0));
        s.step.push_back(step);
        s.tokens.push_back(static_cast<double>(st.int64(1)));
        s.wallTime.push_back(st.real(2));
        s.loss.push_back(st.isNull(3) ? std::nan("") : st.real(3));
        // NULL where an imported run did not log the value at this step.
        s.lr.push_back(st.isNull(4) ? std::nan("") : st.real(4));
        s.gradNorm.push_back(st.isNull(5) ? std::nan("") : st.real(5));
        s.tokensPerSec.push_back(st.isNull(6) ? std::nan("") : st.real(6));
        s.stepTime.push_back(st.real(7));
        s.commBytes.push_back(static_cast<double>(st.int64(8)));
        if (!st.isNull(9)) {
            s.evalStep.push_back(step);
            s.evalLoss.push_back(st.real(9));
        }
    }
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(QStringLiteral("reading the metrics of run %1").arg(runId)));
    return s;
}

Result<QVector<MemorySeries>> RunStore::memorySeries(qint64 runId, qint64 afterStep) const
{
    const auto& categories = protocol::memoryCategories();
    const int n = int(categories.size());
    QByteArray sql = "SELECT rank, step";
    for (const protocol::MemoryCategory& c : categories)
        sql += QByteArray(", ") + c.key;
    sql += ", current, peak, cuda, cuda_allocated, cuda_allocated_peak, cuda_reserved, "
           "cuda_reserved_peak, cuda_alloc_retries, cuda_ooms, offloaded FROM memory WHERE "
           "run_id = ?1 AND step > ?2 ORDER BY rank, step";
    auto st = d->prep(sql.constData());
    if (!st.valid())
        return fail(d->describe(QStringLiteral("reading the memory of run %1").arg(runId)));
    st.bind(1, runId).bind(2, afterStep);
    QVector<MemorySeries> out;
    while (st.step()) {
        const int rank = static_cast<int>(st.int64(0));
        if (out.isEmpty() || out.back().rank != rank) {
            out.push_back({});
            out.back().rank = rank;
            out.back().byCategory.resize(categories.size());
        }
        MemorySeries& m = out.back();
        auto f = [&](int col) { return static_cast<double>(st.int64(col)); };
        m.step.push_back(f(1));
        for (int c = 0; c < n; ++c)
            m.byCategory[size_t(c)].push_back(f(2 + c));
        m.current.push_back(f(n + 2));
        m.peak.push_back(f(n + 3));
        m.cuda.push_back(st.int64(n + 4) != 0);
        m.cudaAllocated.push_back(f(n + 5));
        m.cudaAllocatedPeak.push_back(f(n + 6));
        m.cudaReserved.push_back(f(n + 7));
        m.cudaReservedPeak.push_back(f(n + 8));
        m.cudaAllocRetries.push_back(f(n + 9));
        m.cudaOoms.push_back(f(n + 10));
        m.offloaded.push_back(f(n + 11));
    }
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(QStringLiteral("reading the memory of run %1").arg(runId)));
    return out;
}

QVector<double> MemorySeries::category(const char* key) const
{
    const auto& categories = protocol::memoryCategories();
    for (size_t c = 0; c < categories.size() && c < byCategory.size(); ++c)
        if (std::string_view(categories[c].key) == key)
            return byCategory[c];
    return {};
}

Result<QVector<EventRow>> RunStore::events(qint64 runId, qint64 afterId) const
{
    auto st = d->prep("SELECT id, byte_offset, kind, step, wall_time, message, data FROM events "
                      "WHERE run_id = ?1 AND id > ?2 ORDER BY id");
    if (!st.valid())
        return fail(d->describe(QStringLiteral("reading the events of run %1").arg(runId)));
    st.bind(1, runId).bind(2, afterId);
    QVector<EventRow> out;
    while (st.step()) {
        EventRow e;
        e.id = st.int64(0);
        e.offset = st.int64(1);
        e.kind = st.text(2);
        e.step = st.int64(3);
        e.wallTime = st.real(4);
        e.message = st.text(5);
        e.dataJson = st.blob(6);
        out.push_back(std::move(e));
    }
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(QStringLiteral("reading the events of run %1").arg(runId)));
    return out;
}

Result<qint64> RunStore::metricCount(qint64 runId) const
{
    auto st = d->prep("SELECT count(*) FROM metrics WHERE run_id = ?1");
    if (!st.valid())
        return fail(d->describe(QStringLiteral("counting metrics")));
    st.bind(1, runId);
    if (!st.step())
        return fail(d->describe(QStringLiteral("counting metrics")));
    return static_cast<qint64>(st.int64(0));
}

Result<QVector<ConfigDiff>> RunStore::compareConfigs(const QVector<qint64>& runIds) const
{
    std::vector<nlohmann::json> configs;
    for (qint64 id : runIds) {
        auto r = run(id);
        if (!r)
            return fail(r.error());
        configs.push_back(nlohmann::json::parse(
            r->specJson.constData(), r->specJson.constData() + r->specJson.size(), nullptr, false));
    }
    QVector<ConfigDiff> out;
    for (const auto& d : protocol::differingConfigValues(configs)) {
        ConfigDiff diff;
        diff.key = QString::fromStdString(d.key);
        for (const auto& v : d.values)
            diff.values.push_back(QString::fromStdString(v));
        out.push_back(std::move(diff));
    }
    return out;
}

Result<qint64> RunStore::ingestOffset(qint64 runId, const QString& file) const
{
    auto st = d->prep("SELECT byte_offset FROM ingest_offsets WHERE run_id = ?1 AND file = ?2");
    if (!st.valid())
        return fail(d->describe(QStringLiteral("reading the ingestion offset")));
    st.bind(1, runId).bind(2, file);
    if (st.step())
        return static_cast<qint64>(st.int64(0));
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(QStringLiteral("reading the ingestion offset")));
    return qint64(0);
}

Status RunStore::appendMetrics(
    qint64 runId, const std::vector<protocol::MetricRecord>& records, qint64 newOffset)
{
    const QString doing = QStringLiteral("storing metrics of run %1").arg(runId);
    Impl::Tx tx(d.get());
    if (auto s = tx.begin(doing); !s)
        return s;

    auto sum = d->db.prepare("SELECT last_step, final_loss, best_loss, tps_sum, tps_count, "
                             "tokens, peak_memory FROM runs WHERE id = ?1");
    if (!sum.valid())
        return fail(d->describe(doing));
    sum.bind(1, runId);
    if (!sum.step())
        return fail(QStringLiteral("no run with id %1 in %2").arg(runId).arg(d->path));
    qint64 lastStep = sum.int64(0);
    std::optional<double> finalLoss = sum.optReal(1);
    std::optional<double> bestLoss = sum.optReal(2);
    double tpsSum = sum.real(3);
    qint64 tpsCount = sum.int64(4);
    qint64 tokens = sum.int64(5);
    QVector<qint64> peaks = parsePeaks(sum.blob(6));
    const bool hadPoints = finalLoss.has_value();
    sum = {};

    auto ins = d->db.prepare(
        "INSERT OR REPLACE INTO metrics(run_id, step, tokens, loss, lr, grad_norm, "
        "tokens_per_sec, step_time, wall_time, eval_loss, comm_bytes) VALUES(?1, ?2, ?3, ?4, ?5, "
        "?6, ?7, ?8, ?9, ?10, ?11)");
    const auto& categories = protocol::memoryCategories();
    const int n = int(categories.size());
    QByteArray memSql = "INSERT OR REPLACE INTO memory(run_id, step, rank";
    for (const protocol::MemoryCategory& c : categories)
        memSql += QByteArray(", ") + c.key;
    memSql += ", current, peak, cuda, cuda_allocated, cuda_allocated_peak, cuda_reserved, "
              "cuda_reserved_peak, cuda_alloc_retries, cuda_ooms, offloaded) VALUES(?1";
    for (int i = 2; i <= n + 13; ++i)
        memSql += ", ?" + QByteArray::number(i);
    memSql += ")";
    auto mem = d->db.prepare(memSql.constData());
    // A record's further scalars (a preference run's rewards) as tags, named as the engine's
    // TensorBoard file names them, so the Scalars tab and Compare read engine and imported runs
    // alike.
    auto tag = d->db.prepare("INSERT OR REPLACE INTO scalars(run_id, tag, step, wall_time, value) "
                             "VALUES(?1, ?2, ?3, ?4, ?5)");
    if (!ins.valid() || !mem.valid() || !tag.valid())
        return fail(d->describe(doing));
    bool first = !hadPoints;
    for (const auto& r : records) {
        for (const auto& [name, value] : r.scalars) {
            const QString qname = QString::fromStdString(name);
            tag.reset();
            tag.bind(1, runId)
                .bind(2,
                    qname.startsWith(QLatin1String("eval/")) ? qname
                                                             : QStringLiteral("train/") + qname)
                .bind(3, static_cast<int64_t>(r.step))
                .bind(4, r.wallTimeSec)
                .bind(5, value);
            if (tag.exec() != SQLITE_DONE)
                return fail(d->describe(doing));
        }
        ins.reset();
        ins.bind(1, runId)
            .bind(2, static_cast<int64_t>(r.step))
            .bind(3, static_cast<int64_t>(r.tokens))
            .bind(4, r.loss)
            .bind(5, r.lr)
            .bind(6, r.gradNorm)
            .bind(7, r.tokensPerSec)
            .bind(8, r.stepTimeSec)
            .bind(9, r.wallTimeSec)
            .bind(10, r.evalLoss)
            .bind(11, static_cast<int64_t>(r.commBytes));
        if (ins.exec() != SQLITE_DONE)
            return fail(d->describe(doing));
        for (const auto& m : r.memory) {
            mem.reset();
            mem.bind(1, runId).bind(2, static_cast<int64_t>(r.step)).bind(3, m.rank);
            for (int c = 0; c < n; ++c)
                mem.bind(4 + c, static_cast<int64_t>(m.*categories[size_t(c)].bytes));
            mem.bind(n + 4, static_cast<int64_t>(m.currentBytes))
                .bind(n + 5, static_cast<int64_t>(m.peakBytes))
                .bind(n + 6, static_cast<int64_t>(m.cuda ? 1 : 0))
                .bind(n + 7, static_cast<int64_t>(m.cudaAllocatedBytes))
                .bind(n + 8, static_cast<int64_t>(m.cudaAllocatedPeakBytes))
                .bind(n + 9, static_cast<int64_t>(m.cudaReservedBytes))
                .bind(n + 10, static_cast<int64_t>(m.cudaReservedPeakBytes))
                .bind(n + 11, static_cast<int64_t>(m.cudaAllocRetries))
                .bind(n + 12, static_cast<int64_t>(m.cudaOoms))
                .bind(n + 13, static_cast<int64_t>(m.offloadedBytes));
            if (mem.exec() != SQLITE_DONE)
                return fail(d->describe(doing));
            if (m.rank >= 0 && m.rank < 65536) {
                if (peaks.size() <= m.rank)
                    peaks.resize(m.rank + 1);
                peaks[m.rank] = std::max<qint64>(
                    {peaks[m.rank], qint64(m.peakBytes), qint64(m.currentBytes)});
            }
        }
        if (first || r.step >= lastStep) {
            lastStep = r.step;
            finalLoss = r.loss;
            tokens = std::max<qint64>(tokens, r.tokens);
        }
        first = false;
        if (!bestLoss || r.loss < *bestLoss)
            bestLoss = r.loss;
        if (r.tokensPerSec.value_or(0.0) > 0) {
            tpsSum += *r.tokensPerSec;
            ++tpsCount;
        }
    }
    auto upd = d->db.prepare("UPDATE runs SET last_step = ?2, final_loss = ?3, best_loss = ?4, "
                             "tps_sum = ?5, tps_count = ?6, tokens = ?7, peak_memory = ?8 WHERE "
                             "id = ?1");
    if (!upd.valid())
        return fail(d->describe(doing));
    upd.bind(1, runId)
        .bind(2, static_cast<int64_t>(lastStep))
        .bind(3, finalLoss)
        .bind(4, bestLoss)
        .bind(5, tpsSum)
        .bind(6, static_cast<int64_t>(tpsCount))
        .bind(7, static_cast<int64_t>(tokens))
        .bind(8, encodePeaks(peaks));
    if (auto s = d->done(upd, doing); !s)
        return s;
    // The pace over the stored steps (a resumed run logs some steps again: they replace theirs),
    // as protocol::RunPace adds it up; the same statement as the v6 migration's.
    auto pace = d->db.prepare(
        "UPDATE runs SET step_tokens = (SELECT total(tokens_per_sec * step_time) FROM metrics m "
        "WHERE m.run_id = ?1 AND tokens_per_sec > 0 AND step_time > 0), step_sec = (SELECT "
        "total(step_time) FROM metrics m WHERE m.run_id = ?1 AND tokens_per_sec > 0 AND "
        "step_time > 0), active_sec = coalesce((SELECT wall_time FROM metrics m WHERE m.run_id = "
        "?1 ORDER BY step DESC LIMIT 1), 0) WHERE id = ?1");
    if (!pace.valid())
        return fail(d->describe(doing));
    pace.bind(1, runId);
    if (auto s = d->done(pace, doing); !s)
        return s;
    auto off = d->db.prepare("INSERT OR REPLACE INTO ingest_offsets(run_id, file, byte_offset) "
                             "VALUES(?1, 'metrics', ?2)");
    off.bind(1, runId).bind(2, static_cast<int64_t>(newOffset));
    if (auto s = d->done(off, doing); !s)
        return s;
    return tx.commit(doing);
}

Status RunStore::appendEvents(qint64 runId,
    const std::vector<std::pair<qint64, protocol::EventRecord>>& eventsAtOffsets, qint64 newOffset)
{
    const QString doing = QStringLiteral("storing events of run %1").arg(runId);
    Impl::Tx tx(d.get());
    if (auto s = tx.begin(doing); !s)
        return s;
    auto ins = d->db.prepare("INSERT OR IGNORE INTO events(run_id, byte_offset, kind, step, "
                             "wall_time, message, data) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    if (!ins.valid())
        return fail(d->describe(doing));
    for (const auto& [offset, e] : eventsAtOffsets) {
        ins.reset();
        ins.bind(1, runId)
            .bind(2, static_cast<int64_t>(offset))
            .bind(3, QString::fromStdString(e.kind))
            .bind(4, static_cast<int64_t>(e.step))
            .bind(5, e.wallTimeSec)
            .bind(6, QString::fromStdString(e.message))
            .bind(7, QByteArray::fromStdString(protocol::encodeLine(e.data)));
        if (ins.exec() != SQLITE_DONE)
            return fail(d->describe(doing));
    }
    auto off = d->db.prepare("INSERT OR REPLACE INTO ingest_offsets(run_id, file, byte_offset) "
                             "VALUES(?1, 'events', ?2)");
    off.bind(1, runId).bind(2, static_cast<int64_t>(newOffset));
    if (auto s = d->done(off, doing); !s)
        return s;
    return tx.commit(doing);
}

Status RunStore::addEvent(qint64 runId, const protocol::EventRecord& e)
{
    const QString doing = QStringLiteral("storing an event of run %1").arg(runId);
    Impl::Tx tx(d.get());
    if (auto s = tx.begin(doing); !s)
        return s;
    auto ins = d->db.prepare("INSERT INTO events(run_id, byte_offset, kind, step, wall_time, "
                             "message, data) VALUES(?1, -1, ?2, ?3, ?4, ?5, ?6)");
    if (!ins.valid())
        return fail(d->describe(doing));
    ins.bind(1, runId)
        .bind(2, QString::fromStdString(e.kind))
        .bind(3, static_cast<int64_t>(e.step))
        .bind(4, e.wallTimeSec)
        .bind(5, QString::fromStdString(e.message))
        .bind(6, QByteArray::fromStdString(protocol::encodeLine(e.data)));
    if (auto s = d->done(ins, doing); !s)
        return s;
    return tx.commit(doing);
}

namespace {

std::optional<double> valueOrNull(double v)
{
    return std::isnan(v) ? std::nullopt : std::optional<double>(v);
}

} // namespace

Status RunStore::storeScalars(qint64 runId, const std::vector<TaggedPoint>& points)
{
    const QString doing = QStringLiteral("storing the imported points of run %1").arg(runId);
    Impl::Tx tx(d.get());
    if (auto s = tx.begin(doing); !s)
        return s;
    auto ins = d->db.prepare("INSERT INTO scalars(run_id, tag, step, wall_time, value) "
                             "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(run_id, tag, step) DO UPDATE "
                             "SET wall_time = excluded.wall_time, value = excluded.value "
                             "WHERE excluded.wall_time >= scalars.wall_time");
    if (!ins.valid())
        return fail(d->describe(doing));
    for (const auto& p : points) {
        ins.reset();
        ins.bind(1, runId)
            .bind(2, p.tag)
            .bind(3, static_cast<int64_t>(p.step))
            .bind(4, p.wallTime)
            .bind(5, valueOrNull(p.value));
        if (ins.exec() != SQLITE_DONE)
            return fail(d->describe(doing));
    }
    return tx.commit(doing);
}

namespace {

const char* columnOf(tbio::StoreMetric m)
{
    switch (m) {
    case tbio::StoreMetric::Loss:
        return "loss";
    case tbio::StoreMetric::EvalLoss:
        return "eval_loss";
    case tbio::StoreMetric::LearningRate:
        return "lr";
    case tbio::StoreMetric::GradNorm:
        return "grad_norm";
    case tbio::StoreMetric::TokensPerSec:
        return "tokens_per_sec";
    case tbio::StoreMetric::Tokens:
        return "tokens";
    case tbio::StoreMetric::StepTime:
        return "step_time";
    }
    return "loss";
}

} // namespace

Status RunStore::finishImport(qint64 runId, const QByteArray& sourceJson,
    const std::vector<ImportedColumn>& columns, std::optional<qint64> fromStep, double t0,
    const std::vector<std::pair<QString, qint64>>& fileOffsets)
{
    const QString doing = QStringLiteral("storing the imported points of run %1").arg(runId);
    Impl::Tx tx(d.get());
    if (auto s = tx.begin(doing); !s)
        return s;
    if (fromStep) {
        auto del = d->db.prepare("DELETE FROM metrics WHERE run_id = ?1 AND step >= ?2");
        if (!del.valid())
            return fail(d->describe(doing));
        del.bind(1, runId).bind(2, static_cast<int64_t>(*fromStep));
        if (auto s = d->done(del, doing); !s)
            return s;
        // The columns' tags last to first, each over what the ones after it left: where several
        // tags log a metric at a step, the first listed wins. A step's wall time is its latest.
        for (auto it = columns.rbegin(); it != columns.rend(); ++it) {
            const QString col = QString::fromLatin1(columnOf(it->metric));
            const bool tokens = it->metric == tbio::StoreMetric::Tokens;
            const QString value = tokens ? QStringLiteral("CAST(round(value) AS INTEGER)")
                                         : QStringLiteral("value");
            auto ins = d->db.prepare(
                QStringLiteral(
                    "INSERT INTO metrics(run_id, step, %1, wall_time) SELECT ?1, step, %2, "
                    "max(0, wall_time - ?3) FROM scalars WHERE run_id = ?1 AND tag = ?4 AND "
                    "step >= ?2%3 ON CONFLICT(run_id, step) DO UPDATE SET %1 = "
                    "coalesce(excluded.%1, metrics.%1), wall_time = max(metrics.wall_time, "
                    "excluded.wall_time)")
                    .arg(col, value, tokens ? QStringLiteral(" AND value IS NOT NULL") : QString())
                    .toUtf8()
                    .constData());
            if (!ins.valid())
                return fail(d->describe(doing));
            ins.bind(1, runId)
                .bind(2, static_cast<int64_t>(*fromStep))
                .bind(3, t0)
                .bind(4, it->tag);
            if (auto s = d->done(ins, doing); !s)
                return s;
        }
    }
    auto off = d->db.prepare(
        "INSERT OR REPLACE INTO ingest_offsets(run_id, file, byte_offset) VALUES(?1, ?2, ?3)");
    if (!off.valid())
        return fail(d->describe(doing));
    for (const auto& [file, offset] : fileOffsets) {
        off.reset();
        off.bind(1, runId).bind(2, file).bind(3, static_cast<int64_t>(offset));
        if (off.exec() != SQLITE_DONE)
            return fail(d->describe(doing));
    }
    // The summary from what is stored, as the engine's ingestion keeps it (final loss at the
    // highest step that has one).
    auto upd = d->db.prepare(
        "UPDATE runs SET source = ?2, "
        "last_step = coalesce((SELECT max(step) FROM metrics WHERE run_id = ?1), 0), "
        "final_loss = (SELECT loss FROM metrics WHERE run_id = ?1 AND loss IS NOT NULL "
        "ORDER BY step DESC LIMIT 1), "
        "best_loss = (SELECT min(loss) FROM metrics WHERE run_id = ?1), "
        "tokens = coalesce((SELECT max(tokens) FROM metrics WHERE run_id = ?1), 0), "
        "step_tokens = (SELECT total(tokens_per_sec * step_time) FROM metrics m WHERE m.run_id = "
        "?1 AND tokens_per_sec > 0 AND step_time > 0), "
        "step_sec = (SELECT total(step_time) FROM metrics m WHERE m.run_id = ?1 AND "
        "tokens_per_sec > 0 AND step_time > 0), "
        "active_sec = coalesce((SELECT wall_time FROM metrics m WHERE m.run_id = ?1 ORDER BY "
        "step DESC LIMIT 1), 0) WHERE id = ?1");
    if (!upd.valid())
        return fail(d->describe(doing));
    upd.bind(1, runId).bind(2, sourceJson);
    if (auto s = d->done(upd, doing); !s)
        return s;
    return tx.commit(doing);
}

Result<QStringList> RunStore::scalarTags(qint64 runId) const
{
    // The next tag after the last one, by the primary key: a seek per tag, where DISTINCT would
    // step through every point of a run with millions.
    auto st
        = d->prep("SELECT tag FROM scalars WHERE run_id = ?1 AND tag > ?2 ORDER BY tag LIMIT 1");
    const QString doing = QStringLiteral("reading the tags of run %1").arg(runId);
    if (!st.valid())
        return fail(d->describe(doing));
    QStringList tags;
    for (QString after = QStringLiteral("");;) {
        st.reset();
        st.bind(1, runId).bind(2, after);
        if (!st.step())
            break;
        after = st.text(0);
        tags << after;
    }
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(doing));
    return tags;
}

Result<ScalarSeries> RunStore::scalarSeries(qint64 runId, const QString& tag) const
{
    auto st = d->prep("SELECT step, wall_time, value FROM scalars WHERE run_id = ?1 AND tag = ?2 "
                      "ORDER BY step");
    const QString doing = QStringLiteral("reading %1 of run %2").arg(tag).arg(runId);
    if (!st.valid())
        return fail(d->describe(doing));
    st.bind(1, runId).bind(2, tag);
    ScalarSeries s;
    while (st.step()) {
        s.step.push_back(static_cast<double>(st.int64(0)));
        s.wallTime.push_back(st.real(1));
        s.value.push_back(st.isNull(2) ? std::nan("") : st.real(2));
    }
    if (st.lastCode() != SQLITE_DONE)
        return fail(d->describe(doing));
    return s;
}

Status markStoppedOnRequest(RunStore& store, qint64 runId)
{
    auto after = store.run(runId);
    if (!after || isTerminal(after->status))
        return {};
    protocol::EventRecord e;
    e.kind = "stopped";
    e.message = "stopped on request";
    (void)store.addEvent(runId, e);
    return store.setStatus(runId, RunStatus::Stopped, QStringLiteral("stopped on request"));
}

} // namespace shard::jobs
