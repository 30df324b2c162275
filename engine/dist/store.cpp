// The rendezvous store with a readable error for the common failures (busy port, timeout,
// nobody serving).
#include "dist/store.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include "dist/rank_env.h"
#include "dist/tcp_store.h"

namespace shard::dist {

c10::intrusive_ptr<c10d::Store> connectStore(const RankEnv& env)
{
    const auto timeout
        = std::chrono::milliseconds(static_cast<long long>(env.rdzvTimeoutSec * 1000));
    try {
        auto store
            = c10::make_intrusive<TcpStore>(env.masterAddr, env.masterPort, env.rank == 0, timeout);
        store->waitForWorkers(env.worldSize, env.rank, env.localWorldSize);
        return store;
    } catch (const std::exception& e) {
        std::string what = e.what();
        what = what.substr(0, what.find('\n'));
        throw std::runtime_error("rank " + std::to_string(env.rank) + ": rendezvous on "
            + env.masterAddr + ":" + std::to_string(env.masterPort) + " failed within "
            + std::to_string(static_cast<int>(env.rdzvTimeoutSec)) + " s (" + what
            + "); check that all " + std::to_string(env.worldSize)
            + " ranks started and MASTER_ADDR/MASTER_PORT, or raise SHARD_RDZV_TIMEOUT_S");
    }
}

} // namespace shard::dist
