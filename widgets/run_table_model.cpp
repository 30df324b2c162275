// RunTableModel: display strings plus numeric sort keys.
#include "widgets/run_table_model.h"

#include <QColor>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLocale>

#include "widgets/monitor_page.h"

namespace shard::widgets {

namespace {

// Where a run comes from: where the engine ran it, or the tool whose logs were imported.
QString sourceText(const jobs::RunRecord& r)
{
    const QString job
        = r.jobId.isEmpty() ? QString() : RunTableModel::tr("Slurm job %1").arg(r.jobId);
    switch (r.target) {
    case jobs::TargetKind::Local:
        return RunTableModel::tr("this machine");
    case jobs::TargetKind::Ssh:
        return RunTableModel::tr("SSH: %1").arg(r.host);
    case jobs::TargetKind::Slurm:
        return job.isEmpty() ? RunTableModel::tr("Slurm") : job;
    case jobs::TargetKind::Import: {
        const QString tool = QJsonDocument::fromJson(r.source).object().value("tool").toString();
        QString text = RunTableModel::tr("imported: %1")
                           .arg(tool.isEmpty() ? RunTableModel::tr("logs") : tool);
        if (!job.isEmpty())
            text += ", " + job;
        return text;
    }
    }
    return {};
}

// An imported run's files: where, in what format, which.
QString sourceTip(const jobs::RunRecord& r)
{
    if (r.target != jobs::TargetKind::Import)
        return r.host.isEmpty() ? r.runDir : r.host + ":" + r.runDir;
    const QJsonObject s = QJsonDocument::fromJson(r.source).object();
    QStringList lines;
    lines << RunTableModel::tr("Imported from %1 (%2)")
                 .arg(r.host.isEmpty() ? r.runDir : r.host + ":" + r.runDir,
                     s.value("format").toString());
    if (!s.value("writer").toString().isEmpty())
        lines << RunTableModel::tr("Written by: %1").arg(s.value("writer").toString());
    for (const QJsonValue& f : s.value("files").toArray())
        lines << f.toString();
    return lines.join('\n');
}

} // namespace

void RunTableModel::setRuns(QVector<jobs::RunRecord> runs)
{
    beginResetModel();
    m_runs = std::move(runs);
    endResetModel();
}

const jobs::RunRecord* RunTableModel::runAt(int row) const
{
    return row >= 0 && row < m_runs.size() ? &m_runs[row] : nullptr;
}

int RunTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_runs.size());
}

int RunTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case Id:
        return tr("ID");
    case Name:
        return tr("Name");
    case Source:
        return tr("Source");
    case Model:
        return tr("Model");
    case Strategy:
        return tr("Strategy");
    case Layout:
        return tr("Layout");
    case Ranks:
        return tr("Ranks");
    case Status:
        return tr("Status");
    case BestLoss:
        return tr("Best loss");
    case FinalLoss:
        return tr("Final loss");
    case PeakMemory:
        return tr("Peak memory");
    case TokensPerSec:
        return tr("Tokens/s");
    case Started:
        return tr("Started");
    case Duration:
        return tr("Duration");
    case Message:
        return tr("Message");
    case Notes:
        return tr("Notes");
    }
    return {};
}

QVariant RunTableModel::data(const QModelIndex& index, int role) const
{
    const jobs::RunRecord* r = runAt(index.row());
    if (!r)
        return {};
    if (role == kIdRole)
        return r->id;
    if (role == Qt::TextAlignmentRole)
        return index.column() == Id
                || (index.column() >= Ranks && index.column() <= Duration
                    && index.column() != Status && index.column() != Started)
            ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
            : QVariant(Qt::AlignLeft | Qt::AlignVCenter);
    if (role == Qt::ToolTipRole && (index.column() == Message || index.column() == Notes))
        return index.column() == Message ? r->message : r->notes;
    if (role == Qt::ToolTipRole && index.column() == Source)
        return sourceTip(*r);
    if (role == Qt::ForegroundRole && index.column() == Status) {
        switch (r->status) {
        case jobs::RunStatus::Failed:
            return QColor(200, 40, 40);
        case jobs::RunStatus::Running:
            return QColor(30, 120, 200);
        case jobs::RunStatus::Finished:
            return QColor(30, 140, 60);
        default:
            return {};
        }
    }
    const bool sort = role == kSortRole;
    if (role != Qt::DisplayRole && !sort)
        return {};
    switch (index.column()) {
    case Id:
        return r->id;
    case Name:
        return r->name;
    case Source:
        return sourceText(*r);
    case Model:
        return r->model;
    case Strategy:
        return r->strategy;
    case Layout:
        return r->layout;
    case Ranks:
        return r->worldSize;
    case Status:
        return jobs::toString(r->status);
    case BestLoss:
        if (sort)
            return r->bestLoss.value_or(1e300);
        return r->bestLoss ? QString::number(*r->bestLoss, 'f', 4) : QString();
    case FinalLoss:
        if (sort)
            return r->finalLoss.value_or(1e300);
        return r->finalLoss ? QString::number(*r->finalLoss, 'f', 4) : QString();
    case PeakMemory:
        if (sort)
            return r->peakMemoryBytes();
        return r->peakMemoryBytes() > 0 ? formatBytes(double(r->peakMemoryBytes())) : QString();
    case TokensPerSec:
        if (sort)
            return r->tokensPerSec;
        return r->tokensPerSec > 0 ? QLocale().toString(r->tokensPerSec, 'f', 0) : QString();
    case Started:
        if (sort)
            return r->startedAt.isValid() ? r->startedAt.toMSecsSinceEpoch() : qint64(0);
        return r->startedAt.isValid()
            ? QLocale().toString(r->startedAt.toLocalTime(), QLocale::ShortFormat)
            : QString();
    case Duration:
        if (sort)
            return r->durationMs();
        return r->durationMs() > 0 ? formatDuration(r->durationMs() / 1000.0) : QString();
    case Message:
        // The reason a run did not finish is what a user scans for; a clean finish says little.
        return r->status == jobs::RunStatus::Finished ? QString() : r->message.section('\n', 0, 0);
    case Notes:
        // Every line, on one row (the tooltip and the Notes dialog show them as written).
        return r->notes.trimmed().split('\n', Qt::SkipEmptyParts).join(QStringLiteral(" ⏎ "));
    }
    return {};
}

} // namespace shard::widgets
