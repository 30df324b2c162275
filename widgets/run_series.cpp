// Run directory loading into plot columns.
#include "widgets/run_series.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <QDir>
#include <QFileInfo>

#include "protocol/jsonl_reader.h"
#include "protocol/run_dir.h"

namespace shard::widgets {

void RunSeries::append(const protocol::MetricRecord& r)
{
    step.append(double(r.step));
    tokens.append(double(r.tokens));
    wallTimeSec.append(r.wallTimeSec);
    loss.append(r.loss);
    lr.append(r.lr);
    gradNorm.append(r.gradNorm);
    tokensPerSec.append(r.tokensPerSec);
    evalLoss.append(r.evalLoss.value_or(std::numeric_limits<double>::quiet_NaN()));
    stepTimeSec.append(r.stepTimeSec);
    commBytes.append(double(r.commBytes));
    double peak = 0.0;
    for (const auto& m : r.memory)
        peak = std::max(peak, double(m.peakBytes));
    peakBytes.append(peak);
    if (!r.memory.empty())
        lastMemory = r.memory;
}

const QVector<double>& RunSeries::xColumn(XAxisKind kind) const
{
    switch (kind) {
    case XAxisKind::Tokens:
        return tokens;
    case XAxisKind::WallTime:
        return wallTimeSec;
    case XAxisKind::Step:
        break;
    }
    return step;
}

jobs::Result<RunSeries> loadRunDirectory(const QString& directory)
{
    const QFileInfo info(directory);
    if (!info.exists())
        return jobs::fail(
            QObject::tr("%1: no such folder; pick the folder a run wrote (it holds run.json)")
                .arg(directory));
    if (!info.isDir())
        return jobs::fail(
            QObject::tr("%1: not a folder; pick the run's folder, which holds run.json")
                .arg(directory));
    const protocol::RunDir dir(QDir(directory).absolutePath().toStdString());
    RunSeries run;
    run.directory = QString::fromStdString(dir.root());
    run.id = run.directory;
    std::ifstream specIn(dir.specFile());
    if (!specIn)
        return jobs::fail(
            QObject::tr("%1: no run.json, so this is not a run folder; pick the folder given "
                        "to --out when the run started")
                .arg(directory));
    try {
        specIn >> run.config;
    } catch (const std::exception& e) {
        return jobs::fail(
            QObject::tr("%1/run.json is not valid JSON (%2); the run folder is damaged")
                .arg(directory, QString::fromUtf8(e.what())));
    }
    if (!run.config.is_object())
        return jobs::fail(QObject::tr("%1/run.json must hold a JSON object").arg(directory));
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

} // namespace shard::widgets
