// LogTail: what is new in a log, from the file and over SSH (a real sshd on loopback): complete
// lines only (a partial last line waits for its newline), at most the last kLogTailBytes, from
// the start again after the file shrank; a log that does not exist yet yields nothing; a fetch
// in flight is dropped with its LogTail.
#include <QtTest>

#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>

#include "jobs/log_tail.h"
#include "sshd_fixture.h"

using namespace shard::jobs;

namespace {

void append(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::Append));
    f.write(bytes);
}

// Fetches once and returns what it emitted (waiting for the SSH call to return).
QStringList fetchOnce(LogTail& tail, bool remote)
{
    QSignalSpy spy(&tail, &LogTail::lines);
    QSignalSpy done(&tail, &LogTail::fetched);
    tail.fetch();
    if (remote && done.isEmpty())
        done.wait(10000);
    [&] { QCOMPARE(done.size(), 1); }();
    QStringList all;
    for (const auto& args : spy)
        all << args.at(0).toStringList();
    return all;
}

} // namespace

class TestLogTail : public QObject {
    Q_OBJECT

    QTemporaryDir m_work;
    SshdFixture* m_sshd = nullptr;
    SshOptions m_options;

    // The same sequence for a local log and the same file read over SSH.
    void sequence(bool remote)
    {
        const QString path = m_work.filePath(remote ? "remote.log" : "local.log");
        std::optional<SshHost> host;
        if (remote)
            host = *SshHost::parse("node0");
        LogTail tail(path, host, m_options);
        QVERIFY(fetchOnce(tail, remote).isEmpty()); // no file yet

        append(path, "one\ntwo\nthr");
        QCOMPARE(fetchOnce(tail, remote), QStringList({"one", "two"}));
        QVERIFY(fetchOnce(tail, remote).isEmpty()); // "thr" has no newline yet
        append(path, "ee\nfour\n");
        QCOMPARE(fetchOnce(tail, remote), QStringList({"three", "four"}));

        // Truncated and rewritten (a resumed run's new log): read from its start again.
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write("new\n");
        f.close();
        QCOMPARE(fetchOnce(tail, remote), QStringList({"new"}));

        // A burst larger than the tail: only the lines within the last kLogTailBytes.
        QByteArray burst;
        for (int i = 0; burst.size() < 3 * kLogTailBytes; ++i)
            burst += "line " + QByteArray::number(i) + "\n";
        append(path, burst);
        const QStringList got = fetchOnce(tail, remote);
        QVERIFY(!got.isEmpty());
        qint64 bytes = 0;
        for (const QString& l : got)
            bytes += l.size() + 1;
        QVERIFY(bytes <= kLogTailBytes);
        QVERIFY(bytes > kLogTailBytes - 32);
        QVERIFY(got.last().startsWith("line ") && burst.endsWith(got.last().toUtf8() + "\n"));
    }

private Q_SLOTS:
    void initTestCase()
    {
        m_sshd = new SshdFixture;
        QString why;
        if (!m_sshd->start(1, &why))
            QFAIL(qPrintable(why));
        m_options.configFile = m_sshd->configFile();
        m_options.controlDir = m_work.filePath("cm");
        m_options.connectTimeoutSec = 5;
    }

    void cleanupTestCase()
    {
        SshClient(m_options).closeMaster(*SshHost::parse("node0"));
        delete m_sshd;
    }

    void localLog() { sequence(false); }
    void remoteLog() { sequence(true); }

    // Dropping the tail while its SSH call is on its way emits nothing afterwards.
    void droppedWhileFetching()
    {
        const QString path = m_work.filePath("dropped.log");
        append(path, "a\n");
        auto* tail = new LogTail(path, *SshHost::parse("node0"), m_options);
        int emitted = 0;
        connect(tail, &LogTail::lines, this, [&emitted] { ++emitted; });
        tail->fetch();
        delete tail;
        QTest::qWait(500);
        QCOMPARE(emitted, 0);
    }
};

QTEST_GUILESS_MAIN(TestLogTail)
#include "tst_log_tail.moc"
