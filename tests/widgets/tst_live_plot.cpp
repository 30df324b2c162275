// LivePlot: redraws are coalesced (<= ~25/s), hidden plots do not redraw, long histories are
// decimated to the pixel width, appends go in incrementally, smoothing and log scale apply.
#include <cmath>

#include <QtTest>

#include "widgets/chart_math.h"
#include "widgets/live_plot.h"
#include "widgets/qcp.h"

using namespace shard::widgets;

class TstLivePlot : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void burstsAreCoalesced()
    {
        LivePlot plot("loss");
        plot.resize(800, 400);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        const int series = plot.addSeries("a", Qt::blue);
        QTest::qWait(100);
        const int before = plot.replotCount();
        QElapsedTimer timer;
        timer.start();
        int step = 0;
        // ~1000 appends per second for at least 600 ms: far more than the redraw budget. On a
        // loaded machine the burst goes on until the plot has redrawn during it three times.
        while (
            timer.elapsed() < 600 || (plot.replotCount() - before < 3 && timer.elapsed() < 20000)) {
            plot.appendPoints(series, {double(step)}, {std::sin(step * 0.01)});
            ++step;
            QTest::qWait(1);
        }
        // The last append is drawn by the redraw the burst left pending.
        QTRY_COMPARE_WITH_TIMEOUT(plot.drawnPointCount(series), step, 10000);
        const int replots = plot.replotCount() - before;
        const double seconds = timer.elapsed() / 1000.0;
        QVERIFY2(replots >= 3, qPrintable(QString("only %1 replots").arg(replots)));
        QVERIFY2(replots <= int(seconds * 25) + 2,
            qPrintable(
                QString("%1 replots in %2 s for %3 appends").arg(replots).arg(seconds).arg(step)));
    }

    void hiddenPlotDoesNotRedraw()
    {
        QWidget window;
        auto* plot = new LivePlot("hidden", &window);
        window.resize(600, 300);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        const int s = plot->addSeries("a", Qt::red);
        QTRY_VERIFY(plot->replotCount() > 0 && !plot->hasPendingRedraw());
        plot->hide();
        // A redraw queued before the hide (QCustomPlot's own queue) lands now, not in the count.
        QCoreApplication::sendPostedEvents();
        QCoreApplication::processEvents();
        const int before = plot->replotCount();
        for (int i = 0; i < 50; ++i)
            plot->appendPoints(s, {double(i)}, {double(i)});
        QTest::qWait(200);
        QCOMPARE(plot->replotCount(), before);
        QVERIFY(plot->hasPendingRedraw());
        plot->show();
        QTRY_VERIFY(plot->replotCount() > before);
        QCOMPARE(plot->drawnPointCount(s), 50);
    }

    void longHistoryIsDecimatedToPixelWidth()
    {
        LivePlot plot;
        plot.resize(900, 400);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        const int s = plot.addSeries("long", Qt::darkGreen);
        const int n = 300000;
        QVector<double> k(n), v(n);
        for (int i = 0; i < n; ++i) {
            k[i] = i;
            v[i] = std::cos(i * 1e-3);
        }
        v[200000] = 9.0;
        plot.setPoints(s, k, v);
        plot.flushNow();
        const int width = plot.customPlot()->axisRect()->width();
        QVERIFY(width > 100);
        QVERIFY2(plot.drawnPointCount(s) <= 2 * width + 4,
            qPrintable(QString("%1 points for %2 px").arg(plot.drawnPointCount(s)).arg(width)));
        // The spike is still drawn and the y range covers it.
        QVERIFY(plot.customPlot()->yAxis->range().upper >= 9.0);
        QCOMPARE(plot.series(s).size(), qsizetype(n));
    }

    void appendsGoInIncrementally()
    {
        LivePlot plot;
        plot.resize(600, 300);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        const int s = plot.addSeries("a", Qt::blue);
        plot.appendPoints(s, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
        plot.flushNow();
        QCOMPARE(plot.drawnPointCount(s), 10);
        const auto* first = &*plot.customPlot()->graph(0)->data()->constBegin();
        plot.appendPoints(s, {10, 11, 12}, {1, 1, 1});
        plot.flushNow();
        QCOMPARE(plot.drawnPointCount(s), 13);
        // Keys that go backwards are dropped instead of corrupting the sorted container.
        plot.appendPoints(s, {5}, {100});
        plot.flushNow();
        QCOMPARE(plot.drawnPointCount(s), 13);
        Q_UNUSED(first);
    }

    void smoothingDrawsEmaOverFaintRaw()
    {
        LivePlot plot;
        plot.resize(600, 300);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        const int s = plot.addSeries("loss", Qt::blue);
        QVector<double> k, v;
        for (int i = 0; i < 100; ++i) {
            k.append(i);
            v.append(5.0 / (1 + i) + (i % 2 ? 0.3 : -0.3));
        }
        plot.appendPoints(s, k.mid(0, 50), v.mid(0, 50));
        plot.setSmoothing(0.8);
        plot.appendPoints(s, k.mid(50), v.mid(50));
        plot.flushNow();
        auto* smooth = plot.customPlot()->graph(1);
        QVERIFY(smooth->visible());
        QCOMPARE(smooth->dataCount(), 100);
        const auto expected = emaSmooth(v, 0.8);
        int i = 0;
        for (auto it = smooth->data()->constBegin(); it != smooth->data()->constEnd(); ++it, ++i)
            QVERIFY(std::abs(it->value - expected[i]) < 1e-12);
        QVERIFY(plot.customPlot()->graph(0)->pen().color().alpha() < 255);
        plot.setSmoothing(0.0);
        plot.flushNow();
        QVERIFY(!plot.customPlot()->graph(1)->visible());
    }

    void logScaleAndAxisKinds()
    {
        LivePlot plot;
        plot.resize(600, 300);
        plot.show();
        const int s = plot.addSeries("a", Qt::blue);
        plot.setPoints(s, {1, 2, 3}, {10, 100, 1000});
        plot.setLogY(true);
        plot.flushNow();
        QCOMPARE(plot.customPlot()->yAxis->scaleType(), QCPAxis::stLogarithmic);
        QVERIFY(plot.customPlot()->yAxis->range().lower > 0);
        plot.setXAxisKind(XAxisKind::WallTime);
        QVERIFY(plot.customPlot()->xAxis->label().contains("wall time"));
        QVERIFY(!plot.customPlot()->xAxis->ticker().dynamicCast<QCPAxisTickerTime>().isNull());
        plot.setXAxisKind(XAxisKind::Tokens);
        QCOMPARE(plot.customPlot()->xAxis->label(), QString("tokens"));
    }

    // A series without points has no legend entry (the Monitor's "eval loss" before, or
    // without, any evaluation); it gets one with its first point.
    void legendListsSeriesWithPoints()
    {
        LivePlot plot;
        plot.resize(600, 300);
        plot.show();
        const int train = plot.addSeries("loss", Qt::blue);
        const int eval = plot.addSeries("eval loss", Qt::red);
        plot.setLegendVisible(true);
        plot.flushNow();
        QVERIFY(!plot.customPlot()->legend->visible()); // no points, no (empty) legend box
        plot.setPoints(train, {1, 2, 3}, {3, 2, 1});
        plot.flushNow();
        QCOMPARE(plot.customPlot()->legend->itemCount(), 1);
        QVERIFY(plot.customPlot()->legend->visible());
        plot.appendPoints(eval, {3}, {1.5});
        plot.flushNow();
        QCOMPARE(plot.customPlot()->legend->itemCount(), 2);
        plot.setPoints(eval, {}, {});
        plot.flushNow();
        QCOMPARE(plot.customPlot()->legend->itemCount(), 1);
    }

    // A step axis has ticks on whole steps only, however many steps there are (not 2.5, 7.5).
    void stepTicksAreWholeSteps()
    {
        LivePlot plot;
        plot.resize(600, 300);
        plot.show();
        const int s = plot.addSeries("loss", Qt::blue);
        for (int n = 2; n <= 60; ++n) {
            QVector<double> k, v;
            for (int i = 1; i <= n; ++i) {
                k.append(i);
                v.append(1.0 / i);
            }
            plot.setPoints(s, k, v);
            plot.flushNow();
            for (double t : plot.customPlot()->xAxis->tickVector())
                QVERIFY2(std::fmod(t, 1.0) == 0.0,
                    qPrintable(QString("tick %1 with %2 steps").arg(t).arg(n)));
        }
    }

    // A loss between 0.3 and 8 on a log axis: plain 0.5, 1, 2, 5 ticks (not 7·10⁰ alone).
    void logTicksAreReadable()
    {
        LivePlot plot;
        plot.resize(600, 300);
        plot.show();
        const int s = plot.addSeries("loss", Qt::blue);
        plot.setPoints(s, {1, 2, 3}, {8, 2, 0.3});
        plot.setLogY(true);
        plot.flushNow();
        QCPAxis* y = plot.customPlot()->yAxis;
        const QVector<double> ticks = y->tickVector();
        QVERIFY2(ticks.contains(0.5) && ticks.contains(1) && ticks.contains(5),
            qPrintable(QString::number(ticks.size())));
        QVERIFY(y->tickVectorLabels().contains("0.5"));
        QVERIFY(!y->tickVectorLabels().join(' ').contains(QChar(0x00B7)));
    }

    // One point is drawn as a dot; a chart emptied for a new run drops the old run's axes;
    // memory-like charts start at zero.
    void lonePointEmptyChartAndZeroBase()
    {
        LivePlot plot;
        plot.resize(600, 300);
        plot.show();
        const int s = plot.addSeries("a", Qt::blue);
        plot.setPoints(s, {5}, {70});
        plot.flushNow();
        QVERIFY(plot.customPlot()->graph(0)->scatterStyle().shape() != QCPScatterStyle::ssNone);
        QVERIFY(plot.customPlot()->xAxis->range().size() > 0);
        plot.setPoints(s, {1, 2, 3}, {66.5, 68, 70});
        plot.flushNow();
        QCOMPARE(plot.customPlot()->graph(0)->scatterStyle().shape(), QCPScatterStyle::ssNone);
        QVERIFY(plot.customPlot()->yAxis->range().lower > 60);
        plot.setYIncludesZero(true);
        plot.flushNow();
        QCOMPARE(plot.customPlot()->yAxis->range().lower, 0.0);
        plot.setPoints(s, {}, {});
        plot.flushNow();
        QCOMPARE(plot.customPlot()->xAxis->range().upper, 1.0);
        QCOMPARE(plot.customPlot()->yAxis->range().upper, 1.0);

        // A flat line (a constant learning rate) is framed around its value, not around 0 in
        // the previous view's span; a line flat but for rounding noise is not zoomed into it.
        plot.setYIncludesZero(false);
        plot.setPoints(s, {1, 2, 3}, {3e-4, 3e-4, 3e-4});
        plot.flushNow();
        QCPRange y = plot.customPlot()->yAxis->range();
        QVERIFY2(y.lower > 2e-4 && y.upper < 4e-4 && y.contains(3e-4),
            qPrintable(QString("%1 .. %2").arg(y.lower).arg(y.upper)));
        plot.setPoints(s, {1, 2, 3}, {1.2, 1.2 + 2e-16, 1.2});
        plot.flushNow();
        y = plot.customPlot()->yAxis->range();
        QVERIFY2(y.size() > 0.01 && y.contains(1.2),
            qPrintable(QString("%1 .. %2").arg(y.lower).arg(y.upper)));
    }
};

QTEST_MAIN(TstLivePlot)
#include "tst_live_plot.moc"
