// Run series from a run directory or from the run store's columns.
#include "jobs/run_series.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <QDir>
#include <QFileInfo>

#include "protocol/jsonl_reader.h"
#include "protocol/memory_categories.h"
#include "protocol/run_dir.h"

namespace shard::jobs {

void RunSeries::append(const protocol::MetricRecord& r)
{
    step.append(double(r.step));
    tokens.append(double(r.tokens));
    wallTimeSec.append(r.wallTimeSec);
    loss.append(r.loss);
    constexpr double absent = std::numeric_limits<double>::quiet_NaN();
    lr.append(r.lr.value_or(absent));
    gradNorm.append(r.gradNorm.value_or(absent));
    tokensPerSec.append(r.tokensPerSec.value_or(absent));
    evalLoss.append(r.evalLoss.value_or(absent));
    stepTimeSec.append(r.stepTimeSec);
    commBytes.append(double(r.commBytes));
    double peak = 0.0;
    for (const auto& m : r.memory)
        peak = std::max(peak, double(m.peakBytes));
    peakBytes.append(peak);
    if (!r.memory.empty())
        lastMemory = r.memory;
    for (const auto& [name, value] : r.scalars) {
        const QString tag = QString::fromStdString(name);
        ScalarSeries& t
            = scalars[tag.startsWith(QLatin1String("eval/")) ? tag
                                                             : QStringLiteral("train/") + tag];
        t.step.append(double(r.step));
        t.wallTime.append(r.wallTimeSec);
        t.value.append(value);
    }
}

void RunSeries::append(const RunSeries& more)
{
    step += more.step;
    tokens += more.tokens;
    wallTimeSec += more.wallTimeSec;
    loss += more.loss;
    lr += more.lr;
    gradNorm += more.gradNorm;
    tokensPerSec += more.tokensPerSec;
    evalLoss += more.evalLoss;
    stepTimeSec += more.stepTimeSec;
    commBytes += more.commBytes;
    peakBytes += more.peakBytes;
    if (!more.lastMemory.empty())
        lastMemory = more.lastMemory;
    events.insert(events.end(), more.events.begin(), more.events.end());
    for (auto it = more.scalars.begin(); it != more.scalars.end(); ++it) {
        ScalarSeries& t = scalars[it.key()];
        t.step += it->step;
        t.wallTime += it->wallTime;
        t.value += it->value;
    }
}

namespace {

// An event row of the store as the record the run wrote.
protocol::EventRecord eventFromRow(const EventRow& row)
{
    protocol::EventRecord e;
    e.kind = row.kind.toStdString();
    e.step = row.step;
    e.wallTimeSec = row.wallTime;
    e.message = row.message.toStdString();
    e.data = nlohmann::json::parse(row.dataJson.toStdString(), nullptr, false);
    if (!e.data.is_object())
        e.data = nlohmann::json::object();
    return e;
}

} // namespace

Result<RunSeries> loadStoredSeries(
    const RunStore& store, qint64 runId, qint64 afterStep, qint64 afterEventId, qint64* lastEventId)
{
    auto run = store.run(runId);
    if (!run)
        return fail(run.error());
    // Events first: the store holds a run's points before the event that ends it, so points read
    // after the events hold every point of a run those events end.
    auto events = store.events(runId, afterEventId);
    auto metrics = store.metricSeries(runId, afterStep);
    auto memory = store.memorySeries(runId, afterStep);
    if (!events || !metrics || !memory)
        return fail(!events ? events.error() : !metrics ? metrics.error() : memory.error());
    RunSeries s;
    s.id = QString::number(runId);
    s.name = run->name;
    s.directory = run->runDir;
    s.config = nlohmann::json::parse(run->specJson.toStdString(), nullptr, false);
    if (!s.config.is_object())
        s.config = nlohmann::json::object();
    const MetricSeries& m = metrics.value();
    s.step = m.step;
    s.tokens = m.tokens;
    s.wallTimeSec = m.wallTime;
    s.loss = m.loss;
    s.lr = m.lr;
    s.gradNorm = m.gradNorm;
    s.tokensPerSec = m.tokensPerSec;
    s.stepTimeSec = m.stepTime;
    s.commBytes = m.commBytes;
    // Eval losses sit on their own steps: NaN where a step has none.
    s.evalLoss.fill(std::numeric_limits<double>::quiet_NaN(), s.step.size());
    for (int k = 0, j = 0; k < m.evalStep.size(); ++k) {
        while (j < s.step.size() && s.step[j] < m.evalStep[k])
            ++j;
        if (j < s.step.size() && s.step[j] == m.evalStep[k])
            s.evalLoss[j] = m.evalLoss[k];
    }
    // Peak over ranks per step, aligned with the metric steps; the last step's ranks in full.
    std::map<double, double> peakAt;
    double lastStep = -1;
    for (const MemorySeries& rank : memory.value()) {
        for (int i = 0; i < rank.step.size(); ++i)
            peakAt[rank.step[i]] = std::max(
                peakAt[rank.step[i]], std::max(rank.peak.value(i), rank.current.value(i)));
        if (!rank.step.isEmpty())
            lastStep = std::max(lastStep, rank.step.back());
    }
    s.peakBytes.reserve(s.step.size());
    for (double step : s.step) {
        auto it = peakAt.find(step);
        s.peakBytes.append(it == peakAt.end() ? 0.0 : it->second);
    }
    for (const MemorySeries& rank : memory.value()) {
        const int i = int(rank.step.size()) - 1;
        if (i < 0 || rank.step[i] != lastStep)
            continue;
        protocol::RankMemory r;
        r.rank = rank.rank;
        const auto& categories = protocol::memoryCategories();
        for (size_t c = 0; c < categories.size() && c < rank.byCategory.size(); ++c)
            r.*categories[c].bytes = qint64(rank.byCategory[c].value(i));
        r.currentBytes = qint64(rank.current.value(i));
        r.peakBytes = qint64(rank.peak.value(i));
        r.cuda = rank.cuda.value(i);
        r.cudaAllocatedBytes = qint64(rank.cudaAllocated.value(i));
        r.cudaAllocatedPeakBytes = qint64(rank.cudaAllocatedPeak.value(i));
        r.cudaReservedBytes = qint64(rank.cudaReserved.value(i));
        r.cudaReservedPeakBytes = qint64(rank.cudaReservedPeak.value(i));
        r.cudaAllocRetries = qint64(rank.cudaAllocRetries.value(i));
        r.cudaOoms = qint64(rank.cudaOoms.value(i));
        r.offloadedBytes = qint64(rank.offloaded.value(i));
        s.lastMemory.push_back(r);
    }
    // Every tag's points after afterStep (the store's scalars table: engine and imported runs).
    if (auto tags = store.scalarTags(runId); tags) {
        for (const QString& tag : tags.value()) {
            auto points = store.scalarSeries(runId, tag);
            if (!points)
                continue;
            ScalarSeries kept;
            for (qsizetype i = 0; i < points->step.size(); ++i)
                if (points->step[i] > double(afterStep)) {
                    kept.step.append(points->step[i]);
                    kept.wallTime.append(points->wallTime.value(i));
                    kept.value.append(points->value.value(i));
                }
            if (!kept.step.isEmpty())
                s.scalars.insert(tag, kept);
        }
    }
    qint64 newest = afterEventId;
    for (const EventRow& row : events.value()) {
        s.events.push_back(eventFromRow(row));
        newest = std::max(newest, row.id);
    }
    if (lastEventId)
        *lastEventId = newest;
    return s;
}

Result<RunSeries> loadRunDirectory(const QString& directory)
{
    const QFileInfo info(directory);
    if (!info.exists())
        return fail(
            QObject::tr("%1: no such folder; pick the folder a run wrote (it holds run.json)")
                .arg(directory));
    if (!info.isDir())
        return fail(QObject::tr("%1: not a folder; pick the run's folder, which holds run.json")
                        .arg(directory));
    const protocol::RunDir dir(QDir(directory).absolutePath().toStdString());
    RunSeries run;
    run.directory = QString::fromStdString(dir.root());
    run.id = run.directory;
    std::ifstream specIn(dir.specFile());
    if (!specIn)
        return fail(
            QObject::tr("%1: no run.json, so this is not a run folder; pick the folder given "
                        "to --out when the run started")
                .arg(directory));
    try {
        specIn >> run.config;
    } catch (const std::exception& e) {
        return fail(QObject::tr("%1/run.json is not valid JSON (%2); the run folder is damaged")
                        .arg(directory, QString::fromUtf8(e.what())));
    }
    if (!run.config.is_object())
        return fail(QObject::tr("%1/run.json must hold a JSON object").arg(directory));
    run.name = run.config.contains("name") && run.config["name"].is_string()
            && !run.config["name"].get<std::string>().empty()
        ? QString::fromStdString(run.config["name"].get<std::string>())
        : QFileInfo(directory).fileName();

    QString badLine;
    protocol::readJsonlFile(
        dir.metricsFile(), 0,
        [&](const nlohmann::json& j, int64_t) {
            try {
                run.append(protocol::metricFromJson(j));
            } catch (const std::exception& e) {
                if (badLine.isEmpty())
                    badLine = QString::fromUtf8(e.what());
            }
        },
        {}, int64_t(1) << 40);
    protocol::readJsonlFile(
        dir.eventsFile(), 0,
        [&](const nlohmann::json& j, int64_t) {
            try {
                run.events.push_back(protocol::eventFromJson(j));
            } catch (const std::exception&) {
            }
        },
        {}, int64_t(64) << 20);
    return run;
}

std::vector<SampleComparison> compareSamples(const std::vector<const RunSeries*>& runs)
{
    std::vector<SampleComparison> rows;
    std::map<std::string, size_t> rowOf;
    for (size_t r = 0; r < runs.size(); ++r)
        for (const auto& e : runs[r]->events) {
            const auto sample = protocol::sampleFromEvent(e);
            if (!sample)
                continue;
            auto [it, added] = rowOf.emplace(sample->prompt, rows.size());
            if (added) {
                SampleComparison row;
                row.prompt = QString::fromStdString(sample->prompt);
                for (size_t k = 0; k < runs.size(); ++k) {
                    row.completions << QString();
                    row.steps << -1;
                }
                rows.push_back(row);
            }
            SampleComparison& row = rows[it->second];
            if (sample->step >= row.steps[qsizetype(r)]) {
                row.completions[qsizetype(r)] = QString::fromStdString(sample->completion);
                row.steps[qsizetype(r)] = sample->step;
            }
        }
    return rows;
}

} // namespace shard::jobs
