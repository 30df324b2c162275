// Runs ▸ Export model… and Playground ▸ Export…: a local run's weights (or a model folder's) as a
// GGUF file for llama.cpp / Ollama / LM Studio (with an Ollama Modelfile beside it) or a run's as
// a Hugging Face folder, through `shard-worker export` in a child process: a progress bar while
// it writes, its message when it ends, and Cancel.
#pragma once

#include <QDialog>
#include <QProcess>
#include <QString>

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;

namespace shard::widgets {

class ExportDialog : public QDialog {
    Q_OBJECT
public:
    // runDir: the run's folder on this machine, one of its checkpoints, or a Hugging Face model
    // folder; runName: for the default file name.
    ExportDialog(const QString& runDir, const QString& runName, QWidget* parent = nullptr);
    ~ExportDialog() override;

    void setWorkerProgram(const QString& program) { m_worker = program; }
    // What `shard-worker export` gets for the current choices (tests read it).
    QStringList workerArguments() const;
    QString statusText() const;
    bool isRunning() const;
    // Starts the export (the Export button).
    void start();

Q_SIGNALS:
    void finished(bool ok);

private:
    // The type, the export button and the source line, as the format and the source allow.
    void updateChoices();
    void readProgress();
    void onFinished(int exitCode, QProcess::ExitStatus status);
    QString defaultOutput() const;
    QString exportName() const; // general.name and the default file name

    QString m_runDir;
    QString m_runName;
    QString m_worker = QStringLiteral("shard-worker");
    QComboBox* m_format = nullptr;
    QComboBox* m_type = nullptr;
    QLineEdit* m_out = nullptr;
    QPushButton* m_browse = nullptr;
    QProgressBar* m_progress = nullptr;
    QLabel* m_status = nullptr;
    QLabel* m_source = nullptr;
    QPushButton* m_export = nullptr;
    QPushButton* m_close = nullptr;
    QProcess* m_process = nullptr;
    QByteArray m_stderr;
    bool m_cancelled = false;
};

} // namespace shard::widgets
