// One byte formatter for the studio and the CLI: "512 B", "3.25 MiB", "36.3 MiB", "1.50 GiB"
// (binary units; two decimals below 10, one above); and one duration formatter.
#pragma once

#include <QString>

#include "plan/planner.h"

namespace shard::jobs {

inline QString formatBytes(double bytes)
{
    return QString::fromStdString(plan::formatBytesShort(bytes));
}

// "m:ss", or "h:mm:ss" from an hour on; "—" for what is not a duration.
inline QString formatDuration(double seconds)
{
    if (!(seconds >= 0) || seconds > 1e8)
        return QStringLiteral("—");
    const auto s = qint64(seconds + 0.5);
    if (s >= 3600)
        return QString("%1:%2:%3")
            .arg(s / 3600)
            .arg((s / 60) % 60, 2, 10, QChar('0'))
            .arg(s % 60, 2, 10, QChar('0'));
    return QString("%1:%2").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
}

} // namespace shard::jobs
