// Launch page: the fields become a validated run spec and the exact command the local launcher
// runs; presets round-trip; bad input (no model, a bad learning rate, a worker that is not
// installed) shows a message instead of starting anything.
#include <QtTest>

#include <QComboBox>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTemporaryDir>

#include "widgets/launch_page.h"
#include "widgets/store_service.h"

using namespace shard::widgets;

class TstLaunchPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        QCoreApplication::setOrganizationName("ShardStudioTest");
        QSettings::setDefaultFormat(QSettings::IniFormat);
        QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_settings.path());
    }

    void fieldsBecomeSpecAndCommand()
    {
        LaunchPage page;
        page.setModelFolder(m_tmp.filePath("model"));
        page.setDataFiles({m_tmp.filePath("a.jsonl"), m_tmp.filePath("b c.jsonl")});
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setRunName("tiny run");
        page.setSteps(5);
        page.findChild<QSpinBox*>("ranks")->setValue(2);
        page.findChild<QComboBox*>("strategy")
            ->setCurrentIndex(page.findChild<QComboBox*>("strategy")->findData("zero2"));
        page.findChild<QLineEdit*>("lr")->setText("1e-3");
        QSignalSpy preview(&page, &LaunchPage::previewChanged);
        QTRY_VERIFY(preview.count() > 0);
        auto spec = page.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        QCOMPARE(spec.value().steps, int64_t(5));
        QCOMPARE(spec.value().procsPerNode, 2);
        QCOMPARE(spec.value().strategy, std::string("zero2"));
        QCOMPARE(spec.value().lr, 1e-3);
        QCOMPARE(int(spec.value().data.size()), 2);
        const QString runDir = m_tmp.filePath("runs/tiny_run");
        QCOMPARE(QString::fromStdString(spec.value().outDir), runDir);
        const QString text = page.commandPreview();
        QVERIFY2(text.contains("launch --nproc-per-node 2"), qPrintable(text));
        QVERIFY(text.contains("--run-dir " + runDir));
        QVERIFY(text.contains("-- train --config " + runDir + "/launch-spec.json"));
        QVERIFY(text.contains("--master-port "));
        QVERIFY(text.contains("\"strategy\": \"zero2\""));
        QVERIFY(text.contains("b c.jsonl"));
        auto request = page.request();
        QVERIFY(request);
        QCOMPARE(request.value().procsPerNode, 2);
        QVERIFY(text.contains(QString::number(request.value().masterPort)));
    }

    void badInputShowsWhy()
    {
        LaunchPage page;
        QVERIFY(!page.spec());
        QVERIFY(page.spec().error().contains("model folder"));
        QTRY_VERIFY(page.commandPreview().contains("Not ready"));
        page.setModelFolder(m_tmp.filePath("model"));
        page.setDataFiles({m_tmp.filePath("a.jsonl")});
        page.findChild<QLineEdit*>("lr")->setText("fast");
        QVERIFY(page.spec().error().contains("'fast' is not a number"));
        page.findChild<QLineEdit*>("lr")->setText("1e-3");
        page.setSteps(0);
        QVERIFY2(page.spec().error().contains("steps"), qPrintable(page.spec().error()));
        // Start with nothing valid: a message, no run.
        page.start();
        QVERIFY(!page.messageText().isEmpty());
    }

    void presetsRoundTrip()
    {
        LaunchPage page;
        page.setModelFolder("/models/tiny");
        page.setDataFiles({"/data/train.jsonl"});
        page.setRunName("preset-run");
        page.setSteps(77);
        page.savePreset("my preset");
        QVERIFY(page.presetNames().contains("my preset"));
        LaunchPage other;
        QVERIFY(other.loadPreset("my preset"));
        QCOMPARE(other.spec().value().steps, int64_t(77));
        QCOMPARE(other.spec().value().model, std::string("/models/tiny"));
        QVERIFY(!other.loadPreset("no such preset"));
        QVERIFY(other.messageText().contains("No preset"));
    }

    void missingWorkerShowsMessage()
    {
        qunsetenv("SHARD_WORKER");
        LaunchPage page;
        page.show();
        StoreService store(m_tmp.filePath("store.sqlite"));
        page.setStore(&store);
        page.setModelFolder(m_tmp.filePath("model"));
        page.setDataFiles({m_tmp.filePath("a.jsonl")});
        page.setRunsRoot(m_tmp.filePath("runs"));
        page.setWorkerProgram("shard-worker-that-is-not-installed");
        page.setSteps(3);
        QTRY_VERIFY(page.findChild<QPushButton*>(QString())); // constructed
        QSignalSpy errors(&store, &StoreService::errorOccurred);
        page.start();
        QTRY_COMPARE_WITH_TIMEOUT(errors.count(), 1, 10000);
        QTRY_VERIFY(page.messageText().contains("not found"));
        QVERIFY2(page.messageText().contains("SHARD_WORKER"), qPrintable(page.messageText()));
    }

private:
    QTemporaryDir m_tmp;
    QTemporaryDir m_settings;
};

QTEST_MAIN(TstLaunchPage)
#include "tst_launch_page.moc"
