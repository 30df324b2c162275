// The registry entries: every data-parallel strategy is a ShardedStrategy with its own plan.
#include "fsdp/register_strategies.h"

#include <memory>

#include "fsdp/sharded_strategy.h"
#include "protocol/parallel_dims.h"

namespace shard::fsdp {

void registerStrategies()
{
    for (const std::string& name : protocol::strategyNames())
        engine::registerStrategy(name, [](const engine::StrategyOptions& options) {
            return std::make_unique<ShardedStrategy>(options);
        });
}

} // namespace shard::fsdp
