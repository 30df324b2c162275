// Ingestor: moves a run directory's metrics.jsonl / events.jsonl into the RunStore by byte
// offset. Idempotent (the offset is stored in the same transaction as the points), tolerant of
// a half-written last line (left for the next read), batched (one transaction per chunk).
#pragma once

#include <functional>

#include <QByteArray>
#include <QString>

#include "jobs/result.h"
#include "jobs/run_store.h"

namespace shard::jobs {

enum class IngestFile { Metrics, Events };
QString fileKey(IngestFile file);  // "metrics" / "events": the key of RunStore::ingestOffset
QString fileName(IngestFile file); // "metrics.jsonl" / "events.jsonl"

struct IngestStats {
    qint64 metrics = 0;  // metric records stored
    qint64 events = 0;   // event records stored
    qint64 badLines = 0; // lines skipped (not JSON, wrong schema)
    qint64 lastStep = -1;
    std::optional<RunStatus> status; // set when an event changed the run's status
    QString statusMessage;
    QString lastBadLine; // the reason for the last skipped line, for a log
    void add(const IngestStats& other);
};

// Stores the rest of metrics.jsonl (the bytes after its stored offset). The ingestor calls it
// before it stores an events chunk that ends the run: the worker writes its finish event after
// its last metric, so a store whose run has ended then holds every point of that run.
using MetricsCatchUp = std::function<Result<IngestStats>()>;

class Ingestor {
public:
    explicit Ingestor(RunStore& store, qint64 maxBatchBytes = 8 << 20)
        : m_store(store)
        , m_maxBatchBytes(maxBatchBytes)
    {
    }

    // Reads everything new in <runDir>/metrics.jsonl and events.jsonl from the stored offsets.
    // Also copies <runDir>/run.json into the store when the run has no spec yet.
    Result<IngestStats> ingestRunDir(qint64 runId, const QString& runDir);

    // Feeds bytes of `file` that start at byte `startOffset` (a remote `tail -c +N` stream).
    // Consumes complete lines only; bytes before the stored offset are skipped (a reconnect may
    // resend them). *consumed = bytes of `data` that are now stored (the caller keeps the rest).
    // An events chunk that ends the run calls `catchUp` first (when given), so the metrics
    // stream, which arrives on its own, cannot lag behind the end of the run in the store.
    Result<IngestStats> ingestBytes(qint64 runId, IngestFile file, const QByteArray& data,
        qint64 startOffset, qint64* consumed, const MetricsCatchUp& catchUp = {});

    // The status a finish event means: completed -> finished; stopped/terminated/cancelled ->
    // stopped; anything else -> failed.
    static RunStatus statusForFinish(const QString& reason);

private:
    Result<IngestStats> ingestChunk(qint64 runId, IngestFile file, const std::string& chunk,
        qint64 chunkOffset, qint64* consumed, const MetricsCatchUp& catchUp);
    // Everything new in one file of the run directory, from its stored offset.
    Result<IngestStats> ingestFile(
        qint64 runId, const QString& runDir, IngestFile file, const MetricsCatchUp& catchUp);

    RunStore& m_store;
    qint64 m_maxBatchBytes;
};

} // namespace shard::jobs
