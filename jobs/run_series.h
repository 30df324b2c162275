// One run's metrics as plot-ready columns plus its resolved spec (run.json): the one series shape
// from the run store to the Monitor, the Compare page and the CLI's PNG and CSV, read straight
// from the store's columns (loadStoredSeries), or from a run directory (loadRunDirectory).
#pragma once

#include <vector>

#include <QMap>
#include <QString>
#include <QStringList>
#include <QVector>

#include <nlohmann/json.hpp>

#include "jobs/result.h"
#include "jobs/run_store.h"
#include "protocol/records.h"

namespace shard::jobs {

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
    // Further scalars by tag, each at its own steps: a preference run's rewards ("train/
    // rewards/margins", as its TensorBoard file names them), an imported run's every tag.
    QMap<QString, ScalarSeries> scalars;

    void append(const protocol::MetricRecord& record);
    // Appends the points and events of `more`, a later part of the same run.
    void append(const RunSeries& more);
    qsizetype size() const { return step.size(); }
};

// Reads <dir>/run.json, metrics.jsonl and events.jsonl. Blocking: call it off the UI thread.
// A folder without run.json, or with a malformed one, is an error that says so.
Result<RunSeries> loadRunDirectory(const QString& directory);

// A recorded run's points after `afterStep` and events after event id `afterEventId`, with its
// spec, as columns read from the store's columns; *lastEventId: the newest event id read.
Result<RunSeries> loadStoredSeries(const RunStore& store, qint64 runId, qint64 afterStep = -1,
    qint64 afterEventId = 0, qint64* lastEventId = nullptr);

// Sample completions side by side: one row per prompt (in order of first appearance over the
// runs), one completion per run (its latest for that prompt; empty where it has none).
struct SampleComparison {
    QString prompt;
    QStringList completions;
    QVector<qint64> steps; // the step of each completion (-1 where none)
};
std::vector<SampleComparison> compareSamples(const std::vector<const RunSeries*>& runs);

} // namespace shard::jobs
