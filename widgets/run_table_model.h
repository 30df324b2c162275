// Table model over run records for the Runs page: id, name, model, strategy, ranks, status, best
// and final loss, peak memory, tokens/s, started, duration, the error or finish message, notes.
// Sort roles carry raw numbers so sorting by loss or memory is numeric.
#pragma once

#include <QAbstractTableModel>
#include <QVector>

#include "jobs/run_store.h"

namespace shard::widgets {

class RunTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        Id,
        Name,
        Source,
        Model,
        Strategy,
        Layout, // tensor / sequence / pipeline parallel (jobs::layoutLabel)
        Ranks,
        Status,
        BestLoss,
        FinalLoss,
        PeakMemory,
        TokensPerSec,
        Started,
        Duration,
        Message,
        Notes,
        ColumnCount
    };
    static constexpr int kSortRole = Qt::UserRole + 1;
    static constexpr int kIdRole = Qt::UserRole + 2;

    using QAbstractTableModel::QAbstractTableModel;

    void setRuns(QVector<jobs::RunRecord> runs);
    const QVector<jobs::RunRecord>& runs() const { return m_runs; }
    const jobs::RunRecord* runAt(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

private:
    QVector<jobs::RunRecord> m_runs;
};

} // namespace shard::widgets
