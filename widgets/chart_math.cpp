// TensorBoard EMA smoothing and min/max (M4) decimation for the chart layer.
#include "widgets/chart_math.h"

#include <algorithm>
#include <cmath>

namespace shard::widgets {

double emaStep(EmaState& state, double value, double weight)
{
    if (!std::isfinite(value))
        return value;
    state.last = state.last * weight + (1.0 - weight) * value;
    ++state.count;
    state.weightPow *= weight;
    const double debias = weight >= 1.0 ? 1.0 : 1.0 - state.weightPow;
    return debias > 0.0 ? state.last / debias : value;
}

QVector<double> emaSmooth(const QVector<double>& values, double weight)
{
    QVector<double> out;
    out.reserve(values.size());
    EmaState state;
    for (double v : values)
        out.append(emaStep(state, v, weight));
    return out;
}

DecimatedSeries decimateMinMax(const QVector<double>& keys, const QVector<double>& values,
    double xMin, double xMax, int buckets)
{
    DecimatedSeries out;
    const qsizetype n = std::min(keys.size(), values.size());
    if (n == 0 || buckets <= 0 || !(xMax > xMin))
        return out;
    const auto first = std::lower_bound(keys.begin(), keys.begin() + n, xMin) - keys.begin();
    const auto last = std::upper_bound(keys.begin(), keys.begin() + n, xMax) - keys.begin();
    out.keys.reserve(std::min<qsizetype>(n, 4 * qsizetype(buckets) + 2));
    out.values.reserve(out.keys.capacity());
    auto push = [&](qsizetype i) {
        if (std::isfinite(values[i])) {
            out.keys.append(keys[i]);
            out.values.append(values[i]);
        }
    };
    if (first > 0)
        push(first - 1);
    const double scale = buckets / (xMax - xMin);
    qsizetype firstValid = first;
    while (firstValid < last && !std::isfinite(values[firstValid]))
        ++firstValid;
    qsizetype previous = -1;
    qsizetype i = first;
    while (i < last) {
        const auto bucket = std::min<qsizetype>(buckets - 1, qsizetype((keys[i] - xMin) * scale));
        qsizetype firstIdx = -1, minIdx = -1, maxIdx = -1, lastIdx = -1;
        while (i < last
            && std::min<qsizetype>(buckets - 1, qsizetype((keys[i] - xMin) * scale)) == bucket) {
            const double v = values[i];
            if (std::isfinite(v)) {
                if (firstIdx < 0)
                    firstIdx = minIdx = maxIdx = i;
                if (v < values[minIdx])
                    minIdx = i;
                if (v > values[maxIdx])
                    maxIdx = i;
                lastIdx = i;
            }
            ++i;
        }
        if (firstIdx < 0)
            continue;
        // Min and max in key order; the first and last points of the range are kept as well so
        // the line starts and ends where the data does.
        qsizetype picks[4] = {firstIdx == firstValid ? firstIdx : -1, std::min(minIdx, maxIdx),
            std::max(minIdx, maxIdx), i >= last ? lastIdx : -1};
        for (qsizetype p : picks) {
            if (p >= 0 && p != previous)
                push(p);
            if (p >= 0)
                previous = p;
        }
    }
    if (last < n)
        push(last);
    return out;
}

QVector<double> logTicks125(double lo, double hi)
{
    QVector<double> ticks;
    if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi))
        return ticks;
    const int first = int(std::floor(std::log10(lo)));
    const int last = int(std::ceil(std::log10(hi)));
    auto collect = [&](std::initializer_list<double> mantissas) {
        ticks.clear();
        for (int e = first; e <= last; ++e)
            for (double m : mantissas) {
                const double t = m * std::pow(10.0, e);
                if (t >= lo * (1 - 1e-12) && t <= hi * (1 + 1e-12))
                    ticks.append(t);
            }
    };
    collect({1, 2, 5});
    if (ticks.size() > 12)
        collect({1});
    else if (ticks.size() < 3)
        collect({1, 2, 3, 4, 5, 6, 7, 8, 9});
    return ticks;
}

double integerTickStep(double step)
{
    if (!(step > 1.0))
        return 1.0;
    const double magnitude = std::pow(10.0, std::floor(std::log10(step)));
    const double mantissa = step / magnitude; // [1, 10)
    const double nice = mantissa < 1.5 ? 1.0 : mantissa < 3.5 ? 2.0 : mantissa < 7.5 ? 5.0 : 10.0;
    return nice * magnitude;
}

} // namespace shard::widgets
