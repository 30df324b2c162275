// One byte formatter for the studio and the CLI: "512 B", "3.25 MiB", "36.3 MiB", "1.50 GiB"
// (binary units; two decimals below 10, one above).
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

} // namespace shard::jobs
