// LogTail: what is new in a run's log since the last look, read from the file for a local run
// and over SSH for a remote one (the same SshClient options as every other SSH call). At most the
// log's last kLogTailBytes, complete lines only, and from the start again when the file shrank.
// One SSH fetch is in flight at a time; a dropped connection just yields nothing (the run's
// watcher reports SSH trouble).
#pragma once

#include <optional>

#include <QObject>
#include <QStringList>

#include "jobs/ssh_client.h"

class QProcess;

namespace shard::jobs {

// A log is shown by its tail: at most this many of its last bytes.
inline constexpr qint64 kLogTailBytes = 64 << 10;
// The complete lines of `data`, a log's bytes from `dataOffset`; *offset moves past the last of
// them (a partial last line is read again next time).
QStringList takeCompleteLines(const QByteArray& data, qint64 dataOffset, qint64* offset);
// What is new in a local log since *offset: at most its last kLogTailBytes, and from its start
// again when it shrank (truncated or replaced).
QStringList readLogTail(const QString& path, qint64* offset);

class LogTail : public QObject {
    Q_OBJECT
public:
    // `path` on `host`, or on this machine without one.
    LogTail(QString path, std::optional<SshHost> host,
        SshOptions options = SshOptions::fromEnvironment(), QObject* parent = nullptr);
    ~LogTail() override; // a fetch in flight is killed

    // Emits lines() with what is new: at once for a local log, when the SSH call returns for a
    // remote one (nothing when the previous fetch is still on its way).
    void fetch();

Q_SIGNALS:
    void lines(const QStringList& lines);
    // After each fetch that ran to its end (after lines(), if it had any).
    void fetched();

private:
    QString m_path;
    std::optional<SshHost> m_host;
    SshClient m_ssh;
    qint64 m_offset = 0;
    QProcess* m_fetch = nullptr;
};

} // namespace shard::jobs
