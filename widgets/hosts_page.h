// Hosts page: SSH hosts and Slurm clusters the studio can launch on, kept in QSettings, each with
// a connection test off the UI thread, cancellable. An SSH host is tested by
// jobs::SshLauncher::checkHost, the check a launch makes, and its failures are
// jobs::SshClient::describeFailure's words: a host that passes here is one a launch reaches.
// Its Doctor panel shows jobs::doctor's checks (what `shard doctor` prints) for the selected host
// or for this machine: what each can train with, and the command that fixes each missing piece.
#pragma once

#include <QFutureWatcher>
#include <QWidget>

#include "jobs/doctor.h"
#include "jobs/host_check.h"
#include "jobs/result.h"
#include "jobs/slurm_options.h"
#include "jobs/ssh_client.h"

class QComboBox;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTextBrowser;

namespace shard::widgets {

class MessageBar;

struct HostEntry {
    QString name;
    QString kind = "ssh"; // ssh, slurm
    QString address;      // host name or ssh alias; empty for a local Slurm
    int port = 22;
    QString user;
    QString partition; // slurm
    // What the last successful Test found there (nvidia-smi): the GPU model, its memory and how
    // many; 0 GPUs: none found, or not tested yet.
    QString gpuName;
    double gpuMemoryMiB = 0;
    int gpuCount = 0;
    // Slurm: the jobs' time limit (#SBATCH --time; empty: the partition's default), and how long
    // before it Slurm sends SIGUSR1 so the ranks write a checkpoint and the job requeues itself
    // (--signal=USR1@N; 0: none).
    QString timeLimit;
    int preemptSignalSec = jobs::kDefaultPreemptSignalSec;

    // How ssh reaches it: [user@]address[:port]; empty for a Slurm cluster on this machine.
    QString sshAddress() const
    {
        if (address.isEmpty())
            return {};
        return (user.isEmpty() ? QString() : user + "@") + address
            + (port != 22 ? QStringLiteral(":%1").arg(port) : QString());
    }
};

class HostsPage : public QWidget {
    Q_OBJECT
public:
    explicit HostsPage(QWidget* parent = nullptr);

    QList<HostEntry> hosts() const { return m_hosts; }
    void setHosts(const QList<HostEntry>& hosts);
    void addHost(const HostEntry& host);
    void selectHost(int row);
    // Tests the selected host; the result arrives through testFinished.
    void testSelected();
    void cancelTest();
    bool testing() const { return m_watcher != nullptr; }
    QString messageText() const;

    // The program and arguments a test runs: jobs::SshClient's ssh command line (or sinfo).
    static QStringList testCommand(const HostEntry& host);
    // The host as the SSH launcher names it ([user@]address[:port]).
    static jobs::SshHost sshHost(const HostEntry& host);
    // Turns OpenSSH / Slurm stderr into one readable sentence (SSH: SshClient::describeFailure).
    static QString explainFailure(const HostEntry& host, int exitCode, const QString& stderrText);
    // Runs the test (blocking; the page calls it on a pool thread): the worker's version line and
    // the host's GPUs, or Slurm's partitions; else the reason.
    static jobs::Result<jobs::HostCheck> runTest(const HostEntry& host);
    // Plans for the selected host's GPUs (found by its last Test): planRequested.
    void planForSelected();

    // The Doctor panel: the checks of the selected host (its SSH login; a Slurm cluster's login
    // node, or this machine for a local one) or of this machine, off the UI thread; the result
    // arrives through doctorFinished.
    void doctorSelected();
    void doctorThisMachine();
    bool doctoring() const { return m_doctorWatcher != nullptr; }
    // The last report: whose it is ("this machine" or the host's name) and its checks.
    QString doctorSubject() const { return m_doctorSubject; }
    QList<jobs::DoctorCheck> doctorChecks() const { return m_doctorChecks; }
    // The checks as the panel renders them (HTML: a row a check, the fix under it).
    static QString doctorHtml(const QString& subject, const QList<jobs::DoctorCheck>& checks);
    // Runs the doctor for a host (blocking; the page calls it on a pool thread).
    static jobs::Result<QList<jobs::DoctorCheck>> runDoctor(const HostEntry& host);

    void saveSettings() const;
    void loadSettings();

Q_SIGNALS:
    void testFinished(bool ok, const QString& message);
    // ok false: the host could not be reached (the message bar says why).
    void doctorFinished(bool ok, const QString& subject);
    void hostsChanged();
    // "Plan for these GPUs": the host's GPU model as nvidia-smi names it, its memory and count.
    void planRequested(const QString& gpuName, double memoryMiB, int gpuCount);

private:
    void refreshTable();
    void fillForm(int row);
    HostEntry formEntry() const;
    void onFinished();
    void updatePlanButton();
    void startDoctor(const QString& subject, const HostEntry& host);
    void onDoctorFinished();

    QList<HostEntry> m_hosts;
    QFutureWatcher<jobs::Result<jobs::HostCheck>>* m_watcher = nullptr;
    HostEntry m_testing;
    QFutureWatcher<jobs::Result<QList<jobs::DoctorCheck>>>* m_doctorWatcher = nullptr;
    QString m_doctorSubject;
    QList<jobs::DoctorCheck> m_doctorChecks;

    QTableWidget* m_table = nullptr;
    QLineEdit* m_name = nullptr;
    QComboBox* m_kind = nullptr;
    QLineEdit* m_address = nullptr;
    QSpinBox* m_port = nullptr;
    QLineEdit* m_user = nullptr;
    QLineEdit* m_partition = nullptr;
    QLineEdit* m_timeLimit = nullptr;
    QSpinBox* m_preemptSignal = nullptr;
    QPushButton* m_save = nullptr;
    QPushButton* m_remove = nullptr;
    QPushButton* m_test = nullptr;
    QPushButton* m_cancel = nullptr;
    QPushButton* m_plan = nullptr;
    QPushButton* m_doctor = nullptr;
    QPushButton* m_doctorLocal = nullptr;
    QTextBrowser* m_doctorView = nullptr;
    QProgressBar* m_busy = nullptr;
    MessageBar* m_message = nullptr;
};

} // namespace shard::widgets
