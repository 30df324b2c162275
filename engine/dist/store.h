// The rendezvous store both backends use: a TcpStore (tcp_store.h) served by rank 0 on exactly
// MASTER_ADDR:MASTER_PORT.
#pragma once

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
}

namespace shard::dist {

struct RankEnv;

// Connects to (rank 0: serves) MASTER_ADDR:MASTER_PORT and waits for all ranks, within
// env.rdzvTimeoutSec; throws std::runtime_error naming the address and the fix.
c10::intrusive_ptr<c10d::Store> connectStore(const RankEnv& env);

} // namespace shard::dist
