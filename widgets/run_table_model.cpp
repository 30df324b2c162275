// RunTableModel: display strings plus numeric sort keys.
#include "widgets/run_table_model.h"

#include <QColor>
#include <QLocale>

#include "widgets/monitor_page.h"

namespace shard::widgets {

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
    case Model:
        return tr("Model");
    case Strategy:
        return tr("Strategy");
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
    case Model:
        return r->model;
    case Strategy:
        return r->strategy;
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
