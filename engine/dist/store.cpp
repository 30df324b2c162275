// TCPStore construction with a readable error for the common failures (busy port, timeout).
#include "dist/store.h"

#include <chrono>
#include <stdexcept>
#include <string>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dist/rank_env.h"

namespace shard::dist {

c10::intrusive_ptr<c10d::Store> connectStore(const RankEnv& env)
{
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(env.masterPort);
    opts.isServer = env.rank == 0;
    opts.numWorkers = static_cast<size_t>(env.worldSize);
    opts.waitWorkers = true;
    opts.timeout = std::chrono::milliseconds(static_cast<long long>(env.rdzvTimeoutSec * 1000));
    try {
        return c10::make_intrusive<c10d::TCPStore>(env.masterAddr, opts);
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
