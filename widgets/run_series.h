// One run's metrics as plot-ready columns plus its resolved spec (run.json), loaded from a run
// directory (docs/ARCHITECTURE.md) or from the run store.
#pragma once

#include <vector>

#include <QString>
#include <QStringList>
#include <QVector>

#include <nlohmann/json.hpp>

#include "jobs/result.h"
#include "protocol/records.h"
#include "widgets/live_plot.h"

namespace shard::widgets {

struct RunSeries {
    QString id;   // store id or run directory
    QString name; // what the user sees
    QString directory;
    nlohmann::json config = nlohmann::json::object(); // run.json
    QVector<double> step, tokens, wallTimeSec, loss, lr, gradNorm, tokensPerSec;
    QVector<double> evalLoss;    // NaN where a record has none
    QVector<double> stepTimeSec; // NaN where unknown
    QVector<double> commBytes;
    QVector<double> peakBytes; // largest peak over ranks, per record
    std::vector<protocol::RankMemory> lastMemory;
    std::vector<protocol::EventRecord> events;

    void append(const protocol::MetricRecord& record);
    const QVector<double>& xColumn(XAxisKind kind) const;
    qsizetype size() const { return step.size(); }
};

// Reads <dir>/run.json, metrics.jsonl and events.jsonl. Blocking: call it off the UI thread.
// A folder without run.json, or with a malformed one, is an error that says so.
jobs::Result<RunSeries> loadRunDirectory(const QString& directory);

// Sample completions side by side: one row per prompt (in order of first appearance over the
// runs), one completion per run (its latest for that prompt; empty where it has none).
struct SampleComparison {
    QString prompt;
    QStringList completions;
    QVector<qint64> steps; // the step of each completion (-1 where none)
};
std::vector<SampleComparison> compareSamples(const std::vector<const RunSeries*>& runs);

} // namespace shard::widgets
