// End to end: a real shard-worker run trains 4 steps with checkpoints every 2 steps; its run.json
// is extended to 6 steps and the Monitor page's Resume button (wired by the main window to the
// local launcher) continues it from step 4 in the same folder, where the page sees step 6 arrive.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "widgets/main_window.h"
#include "widgets/monitor_page.h"

using namespace shard::widgets;

namespace {

// The worker of this build tree, or $SHARD_WORKER; it must have both `launch` and `train`.
QString findWorker()
{
    QString w = qEnvironmentVariable("SHARD_WORKER");
    if (w.isEmpty())
        w = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");
    if (!QFileInfo(w).isExecutable())
        return {};
    QProcess p;
    p.start(w, {"--help"});
    if (!p.waitForFinished(20000))
        return {};
    const QByteArray help = p.readAllStandardOutput();
    return help.contains(" launch") && help.contains(" train") ? w : QString();
}

} // namespace

class TstMonitorResume : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void resumeFromPageContinuesFromLatestCheckpoint()
    {
        const QString worker = findWorker();
        if (worker.isEmpty())
            QSKIP("no shard-worker with `launch` and `train` in this build (configure with "
                  "SHARD_BUILD_ENGINE=ON or set SHARD_WORKER)");
        QTemporaryDir tmp;
        QVERIFY(tmp.isValid());
        qputenv("SHARD_WORKER", worker.toUtf8());
        QCoreApplication::setOrganizationName("ShardStudioTest");
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, tmp.filePath("settings"));

        QProcess init;
        init.start(worker,
            {"init-model", "--preset", "tiny-1m", "--out", tmp.filePath("model"), "--seed", "1"});
        QVERIFY(init.waitForFinished(60000));
        QVERIFY2(init.exitCode() == 0, init.readAllStandardError().constData());
        QFile data(tmp.filePath("copy.jsonl"));
        QVERIFY(data.open(QIODevice::WriteOnly));
        uint32_t rng = 7;
        for (int i = 0; i < 100; ++i) {
            QStringList half;
            for (int k = 0; k < 12; ++k) {
                rng = rng * 1664525u + 1013904223u;
                half << QString::number(10 + (rng >> 16) % 100);
            }
            data.write("{\"input_ids\": [1, " + half.join(", ").toUtf8() + ", 2, "
                + half.join(", ").toUtf8() + "]}\n");
        }
        data.close();

        // The first run: 4 steps, checkpoints at steps 2 and 4.
        const QString run = tmp.filePath("run");
        QProcess train;
        train.start(worker,
            {"train", "--model", tmp.filePath("model"), "--data", tmp.filePath("copy.jsonl"),
                "--steps", "4", "--seq-len", "32", "--micro-batch", "2", "--checkpoint-every", "2",
                "--out", run});
        QVERIFY(train.waitForFinished(120000));
        QVERIFY2(train.exitCode() == 0, train.readAllStandardError().constData());

        // The user extends the run to 6 steps.
        QFile spec(run + "/run.json");
        QVERIFY(spec.open(QIODevice::ReadOnly));
        auto j = nlohmann::json::parse(spec.readAll().toStdString());
        spec.close();
        j["steps"] = 6;
        QVERIFY(spec.open(QIODevice::WriteOnly | QIODevice::Truncate));
        spec.write(QByteArray::fromStdString(j.dump(2)));
        spec.close();

        MainWindow window(tmp.filePath("store.sqlite"));
        window.show();
        MonitorPage* monitor = window.monitorPage();
        monitor->openRunDirectory(run);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 10000);
        QCOMPARE(monitor->pointCount(), 4);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->canResume(), 10000);

        auto* resume = monitor->findChild<QPushButton*>("resumeButton");
        QVERIFY(resume);
        QSignalSpy done(monitor, &MonitorPage::resumeDone);
        QTest::mouseClick(resume, Qt::LeftButton);
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 10000);
        QCOMPARE(done.first().first().toString(), QString());
        QCOMPARE(QDir(monitor->runDirectory()).absolutePath(), QDir(run).absolutePath());

        // The resumed run appends steps 5 and 6 to the same folder; the page sees them.
        QTRY_VERIFY_WITH_TIMEOUT(
            !monitor->run().step.empty() && monitor->run().step.back() == 6.0, 120000);
        QTRY_VERIFY_WITH_TIMEOUT(monitor->finished(), 60000);
        const auto& steps = monitor->run().step;
        QCOMPARE(int(steps.size()), 6);
        for (int i = 0; i < 6; ++i)
            QCOMPARE(steps[i], double(i + 1));
        QVERIFY2(monitor->messageText().isEmpty() || monitor->messageText().contains("Resumed"),
            qPrintable(monitor->messageText()));
    }
};

QTEST_MAIN(TstMonitorResume)
#include "tst_monitor_resume.moc"
