// EMA smoothing (TensorBoard's debiased formula) and min/max decimation, checked against hand
// computations and brute force.
#include <cmath>

#include <QtTest>

#include "widgets/chart_math.h"
#include "widgets/series_buffer.h"

using namespace shard::widgets;

class TstChartMath : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void emaMatchesHandComputation_data()
    {
        QTest::addColumn<double>("weight");
        QTest::addColumn<QVector<double>>("values");
        QTest::addColumn<QVector<double>>("expected");
        // w = 0.5: last = 0.5, 1.25, 2.125; debias 0.5, 0.75, 0.875.
        QTest::newRow("w0.5") << 0.5 << QVector<double> {1, 2, 3}
                              << QVector<double> {1.0, 1.25 / 0.75, 2.125 / 0.875};
        QTest::newRow("w0 is identity")
            << 0.0 << QVector<double> {4, -1, 7} << QVector<double> {4, -1, 7};
        // A constant stays constant at any weight thanks to debiasing.
        QTest::newRow("constant w0.9")
            << 0.9 << QVector<double> {3, 3, 3, 3} << QVector<double> {3, 3, 3, 3};
        // w = 0.6 on {10, 0}: last = 4, then 2.4; debias 0.4, 0.64.
        QTest::newRow("w0.6") << 0.6 << QVector<double> {10, 0}
                              << QVector<double> {10.0, 2.4 / 0.64};
    }
    void emaMatchesHandComputation()
    {
        QFETCH(double, weight);
        QFETCH(QVector<double>, values);
        QFETCH(QVector<double>, expected);
        const QVector<double> got = emaSmooth(values, weight);
        QCOMPARE(got.size(), expected.size());
        for (int i = 0; i < got.size(); ++i)
            QVERIFY2(std::abs(got[i] - expected[i]) < 1e-12,
                qPrintable(QString("%1: %2 vs %3").arg(i).arg(got[i]).arg(expected[i])));
    }

    void emaIncrementalEqualsBatch()
    {
        QVector<double> values;
        for (int i = 0; i < 1000; ++i)
            values.append(std::sin(i * 0.1) + (i % 7) * 0.3);
        const auto batch = emaSmooth(values, 0.95);
        EmaState state;
        for (int i = 0; i < values.size(); ++i)
            QCOMPARE(emaStep(state, values[i], 0.95), batch[i]);
    }

    void emaPassesNonFinite()
    {
        const auto got = emaSmooth({1.0, NAN, 3.0}, 0.5);
        QVERIFY(std::isnan(got[1]));
        // The NaN did not advance the state: 3rd value equals the 2-point smoothing of {1, 3}.
        QCOMPARE(got[2], emaSmooth({1.0, 3.0}, 0.5)[1]);
    }

    void decimationKeepsExtremesAndBounds()
    {
        const int n = 200000;
        QVector<double> keys(n), values(n);
        for (int i = 0; i < n; ++i) {
            keys[i] = i;
            values[i] = std::sin(i * 0.001);
        }
        values[123457] = 50.0; // a single spike must survive
        values[7] = -20.0;
        const int buckets = 800;
        const auto d = decimateMinMax(keys, values, 0, n - 1, buckets);
        QVERIFY(d.keys.size() <= 2 * buckets + 4);
        QVERIFY(d.keys.size() >= buckets);
        QVERIFY(std::is_sorted(d.keys.begin(), d.keys.end()));
        QCOMPARE(*std::max_element(d.values.begin(), d.values.end()), 50.0);
        QCOMPARE(*std::min_element(d.values.begin(), d.values.end()), -20.0);
        QCOMPARE(d.keys.front(), 0.0);
        QCOMPARE(d.keys.back(), double(n - 1));
        // Every bucket's brute-force min and max appear in the output.
        for (int b = 0; b < buckets; b += 37) {
            double lo = INFINITY, hi = -INFINITY;
            for (int i = 0; i < n; ++i) {
                const int bucket = std::min(buckets - 1, int(keys[i] * buckets / double(n - 1)));
                if (bucket != b)
                    continue;
                lo = std::min(lo, values[i]);
                hi = std::max(hi, values[i]);
            }
            QVERIFY(d.values.contains(lo));
            QVERIFY(d.values.contains(hi));
        }
    }

    void decimationOfVisibleRangeKeepsNeighbours()
    {
        QVector<double> keys, values;
        for (int i = 0; i < 1000; ++i) {
            keys.append(i);
            values.append(i % 10);
        }
        const auto d = decimateMinMax(keys, values, 100, 200, 10);
        QCOMPARE(d.keys.front(), 99.0);
        QCOMPARE(d.keys.back(), 201.0);
        for (double k : d.keys)
            QVERIFY(k >= 99 && k <= 201);
    }

    void decimationDropsNonFiniteAndHandlesEmpty()
    {
        QVERIFY(decimateMinMax({}, {}, 0, 1, 10).keys.isEmpty());
        const auto d = decimateMinMax({0, 1, 2, 3}, {1, NAN, INFINITY, 2}, 0, 3, 2);
        for (double v : d.values)
            QVERIFY(std::isfinite(v));
        QCOMPARE(d.values.size(), 2);
    }

    // Tick steps on a step axis are whole steps: 1, 2, 5 times a power of ten, at least 1.
    void integerTickSteps()
    {
        QCOMPARE(integerTickStep(0.25), 1.0);
        QCOMPARE(integerTickStep(1.0), 1.0);
        QCOMPARE(integerTickStep(2.5), 2.0);
        QCOMPARE(integerTickStep(5.0), 5.0);
        QCOMPARE(integerTickStep(7.5), 10.0);
        QCOMPARE(integerTickStep(25.0), 20.0);
        QCOMPARE(integerTickStep(250.0), 200.0);
        for (double s : {1.3, 2.5, 4.0, 12.5, 75.0, 2500.0})
            QCOMPARE(std::fmod(integerTickStep(s), 1.0), 0.0);
    }

    void logTicksAreOneTwoFive()
    {
        // A loss between 0.3 and 8: ticks below and above 1, in 1-2-5 steps.
        QCOMPARE(logTicks125(0.3, 8.0), (QVector<double> {0.5, 1, 2, 5}));
        // Within one decade: every mantissa, so the axis is never bare.
        QCOMPARE(logTicks125(1.5, 3.5), (QVector<double> {2, 3}));
        QVERIFY(logTicks125(2.1, 2.9).isEmpty() || logTicks125(2.1, 2.9).size() <= 1);
        // Many decades: powers of ten only.
        const auto wide = logTicks125(1e-3, 1e6);
        QCOMPARE(wide.size(), 10);
        QCOMPARE(wide.front(), 1e-3);
        QVERIFY(logTicks125(0, 1).isEmpty());
        QVERIFY(logTicks125(2, 1).isEmpty());
    }

    void seriesBufferIsBounded()
    {
        SeriesBuffer buffer(1000);
        QVector<double> k, v;
        for (int i = 0; i < 5000; ++i) {
            k = {double(i)};
            v = {double(i) * 2};
            buffer.append(k, v);
            QVERIFY(buffer.size() <= 1000);
        }
        QCOMPARE(buffer.keys().back(), 4999.0);
        QCOMPARE(buffer.values().back(), 9998.0);
        QCOMPARE(buffer.droppedCount() + buffer.size(), 5000);
        QVERIFY(std::is_sorted(buffer.keys().begin(), buffer.keys().end()));
        // Keys that go backwards are refused.
        buffer.append({10.0}, {1.0});
        QCOMPARE(buffer.keys().back(), 4999.0);
    }
};

QTEST_APPLESS_MAIN(TstChartMath)
#include "tst_chart_math.moc"
