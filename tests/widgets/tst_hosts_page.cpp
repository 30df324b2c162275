// Hosts page: a host that refuses the connection (a real ssh client against a closed loopback
// port) gives a readable message without blocking the UI; OpenSSH failures are explained.
#include <QtTest>

#include <QSettings>
#include <QTcpServer>
#include <QTemporaryDir>

#include "widgets/hosts_page.h"

using namespace shard::widgets;

class TstHostsPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName("ShardStudioTest");
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_settingsDir.path());
    }

    void refusingHostShowsMessage()
    {
        if (QStandardPaths::findExecutable("ssh").isEmpty())
            QSKIP("the OpenSSH client is not installed");
        // A port that was free a moment ago: nothing listens there.
        QTcpServer probe;
        QVERIFY(probe.listen(QHostAddress::LocalHost));
        const int port = probe.serverPort();
        probe.close();

        HostsPage page;
        page.show();
        page.addHost({"closed", "ssh", "127.0.0.1", port, "nobody", {}});
        QSignalSpy finished(&page, &HostsPage::testFinished);
        QElapsedTimer t;
        t.start();
        page.testSelected();
        // testSelected returned at once: the UI thread did not wait on ssh.
        QVERIFY(t.elapsed() < 500);
        QVERIFY(page.testing());
        QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 15000);
        QCOMPARE(finished.first().at(0).toBool(), false);
        const QString message = finished.first().at(1).toString();
        QVERIFY2(message.contains("refused the connection"), qPrintable(message));
        QVERIFY(message.contains(QString::number(port)));
        QCOMPARE(page.messageText(), message);
    }

    void hostsPersist()
    {
        {
            HostsPage page;
            page.addHost({"gpu-box", "ssh", "gpu-box.lan", 2222, "me", {}});
            page.addHost({"cluster", "slurm", "", 22, {}, "debug"});
            page.saveSettings();
        }
        HostsPage again;
        again.loadSettings();
        QCOMPARE(again.hosts().size(), 2);
        QCOMPARE(again.hosts()[0].port, 2222);
        QCOMPARE(again.hosts()[1].partition, QString("debug"));
    }

    void testCommandUsesBatchModeAndChecksKeys()
    {
        const QStringList cmd = HostsPage::testCommand({"h", "ssh", "example", 2200, "u", {}});
        QCOMPARE(cmd.front(), QString("ssh"));
        QVERIFY(cmd.contains("BatchMode=yes"));
        QVERIFY(cmd.contains("StrictHostKeyChecking=yes"));
        QVERIFY(cmd.contains("u@example"));
        QCOMPARE(cmd.at(cmd.indexOf("-p") + 1), QString("2200"));
        QCOMPARE(HostsPage::testCommand({"c", "slurm", "", 22, {}, {}}).front(), QString("sinfo"));
    }

    void failuresAreExplained_data()
    {
        QTest::addColumn<QString>("stderrText");
        QTest::addColumn<QString>("expected");
        QTest::newRow("auth") << "u@h: Permission denied (publickey)."
                              << "refused authentication";
        QTest::newRow("unknown") << "ssh: Could not resolve hostname nope: Name or service"
                                 << "unknown host name";
        QTest::newRow("timeout") << "ssh: connect to host 10.0.0.1 port 22: Connection timed out"
                                 << "unreachable";
        QTest::newRow("hostkey") << "Host key verification failed."
                                 << "host key";
        QTest::newRow("worker") << "shard-worker: not found on PATH"
                                << "not installed";
    }
    void failuresAreExplained()
    {
        QFETCH(QString, stderrText);
        QFETCH(QString, expected);
        const QString m = HostsPage::explainFailure({"h", "ssh", "h", 22, {}, {}}, 255, stderrText);
        QVERIFY2(m.contains(expected), qPrintable(m));
    }

private:
    QTemporaryDir m_settingsDir;
};

QTEST_MAIN(TstHostsPage)
#include "tst_hosts_page.moc"
