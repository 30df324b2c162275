// Runs page: every recorded run in a sortable, filterable table (fast with thousands of runs:
// listing happens on the store thread, sorting and filtering in a proxy model), with actions to
// monitor, compare, import a run folder, refresh, rename, annotate, delete (record and folder,
// after a confirmation) and continue a run for more steps from its latest checkpoint.
#pragma once

#include <QSet>
#include <QVector>
#include <QWidget>

#include "jobs/launcher.h"
#include "jobs/run_store.h"
#include "widgets/hosts_page.h"

namespace shard::jobs {
class RunService;
}

class QDialog;
class QLabel;
class QLineEdit;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace shard::widgets {

class MessageBar;
class RunTableModel;

class RunsPage : public QWidget {
    Q_OBJECT
public:
    explicit RunsPage(QWidget* parent = nullptr);

    void setStore(jobs::RunService* store);
    void refresh();
    void setFilterText(const QString& text);
    QVector<qint64> selectedRunIds() const;
    void selectRows(const QList<int>& rows); // rows of the visible (sorted, filtered) table
    int visibleRowCount() const;
    RunTableModel* model() const { return m_model; }
    QTableView* view() const { return m_view; }
    QString messageText() const;

    // The actions behind the buttons (which ask first: a name, the notes, a confirmation, a
    // step count).
    void renameRun(qint64 runId, const QString& name);
    void setNotes(qint64 runId, const QString& notes);
    void deleteRuns(const QVector<qint64>& runIds, bool removeFolders);
    void continueRun(qint64 runId, qint64 moreSteps,
        jobs::ContinueSchedule schedule = jobs::ContinueSchedule::Stretch);
    // What Continue asks, with what happens to the run's learning-rate schedule.
    QString continueQuestion(qint64 runId) const;
    // The Continue dialog ("continueDialog"): the step count ("moreSteps") and, for a decaying
    // schedule, what the learning rate does after the checkpoint ("scheduleStretch",
    // "scheduleKeep", "scheduleRestart"). Accepting it continues the run.
    QDialog* continueDialog(qint64 runId);
    // What Delete asks: each run by id, name, status and folder.
    QString deleteQuestion(const QVector<qint64>& runIds) const;
    // Import logs… (ImportDialog): where the logs can be (this machine and the Hosts page's
    // hosts); the dialog, whose Import imports them; and the import itself, said in the message
    // bar when it ends (the run's id, or why not).
    void setHosts(const QList<HostEntry>& hosts) { m_hosts = hosts; }
    QDialog* importDialog();
    void importLogs(const QString& path, const QString& slurmJob = {});

Q_SIGNALS:
    // A run id: the window follows it through the store (local or remote alike).
    void monitorRequested(const QString& runId);
    void compareRequested(const QVector<qint64>& runIds);
    void refreshed(int runCount);

private:
    const jobs::RunRecord* currentRun() const;
    void fitColumns();
    void restoreSelection(const QVector<qint64>& selected, qint64 currentId);
    void clearStaleMessage(const QVector<jobs::RunRecord>& runs);
    void updateEmptyHint();

    jobs::RunService* m_store = nullptr;
    QSet<qint64> m_continuing; // runs whose continue request is on its way
    QSet<qint64> m_edited;     // runs renamed or annotated here, until the store says done
    // The run the "continues" message is about, until it has ended again.
    struct Continued {
        qint64 runId = 0;
        QString text;
        bool seenLive = false;
    };
    Continued m_continued;
    RunTableModel* m_model = nullptr;
    QSortFilterProxyModel* m_proxy = nullptr;
    QTableView* m_view = nullptr;
    QLineEdit* m_filter = nullptr;
    QPushButton* m_refresh = nullptr;
    QPushButton* m_monitor = nullptr;
    QPushButton* m_compare = nullptr;
    QPushButton* m_import = nullptr;
    QList<HostEntry> m_hosts;
    QString m_importing; // the path of an import started here, until it is answered
    QPushButton* m_rename = nullptr;
    QPushButton* m_notes = nullptr;
    QPushButton* m_delete = nullptr;
    QPushButton* m_continue = nullptr;
    QPushButton* m_exportModel = nullptr;
    MessageBar* m_message = nullptr;
    QLabel* m_emptyHint = nullptr; // where runs come from, while the table is empty
};

} // namespace shard::widgets
