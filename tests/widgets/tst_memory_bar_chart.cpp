// MemoryBarChart: categories stack in order, the capacity line sits at the device size, the
// prediction marker sits at the predicted total, and the value axis covers all of them.
#include <QtTest>

#include "widgets/memory_bar_chart.h"
#include "widgets/qcp.h"

using namespace shard::widgets;

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}

class TstMemoryBarChart : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void stacksCategoriesWithCapacity()
    {
        MemoryBarChart chart("memory");
        chart.resize(700, 400);
        chart.show();
        chart.setCategories({"params", "grads", "optimizer"});
        chart.setBars({{"ddp", {8 * kGiB, 8 * kGiB, 16 * kGiB}, std::nullopt, false},
            {"zero3", {1 * kGiB, 1 * kGiB, 2 * kGiB}, 5 * kGiB, true}});
        chart.setCapacity(24 * kGiB, "24 GiB");
        chart.flushNow();
        QCustomPlot* plot = chart.customPlot();
        QList<QCPBars*> bars;
        for (int i = 0; i < plot->plottableCount(); ++i)
            if (auto* b = qobject_cast<QCPBars*>(plot->plottable(i)))
                bars.append(b);
        QCOMPARE(bars.size(), 3);
        // Each category sits on the one before it.
        QCOMPARE(bars[1]->barBelow(), bars[0]);
        QCOMPARE(bars[2]->barBelow(), bars[1]);
        QCOMPARE(bars[2]->data()->at(0)->value, 16.0);
        QCOMPARE(bars[0]->data()->at(1)->value, 1.0);
        QCOMPARE(bars[2]->name(), QString("optimizer"));
        // Stacked total 32 GiB exceeds the 24 GiB capacity: the axis shows both.
        QVERIFY(plot->yAxis->range().upper >= 32.0);
        QCPItemStraightLine* line = nullptr;
        for (int i = 0; i < plot->itemCount(); ++i)
            if (auto* l = qobject_cast<QCPItemStraightLine*>(plot->item(i)))
                line = l;
        QVERIFY(line && line->visible());
        QCOMPARE(line->point1->coords().y(), 24.0);
        // The chosen strategy is marked and the prediction is drawn at 5 GiB.
        auto ticker = plot->xAxis->ticker().dynamicCast<QCPAxisTickerText>();
        QVERIFY(ticker);
        QCOMPARE(ticker->ticks().value(2), QString("[zero3]"));
        QCPGraph* prediction = nullptr;
        for (int i = 0; i < plot->plottableCount(); ++i)
            if (auto* g = qobject_cast<QCPGraph*>(plot->plottable(i)))
                prediction = g;
        QVERIFY(prediction);
        QCOMPARE(prediction->dataCount(), 1);
        QCOMPARE(prediction->data()->at(0)->value, 5.0);

        chart.setCapacity(std::nullopt);
        QVERIFY(!line->visible());
    }

    // The legend names only what some bar holds, in stack order: a full fine-tuning plan does not
    // list LoRA's categories, a LoRA plan does not list full fine-tuning's gradients.
    void legendListsOnlyUsedCategories()
    {
        MemoryBarChart chart("memory");
        chart.resize(700, 400);
        chart.show();
        chart.setCategories({"params", "grads", "frozen base", "adapters"});
        chart.setBars({{"ddp", {8 * kGiB, 8 * kGiB, 0, 0}, 20 * kGiB, false},
            {"zero3", {1 * kGiB, 1 * kGiB, 0, 0}, std::nullopt, true}});
        chart.flushNow();
        QCOMPARE(chart.legendEntries(), (QStringList {"params", "grads", "predicted"}));
        chart.setBars({{"ddp", {0, 0, 14 * kGiB, 0.1 * kGiB}, std::nullopt, true}});
        chart.flushNow();
        QCOMPARE(chart.legendEntries(), (QStringList {"frozen base", "adapters"}));
        chart.setBars({{"ddp", {1 * kGiB, 0, 14 * kGiB, 0.1 * kGiB}, std::nullopt, true}});
        QCOMPARE(chart.legendEntries(), (QStringList {"params", "frozen base", "adapters"}));
    }

    // The Monitor's bars reach the measured peak (what the categories miss is its own segment),
    // the labels read measured vs predicted, hovering gives the numbers, and the capacity is named
    // in the title instead of being drawn over the bars.
    void measuredPeakAndPredictionSideBySide()
    {
        constexpr double kMiB = 1024.0 * 1024.0;
        MemoryBarChart chart("Memory per rank");
        chart.resize(700, 400);
        chart.show();
        chart.setCategories({"params", "grads", "other"});
        MemoryBar rank0 {"rank 0", {20 * kMiB, 10 * kMiB, 4.2 * kMiB}, 36.9 * kMiB, false};
        rank0.measuredPeakBytes = 36.3 * kMiB;
        chart.setBars({rank0});
        chart.setCapacity(64 * kMiB, "64 MiB per rank");
        chart.flushNow();
        QCustomPlot* plot = chart.customPlot();
        QCPBars* rest = nullptr;
        for (int i = 0; i < plot->plottableCount(); ++i)
            if (auto* b = qobject_cast<QCPBars*>(plot->plottable(i));
                b && b->name().contains("rest of peak"))
                rest = b;
        QVERIFY(rest);
        QCOMPARE(rest->barBelow()->name(), QString("other"));
        QVERIFY(qAbs(rest->data()->at(0)->value - 2.1) < 1e-9); // 36.3 - 34.2 MiB
        auto ticker = plot->xAxis->ticker().dynamicCast<QCPAxisTickerText>();
        const QString label = ticker->ticks().value(1);
        QVERIFY2(label.contains("peak 36.3") && label.contains("plan 36.9"), qPrintable(label));
        const QString tip = chart.describeBar(0);
        QVERIFY2(
            tip.contains("measured peak: 36.3 MiB") && tip.contains("36.9 MiB"), qPrintable(tip));
        QVERIFY2(tip.contains("101.7% of measured"), qPrintable(tip));
        QVERIFY2(chart.title().contains("capacity 64 MiB per rank"), qPrintable(chart.title()));
        QVERIFY(chart.title().startsWith("Memory per rank"));
        for (int i = 0; i < plot->itemCount(); ++i)
            QVERIFY2(!qobject_cast<QCPItemText*>(plot->item(i)) || !plot->item(i)->visible(),
                "no text item may be drawn over the bars");
    }
};

QTEST_MAIN(TstMemoryBarChart)
#include "tst_memory_bar_chart.moc"
