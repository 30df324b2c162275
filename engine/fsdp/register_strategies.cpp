// The registry entries: every data-parallel strategy is a ShardedStrategy with its own plan.
#include "fsdp/register_strategies.h"

#include <memory>

#include "fsdp/sharded_strategy.h"

namespace shard::fsdp {

void registerStrategies()
{
    for (const char* name : {"ddp", "zero1", "zero2", "zero3", "hybrid"})
        engine::registerStrategy(name, [](const engine::StrategyOptions& options) {
            return std::make_unique<ShardedStrategy>(options);
        });
}

} // namespace shard::fsdp
