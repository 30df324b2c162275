// Plan -> "Launch with these settings" -> Launch page -> run spec, through the window's own wiring:
// every field a plan decides arrives (a 2-node GPU plan with hybrid shard group 4 and optimizer
// offload included), a preset plan does not keep another model folder, and the Launch page
// offers only what the engine trains and says why a GPU spec cannot start here.
#include <QtTest>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "plan/model_spec.h"
#include "protocol/run_spec.h"
#include "studio_test_util.h"
#include "widgets/launch_page.h"
#include "widgets/main_window.h"
#include "widgets/plan_page.h"

using namespace shard::widgets;
using shard::test::field;
using shard::test::selectData;
namespace plan = shard::plan;

namespace {

QStringList itemData(QComboBox* box)
{
    QStringList out;
    for (int i = 0; i < box->count(); ++i)
        out << box->itemData(i).toString();
    return out;
}

} // namespace

class TstPlanToLaunch : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        shard::test::isolateSettings(m_settings.path());
        QVERIFY(QDir().mkpath(m_tmp.filePath("model")));
        QFile config(m_tmp.filePath("model/config.json"));
        QVERIFY(config.open(QIODevice::WriteOnly));
        config.write(
            QByteArray::fromStdString(plan::toHfConfig(*plan::findPreset("tiny-1m")).dump(2)));
    }

    void gpuPlanArrivesWhole()
    {
        MainWindow w(m_tmp.filePath("store.sqlite"));
        w.show();
        PlanPage& p = *w.planPage();
        LaunchPage& l = *w.launchPage();
        l.setDataFiles({m_tmp.filePath("train.jsonl")});
        l.setRunName("from-plan");
        QSignalSpy loaded(&p, &PlanPage::modelLoaded);
        p.setModel(m_tmp.filePath("model"));
        QTRY_VERIFY(loaded.count() > 0);
        field<QSpinBox>(p, "gpus")->setValue(4);
        field<QSpinBox>(p, "nodes")->setValue(2);
        selectData(field<QComboBox>(p, "device"), "h100-80g");
        selectData(field<QComboBox>(p, "strategy"), "hybrid");
        field<QSpinBox>(p, "shardGroup")->setValue(4);
        selectData(field<QComboBox>(p, "precision"), "bf16-mixed");
        selectData(field<QComboBox>(p, "checkpointing"), "full");
        selectData(field<QComboBox>(p, "offload"), "optimizer");
        selectData(field<QComboBox>(p, "reduceDtype"), "bf16");
        field<QSpinBox>(p, "microBatch")->setValue(3);
        field<QSpinBox>(p, "seqLen")->setValue(256);
        field<QSpinBox>(p, "gradAccum")->setValue(5);
        p.recompute();
        QVERIFY2(p.input(), qPrintable(p.messageText()));

        QTest::mouseClick(field<QPushButton>(p, "toLaunch"), Qt::LeftButton);
        QCOMPARE(w.currentPage(), Page::Launch);
        auto spec = l.spec();
        QVERIFY2(spec, qPrintable(spec.error()));
        const shard::protocol::RunSpec& s = spec.value();
        QCOMPARE(QString::fromStdString(s.model), m_tmp.filePath("model"));
        QCOMPARE(s.device, std::string("cuda"));
        QCOMPARE(s.procsPerNode, 4);
        QCOMPARE(s.nodes, 2);
        QCOMPARE(s.strategy, std::string("hybrid"));
        QCOMPARE(s.shardGroup, 4);
        QCOMPARE(s.precision, std::string("bf16-mixed"));
        QCOMPARE(s.checkpointing, std::string("full"));
        QCOMPARE(s.offload, std::string("optimizer"));
        QCOMPARE(s.reduceDtype, std::string("bf16"));
        QVERIFY(p.input()->bf16Reduce);
        QVERIFY(field<QComboBox>(l, "reduceDtype")->isEnabled());
        QCOMPARE(s.microBatch, int64_t(3));
        QCOMPARE(s.seqLen, int64_t(256));
        QCOMPARE(s.gradAccum, int64_t(5));
        // What the plan does not decide is the Launch page's.
        QCOMPARE(s.name, std::string("from-plan"));
        QCOMPARE(int(s.data.size()), 1);
        // The engine offloads on a GPU: nothing stops this launch (the run host has the GPUs).
        QVERIFY2(l.cannotRunHere().isEmpty(), qPrintable(l.cannotRunHere()));
        // On the CPU (or Auto, which may resolve to it) the engine refuses offload, so the page
        // says why it cannot start instead of starting something else.
        selectData(field<QComboBox>(l, "device"), "auto");
        QVERIFY2(l.cannotRunHere().contains("CUDA GPU"), qPrintable(l.cannotRunHere()));
        QTRY_VERIFY(l.commandPreview().contains("Not ready"));
        QVERIFY(!l.request());
    }

    void threeDPlanLaunches()
    {
        // A tensor x pipeline layout goes to the Launch page as it was planned: the engine
        // trains it.
        MainWindow w(m_tmp.filePath("store.sqlite"));
        w.show();
        PlanPage& p = *w.planPage();
        LaunchPage& l = *w.launchPage();
        l.setDataFiles({m_tmp.filePath("train.jsonl")});
        QSignalSpy loaded(&p, &PlanPage::modelLoaded);
        p.setModel(m_tmp.filePath("model"));
        QTRY_VERIFY(loaded.count() > 0);
        field<QSpinBox>(p, "gpus")->setValue(8);
        selectData(field<QComboBox>(p, "device"), "h100-80g");
        field<QSpinBox>(p, "tensorParallel")->setValue(2);
        auto* chunks = field<QSpinBox>(p, "virtualStages");
        QVERIFY(!chunks->isEnabled()); // one stage: nothing to interleave
        field<QSpinBox>(p, "pipelineParallel")->setValue(2);
        QVERIFY(chunks->isEnabled());
        chunks->setValue(2);
        field<QCheckBox>(p, "sequenceParallel")->setChecked(true);
        field<QSpinBox>(p, "gradAccum")->setValue(4);
        field<QSpinBox>(p, "seqLen")->setValue(256);
        p.recompute();
        QVERIFY2(p.input() && p.input()->threeD(), qPrintable(p.messageText()));
        // The plan is the interleaved schedule's: its bubble is (pp - 1) / (v K + pp - 1).
        QCOMPARE(p.input()->virtualStages, int64_t(2));
        QVERIFY(p.chosen());
        QCOMPARE(p.chosen()->bubbleFraction, 1.0 / 9.0);
        auto* toLaunch = field<QPushButton>(p, "toLaunch");
        QVERIFY(toLaunch->isEnabled());
        QTest::mouseClick(toLaunch, Qt::LeftButton);
        QCOMPARE(w.currentPage(), Page::Launch);
        const shard::protocol::RunSpec s = l.fieldsSpec();
        QCOMPARE(s.tensorParallel, 2);
        QCOMPARE(s.pipelineParallel, 2);
        QCOMPARE(s.virtualStages, 2);
        QVERIFY(s.sequenceParallel);
        QCOMPARE(s.procsPerNode, 8);
        QCOMPARE(field<QSpinBox>(l, "pipelineParallel")->value(), 2);
        QCOMPARE(field<QSpinBox>(l, "virtualStages")->value(), 2);
        auto* sp = field<QCheckBox>(l, "sequenceParallel");
        QVERIFY(sp->isEnabled() && sp->isChecked());
    }

    void presetPlanDropsTheOldFolder()
    {
        MainWindow w(m_tmp.filePath("store.sqlite"));
        w.show();
        PlanPage& p = *w.planPage();
        LaunchPage& l = *w.launchPage();
        l.setModelFolder(m_tmp.filePath("model")); // an earlier run's model
        p.setModel("llama-3-8b");
        p.recompute();
        QVERIFY(p.input());
        QTest::mouseClick(field<QPushButton>(p, "toLaunch"), Qt::LeftButton);
        QCOMPARE(l.fieldsSpec().model, std::string());
        QVERIFY2(l.messageText().contains("llama-3-8b") && l.messageText().contains("no weights"),
            qPrintable(l.messageText()));
        QVERIFY(!l.spec());
    }

    void offersWhatTheEngineTrains()
    {
        LaunchPage l;
        QStringList trainable;
        for (const auto& p : shard::protocol::trainablePrecisions())
            trainable << QString::fromStdString(p);
        QCOMPARE(itemData(field<QComboBox>(l, "precision")), trainable);
        QVERIFY(!itemData(field<QComboBox>(l, "precision")).contains("fp16-mixed"));
        // A plan in a precision the engine does not train says so.
        PlanPage p;
        p.setModel("tiny-1m");
        field<QSpinBox>(p, "seqLen")->setValue(512); // within tiny-1m's 1024 positions
        selectData(field<QComboBox>(p, "precision"), "bf16");
        p.recompute();
        QVERIFY(p.input());
        l.applyPlan(*p.input(), "tiny-1m");
        QVERIFY2(
            l.messageText().contains("Precision bf16 is not trained"), qPrintable(l.messageText()));
        // Hybrid's shard group is a field of its own, not ranks / 2.
        l.setModelFolder(m_tmp.filePath("model"));
        l.setDataFiles({m_tmp.filePath("train.jsonl")});
        selectData(field<QComboBox>(l, "device"), "cpu");
        selectData(field<QComboBox>(l, "strategy"), "hybrid");
        field<QSpinBox>(l, "ranks")->setValue(6);
        field<QSpinBox>(l, "shardGroup")->setValue(3);
        auto s = l.spec();
        QVERIFY2(s, qPrintable(s.error()));
        QCOMPARE(s.value().shardGroup, 3);
        QVERIFY(l.cannotRunHere().isEmpty());
    }

    // The plan's method and LoRA settings reach the Launch page's run spec.
    void loraPlanReachesTheSpec()
    {
        PlanPage p;
        p.setModel("tiny-1m");
        field<QSpinBox>(p, "seqLen")->setValue(512);
        selectData(field<QComboBox>(p, "method"), "qlora");
        field<QSpinBox>(p, "loraRank")->setValue(4);
        p.findChild<QLineEdit*>("loraTargets")->setText("q,v,down");
        QVERIFY(field<QCheckBox>(p, "doubleQuant")->isEnabled());
        field<QCheckBox>(p, "doubleQuant")->setChecked(false);
        field<QCheckBox>(p, "loraRslora")->setChecked(true);
        p.recompute();
        QVERIFY(p.input());
        QVERIFY(p.input()->method == plan::Method::Qlora);
        QVERIFY(!p.input()->qloraDoubleQuant && p.input()->loraRslora);
        LaunchPage l;
        l.applyPlan(*p.input(), "tiny-1m");
        l.setModelFolder(m_tmp.filePath("model"));
        l.setDataFiles({m_tmp.filePath("train.jsonl")});
        selectData(field<QComboBox>(l, "device"), "cpu");
        auto s = l.spec();
        QVERIFY2(s, qPrintable(s.error()));
        QCOMPARE(s.value().method, std::string("qlora"));
        QCOMPARE(s.value().loraRank, int64_t(4));
        QCOMPARE(s.value().loraTargets, std::string("q,v,down"));
        QVERIFY(!s.value().qloraDoubleQuant);
        QVERIFY(s.value().loraRslora);
        QVERIFY(s.value().usesLora());
        QVERIFY(!field<QCheckBox>(l, "doubleQuant")->isChecked());
        // The Launch form shows them, and what it shows is what the spec gets.
        QCOMPARE(field<QComboBox>(l, "method")->currentData().toString(), QString("qlora"));
        QCOMPARE(field<QSpinBox>(l, "loraRank")->value(), 4);
        field<QSpinBox>(l, "loraRank")->setValue(32);
        field<QDoubleSpinBox>(l, "loraAlpha")->setValue(64);
        field<QDoubleSpinBox>(l, "loraDropout")->setValue(0.05);
        selectData(field<QComboBox>(l, "method"), "lora");
        QVERIFY(!field<QCheckBox>(l, "doubleQuant")->isEnabled()); // QLoRA's only
        s = l.spec();
        QVERIFY2(s, qPrintable(s.error()));
        QCOMPARE(s.value().method, std::string("lora"));
        QCOMPARE(s.value().loraRank, int64_t(32));
        QCOMPARE(s.value().loraAlpha, 64.0);
        QCOMPARE(s.value().loraDropout, 0.05);
        // The form offers only what the engine takes: a dropout below 1.
        field<QDoubleSpinBox>(l, "loraDropout")->setValue(1.5);
        QVERIFY(field<QDoubleSpinBox>(l, "loraDropout")->value() < 1);
        s = l.spec();
        QVERIFY2(s, qPrintable(s.error()));
        l.findChild<QLineEdit*>("loraTargets")->setText("q,zz");
        QVERIFY(!l.spec()); // the run spec's own check names the bad target
        selectData(field<QComboBox>(l, "method"), "full");
        QVERIFY(!field<QSpinBox>(l, "loraRank")->isEnabled());
    }

private:
    QTemporaryDir m_tmp;
    QTemporaryDir m_settings;
};

QTEST_MAIN(TstPlanToLaunch)
#include "tst_plan_to_launch.moc"
