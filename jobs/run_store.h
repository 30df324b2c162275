// RunStore: the SQLite record of every run (spec, status, where it runs, summary), its metric
// points, per-rank memory points, events and ingestion offsets. Versioned migrations, WAL, every
// statement parameterised. One RunStore is one connection: use it from one thread (open another
// store on the same file for another thread; WAL lets readers and one writer work together).
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <QByteArray>
#include <QDateTime>
#include <QString>
#include <QStringList>
#include <QVector>

#include "jobs/result.h"
#include "protocol/records.h"
#include "tbio/known_tags.h"

namespace shard::jobs {

enum class RunStatus { Queued, Running, Finished, Failed, Interrupted, Stopped };

QString toString(RunStatus status); // "queued", "running", ...
std::optional<RunStatus> runStatusFromString(const QString& text);
bool isTerminal(RunStatus status); // finished, failed, interrupted, stopped

// Where a run runs: this machine, SSH hosts, a Slurm cluster, or nowhere (imported from another
// tool's files). The store's `target` column spells it "local", "ssh", "slurm", "import".
enum class TargetKind { Local, Ssh, Slurm, Import };
QString toString(TargetKind kind);
// nullopt for a name this build does not know.
std::optional<TargetKind> targetKindFromString(const QString& text);

// One row of the runs table. Timestamps are invalid QDateTime when not set.
// A run's model-parallel layout in a few characters: "TP2", "TP2+SP" (sequence parallel),
// "PP4", "PP2 v2" (interleaved 1F1B, 2 chunks a stage), "TP2 x PP2"; "" when tp = pp = 1.
QString layoutLabel(
    qint64 tensorParallel, bool sequenceParallel, qint64 pipelineParallel, qint64 virtualStages);

struct RunRecord {
    qint64 id = 0;
    QString name;
    QByteArray specJson; // the resolved run spec (run.json); empty in listings unless asked
    RunStatus status = RunStatus::Queued;
    TargetKind target = TargetKind::Local;
    QString host;          // "" for local; SSH hosts joined by ','; Slurm: the --via host or ""
    QString runDir;        // on `host` (node 0's host for SSH)
    qint64 pid = 0;        // local launcher pid (node 0's remote pid for SSH)
    QString jobId;         // Slurm job id
    QByteArray launchInfo; // JSON, launcher-specific (per-host pids, ssh options, sbatch path)
    QString message;       // finish reason or last error
    QString notes;         // the user's notes
    // An imported run's origin, JSON {"tool", "path", "host", "files"}; empty for the engine's.
    QByteArray source;
    QDateTime createdAt, startedAt, endedAt;

    // From the spec, for listing without parsing JSON.
    QString model, strategy;
    int worldSize = 0;
    qint64 totalSteps = 0;
    // The model-parallel layout (layoutLabel of the spec's tensor_parallel, sequence_parallel,
    // pipeline_parallel and virtual_stages): "" for data parallelism only.
    QString layout;

    // Summary, kept up to date by ingestion.
    qint64 lastStep = 0;
    qint64 tokens = 0;
    std::optional<double> finalLoss; // loss at the highest step
    std::optional<double> bestLoss;
    // One definition each (protocol::RunPace): tokens/s is the tokens of the logged steps over
    // the time those steps took; the active time is the run's clock at its last logged step
    // (start-up before it, and idle gaps between a stop and a resume, are not counted).
    double tokensPerSec = 0.0;
    double activeSec = 0.0;
    QVector<qint64> peakMemoryPerRank; // bytes, index = rank

    qint64 peakMemoryBytes() const; // max over ranks, 0 if none
    // The active time; before any step, started..ended (or now while running), 0 if not started.
    qint64 durationMs() const;
};

struct NewRun {
    QString name;
    QByteArray specJson = "{}";
    TargetKind target = TargetKind::Local;
    QString host;
    QString runDir;
    RunStatus status = RunStatus::Queued;
};

struct RunQuery {
    QString text;                    // substring of name, model, strategy, host or run dir
    std::optional<RunStatus> status; // only this status
    int limit = -1;                  // -1: all
    bool includeSpec = false;        // fill RunRecord::specJson
};

// Columns as vectors, ready for QCustomPlot::addData(keys, values, true). Sorted by step.
struct MetricSeries {
    QVector<double> step, tokens, wallTime, loss, lr, gradNorm, tokensPerSec, stepTime;
    QVector<double> commBytes;
    QVector<double> evalStep, evalLoss; // only the points that carry an eval loss
    int size() const { return step.size(); }
};

// A scalar under its own tag (every scalar of an imported run).
struct TaggedPoint {
    QString tag;
    qint64 step = 0;
    double wallTime = 0.0; // seconds since the epoch
    double value = 0.0;
};

// A scalar tag of an imported run whose points fill one of the store's metric columns
// (tbio::knownTag: "train/loss" fills the loss).
struct ImportedColumn {
    QString tag;
    tbio::StoreMetric metric;
};

struct ScalarSeries {
    QVector<double> step, wallTime, value;
};

struct MemorySeries {
    int rank = 0;
    QVector<double> step;
    // Bytes by category, in protocol::memoryCategories()' order (each is a store column named by
    // its key: a category added to that table is stored and read without more code here).
    std::vector<QVector<double>> byCategory;
    QVector<double> current, peak;
    // One category's points by its key ("grads"); empty when there is no such category.
    QVector<double> category(const char* key) const;
    // A GPU rank's caching allocator (protocol::RankMemory's cuda fields); cuda false on a CPU.
    QVector<bool> cuda;
    QVector<double> cudaAllocated, cudaAllocatedPeak, cudaReserved, cudaReservedPeak;
    QVector<double> cudaAllocRetries, cudaOoms;
    QVector<double> offloaded; // offload: the rank's state in host memory
};

struct EventRow {
    qint64 id = 0;
    qint64 offset = 0; // byte offset of the line in events.jsonl (or -1 if made by a launcher)
    QString kind;
    qint64 step = -1;
    double wallTime = 0.0;
    QString message;
    QByteArray dataJson;
};

// A config value that differs between compared runs; values[i] belongs to the i-th run id
// ("" where the run's spec lacks the key). Keys are dotted paths into run.json.
struct ConfigDiff {
    QString key;
    QStringList values;
};

enum class OpenMode { ReadWrite, ReadOnly };

class RunStore {
public:
    static constexpr int kSchemaVersion = 7;

    // $SHARD_STORE if set, else <AppDataLocation>/runs.sqlite.
    static QString defaultPath();

    // Opens (creating and migrating when ReadWrite) the store at `path`. Errors are one line:
    // locked by another process, corrupt, read-only disk, written by a newer version.
    static Result<RunStore> open(
        const QString& path, OpenMode mode = OpenMode::ReadWrite, int busyTimeoutMs = 5000);
    // For the studio: read-write if possible, else read-only when the file is readable (locked
    // writer, read-only disk); `warning` then says why it is read-only.
    static Result<RunStore> openBestEffort(const QString& path, QString* warning);

    RunStore(RunStore&&) noexcept;
    RunStore& operator=(RunStore&&) noexcept;
    ~RunStore();

    QString path() const;
    bool isReadOnly() const;
    int schemaVersion() const; // of the open file

    // Runs.
    Result<qint64> createRun(const NewRun& run);
    // For a resume: the newest run recorded at run.host and run.runDir continues (its spec is
    // replaced, it is queued again, its points and ingestion offsets are kept, so the resumed
    // steps overwrite the re-run ones); a new run when there is none.
    Result<qint64> reopenOrCreateRun(const NewRun& run);
    Result<RunRecord> run(qint64 id) const;
    // `idOrName`: a numeric id, or a name (the newest run with that name).
    Result<RunRecord> findRun(const QString& idOrName) const;
    Result<QVector<RunRecord>> listRuns(const RunQuery& query = {}) const;
    // The newest run recorded at this host ("" = local) and run directory; 0 when none.
    Result<qint64> findRunByDir(const QString& host, const QString& runDir) const;
    Status deleteRun(qint64 id);
    // Refuses a name another run has.
    Status renameRun(qint64 id, const QString& name);
    Status setNotes(qint64 id, const QString& notes);
    // Changes when another connection (the CLI, another studio, a pool thread) has committed
    // to the store since the last call on this one (SQLite's data_version).
    Result<qint64> changeCounter() const;
    // Sets started_at when entering Running (once), ended_at when entering a terminal status; a
    // run that goes from an ended status to a live one without a message loses its old message.
    Status setStatus(qint64 id, RunStatus status, const QString& message = {});
    Status setProcess(qint64 id, qint64 pid, const QByteArray& launchInfo);
    Status setJobId(qint64 id, const QString& jobId);
    Status setRunDir(qint64 id, const QString& runDir);
    Status setSpec(qint64 id, const QByteArray& specJson);

    // Points.
    Result<MetricSeries> metricSeries(qint64 runId, qint64 afterStep = -1) const;
    Result<QVector<MemorySeries>> memorySeries(qint64 runId, qint64 afterStep = -1) const;
    Result<QVector<EventRow>> events(qint64 runId, qint64 afterId = 0) const;
    Result<qint64> metricCount(qint64 runId) const;
    Result<QVector<ConfigDiff>> compareConfigs(const QVector<qint64>& runIds) const;

    // Ingestion (used by Ingestor): offsets of "metrics" / "events", and atomic appends that
    // store the points and the new offset in one transaction (so a crash never double-counts).
    // ingestOffset also gives where the last import stopped reading an imported run's file (its
    // path is the key; 0 if it was never read).
    Result<qint64> ingestOffset(qint64 runId, const QString& file) const;
    Status appendMetrics(
        qint64 runId, const std::vector<protocol::MetricRecord>& records, qint64 newOffset);
    Status appendEvents(qint64 runId,
        const std::vector<std::pair<qint64, protocol::EventRecord>>& eventsAtOffsets,
        qint64 newOffset);
    // Events made by a launcher (not read from events.jsonl), e.g. "interrupted".
    Status addEvent(qint64 runId, const protocol::EventRecord& event);

    // Imported runs (jobs/run_import.h), stored as they are read, a batch at a time, so an
    // import's memory does not grow with the file. storeScalars: one transaction; a point
    // replaces the stored one of its tag and step unless that one has a later wall time (a
    // restarted job logs some steps again: the later write wins).
    Status storeScalars(qint64 runId, const std::vector<TaggedPoint>& points);
    // Then, in one transaction: the metric columns of the steps from `fromStep` on are made again
    // from the stored scalars (`columns`: for each metric its tags, the first listed wins where
    // several log the same step; wall times in seconds after `t0`; no `fromStep`: none changed),
    // the source is recorded, each file's read offset is kept (ingestOffset), and the run's
    // summary (last step, final and best loss, tokens, pace) is recomputed from what is stored.
    Status finishImport(qint64 runId, const QByteArray& sourceJson,
        const std::vector<ImportedColumn>& columns, std::optional<qint64> fromStep, double t0,
        const std::vector<std::pair<QString, qint64>>& fileOffsets);
    // An imported run's tags (one index seek each, however many points), and one tag's points in
    // step order.
    Result<QStringList> scalarTags(qint64 runId) const;
    Result<ScalarSeries> scalarSeries(qint64 runId, const QString& tag) const;

private:
    struct Impl;
    explicit RunStore(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> d;
};

// After a stop on request: a run that did not record its own end gets a "stopped" event and the
// status stopped.
Status markStoppedOnRequest(RunStore& store, qint64 runId);

} // namespace shard::jobs
