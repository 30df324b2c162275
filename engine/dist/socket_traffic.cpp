// Walks /proc/self/fd and asks the kernel for each TCP socket's byte counter.
#include "dist/socket_traffic.h"

#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdlib>

namespace shard::dist {

int64_t tcpBytesSent()
{
    int64_t total = 0;
    DIR* dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    while (dirent* entry = readdir(dir)) {
        char* end = nullptr;
        long fd = std::strtol(entry->d_name, &end, 10);
        if (!end || *end != '\0' || fd == dirfd(dir))
            continue;
        struct stat st { };
        if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode))
            continue;
        tcp_info info {};
        socklen_t len = sizeof info;
        if (getsockopt(static_cast<int>(fd), IPPROTO_TCP, TCP_INFO, &info, &len) != 0)
            continue;
        if (len < offsetof(tcp_info, tcpi_bytes_sent) + sizeof info.tcpi_bytes_sent)
            continue;
        total += static_cast<int64_t>(info.tcpi_bytes_sent);
        // bytes_sent counts retransmissions too: a rank descheduled past the retransmission
        // timeout on a loaded machine makes its peer send a window again (CI saw +10%). What the
        // collective put on the wire once is sent minus retransmitted.
        if (len >= offsetof(tcp_info, tcpi_bytes_retrans) + sizeof info.tcpi_bytes_retrans)
            total -= static_cast<int64_t>(info.tcpi_bytes_retrans);
    }
    closedir(dir);
    return total;
}

} // namespace shard::dist
