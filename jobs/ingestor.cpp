// Offset-based ingestion of the run directory's JSON lines into the RunStore
// (docs/ARCHITECTURE.md).
#include "jobs/ingestor.h"

#include <fstream>

#include <QFile>

#include "protocol/jsonl_reader.h"
#include "protocol/records.h"

namespace shard::jobs {

QString fileKey(IngestFile file)
{
    return file == IngestFile::Metrics ? QStringLiteral("metrics") : QStringLiteral("events");
}

QString fileName(IngestFile file)
{
    return fileKey(file) + QStringLiteral(".jsonl");
}

void IngestStats::add(const IngestStats& other)
{
    metrics += other.metrics;
    events += other.events;
    badLines += other.badLines;
    lastStep = std::max(lastStep, other.lastStep);
    if (other.status) {
        status = other.status;
        statusMessage = other.statusMessage;
    }
    if (!other.lastBadLine.isEmpty())
        lastBadLine = other.lastBadLine;
}

RunStatus Ingestor::statusForFinish(const QString& reason)
{
    const QString r = reason.toLower();
    if (r == "completed" || r == "complete" || r == "done" || r == "finished" || r == "success")
        return RunStatus::Finished;
    if (r == "stopped" || r == "terminated" || r == "cancelled" || r == "canceled" || r == "signal"
        || r == "sigterm")
        return RunStatus::Stopped;
    return RunStatus::Failed;
}

Result<IngestStats> Ingestor::ingestChunk(qint64 runId, IngestFile file, const std::string& chunk,
    qint64 chunkOffset, qint64* consumed, const MetricsCatchUp& catchUp)
{
    IngestStats stats;
    std::vector<protocol::MetricRecord> metrics;
    std::vector<std::pair<qint64, protocol::EventRecord>> events;
    auto onBad = [&](const std::string& line, const std::string& why) {
        ++stats.badLines;
        stats.lastBadLine = QString::fromStdString(why + ": " + line.substr(0, 120));
    };
    protocol::JsonlChunkResult res;
    bool reopens = false; // a "requeued" event: a run that ended goes on
    if (file == IngestFile::Metrics) {
        res = protocol::consumeJsonl(
            chunk,
            [&](const nlohmann::json& j, int64_t) {
                auto type = j.find("type");
                if (type != j.end() && type->is_string() && *type != "metric")
                    throw std::runtime_error("not a metric record");
                metrics.push_back(protocol::metricFromJson(j));
                stats.lastStep = std::max<qint64>(stats.lastStep, metrics.back().step);
            },
            onBad);
    } else {
        res = protocol::consumeJsonl(
            chunk,
            [&](const nlohmann::json& j, int64_t lineOffset) {
                events.emplace_back(chunkOffset + lineOffset, protocol::eventFromJson(j));
                const auto& e = events.back().second;
                if (e.kind == "start") {
                    stats.status = RunStatus::Running;
                    stats.statusMessage.clear();
                } else if (e.kind == "requeued") {
                    // Slurm started the job again: the same run goes on from its checkpoint,
                    // also after a preemption or a stop had ended it.
                    stats.status = RunStatus::Running;
                    stats.statusMessage = QString::fromStdString(e.message);
                    reopens = true;
                } else if (e.kind == "preempted") {
                    // Stopped after a checkpoint; resumable (a Slurm job requeues itself).
                    stats.status = RunStatus::Interrupted;
                    stats.statusMessage = QString::fromStdString(e.message);
                } else if (e.kind == "finish") {
                    QString reason;
                    if (auto it = e.data.find("reason"); it != e.data.end() && it->is_string())
                        reason = QString::fromStdString(it->get<std::string>());
                    stats.status = statusForFinish(reason);
                    stats.statusMessage
                        = e.message.empty() ? reason : QString::fromStdString(e.message);
                }
            },
            onBad);
    }
    *consumed = res.consumedBytes;
    if (res.consumedBytes == 0)
        return stats;
    const qint64 newOffset = chunkOffset + res.consumedBytes;
    if (file == IngestFile::Metrics) {
        if (auto s = m_store.appendMetrics(runId, metrics, newOffset); !s)
            return fail(s.error());
        stats.metrics = static_cast<qint64>(metrics.size());
    } else {
        if (catchUp && stats.status && isTerminal(*stats.status)) {
            auto caught = catchUp();
            if (!caught)
                return fail(caught.error());
            stats.add(*caught); // metrics only: it sets no status
        }
        if (auto s = m_store.appendEvents(runId, events, newOffset); !s)
            return fail(s.error());
        stats.events = static_cast<qint64>(events.size());
        if (stats.status) {
            auto current = m_store.run(runId);
            // A late "start" never reopens a run that already ended; a requeued job does.
            if (current
                && !(isTerminal(current->status) && *stats.status == RunStatus::Running
                    && !reopens)) {
                if (current->status != *stats.status || !stats.statusMessage.isEmpty())
                    if (auto s = m_store.setStatus(runId, *stats.status, stats.statusMessage); !s)
                        return fail(s.error());
            } else {
                stats.status.reset();
            }
        }
    }
    return stats;
}

Result<IngestStats> Ingestor::ingestFile(
    qint64 runId, const QString& runDir, IngestFile file, const MetricsCatchUp& catchUp)
{
    IngestStats total;
    const QString path = runDir + QLatin1Char('/') + fileName(file);
    auto offset = m_store.ingestOffset(runId, fileKey(file));
    if (!offset)
        return fail(offset.error());
    qint64 at = *offset;
    for (;;) {
        std::ifstream in(path.toStdString(), std::ios::binary);
        if (!in)
            break; // not written yet
        in.seekg(0, std::ios::end);
        const qint64 size = static_cast<qint64>(in.tellg());
        if (at >= size)
            break;
        const qint64 n = std::min(size - at, m_maxBatchBytes);
        std::string buf(static_cast<size_t>(n), '\0');
        in.seekg(at);
        in.read(buf.data(), n);
        buf.resize(static_cast<size_t>(in.gcount()));
        qint64 consumed = 0;
        auto stats = ingestChunk(runId, file, buf, at, &consumed, catchUp);
        if (!stats)
            return fail(stats.error());
        total.add(*stats);
        if (consumed == 0) {
            if (n == m_maxBatchBytes) // one line longer than a batch: skip it as bad
                return fail(QStringLiteral("%1: a line at byte %2 is longer than %3 bytes")
                                .arg(path)
                                .arg(at)
                                .arg(m_maxBatchBytes));
            break; // only a half-written line is left
        }
        at += consumed;
    }
    return total;
}

Result<IngestStats> Ingestor::ingestRunDir(qint64 runId, const QString& runDir)
{
    // Events first: the finish event follows the last metric, so metrics read after it are
    // complete; and an events chunk that ends the run stores those metrics before itself, so
    // a reader of the store never sees a run that ended without all of its points.
    auto metrics = [&] { return ingestFile(runId, runDir, IngestFile::Metrics, {}); };
    IngestStats total;
    for (IngestFile file : {IngestFile::Events, IngestFile::Metrics}) {
        auto stats = ingestFile(runId, runDir, file, metrics);
        if (!stats)
            return fail(stats.error());
        total.add(*stats);
    }
    // The engine writes the resolved spec; keep it when the launcher had none.
    auto rec = m_store.run(runId);
    if (rec && (rec->specJson.isEmpty() || rec->specJson == "{}")) {
        QFile spec(runDir + QStringLiteral("/run.json"));
        if (spec.open(QIODevice::ReadOnly)) {
            const QByteArray json = spec.readAll();
            if (!json.trimmed().isEmpty() && json.trimmed().endsWith('}'))
                if (auto s = m_store.setSpec(runId, json.trimmed()); !s)
                    return fail(s.error());
        }
    }
    return total;
}

Result<IngestStats> Ingestor::ingestBytes(qint64 runId, IngestFile file, const QByteArray& data,
    qint64 startOffset, qint64* consumed, const MetricsCatchUp& catchUp)
{
    *consumed = 0;
    auto stored = m_store.ingestOffset(runId, fileKey(file));
    if (!stored)
        return fail(stored.error());
    if (startOffset > *stored)
        return fail(QStringLiteral("%1 of run %2: stream starts at byte %3 but only %4 bytes are "
                                   "stored (a gap); re-attach to read from the stored offset")
                        .arg(fileName(file))
                        .arg(runId)
                        .arg(startOffset)
                        .arg(*stored));
    const qint64 skip = std::min<qint64>(*stored - startOffset, data.size());
    IngestStats total;
    qint64 at = *stored;
    qint64 pos = skip;
    while (pos < data.size()) {
        const qint64 n = std::min<qint64>(data.size() - pos, m_maxBatchBytes);
        const std::string chunk(data.constData() + pos, static_cast<size_t>(n));
        qint64 used = 0;
        auto stats = ingestChunk(runId, file, chunk, at, &used, catchUp);
        if (!stats)
            return fail(stats.error());
        total.add(*stats);
        if (used == 0)
            break;
        pos += used;
        at += used;
    }
    *consumed = pos;
    return total;
}

} // namespace shard::jobs
