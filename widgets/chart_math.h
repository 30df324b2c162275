// Pure numeric helpers of the chart layer: TensorBoard-style EMA smoothing and min/max
// decimation of long histories to the plot's pixel width. No widget dependency.
#pragma once

#include <cstdint>

#include <QVector>

namespace shard::widgets {

// Running state of a debiased exponential moving average, so live data is smoothed
// incrementally with the same result as smoothing the whole series at once.
struct EmaState {
    double last = 0.0;
    int64_t count = 0;      // finite values folded in so far
    double weightPow = 1.0; // weight^count, kept so a step costs no pow()
};

// TensorBoard's smoothing: last = last*w + (1-w)*y, divided by (1 - w^n) so the first points are
// not pulled towards zero. Non-finite values pass through without touching the state. w in [0, 1).
double emaStep(EmaState& state, double value, double weight);
QVector<double> emaSmooth(const QVector<double>& values, double weight);

struct DecimatedSeries {
    QVector<double> keys;
    QVector<double> values;
};

// Reduces sorted (keys, values) to the min and max of each of `buckets` equal slices of
// [xMin, xMax] (in key order), plus the first and last point of the range, so a line drawn from
// the result covers the same pixel columns, with the same extremes, as one drawn from all points.
// The nearest point outside each end is kept so the line reaches the plot's edges. Non-finite
// values are dropped.
DecimatedSeries decimateMinMax(const QVector<double>& keys, const QVector<double>& values,
    double xMin, double xMax, int buckets);

// Tick positions for a logarithmic axis over [lo, hi] (lo > 0): 1, 2 and 5 times the powers of
// ten that fall inside; all nine mantissas when that gives fewer than three ticks; only powers
// of ten when it gives more than 12 (many decades).
QVector<double> logTicks125(double lo, double hi);

// A tick step for a count axis (steps): QCustomPlot's readable `step` moved to 1, 2 or 5 times a
// power of ten, never below 1, so no tick falls between two steps (2.5, 7.5).
double integerTickStep(double step);

} // namespace shard::widgets
