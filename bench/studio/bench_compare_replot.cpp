// Qt Test benchmark: the Compare view holding 20 runs x 50,000 points (loss and peak memory).
// Measures (a) a replot of the view as it stands (what a pan, a live point or an expose costs)
// and (b) a rebuild that re-decimates every series and replots (after a resize, a zoom or an
// x-axis change); prints the median of many runs of each and fails if (a) misses one frame.
#include <algorithm>
#include <cmath>

#include <ctime>

#include <QtTest>

#include "bench_clock.h"

#include "jobs/run_series.h"
#include "widgets/compare_page.h"
#include "widgets/live_plot.h"
#include "widgets/qcp.h"

using namespace shard::widgets;
using namespace shard;

using shard::bench::median;
using shard::bench::threadCpuMs;

namespace {

constexpr int kRuns = 20;
constexpr int kPoints = 50000;
constexpr int kRepeats = 41;

jobs::RunSeries syntheticRun(int index)
{
    jobs::RunSeries run;
    run.id = QString("bench-%1").arg(index);
    run.name = QString("run %1").arg(index);
    run.config = {{"lr", 1e-4 * (index + 1)}, {"strategy", index % 2 ? "zero3" : "ddp"}};
    uint32_t rng = 12345u + uint32_t(index);
    for (int i = 0; i < kPoints; ++i) {
        rng = rng * 1664525u + 1013904223u;
        const double noise = (double(rng >> 8) / double(1u << 24) - 0.5) * 0.4;
        run.step.append(i + 1);
        run.tokens.append(double(i + 1) * 4096);
        run.wallTimeSec.append((i + 1) * 0.35);
        run.loss.append(2.0 + 8.0 / std::sqrt(1.0 + i * (0.01 + index * 1e-3)) + noise);
        run.lr.append(1e-4);
        run.gradNorm.append(1.0);
        run.tokensPerSec.append(11000);
        run.peakBytes.append((20.0 + index + std::sin(i * 0.01)) * 1024 * 1024 * 1024);
    }
    return run;
}

} // namespace

class BenchCompareReplot : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void initTestCase()
    {
        m_page = new ComparePage;
        m_page->resize(1600, 1000);
        m_page->show();
        QVERIFY(QTest::qWaitForWindowExposed(m_page));
        for (int i = 0; i < kRuns; ++i)
            m_page->addRun(syntheticRun(i));
        m_page->setSmoothing(0.6);
        m_page->flushCharts();
        QCOMPARE(m_page->lossPlot()->seriesCount(), kRuns);
        qInfo("loss chart %dx%d px, %d points per series drawn of %d",
            m_page->lossPlot()->customPlot()->axisRect()->width(),
            m_page->lossPlot()->customPlot()->axisRect()->height(),
            m_page->lossPlot()->drawnPointCount(0), kPoints);
    }
    void cleanupTestCase() { delete m_page; }

    void replotCompareView()
    {
        QCustomPlot* loss = m_page->lossPlot()->customPlot();
        QCustomPlot* memory = m_page->memoryPlot()->customPlot();
        std::vector<double> ms, cpu;
        for (int i = 0; i < kRepeats; ++i) {
            QElapsedTimer t;
            t.start();
            const double c0 = threadCpuMs();
            loss->replot(QCustomPlot::rpImmediateRefresh);
            memory->replot(QCustomPlot::rpImmediateRefresh);
            cpu.push_back(threadCpuMs() - c0);
            ms.push_back(t.nsecsElapsed() / 1e6);
        }
        const double m = median(cpu);
        qInfo("replot, 20 runs x 50k points (loss + memory charts): median CPU %.2f ms, "
              "wall %.2f ms over %d",
            m, median(ms), kRepeats);
        QVERIFY2(m < 16.0, qPrintable(QString("median %1 ms misses the 16 ms frame").arg(m)));
        QBENCHMARK
        {
            loss->replot(QCustomPlot::rpImmediateRefresh);
            memory->replot(QCustomPlot::rpImmediateRefresh);
        }
    }

    void redecimateAndReplot()
    {
        std::vector<double> ms, cpu;
        for (int i = 0; i < kRepeats; ++i) {
            QElapsedTimer t;
            t.start();
            const double c0 = threadCpuMs();
            m_page->lossPlot()->resetView(); // marks every series for a full rebuild
            m_page->memoryPlot()->resetView();
            m_page->flushCharts();
            cpu.push_back(threadCpuMs() - c0);
            ms.push_back(t.nsecsElapsed() / 1e6);
        }
        qInfo("re-decimate 2 x 20 x 50k points + replot: median CPU %.2f ms, wall %.2f ms over "
              "%d",
            median(cpu), median(ms), kRepeats);
        QBENCHMARK
        {
            m_page->lossPlot()->resetView();
            m_page->memoryPlot()->resetView();
            m_page->flushCharts();
        }
    }

private:
    ComparePage* m_page = nullptr;
};

QTEST_MAIN(BenchCompareReplot)
#include "bench_compare_replot.moc"
