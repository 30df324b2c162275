// The memory vocabulary's one table.
#include "protocol/memory_categories.h"

#include <cstring>

namespace shard::protocol {

const std::vector<MemoryCategory>& memoryCategories()
{
    // The planner's comm buffers (reduce inputs and outputs) and overhead are not categories
    // the engine keeps apart: the counting allocator has them in "other".
    using M = MemoryCategory::Measured;
    static const std::vector<MemoryCategory> table = {
        {"sharded_params", "sharded params", &RankMemory::shardedParamBytes, M::Held, true,
            {"sharded_params", "adapters"}},
        {"gathered_params", "gathered params", &RankMemory::gatheredParamBytes, M::Freed, true,
            {"gathered_params"}},
        {"frozen_params", "frozen base", &RankMemory::frozenParamBytes, M::Held, false,
            {"frozen_base", "quantized_base"}},
        {"grads", "grads", &RankMemory::gradBytes, M::Freed, true, {"grads", "adapter_grads"}},
        {"optimizer", "optimizer", &RankMemory::optimizerBytes, M::Held, true,
            {"optimizer", "adapter_optimizer"}},
        {"activations", "activations", &RankMemory::activationBytes, M::Largest, true,
            {"activations", "logits"}},
        {"other", "other", &RankMemory::otherBytes, M::Rest, true, {"comm_buffers", "overhead"}},
    };
    return table;
}

std::vector<int64_t> plannedByCategory(
    const std::vector<std::pair<std::string, int64_t>>& plannedComponents)
{
    const auto& table = memoryCategories();
    std::vector<int64_t> out(table.size(), 0);
    for (const auto& [key, bytes] : plannedComponents) {
        size_t at = table.size() - 1; // "other"
        for (size_t i = 0; i < table.size(); ++i)
            for (const char* k : table[i].plannedKeys)
                if (key == k)
                    at = i;
        out[at] += bytes;
    }
    return out;
}

} // namespace shard::protocol
