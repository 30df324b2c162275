// The run service against real processes and a real store: a launch over SSH to a host that
// accepts the connection and never answers must not stall a run that is being followed (each of
// its points arrives once, in order, while the launch waits); a folder attached again is the
// same record; stop goes through the run's launcher.
#include <QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTemporaryDir>

#include "jobs/run_service.h"
#include "jobs/run_store.h"

#include "jobs_test_util.h"

using namespace shard::jobs;

namespace {

// A local run of the shell workload: `steps` metric records, one per `stepSec`.
LaunchRequest fakeRun(const QString& runDir, int steps, double stepSec)
{
    return shard::test::fakeRunRequest("followed", runDir, steps, stepSec, 1);
}

// Accepts TCP connections on loopback and never sends a byte: an SSH host that hangs before its
// banner (a dead sshd, a black-holing firewall that completes the handshake).
class SilentHost : public QTcpServer {
public:
    SilentHost() { QVERIFY(listen(QHostAddress::LocalHost, 0)); }
    QList<QTcpSocket*> held;

protected:
    void incomingConnection(qintptr fd) override
    {
        auto* s = new QTcpSocket(this);
        s->setSocketDescriptor(fd);
        held << s; // kept open, silent
    }
};

} // namespace

class TstRunService : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        QVERIFY(m_tmp.isValid());
        if (QStandardPaths::findExecutable("ssh").isEmpty())
            QSKIP("the OpenSSH client is not installed");
    }

    void silentSshHostDoesNotStallAFollowedRun()
    {
        RunService service(m_tmp.filePath("store.sqlite"));
        QSignalSpy opened(&service, &RunService::opened);
        QTRY_COMPARE_WITH_TIMEOUT(opened.count(), 1, 30000);

        // The followed run: a real local process writing a point every 50 ms for ~15 s.
        const int steps = 300;
        QSignalSpy launched(&service, &RunService::launched);
        service.launch(fakeRun(m_tmp.filePath("followed"), steps, 0.05));
        QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 20000);
        const qint64 id = launched.first().first().toLongLong();
        QVERIFY(id > 0);

        QVector<double> seen;
        QVector<qint64> arrivals; // ms since the SSH launch, per update with new points
        QElapsedTimer sinceLaunch;
        bool ended = false;
        connect(
            &service, &RunService::runFollowed, this, [&](quint64 ticket, const FollowUpdate& u) {
                if (ticket != 7)
                    return;
                seen += u.points.step;
                if (!u.points.step.isEmpty() && sinceLaunch.isValid())
                    arrivals << sinceLaunch.elapsed();
                ended = ended || u.state.ended;
            });
        service.followRun(id, 7);
        QTRY_VERIFY_WITH_TIMEOUT(seen.size() >= 5, 30000);

        // Meanwhile a launch to a host that never answers.
        SilentHost host;
        QSignalSpy errors(&service, &RunService::errorOccurred);
        LaunchRequest remote = fakeRun("remote-run", 3, 0.05);
        remote.name = "silent";
        sinceLaunch.start();
        service.launch(
            remote, LaunchTarget::ssh({QString("nobody@127.0.0.1:%1").arg(host.serverPort())}));
        QTRY_VERIFY_WITH_TIMEOUT(!errors.isEmpty(), 60000);
        const qint64 launchMs = sinceLaunch.elapsed();
        const QString error = errors.first().first().toString();
        QVERIFY2(error.contains("Could not start the run"), qPrintable(error));
        QVERIFY2(!host.held.isEmpty(), "the launch never reached the silent host");
        // The launch waited for the host (the SSH client's connect timeout) ...
        QVERIFY2(
            launchMs >= 3000, qPrintable(QString("the launch failed after %1 ms").arg(launchMs)));
        // ... while the followed run kept updating, a few times a second.
        QVector<qint64> during;
        for (qint64 t : arrivals)
            if (t <= launchMs)
                during << t;
        QVERIFY2(during.size() >= launchMs / 1000,
            qPrintable(QString("%1 updates in %2 ms").arg(during.size()).arg(launchMs)));
        qint64 gap = during.isEmpty() ? launchMs : during.first();
        for (int i = 1; i < during.size(); ++i)
            gap = std::max(gap, during[i] - during[i - 1]);
        gap = std::max(gap, during.isEmpty() ? 0 : launchMs - during.last());
        QVERIFY2(gap < 2000, qPrintable(QString("no update for %1 ms during the launch").arg(gap)));
        qInfo("launch failed after %lld ms; %d updates meanwhile, longest gap %lld ms",
            static_cast<long long>(launchMs), int(during.size()), static_cast<long long>(gap));

        // Every point of the followed run arrives once, in order.
        QTRY_VERIFY_WITH_TIMEOUT(ended, 60000);
        QTRY_COMPARE_WITH_TIMEOUT(seen.size(), steps, 30000);
        for (int i = 0; i < steps; ++i)
            QCOMPARE(seen[i], double(i + 1));

        // The folder attached again is the same record.
        QSignalSpy attached(&service, &RunService::runAttached);
        service.attachRunDirectory(m_tmp.filePath("followed"));
        QTRY_COMPARE_WITH_TIMEOUT(attached.count(), 1, 30000);
        QCOMPARE(attached.first().at(1).toLongLong(), id);
        auto store = RunStore::open(m_tmp.filePath("store.sqlite"));
        QVERIFY(store);
        QCOMPARE(store->metricCount(id).valueOr(0), qint64(steps));
        QCOMPARE(toString(store->run(id)->status), QString("finished"));
    }

    void stopGoesThroughTheRunsLauncher()
    {
        RunService service(m_tmp.filePath("stop.sqlite"));
        QSignalSpy launched(&service, &RunService::launched);
        service.launch(fakeRun(m_tmp.filePath("stopped"), 1000, 0.05));
        QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 20000);
        const qint64 id = launched.first().first().toLongLong();
        QTRY_VERIFY_WITH_TIMEOUT(
            shard::test::countLines(m_tmp.filePath("stopped/metrics.jsonl")) >= 3, 20000);
        QSignalSpy stopped(&service, &RunService::stopped);
        service.stopRun(id);
        QTRY_COMPARE_WITH_TIMEOUT(stopped.count(), 1, 30000);
        auto store = RunStore::open(m_tmp.filePath("stop.sqlite"));
        QVERIFY(store);
        QCOMPARE(toString(store->run(id)->status), QString("stopped"));
        // Every point the run wrote before it stopped is in the store.
        QCOMPARE(store->metricCount(id).valueOr(0),
            qint64(shard::test::countLines(m_tmp.filePath("stopped/metrics.jsonl"))));
    }

private:
    QTemporaryDir m_tmp;
};

QTEST_GUILESS_MAIN(TstRunService)
#include "tst_run_service.moc"
