// A bounded, column-wise buffer of one live series (PlotJuggler's habit): appending beyond the
// capacity drops the oldest points, so a week-long run cannot grow the studio without bound.
#pragma once

#include <cstdint>

#include <QVector>

namespace shard::widgets {

class SeriesBuffer {
public:
    explicit SeriesBuffer(qsizetype capacity = kDefaultCapacity);

    static constexpr qsizetype kDefaultCapacity = 1 << 20;

    // Keys must not decrease across appends; points older than the last key are dropped.
    void append(const QVector<double>& keys, const QVector<double>& values);
    void clear();

    qsizetype size() const { return m_keys.size(); }
    qsizetype capacity() const { return m_capacity; }
    bool empty() const { return m_keys.isEmpty(); }
    const QVector<double>& keys() const { return m_keys; }
    const QVector<double>& values() const { return m_values; }
    // Total points ever dropped from the front; a reader that remembers it knows whether the
    // points it drew are still a prefix of the buffer.
    int64_t droppedCount() const { return m_dropped; }

private:
    qsizetype m_capacity;
    QVector<double> m_keys;
    QVector<double> m_values;
    int64_t m_dropped = 0;
};

} // namespace shard::widgets
