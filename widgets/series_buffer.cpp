// Bounded column buffer: trims in chunks of a quarter capacity so appends stay amortised O(1).
#include "widgets/series_buffer.h"

#include <algorithm>

namespace shard::widgets {

SeriesBuffer::SeriesBuffer(qsizetype capacity)
    : m_capacity(std::max<qsizetype>(capacity, 4))
{
}

void SeriesBuffer::append(const QVector<double>& keys, const QVector<double>& values)
{
    const qsizetype n = std::min(keys.size(), values.size());
    for (qsizetype i = 0; i < n; ++i) {
        if (!m_keys.isEmpty() && keys[i] < m_keys.back())
            continue;
        m_keys.append(keys[i]);
        m_values.append(values[i]);
    }
    if (m_keys.size() > m_capacity) {
        // Drop down to 3/4 of the capacity at once rather than one point per append.
        const qsizetype drop = m_keys.size() - (m_capacity - m_capacity / 4);
        m_keys.remove(0, drop);
        m_values.remove(0, drop);
        m_dropped += drop;
    }
}

void SeriesBuffer::clear()
{
    m_dropped += m_keys.size();
    m_keys.clear();
    m_values.clear();
}

} // namespace shard::widgets
