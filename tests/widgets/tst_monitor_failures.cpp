// The Monitor page when runs go wrong, with real shard-worker processes: a run that fails before
// it writes run.json shows the failure and its cause within seconds (not "not a run folder"); when
// rank 1 fails first its log is the one shown, with a rank picker; a completed run offers neither
// Resume nor an ETA; a studio reopened mid-run follows that run again and lists running runs.
#include <QtTest>

#include <QComboBox>
#include <QDir>
#include <QDirIterator>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QPushButton>
#include <QSpinBox>
#include <QTemporaryDir>

#include <csignal>

#include <nlohmann/json.hpp>

#include "jobs/run_service.h"
#include "widgets/launch_page.h"
#include "widgets/main_window.h"
#include "widgets/monitor_page.h"

#include "studio_test_util.h"

using namespace shard::widgets;
using shard::test::findWorker;

namespace {

// The child of `parent` whose environment has RANK=<rank>, or 0.
qint64 rankPid(qint64 parent, int rank)
{
    QDirIterator it("/proc", QDir::Dirs | QDir::NoDotAndDotDot);
    while (it.hasNext()) {
        const QString dir = it.next();
        bool numeric = false;
        const qint64 pid = QFileInfo(dir).fileName().toLongLong(&numeric);
        if (!numeric)
            continue;
        QFile stat(dir + "/stat");
        if (!stat.open(QIODevice::ReadOnly))
            continue;
        const QByteArray s = stat.readAll();
        const QList<QByteArray> fields = s.mid(s.lastIndexOf(')') + 2).split(' ');
        if (fields.size() < 2 || fields[1].toLongLong() != parent)
            continue;
        QFile env(dir + "/environ");
        if (env.open(QIODevice::ReadOnly)
            && env.readAll().split('\0').contains("RANK=" + QByteArray::number(rank)))
            return pid;
    }
    return 0;
}

} // namespace

class TstMonitorFailures : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        m_worker = findWorker();
        if (m_worker.isEmpty())
            QSKIP("no shard-worker with `launch` and `train` in this build (configure with "
                  "SHARD_BUILD_ENGINE=ON or set SHARD_WORKER)");
        QVERIFY(m_tmp.isValid());
        const QString setUp = shard::test::setUpTinyTask(m_tmp.path(), m_worker, 100);
        QVERIFY2(setUp.isEmpty(), qPrintable(setUp));
    }

    // An empty model folder: the rank fails before run.json exists.
    void failedStartShowsWhyWithinSeconds()
    {
        QVERIFY(QDir().mkpath(m_tmp.filePath("empty-model")));
        MainWindow window(m_tmp.filePath("store.sqlite"));
        window.show();
        // Launched through the store as the Launch page does (the page itself refuses an empty
        // model folder before Start; a run started elsewhere, or one whose folder changed after
        // the check, fails in the worker).
        shard::jobs::LaunchRequest request;
        request.name = "fails-at-start";
        request.runDir = m_tmp.filePath("runs/fails-at-start");
        request.spec = shard::protocol::runSpecFromJson(nlohmann::json {{"name", "fails-at-start"},
            {"model", m_tmp.filePath("empty-model").toStdString()},
            {"data", {m_tmp.filePath("copy.jsonl").toStdString()}}, {"steps", 3}});
        QSignalSpy launched(window.store(), &shard::jobs::RunService::launched);
        window.store()->launch(request);
        QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 20000);
        QElapsedTimer since;
        since.start();
        MonitorPage* monitor = window.monitorPage();
        // Seconds on an idle machine (the time is logged); the limit leaves room for a loaded one,
        // where loading the worker alone takes several.
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 30000);
        qInfo("failure shown %lld ms after the launch", since.elapsed());
        QVERIFY2(monitor->messageText().contains("error"), qPrintable(monitor->messageText()));
        QVERIFY2(!monitor->messageText().contains("run.json"), qPrintable(monitor->messageText()));
        QVERIFY(!monitor->findChild<QPushButton*>("stopButton")->isEnabled());
        // The cause is in the rank's log, which the page shows.
        QTRY_VERIFY_WITH_TIMEOUT(monitor->logText().contains("config.json"), 30000);
        QVERIFY(!monitor->run().events.empty());
    }

    void failingRankLogIsShown()
    {
        const QString run = m_tmp.filePath("rank1-dies");
        QProcess launcher;
        launcher.setProcessChannelMode(QProcess::ForwardedErrorChannel);
        launcher.start(m_worker,
            {"launch", "--nproc-per-node", "2", "--run-dir", run, "--", "train", "--model",
                m_tmp.filePath("model"), "--data", m_tmp.filePath("copy.jsonl"), "--steps",
                "100000", "--seq-len", "32", "--micro-batch", "2", "--strategy", "zero3",
                "--nproc-per-node", "2", "--out", run});
        QVERIFY(launcher.waitForStarted(10000));
        MainWindow window(m_tmp.filePath("store.sqlite"));
        window.show();
        MonitorPage* monitor = window.monitorPage();
        monitor->openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->pointCount() > 0, 120000);
        QCOMPARE(monitor->shownLogRank(), 0);
        auto* picker = monitor->findChild<QComboBox*>("logRank");
        QVERIFY(picker);
        QTRY_VERIFY_WITH_TIMEOUT(picker->findData(1) >= 0, 30000);

        const qint64 rank1 = rankPid(launcher.processId(), 1);
        QVERIFY2(rank1 > 1, "rank 1's process not found");
        QCOMPARE(::kill(pid_t(rank1), SIGKILL), 0);
        QVERIFY(launcher.waitForFinished(20000));
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 30000);
        QTRY_COMPARE_WITH_TIMEOUT(monitor->shownLogRank(), 1, 30000);
        QFile log(run + "/logs/rank-1.log");
        QVERIFY(log.open(QIODevice::ReadOnly));
        const QList<QByteArray> lines = log.readAll().trimmed().split('\n');
        QTRY_VERIFY_WITH_TIMEOUT(
            monitor->logText().contains(QString::fromUtf8(lines.last())), 30000);

        // The picker shows any rank's log.
        picker->setCurrentIndex(picker->findData(0));
        Q_EMIT picker->activated(picker->currentIndex());
        QTRY_COMPARE_WITH_TIMEOUT(monitor->shownLogRank(), 0, 30000);
    }

    void completedRunOffersNoResumeAndNoEta()
    {
        const QString run = m_tmp.filePath("completed");
        const QString trained = shard::test::trainTinyRun(m_worker, m_tmp.path(), run,
            {"--steps", "4", "--seq-len", "32", "--micro-batch", "2", "--checkpoint-every", "2"});
        QVERIFY2(trained.isEmpty(), qPrintable(trained));
        MainWindow window(m_tmp.filePath("store.sqlite"));
        window.show();
        MonitorPage* monitor = window.monitorPage();
        QSignalSpy checked(monitor, &MonitorPage::resumeCheckDone);
        monitor->openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(checked.count() > 0, 30000);
        QCOMPARE(checked.last().first().toBool(), false);
        QVERIFY(!monitor->canResume());
        QVERIFY2(!monitor->etaText().contains("ETA"), qPrintable(monitor->etaText()));
        QVERIFY2(monitor->etaText().contains("elapsed"), qPrintable(monitor->etaText()));
    }

    // The studio closed mid-run and opened again: it follows the same run, and lists the runs
    // that are going at the top of the Monitor page.
    void reopenedStudioFollowsTheRunAgain()
    {
        QString runDir;
        {
            MainWindow first(m_tmp.filePath("store.sqlite"));
            first.show();
            LaunchPage* launch = first.launchPage();
            launch->setModelFolder(m_tmp.filePath("model"));
            launch->setDataFiles({m_tmp.filePath("copy.jsonl")});
            launch->setRunsRoot(m_tmp.filePath("runs"));
            launch->setRunName("long-one");
            launch->setSteps(100000);
            launch->findChild<QSpinBox*>("seqLen")->setValue(32);
            QSignalSpy launched(launch, &LaunchPage::launched);
            launch->start();
            QTRY_COMPARE_WITH_TIMEOUT(launched.count(), 1, 20000);
            runDir = launched.first().at(1).toString();
            QTRY_VERIFY_WITH_TIMEOUT(first.monitorPage()->pointCount() > 0, 120000);
            first.close(); // saves what it follows
        }
        MainWindow again(m_tmp.filePath("store.sqlite"));
        again.restoreSettings();
        again.show();
        MonitorPage* monitor = again.monitorPage();
        // Followed by its store id: the folder is known once the service answers.
        QTRY_COMPARE_WITH_TIMEOUT(
            QDir(monitor->runDirectory()).absolutePath(), QDir(runDir).absolutePath(), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->pointCount() > 0, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->runningRunCount() >= 1, 20000);
        // Stop it through the page (the store's launcher), and wait until every rank is gone.
        QTest::mouseClick(monitor->findChild<QPushButton*>("stopButton"), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
    }

private:
    QString m_worker;
    QTemporaryDir m_tmp;
};

QTEST_MAIN(TstMonitorFailures)
#include "tst_monitor_failures.moc"
