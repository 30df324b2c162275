// One byte formatter for the studio and the CLI: "512 B", "3.25 MiB", "36.3 MiB", "1.50 GiB"
// (binary units; two decimals below 10, one above); and one duration formatter.
#pragma once

#include <QString>

namespace shard::jobs {

inline QString formatBytes(double bytes)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        ++u;
    }
    return QString("%1 %2").arg(bytes, 0, 'f', u == 0 ? 0 : (bytes < 10 ? 2 : 1)).arg(units[u]);
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
