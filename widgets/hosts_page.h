// Hosts page: SSH hosts and Slurm clusters the studio can launch on, kept in QSettings, each with
// a connection test that runs the system OpenSSH client (or sinfo) asynchronously, cancellable,
// and explains failures in words.
#pragma once

#include <QProcess>
#include <QWidget>

class QComboBox;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace shard::widgets {

class MessageBar;

struct HostEntry {
    QString name;
    QString kind = "ssh"; // ssh, slurm
    QString address;      // host name or ssh alias; empty for a local Slurm
    int port = 22;
    QString user;
    QString partition; // slurm
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
    bool testing() const { return m_process != nullptr; }
    QString messageText() const;

    // The program and arguments a test runs (shown to the user and used by the test).
    static QStringList testCommand(const HostEntry& host);
    // Turns OpenSSH / Slurm stderr into one readable sentence.
    static QString explainFailure(const HostEntry& host, int exitCode, const QString& stderrText);

    void saveSettings() const;
    void loadSettings();

Q_SIGNALS:
    void testFinished(bool ok, const QString& message);
    void hostsChanged();

private:
    void refreshTable();
    void fillForm(int row);
    HostEntry formEntry() const;
    void onFinished(int exitCode, QProcess::ExitStatus status);

    QList<HostEntry> m_hosts;
    QProcess* m_process = nullptr;
    HostEntry m_testing;

    QTableWidget* m_table = nullptr;
    QLineEdit* m_name = nullptr;
    QComboBox* m_kind = nullptr;
    QLineEdit* m_address = nullptr;
    QSpinBox* m_port = nullptr;
    QLineEdit* m_user = nullptr;
    QLineEdit* m_partition = nullptr;
    QPushButton* m_save = nullptr;
    QPushButton* m_remove = nullptr;
    QPushButton* m_test = nullptr;
    QPushButton* m_cancel = nullptr;
    QProgressBar* m_busy = nullptr;
    MessageBar* m_message = nullptr;
};

} // namespace shard::widgets
