// LogTail: a local read, or one `ssh host sh -c` that prints the offset it read from and the
// bytes after it.
#include "jobs/log_tail.h"

#include <algorithm>

#include <QFile>
#include <QProcess>

namespace shard::jobs {

QStringList takeCompleteLines(const QByteArray& data, qint64 dataOffset, qint64* offset)
{
    QStringList lines;
    const qsizetype end = data.lastIndexOf('\n');
    if (end < 0)
        return lines;
    *offset = dataOffset + end + 1;
    for (const QByteArray& line : data.left(end).split('\n'))
        lines.append(QString::fromUtf8(line));
    return lines;
}

QStringList readLogTail(const QString& path, qint64* offset)
{
    QFile log(path);
    if (!log.open(QIODevice::ReadOnly))
        return {};
    qint64 from = *offset > log.size() ? 0 : *offset;
    from = std::max(from, log.size() - kLogTailBytes);
    log.seek(from);
    return takeCompleteLines(log.readAll(), from, offset);
}

LogTail::LogTail(QString path, std::optional<SshHost> host, SshOptions options, QObject* parent)
    : QObject(parent)
    , m_path(std::move(path))
    , m_host(std::move(host))
    , m_ssh(std::move(options))
{
}

LogTail::~LogTail()
{
    if (m_fetch) {
        m_fetch->disconnect(this);
        m_fetch->kill();
        m_fetch->waitForFinished(1000);
        delete m_fetch;
    }
}

void LogTail::fetch()
{
    if (!m_host) {
        const QStringList got = readLogTail(m_path, &m_offset);
        if (!got.isEmpty())
            Q_EMIT lines(got);
        Q_EMIT fetched();
        return;
    }
    if (m_fetch)
        return; // the previous fetch is still on its way
    const QString script
        = QStringLiteral("f=%1; s=$(stat -c %s -- \"$f\" 2>/dev/null) || exit 0; o=%2; "
                         "[ \"$s\" -lt \"$o\" ] && o=0; [ $((s - o)) -gt %3 ] && o=$((s - %3)); "
                         "echo \"OFF=$o\"; tail -c +$((o + 1)) -- \"$f\" | head -c $((s - o))")
              .arg(SshClient::shellQuote(m_path))
              .arg(m_offset)
              .arg(kLogTailBytes);
    m_fetch = new QProcess(this);
    connect(m_fetch, &QProcess::finished, this, [this] {
        QProcess* p = m_fetch;
        m_fetch = nullptr;
        p->deleteLater();
        const QByteArray out = p->readAllStandardOutput();
        // No "OFF=": no log yet, or SSH trouble (the watcher reports that).
        if (p->exitStatus() == QProcess::NormalExit && p->exitCode() == 0
            && out.startsWith("OFF=")) {
            const qsizetype nl = out.indexOf('\n');
            const QStringList got
                = takeCompleteLines(out.mid(nl + 1), out.mid(4, nl - 4).toLongLong(), &m_offset);
            if (!got.isEmpty())
                Q_EMIT lines(got);
        }
        Q_EMIT fetched();
    });
    m_fetch->start(QStringLiteral("ssh"), m_ssh.sshArgs(*m_host) << script);
}

} // namespace shard::jobs
