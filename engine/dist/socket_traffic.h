// Bytes this process has sent over TCP, read from the kernel (TCP_INFO of every socket it
// holds): an independent check of the Communicator's byte counters.
#pragma once

#include <cstdint>

namespace shard::dist {

// Sum of tcpi_bytes_sent minus tcpi_bytes_retrans over this process's TCP sockets: bytes put
// on the wire once (includes the store's and Gloo's headers, so compare differences across one
// collective with a small tolerance).
int64_t tcpBytesSent();

} // namespace shard::dist
