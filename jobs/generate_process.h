// A `shard-worker generate` child process and its JSON-lines records (protocol/records.h), for the
// CLI and the studio: neither links Torch, and generation never blocks their event loop. Records
// arrive as signals while the worker streams; cancel() kills it at once.
#pragma once

#include <QByteArray>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>

#include "protocol/records.h"

namespace shard::jobs {

class GenerateProcess : public QObject {
    Q_OBJECT
public:
    explicit GenerateProcess(QObject* parent = nullptr);
    ~GenerateProcess() override;

    // Starts `worker generate args...` (worker: a path or a name found by
    // LocalLauncher::findWorker). false with error() set when it cannot start.
    bool start(const QString& worker, const QStringList& args);
    // Kills the worker now; finished() follows with cancelled = true.
    void cancel();
    bool isRunning() const;
    QString error() const { return m_error; }
    // Everything the worker wrote on stderr so far.
    QString errorOutput() const { return QString::fromUtf8(m_stderr); }

Q_SIGNALS:
    void modelLoaded(const shard::protocol::GenModelRecord& model);
    void token(const shard::protocol::GenTokenRecord& token);
    void summary(const shard::protocol::GenSummaryRecord& summary);
    // Once per start: ok when the worker exited 0 after its summary; otherwise `message` says
    // why (its last stderr line, or that it was cancelled).
    void finished(bool ok, bool cancelled, const QString& message);

private:
    void readLines();
    void onFinished(int exitCode, QProcess::ExitStatus status);

    QProcess* m_process = nullptr;
    QByteArray m_pending;
    QByteArray m_stderr;
    QString m_error;
    bool m_cancelled = false;
    bool m_gotSummary = false;
};

} // namespace shard::jobs
