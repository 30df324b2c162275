// Plan page: every field changes the plan the planner computes, the chart shows one stacked bar
// per strategy with the chosen one marked and the device capacity, and bad models or impossible
// settings show a message.
#include <QtTest>

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QToolButton>

#include <nlohmann/json.hpp>

#include "plan/device_catalog.h"
#include "plan/model_spec.h"
#include "studio_test_util.h"
#include "widgets/memory_bar_chart.h"
#include "widgets/plan_page.h"
#include "widgets/theme.h"

using namespace shard::widgets;
using shard::test::field;
using shard::test::selectData;
namespace plan = shard::plan;

namespace {

double total(const plan::PlanResult* r)
{
    return double(r->perDevice.total());
}

// The seeds' 70B case: llama-2-70b on 8 nodes of 8 GPUs, ZeRO-1, sequence 4096, 16 micro-batches.
void seventyBOnSixtyFourGpus(PlanPage& page)
{
    page.setModel("llama-2-70b");
    field<QSpinBox>(page, "gpus")->setValue(8);
    field<QSpinBox>(page, "nodes")->setValue(8);
    selectData(field<QComboBox>(page, "strategy"), "zero1");
    field<QSpinBox>(page, "seqLen")->setValue(4096);
    field<QSpinBox>(page, "gradAccum")->setValue(16);
}

} // namespace

class TstPlanPage : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void fieldsChangeThePlan()
    {
        PlanPage page;
        page.show();
        page.setModel("llama-2-7b");
        page.recompute();
        QVERIFY(page.chosen());
        QCOMPARE(page.chosen()->params, int64_t(6738415616));
        QVERIFY(page.chosen()->input.strategy == plan::Strategy::Zero3);
        // One bar per strategy, the chosen one marked.
        const auto& bars = page.chart()->bars();
        QCOMPARE(bars.size(), page.results().size());
        QVERIFY(bars.size() >= 4);
        int marked = 0;
        for (const auto& b : bars)
            marked += b.highlighted ? 1 : 0;
        QCOMPARE(marked, 1);
        QCOMPARE(bars[3].label, QString("zero3"));
        QVERIFY(bars[3].highlighted);
        QCOMPARE(*page.chart()->capacity(), 80.0 * (1 << 30));

        // Micro-batch up: more activations, bigger total.
        const double activations1 = double(page.chosen()->perDevice.activations);
        const double total1 = total(page.chosen());
        field<QSpinBox>(page, "microBatch")->setValue(4);
        QTRY_VERIFY(page.chosen() && page.chosen()->input.microBatch == 4);
        QVERIFY(page.chosen()->perDevice.activations > activations1);
        QVERIFY(total(page.chosen()) > total1);

        // Fewer GPUs: each holds a bigger shard (zero3 shards over all ranks).
        const double shard8 = double(page.chosen()->perDevice.shardedParams);
        field<QSpinBox>(page, "gpus")->setValue(2);
        QTRY_VERIFY(page.chosen() && page.chosen()->worldSize == 2);
        QVERIFY(double(page.chosen()->perDevice.shardedParams) > 3.5 * shard8);

        // Strategy: the marked bar follows.
        selectData(field<QComboBox>(page, "strategy"), "ddp");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.strategy == plan::Strategy::Ddp);
        QVERIFY(page.chart()->bars()[0].highlighted);
        QVERIFY(!page.chart()->bars()[3].highlighted);

        // A 24 GiB device cannot hold DDP of a 7B model.
        selectData(field<QComboBox>(page, "device"), "rtx-4090");
        QTRY_VERIFY(page.chosen() && page.chosen()->capacityBytes < int64_t(25) << 30);
        QVERIFY(!page.chosen()->fits);
        QVERIFY2(page.verdictText().contains("Does not fit"), qPrintable(page.verdictText()));
        QCOMPARE(*page.chart()->capacity(), 24.0 * (1 << 30));

        // Back to zero3 on 8 x 80 GiB with checkpointing: fits, and checkpointing shrinks
        // activations.
        selectData(field<QComboBox>(page, "device"), "h100-80g");
        selectData(field<QComboBox>(page, "strategy"), "zero3");
        field<QSpinBox>(page, "gpus")->setValue(8);
        field<QSpinBox>(page, "microBatch")->setValue(1);
        QTRY_VERIFY(
            page.chosen() && page.chosen()->worldSize == 8 && page.chosen()->input.microBatch == 1);
        QVERIFY(page.chosen()->fits);
        QVERIFY(page.verdictText().contains("Fits"));
        const double actNone = double(page.chosen()->perDevice.activations);
        selectData(field<QComboBox>(page, "checkpointing"), "full");
        QTRY_VERIFY(
            page.chosen() && page.chosen()->input.checkpointing == plan::Checkpointing::Full);
        QVERIFY(double(page.chosen()->perDevice.activations) < actNone / 4);

        // Longer sequences lower the largest micro-batch that fits.
        field<QSpinBox>(page, "seqLen")->setValue(1024);
        QTRY_VERIFY(page.chosen() && page.chosen()->input.seqLen == 1024);
        const int64_t lmb = page.largestMicroBatch();
        QVERIFY(lmb > 0);
        field<QSpinBox>(page, "seqLen")->setValue(4096);
        QTRY_VERIFY(page.chosen() && page.chosen()->input.seqLen == 4096);
        QVERIFY(page.largestMicroBatch() < lmb);
        QVERIFY(page.fewestGpus() >= 1);

        // Precision fp32 doubles the gathered parameter bytes of bf16.
        const double gathered16 = double(page.chosen()->perDevice.gatheredParams);
        selectData(field<QComboBox>(page, "precision"), "fp32");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.precision == plan::Precision::Fp32);
        QVERIFY(double(page.chosen()->perDevice.gatheredParams) > 1.9 * gathered16);
    }

    // Method, rank, alpha, dropout and targets reach the planner; the chart carries the frozen
    // base, NF4 base and adapter categories in their own colours; Launch gets them in its spec.
    void loraFieldsChangeThePlan()
    {
        PlanPage page;
        page.show();
        page.setModel("llama-3.1-8b");
        selectData(field<QComboBox>(page, "device"), "rtx-4090");
        selectData(field<QComboBox>(page, "strategy"), "ddp");
        field<QSpinBox>(page, "gpus")->setValue(1);
        field<QSpinBox>(page, "microBatch")->setValue(2);
        field<QSpinBox>(page, "seqLen")->setValue(2048);
        selectData(field<QComboBox>(page, "checkpointing"), "full");
        QTRY_VERIFY(page.chosen() && page.chosen()->worldSize == 1
            && page.chosen()->input.seqLen == 2048 && page.chosen()->input.microBatch == 2
            && page.chosen()->input.checkpointing == plan::Checkpointing::Full);
        QVERIFY(!field<QSpinBox>(page, "loraRank")->isEnabled());
        const double fullTotal = total(page.chosen());
        QVERIFY(!page.chosen()->fits);

        selectData(field<QComboBox>(page, "method"), "lora");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.method == plan::Method::Lora);
        QVERIFY(field<QSpinBox>(page, "loraRank")->isEnabled());
        const int64_t P = page.chosen()->params;
        QCOMPARE(page.chosen()->perDevice.frozenBase, 2 * P);
        QCOMPARE(page.chosen()->perDevice.adapterOptimizer, int64_t(8) * 6815744);
        const double loraTotal = total(page.chosen());
        QVERIFY(loraTotal < fullTotal / 4);

        field<QSpinBox>(page, "loraRank")->setValue(16);
        field<QLineEdit>(page, "loraTargets")->setText("q,k,v,o,gate,up,down");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.loraRank == 16
            && page.chosen()->input.loraTargets == "q,k,v,o,gate,up,down");
        QCOMPARE(page.chosen()->perDevice.adapterOptimizer, int64_t(8) * 41943040);
        field<QDoubleSpinBox>(page, "loraAlpha")->setValue(32);
        field<QDoubleSpinBox>(page, "loraDropout")->setValue(0.1);
        QTRY_VERIFY(page.chosen() && page.chosen()->input.loraDropout > 0.05);
        QCOMPARE(page.chosen()->input.loraAlpha, 32.0);

        selectData(field<QComboBox>(page, "method"), "qlora");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.method == plan::Method::Qlora);
        QVERIFY(page.chosen()->perDevice.quantizedBase > 0);
        // The table hides what no strategy uses: the full-model optimizer row under QLoRA.
        auto* table = field<QTableWidget>(page, "components");
        QVERIFY(table->isRowHidden(int(planCategoryNames().indexOf("optimizer"))));
        QVERIFY(!table->isRowHidden(int(planCategoryNames().indexOf("NF4 base"))));
        QVERIFY(page.chosen()->fits);
        QVERIFY(total(page.chosen()) < loraTotal);
        // Double quantisation (on by default) keeps 8-bit block scales: turning it off adds
        // three bytes per 64 NF4 parameters.
        QVERIFY(field<QCheckBox>(page, "doubleQuant")->isChecked());
        const int64_t nf4Dq = page.chosen()->perDevice.quantizedBase;
        field<QCheckBox>(page, "doubleQuant")->setChecked(false);
        QTRY_VERIFY(page.chosen() && !page.chosen()->input.qloraDoubleQuant);
        const int64_t Q = plan::quantizedParameterCount(page.chosen()->input.model);
        QCOMPARE(page.chosen()->perDevice.quantizedBase - nf4Dq, 3 * Q / 64 - 4 * Q / (64 * 256));
        field<QCheckBox>(page, "doubleQuant")->setChecked(true);

        // A bad target: a message, no plan.
        field<QLineEdit>(page, "loraTargets")->setText("q,x");
        QTRY_VERIFY(!page.chosen());

        // The categories: each its own colour, one value per category in every bar.
        const QStringList names = planCategoryNames();
        QCOMPARE(names.size(), int(plan::MemoryBreakdown {}.components().size()));
        QVERIFY(names.contains("frozen base") && names.contains("NF4 base")
            && names.contains("adapters") && names.contains("adapter optimizer"));
        QSet<QRgb> colours;
        for (int i = 0; i < names.size(); ++i)
            colours.insert(Theme::categoryColor(i).rgb());
        QCOMPARE(colours.size(), names.size());
    }

    // Preference objectives: a pair is two sequences (the activations of twice the micro-batch),
    // DPO's reference and its note follow the method; the fields' rules are the engine's.
    void objectiveChangesThePlan()
    {
        PlanPage page;
        page.show();
        page.setModel("llama-3.1-8b");
        selectData(field<QComboBox>(page, "strategy"), "zero3");
        field<QSpinBox>(page, "gpus")->setValue(8);
        field<QSpinBox>(page, "microBatch")->setValue(2);
        field<QSpinBox>(page, "seqLen")->setValue(2048);
        QTRY_VERIFY(page.chosen() && page.chosen()->input.microBatch == 2
            && page.chosen()->input.seqLen == 2048 && page.chosen()->worldSize == 8);
        field<QSpinBox>(page, "microBatch")->setValue(4);
        QTRY_VERIFY(page.chosen() && page.chosen()->input.microBatch == 4);
        const int64_t sftFour = page.chosen()->perDevice.activations;
        field<QSpinBox>(page, "microBatch")->setValue(2);
        QTRY_VERIFY(page.chosen() && page.chosen()->input.microBatch == 2);
        selectData(field<QComboBox>(page, "objective"), "dpo");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.objective == "dpo");
        QCOMPARE(page.chosen()->perDevice.activations, sftFour);
        QCOMPARE(page.chosen()->input.reference, std::string("precomputed"));
        bool noted = false;
        for (const auto& n : page.chosen()->notes)
            noted = noted || n.find("two sequences") != std::string::npos;
        QVERIFY(noted);
        // Full fine-tuning's live reference: a frozen bf16 copy, 1/8 of it on each GPU under
        // zero3, in the frozen base row.
        const int64_t precomputedTotal = page.chosen()->perDevice.total();
        QCOMPARE(page.chosen()->perDevice.frozenBase, int64_t(0));
        selectData(field<QComboBox>(page, "reference"), "live");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.reference == "live");
        QCOMPARE(page.chosen()->perDevice.frozenBase,
            2 * plan::parameterCount(plan::resolveModel("llama-3.1-8b")) / 8);
        QVERIFY(page.chosen()->perDevice.total() > precomputedTotal);
        selectData(field<QComboBox>(page, "reference"), "auto");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.reference == "precomputed");
        selectData(field<QComboBox>(page, "method"), "lora");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.reference == "live");
        selectData(field<QComboBox>(page, "objective"), "orpo");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.objective == "orpo"
            && page.chosen()->input.reference.empty());
        QVERIFY(!field<QComboBox>(page, "reference")->isEnabled());
        QVERIFY(field<QDoubleSpinBox>(page, "orpoLambda")->isEnabled());
        selectData(field<QComboBox>(page, "objective"), "sft");
        selectData(field<QComboBox>(page, "method"), "full");
    }

    // Device "CPU (host memory)": a rank's capacity is the node's RAM divided by the ranks per
    // node, this machine's RAM unless the user types another, as `shard plan` and the Launch
    // page count it; never the memory of the card chosen before, and not after a restart either
    // (the settings once kept that card's 80 GiB as the CPU's RAM).
    void cpuCapacityIsHostRamPerRank()
    {
        QTemporaryDir settings;
        shard::test::isolateSettings(settings.path());
        const int64_t ram = plan::physicalMemoryBytes();
        QVERIFY(ram > 0);
        const QString perRank = QString::fromStdString(plan::formatGiB(ram / 2)) + " per rank";
        {
            PlanPage page;
            page.setModel("llama-2-7b");
            selectData(field<QComboBox>(page, "device"), "h100-80g");
            page.recompute();
            QCOMPARE(page.chosen()->capacityBytes, int64_t(80) << 30);
            selectData(field<QComboBox>(page, "device"), "cpu");
            field<QSpinBox>(page, "gpus")->setValue(2);
            page.recompute();
            QVERIFY(page.chosen());
            QCOMPARE(page.chosen()->capacityBytes, ram / 2);
            QCOMPARE(*page.chart()->capacity(), double(ram / 2));
            QVERIFY2(page.verdictText().contains(perRank), qPrintable(page.verdictText()));
            QVERIFY2(
                page.verdictText().contains("2 rank(s) per node"), qPrintable(page.verdictText()));
            page.saveSettings();
        }
        {
            PlanPage again;
            again.loadSettings();
            QCOMPARE(field<QComboBox>(again, "device")->currentData().toString(), QString("cpu"));
            again.recompute();
            QCOMPARE(again.chosen()->capacityBytes, ram / 2);
            // Another node's RAM, typed: used, and kept across a card and back.
            field<QDoubleSpinBox>(again, "customGiB")->setValue(16);
            again.recompute();
            QCOMPARE(again.chosen()->capacityBytes, (int64_t(16) << 30) / 2);
            selectData(field<QComboBox>(again, "device"), "h100-80g");
            QCOMPARE(field<QDoubleSpinBox>(again, "customGiB")->value(), 80.0);
            selectData(field<QComboBox>(again, "device"), "cpu");
            QCOMPARE(field<QDoubleSpinBox>(again, "customGiB")->value(), 16.0);
            again.saveSettings();
        }
        {
            PlanPage third;
            third.loadSettings();
            third.recompute();
            QCOMPARE(third.chosen()->capacityBytes, (int64_t(16) << 30) / 2);
        }
        // The settings of an older studio: the CPU with a card's 80 GiB in "customGiB".
        {
            QSettings s;
            s.beginGroup("plan");
            s.setValue("device", "cpu");
            s.setValue("customGiB", 80.0);
            s.remove("cpuRamGiB");
            s.endGroup();
        }
        PlanPage old;
        old.loadSettings();
        old.recompute();
        QCOMPARE(old.chosen()->capacityBytes, ram / 2);
        QVERIFY2(old.verdictText().contains(perRank), qPrintable(old.verdictText()));
    }

    // A plan that does not fit says what would: here the sharded strategies.
    void notFittingSuggestsWhatWould()
    {
        PlanPage page;
        page.setModel("llama-2-7b");
        selectData(field<QComboBox>(page, "device"), "h100-80g");
        field<QSpinBox>(page, "gpus")->setValue(8);
        field<QSpinBox>(page, "microBatch")->setValue(1);
        field<QSpinBox>(page, "seqLen")->setValue(1024);
        selectData(field<QComboBox>(page, "strategy"), "ddp");
        page.recompute();
        QVERIFY(page.chosen() && !page.chosen()->fits);
        const QString verdict = page.verdictText();
        QVERIFY2(verdict.contains("Does not fit") && verdict.contains("Try ")
                && verdict.contains("zero3") && verdict.contains("fits with these settings"),
            qPrintable(verdict));
    }

    // A tiny model's components read in MiB (or KiB), not as 0.00 GiB, in the table and the
    // verdict.
    void tinyModelsAreShownInMiB()
    {
        PlanPage page;
        page.setModel("tiny-1m");
        selectData(field<QComboBox>(page, "device"), "cpu");
        field<QSpinBox>(page, "gpus")->setValue(1);
        field<QSpinBox>(page, "seqLen")->setValue(256);
        page.recompute();
        QVERIFY(page.chosen());
        QVERIFY(page.chosen()->perDevice.total() < (int64_t(1) << 30));
        auto* table = field<QTableWidget>(page, "components");
        int totalRow = -1;
        for (int r = 0; r < table->rowCount(); ++r)
            if (table->verticalHeaderItem(r)->text().startsWith("total"))
                totalRow = r;
        QVERIFY(totalRow >= 0);
        QCOMPARE(table->verticalHeaderItem(totalRow)->text(), QString("total, MiB"));
        for (int c = 0; c < table->columnCount(); ++c)
            QVERIFY2(table->item(totalRow, c)->text().toDouble() >= 1.0,
                qPrintable(table->item(totalRow, c)->text()));
        const QString verdict = page.verdictText();
        QVERIFY2(verdict.contains(" MiB of "), qPrintable(verdict));
        QVERIFY2(!verdict.contains("0.00 GiB"), qPrintable(verdict));
        // On a 4 TiB device memory sets no limit on this model's micro-batch: said so, not
        // "65536" (the search's end).
        selectData(field<QComboBox>(page, "device"), "custom");
        field<QDoubleSpinBox>(page, "customGiB")->setValue(4096);
        page.recompute();
        QCOMPARE(page.largestMicroBatch(), int64_t(65536));
        const QString details = field<QLabel>(page, "details")->text();
        QVERIFY2(details.contains("not limited by memory"), qPrintable(details));
        // What a checkpoint of it costs on disk (the Monitor then measures it).
        QVERIFY2(details.contains("Checkpoint: ") && details.contains("written per rank"),
            qPrintable(details));
        QVERIFY2(!details.contains("<b>65536</b>"), qPrintable(details));
    }

    // Why the numbers are what they are (issue 27, item 3): the accounting used, the moment of
    // the peak, the overhead's parts, and on hover what each row holds.
    void numbersAreExplained()
    {
        PlanPage page;
        page.setModel("llama-2-7b");
        page.recompute();
        QVERIFY(page.chosen());
        QString details = field<QLabel>(page, "details")->text();
        QVERIFY2(details.contains("this engine's accounting"), qPrintable(details));
        QVERIFY2(details.contains("peak at <b>" + QString::fromStdString(page.chosen()->peakPhase)),
            qPrintable(details));
        QVERIFY2(details.contains("overhead ") && details.contains("1.50 GiB fixed per device")
                && details.contains("fragmentation (5% of the rest)"),
            qPrintable(details));
        auto* table = field<QTableWidget>(page, "components");
        QCOMPARE(table->verticalHeaderItem(2)->text(), QString("grads"));
        QVERIFY(table->verticalHeaderItem(2)->toolTip().contains("ZeRO-1"));
        QVERIFY(table->verticalHeaderItem(7)->toolTip().contains("fragmentation"));
        QCOMPARE(planCategoryTips().size(), planCategoryNames().size() + 2);
        for (int r = 0; r < table->rowCount(); ++r)
            QVERIFY2(!table->verticalHeaderItem(r)->toolTip().isEmpty(),
                qPrintable(table->verticalHeaderItem(r)->text()));
        selectData(field<QComboBox>(page, "mode"), "zero-paper");
        page.recompute();
        details = field<QLabel>(page, "details")->text();
        QVERIFY2(details.contains("the ZeRO paper's accounting")
                && details.contains("not this engine's"),
            qPrintable(details));
        selectData(field<QComboBox>(page, "device"), "cpu");
        selectData(field<QComboBox>(page, "mode"), "engine");
        page.recompute();
        details = field<QLabel>(page, "details")->text();
        QVERIFY2(details.contains("none on CPU"), qPrintable(details));
    }

    // The method and the LoRA fields come back after a restart, as every other field does.
    void loraFieldsSurviveARestart()
    {
        QTemporaryDir settings;
        shard::test::isolateSettings(settings.path());
        {
            PlanPage page;
            page.setModel("llama-2-7b");
            selectData(field<QComboBox>(page, "method"), "qlora");
            field<QSpinBox>(page, "loraRank")->setValue(32);
            field<QDoubleSpinBox>(page, "loraAlpha")->setValue(64);
            field<QDoubleSpinBox>(page, "loraDropout")->setValue(0.05);
            field<QLineEdit>(page, "loraTargets")->setText("q,v,down");
            field<QCheckBox>(page, "loraRslora")->setChecked(true);
            field<QCheckBox>(page, "doubleQuant")->setChecked(false);
            page.saveSettings();
        }
        PlanPage again;
        again.loadSettings();
        QCOMPARE(field<QComboBox>(again, "method")->currentData().toString(), QString("qlora"));
        QCOMPARE(field<QSpinBox>(again, "loraRank")->value(), 32);
        QCOMPARE(field<QDoubleSpinBox>(again, "loraAlpha")->value(), 64.0);
        QCOMPARE(field<QDoubleSpinBox>(again, "loraDropout")->value(), 0.05);
        QCOMPARE(field<QLineEdit>(again, "loraTargets")->text(), QString("q,v,down"));
        QVERIFY(field<QCheckBox>(again, "loraRslora")->isChecked());
        QVERIFY(!field<QCheckBox>(again, "doubleQuant")->isChecked());
        again.recompute();
        QVERIFY(again.chosen());
        QCOMPARE(again.chosen()->input.loraRank, int64_t(32));
        QVERIFY(again.chosen()->perDevice.quantizedBase > 0);
    }

    void huggingFaceFolderIsPlanned()
    {
        QTemporaryDir tmp;
        const auto spec = *plan::findPreset("tiny-15m");
        QFile f(tmp.filePath("config.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(plan::toHfConfig(spec).dump()));
        f.close();
        PlanPage page;
        QSignalSpy loaded(&page, &PlanPage::modelLoaded);
        page.setModel(tmp.path());
        QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 1, 30000);
        field<QSpinBox>(page, "seqLen")->setValue(1024); // within tiny-15m's 2048 positions
        page.recompute();
        QVERIFY2(page.chosen(), qPrintable(page.messageText()));
        QCOMPARE(page.chosen()->params, plan::parameterCount(spec));
        QCOMPARE(page.modelName(), QDir(tmp.path()).dirName());
    }

    void folderWithoutConfigShowsMessage()
    {
        QTemporaryDir tmp;
        PlanPage page;
        page.show();
        QSignalSpy failed(&page, &PlanPage::modelFailed);
        page.setModel(tmp.path());
        QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 30000);
        QVERIFY2(page.messageText().contains("config.json"), qPrintable(page.messageText()));
        // The previous model stays planned.
        QCOMPARE(page.modelName(), QString("llama-2-7b"));
    }

    void impossibleSettingsShowMessage()
    {
        PlanPage page;
        page.show();
        selectData(field<QComboBox>(page, "strategy"), "hybrid");
        field<QSpinBox>(page, "gpus")->setValue(8);
        field<QSpinBox>(page, "shardGroup")->setValue(3);
        page.recompute();
        QVERIFY2(!page.messageText().isEmpty(), "hybrid group 3 over 8 GPUs must be refused");
        QVERIFY(page.messageText().contains("3"));
        QVERIFY(page.results().empty());
        field<QSpinBox>(page, "shardGroup")->setValue(4);
        page.recompute();
        QVERIFY(page.messageText().isEmpty());
        QVERIFY(page.chosen());
        QCOMPARE(page.chosen()->shardDegree, int64_t(4));
    }

    // Tensor and pipeline parallel (issue 29): the seeds' 70B layout on 64 GPUs is planned as
    // the engine trains it (its accounting stays chosen), and in the paper's accounting the
    // seeds' answer fits 80 GB; the fullest pipeline stage is the plan; it can be launched and
    // exported for torchtitan; back to 1 x 1 too.
    void tensorAndPipelineParallel()
    {
        PlanPage page;
        page.show();
        seventyBOnSixtyFourGpus(page);
        auto* sp = field<QCheckBox>(page, "sequenceParallel");
        QVERIFY(!sp->isEnabled()); // offered with tensor parallel only
        field<QSpinBox>(page, "tensorParallel")->setValue(4);
        field<QSpinBox>(page, "pipelineParallel")->setValue(2);
        QVERIFY(sp->isEnabled());
        QCOMPARE(field<QComboBox>(page, "mode")->currentData().toString(), QString("engine"));
        page.recompute();
        QTRY_VERIFY(page.chosen() && page.chosen()->input.tp == 4);
        QVERIFY(page.chosen()->input.mode == plan::AccountingMode::Engine);
        QVERIFY2(page.chosen()->peakPhase.find("pipeline stage") != std::string::npos,
            page.chosen()->peakPhase.c_str());
        selectData(field<QComboBox>(page, "mode"), "zero-paper");
        // Without sequence parallel the norms' activations are whole on every GPU; with it
        // they are split over the 4 (70B at TP4 x PP2 fits 80 GB with it).
        page.recompute();
        QTRY_VERIFY(page.chosen() && page.chosen()->input.tp == 4);
        QVERIFY(!page.chosen()->input.sequenceParallel);
        const int64_t without = page.chosen()->perDevice.activations;
        sp->setChecked(true);
        page.recompute();
        QTRY_VERIFY(
            page.chosen() && page.chosen()->input.tp == 4 && page.chosen()->input.sequenceParallel);
        const plan::PlanResult* c = page.chosen();
        QVERIFY(c->perDevice.activations < without);
        QCOMPARE(c->input.pp, int64_t(2));
        QCOMPARE(c->shardDegree, int64_t(8));
        QCOMPARE(c->peakPhase, std::string("backward start, pipeline stage 0"));
        QVERIFY(c->fits);
        auto* launch = page.findChild<QPushButton*>("toLaunch");
        QVERIFY(launch->isEnabled()); // the engine trains the layout
        QVERIFY2(launch->toolTip().contains("tensor parallel 4, pipeline stages 2"),
            qPrintable(launch->toolTip()));
        QVERIFY(page.findChild<QToolButton*>("exportFor")->isEnabled());
        field<QSpinBox>(page, "tensorParallel")->setValue(1);
        field<QSpinBox>(page, "pipelineParallel")->setValue(1);
        QVERIFY(!sp->isEnabled());
        page.recompute();
        QTRY_VERIFY(page.chosen() && page.chosen()->input.tp == 1);
        QVERIFY(!page.chosen()->input.sequenceParallel); // not planned without tensor parallel
        QVERIFY(launch->isEnabled());
    }

    // "Recommend a layout": 70B on 64 GPUs with ZeRO-1 does not fit with data parallelism alone;
    // the page sets the fastest tensor x pipeline layout that fits, the accumulation that keeps
    // the global batch of 1,024, and says why.
    void recommendsALayout()
    {
        PlanPage page;
        page.show();
        seventyBOnSixtyFourGpus(page);
        selectData(field<QComboBox>(page, "checkpointing"), "full");
        page.recompute();
        QTRY_VERIFY(page.chosen() && page.chosen()->input.model.name == "llama-2-70b");
        page.findChild<QPushButton*>("recommendLayout")->click();
        const int tp = field<QSpinBox>(page, "tensorParallel")->value();
        const int pp = field<QSpinBox>(page, "pipelineParallel")->value();
        QVERIFY2(tp * pp > 1, "data parallelism alone does not fit");
        QCOMPARE(field<QSpinBox>(page, "gradAccum")->value() * 64 / (tp * pp), 1024);
        QCOMPARE(field<QComboBox>(page, "mode")->currentData().toString(), QString("zero-paper"));
        QVERIFY2(page.messageText().contains("global batch of 1024 sequences")
                && page.messageText().contains("fastest layout that does")
                && page.messageText().contains("data parallelism alone (DP 64"),
            qPrintable(page.messageText()));
        page.recompute();
        QTRY_VERIFY(page.chosen() && page.chosen()->input.tp == tp && page.chosen()->fits);
        // Nothing fits on one GPU: said, the fields left as they were.
        field<QSpinBox>(page, "nodes")->setValue(1);
        field<QSpinBox>(page, "gpus")->setValue(1);
        page.findChild<QPushButton*>("recommendLayout")->click();
        QVERIFY2(
            page.messageText().contains("no layout of 1 GPU fits"), qPrintable(page.messageText()));
        QCOMPARE(field<QSpinBox>(page, "tensorParallel")->value(), tp);
    }

    // A DeepSpeed config sets the fields and the page plans it with DeepSpeed's accounting and
    // the config's knobs; a bad config leaves the fields as they were and says why.
    void importsDeepSpeedConfig()
    {
        QTemporaryDir dir;
        PlanPage page;
        page.show();
        page.setModel("llama-2-7b");
        field<QSpinBox>(page, "gpus")->setValue(4);
        field<QSpinBox>(page, "nodes")->setValue(2);
        page.recompute();
        const QString path = dir.filePath("ds_config.json");
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto",
                "bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
                "offload_optimizer": {"device": "cpu"}, "overlap_comm": true,
                "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8}})");
        }
        QVERIFY(page.importConfig(path));
        QTRY_VERIFY(page.chosen() && page.chosen()->input.strategy == plan::Strategy::Zero2);
        QCOMPARE(field<QComboBox>(page, "offload")->currentData().toString(), QString("optimizer"));
        QCOMPARE(field<QComboBox>(page, "mode")->currentData().toString(), QString("deepspeed"));
        QCOMPARE(field<QSpinBox>(page, "microBatch")->value(), 2);
        QCOMPARE(field<QSpinBox>(page, "gpus")->value(), 4); // the page's GPUs fill the config's
        QVERIFY(page.messageText().contains("Imported ds_config.json"));
        QVERIFY(page.messageText().contains("gradient_accumulation_steps = 1"));
        // The chosen bar is DeepSpeed's accounting with the config's buckets: 2 bytes x 4.5 x
        // (2e8 + 2e8).
        const plan::PlanResult* c = page.chosen();
        QCOMPARE(double(c->perDevice.commBuffers), 2.0 * 4.5 * 4e8);
        QCOMPARE(double(c->perDevice.shardedParams), 2.0 * 6738415616.0);
        QCOMPARE(c->peakPhase, std::string("backward (DeepSpeed's accounting)"));
        // Another strategy on the page keeps the config's buckets (stage 3: one reduce bucket,
        // doubled under overlap_comm).
        selectData(field<QComboBox>(page, "strategy"), "zero3");
        QTRY_VERIFY(page.chosen() && page.chosen()->input.strategy == plan::Strategy::Zero3);
        QCOMPARE(double(page.chosen()->perDevice.commBuffers), 2.0 * 2e8 * 2.0);

        // A config DeepSpeed would refuse: nothing changes, the message says what is wrong.
        const QString bad = dir.filePath("bad.json");
        {
            QFile f(bad);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(R"({"train_batch_size": 7, "zero_optimization": {"stage": 1}})");
        }
        QVERIFY(!page.importConfig(bad));
        QVERIFY(page.messageText().contains("train_batch_size 7 does not split over 8 GPUs"));
        QCOMPARE(field<QComboBox>(page, "strategy")->currentData().toString(), QString("zero3"));
        QVERIFY(!page.importConfig(dir.filePath("notes.txt")));
        QVERIFY(page.messageText().contains("not a config this page reads"));
    }

    // accelerate's FSDP template: its process count and sharding strategy become the fields,
    // and the accounting stays the engine's (FSDP is what the engine implements).
    void importsAccelerateConfig()
    {
        const QString fixture = QStringLiteral(SHARD_SOURCE_DIR)
            + "/../shared/fixtures/huggingface__accelerate/fsdp.yaml";
        if (!QFile::exists(fixture))
            QSKIP("../shared/fixtures is absent (configs other projects wrote)");
        PlanPage page;
        page.show();
        page.setModel("llama-2-7b");
        page.recompute();
        QVERIFY(page.importConfig(fixture));
        QTRY_VERIFY(page.chosen() && page.chosen()->worldSize == 2);
        QCOMPARE(field<QComboBox>(page, "strategy")->currentData().toString(), QString("zero3"));
        QCOMPARE(field<QComboBox>(page, "reduceDtype")->currentData().toString(), QString("bf16"));
        QCOMPARE(field<QComboBox>(page, "mode")->currentData().toString(), QString("engine"));
        QVERIFY(page.messageText().contains("Not modelled"));
    }

    // "Export for…": every format is written from the page's plan, and a config reads back as
    // the same plan.
    void exportsThePlan()
    {
        PlanPage page;
        page.show();
        page.setModel("llama-2-7b");
        selectData(field<QComboBox>(page, "strategy"), "hybrid");
        field<QSpinBox>(page, "gpus")->setValue(8);
        field<QSpinBox>(page, "nodes")->setValue(2);
        field<QSpinBox>(page, "shardGroup")->setValue(8);
        selectData(field<QComboBox>(page, "checkpointing"), "full");
        page.recompute();
        QVERIFY(page.chosen());
        QVERIFY(page.findChild<QToolButton*>("exportFor")->isEnabled());
        for (const char* kind : {"deepspeed", "accelerate", "torchtitan", "torchrun",
                 "deepspeed-launch", "accelerate-launch", "sbatch"})
            QVERIFY2(!page.exportFor(kind).text.empty(), kind);
        const plan::ExportedConfig ds = page.exportFor("deepspeed");
        QVERIFY(QString::fromStdString(ds.text).contains("\"mics_shard_size\": 8"));
        QTemporaryDir dir;
        const QString path = dir.filePath("back.json");
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(QByteArray::fromStdString(ds.text));
        }
        PlanPage again;
        again.setModel("llama-2-7b");
        field<QSpinBox>(again, "gpus")->setValue(8);
        field<QSpinBox>(again, "nodes")->setValue(2);
        again.recompute();
        QVERIFY(again.importConfig(path));
        QTRY_VERIFY(again.chosen() && again.chosen()->input.strategy == plan::Strategy::Hybrid);
        QCOMPARE(again.chosen()->input.shardGroup, int64_t(8));
        // The dialog shows the text and what the target cannot say.
        page.showExport("deepspeed");
        QDialog* dialog = nullptr;
        QTRY_VERIFY((dialog = page.findChild<QDialog*>("exportDialog")) != nullptr);
        auto* text = dialog->findChild<QPlainTextEdit*>("exportText");
        QVERIFY(text && text->toPlainText().contains("\"stage\": 3"));
        auto* notes = dialog->findChild<QLabel*>("exportNotes");
        QVERIFY(notes && notes->text().contains("gradient_checkpointing"));
        dialog->close();
    }

    void catalogueTableAndWarnings()
    {
        PlanPage page;
        page.show();
        page.setModel("llama-2-7b");
        // Every catalogued card is offered, and the fit and the throughput follow the card.
        auto* device = field<QComboBox>(page, "device");
        for (const auto& card : plan::gpuCatalog())
            QVERIFY2(device->findData(QString::fromStdString(card.key)) >= 0, card.key.c_str());
        QVERIFY(device->findData("cpu") >= 0);
        selectData(field<QComboBox>(page, "strategy"), "zero3");
        field<QSpinBox>(page, "gpus")->setValue(8);
        selectData(device, "h100-80g");
        page.recompute();
        QVERIFY(page.chosen());
        const double h100 = page.chosen()->tokensPerSecond;
        selectData(device, "a100-80g");
        page.recompute();
        QCOMPARE(page.chosen()->capacityBytes > 0, true);
        QVERIFY2(page.chosen()->tokensPerSecond < 0.5 * h100,
            "an A100 (312 TFLOP/s) must plan slower than an H100 (989)");
        // A catalogued card greys its own memory into the size field, not a stale 48 GiB.
        auto* size = field<QDoubleSpinBox>(page, "customGiB");
        QVERIFY(!size->isEnabled());
        QCOMPARE(size->value(), 80.0);
        // The per-component table: one column per strategy, one row per component + total.
        auto* table = field<QTableWidget>(page, "components");
        QCOMPARE(table->columnCount(), int(page.results().size()));
        QCOMPARE(table->rowCount(), planCategoryNames().size() + 2);
        QVERIFY(table->horizontalHeaderItem(3)->text().contains("zero3"));
        QVERIFY(table->horizontalHeaderItem(3)->text().startsWith("▶"));
        // Over 80% of device memory: flagged even though it fits.
        field<QSpinBox>(page, "microBatch")->setValue(1);
        int64_t tightBatch = 0;
        for (int64_t b = 1; b <= 64 && !tightBatch; ++b) {
            field<QSpinBox>(page, "microBatch")->setValue(int(b));
            page.recompute();
            const auto* c = page.chosen();
            if (c->fits && double(c->perDevice.total()) > 0.8 * double(c->capacityBytes))
                tightBatch = b;
        }
        QVERIFY2(tightBatch > 0, "some micro-batch must land between 80% and 100%");
        QVERIFY2(page.verdictText().contains("tight"), qPrintable(page.verdictText()));
        // Offload checks host memory: llama-2-70b with everything offloaded needs > 1 TiB of
        // host RAM per 8-GPU node.
        page.setModel("llama-2-70b");
        field<QSpinBox>(page, "microBatch")->setValue(1);
        field<QSpinBox>(page, "seqLen")->setValue(2048);
        selectData(field<QComboBox>(page, "checkpointing"), "full");
        selectData(field<QComboBox>(page, "offload"), "params+optimizer");
        field<QDoubleSpinBox>(page, "hostGiB")->setValue(512);
        page.recompute();
        QVERIFY(page.chosen());
        QVERIFY(!page.chosen()->fits);
        QVERIFY2(page.verdictText().contains("host memory"), qPrintable(page.verdictText()));
        field<QDoubleSpinBox>(page, "hostGiB")->setValue(4096);
        page.recompute();
        QVERIFY(page.chosen()->fits);
        // The accounting mode is a field.
        selectData(field<QComboBox>(page, "mode"), "zero-paper");
        page.recompute();
        QVERIFY(page.chosen()->input.mode == plan::AccountingMode::ZeroPaper);
    }

    void folderIsShownAndNoPlanIsNotGreen()
    {
        QTemporaryDir tmp;
        QFile f(tmp.filePath("config.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(plan::toHfConfig(*plan::findPreset("tiny-1m")).dump()));
        f.close();
        PlanPage page;
        page.show();
        page.recompute();
        QVERIFY(page.verdictText().contains("Fits"));
        auto* toLaunch = field<QPushButton>(page, "toLaunch");
        QVERIFY(toLaunch->isEnabled());
        QSignalSpy loaded(&page, &PlanPage::modelLoaded);
        page.setModel(tmp.path());
        QTRY_COMPARE_WITH_TIMEOUT(loaded.count(), 1, 30000);
        auto* box = field<QComboBox>(page, "model");
        QCOMPARE(box->currentData().toString(), tmp.path());
        QVERIFY2(box->currentText().contains(QDir(tmp.path()).dirName()),
            qPrintable(box->currentText()));
        // The model's facts are shown as soon as it is read, whether or not a plan follows.
        QVERIFY2(field<QLabel>(page, "modelInfo")->text().contains(tmp.path()),
            qPrintable(field<QLabel>(page, "modelInfo")->text()));
        // An impossible setting: "No plan", not in the last verdict's green.
        selectData(field<QComboBox>(page, "strategy"), "hybrid");
        field<QSpinBox>(page, "gpus")->setValue(8);
        field<QSpinBox>(page, "shardGroup")->setValue(3);
        page.recompute();
        QCOMPARE(page.verdictText(), QString("No plan"));
        QVERIFY(!field<QLabel>(page, "verdict")->styleSheet().contains("#1d7a2e"));
        // Nothing to launch with.
        QVERIFY(!toLaunch->isEnabled());
        selectData(field<QComboBox>(page, "strategy"), "zero3");
        field<QSpinBox>(page, "seqLen")->setValue(256); // the folder's model has 1024 positions
        page.recompute();
        QVERIFY2(page.verdictText().contains("Fits"), qPrintable(page.messageText()));
        QVERIFY(toLaunch->isEnabled());
    }

    void predictionForARunSpec()
    {
        // A CPU run (run.json records the device the worker resolved; "auto", the default, is
        // planned for a GPU).
        const nlohmann::json spec = {{"model", "tiny-1m"}, {"device", "cpu"}, {"strategy", "zero3"},
            {"procs_per_node", 2}, {"steps", 10}, {"micro_batch", 4}, {"seq_len", 64}};
        const auto bytes = predictedBytesPerRank(spec);
        QVERIFY(bytes && *bytes > 0);
        auto in = plan::PlanInput {};
        in.model = *plan::findPreset("tiny-1m");
        in.strategy = plan::Strategy::Zero3;
        in.precision = plan::Precision::Fp32;
        in.microBatch = 4;
        in.seqLen = 64;
        in.gpusPerNode = 2;
        in.device = plan::DeviceSpec::cpu(1LL << 40);
        QCOMPARE(*bytes, double(plan::plan(in).perDevice.total()));
        QVERIFY(!predictedBytesPerRank({{"model", "no-such-model"}, {"steps", 1}}));
    }
};

QTEST_MAIN(TstPlanPage)
#include "tst_plan_page.moc"
