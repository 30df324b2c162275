// Runs page: every recorded run in a sortable, filterable table (fast with thousands of runs:
// listing happens on the store thread, sorting and filtering in a proxy model), with actions to
// monitor, compare, import a run folder and refresh.
#pragma once

#include <QVector>
#include <QWidget>

#include "jobs/run_store.h"

class QLineEdit;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace shard::widgets {

class MessageBar;
class RunTableModel;
class StoreService;

class RunsPage : public QWidget {
    Q_OBJECT
public:
    explicit RunsPage(QWidget* parent = nullptr);

    void setStore(StoreService* store);
    void refresh();
    void setFilterText(const QString& text);
    QVector<qint64> selectedRunIds() const;
    void selectRows(const QList<int>& rows); // rows of the visible (sorted, filtered) table
    int visibleRowCount() const;
    RunTableModel* model() const { return m_model; }
    QTableView* view() const { return m_view; }
    QString messageText() const;

Q_SIGNALS:
    // A run id: the window follows it through the store (local or remote alike).
    void monitorRequested(const QString& runId);
    void compareRequested(const QVector<qint64>& runIds);
    void refreshed(int runCount);

private:
    StoreService* m_store = nullptr;
    RunTableModel* m_model = nullptr;
    QSortFilterProxyModel* m_proxy = nullptr;
    QTableView* m_view = nullptr;
    QLineEdit* m_filter = nullptr;
    QPushButton* m_refresh = nullptr;
    QPushButton* m_monitor = nullptr;
    QPushButton* m_compare = nullptr;
    QPushButton* m_import = nullptr;
    MessageBar* m_message = nullptr;
};

} // namespace shard::widgets
