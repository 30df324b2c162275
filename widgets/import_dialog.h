// Runs ▸ Import logs… and File ▸ Import logs…: another tool's logs (TensorBoard event files, a
// trainer_state.json, a job's stdout) or a run folder of Shard Studio, on this machine or on a
// host of the Hosts page (read over ssh as HOST:PATH, followed by byte offset), and optionally
// the Slurm job that writes them: the run then takes the job's state and is followed until the
// job ends (what `shard runs import PATH --slurm-job ID` does).
#pragma once

#include <QDialog>
#include <QList>
#include <QString>

#include "widgets/hosts_page.h"

class QComboBox;
class QDialogButtonBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace shard::widgets {

class ImportDialog : public QDialog {
    Q_OBJECT
public:
    explicit ImportDialog(const QList<HostEntry>& hosts, QWidget* parent = nullptr);

    // 0: this machine; 1 + i: hosts[i].
    void setWhere(int index);
    void setPath(const QString& path);
    void setSlurmJob(const QString& jobId);

    // What jobs::importRuns gets: a path here, or [user@]host[:port]:PATH.
    QString importPath() const;
    QString slurmJob() const;
    // Why Import is disabled, in words; empty when it is enabled.
    QString problem() const;

private:
    void update();
    const HostEntry* host() const; // null: this machine

    QList<HostEntry> m_hosts;
    QComboBox* m_where = nullptr;
    QLineEdit* m_path = nullptr;
    QPushButton* m_browse = nullptr;
    QLineEdit* m_job = nullptr;
    QLabel* m_preview = nullptr;
    QDialogButtonBox* m_buttons = nullptr;
};

} // namespace shard::widgets
