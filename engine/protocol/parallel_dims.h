// The sharding vocabulary, parsed and validated once: which strategy, how the ranks split into
// shard groups and replicas, over how many nodes. Shared by the run spec, the planner, the studio
// and the engine's strategy registry (like torchtitan's ParallelDims).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shard::protocol {

enum class Strategy { Ddp, Zero1, Zero2, Zero3, Hybrid };

// "ddp", "zero1", "zero2", "zero3", "hybrid", in that order.
const std::vector<Strategy>& allStrategies();
const std::vector<std::string>& strategyNames();
std::string strategyName(Strategy s);
// Throws std::runtime_error listing the accepted names.
Strategy parseStrategyName(const std::string& name);
bool isStrategyName(const std::string& name);

struct ParallelDims {
    Strategy strategy = Strategy::Zero3;
    int64_t shardGroup = 0; // hybrid: ranks that shard one replica; ignored otherwise
    int64_t nodes = 1;
    int64_t ranksPerNode = 1;
    // Tensor-parallel degree: consecutive ranks that split each block's weights (Megatron
    // style, core/model/tensor_parallel.h); the strategy runs over the world / tp data-parallel
    // ranks.
    int64_t tp = 1;
    // Pipeline-parallel degree: stages of contiguous layers (plan::balancedStages), 1F1B.
    int64_t pp = 1;

    int64_t worldSize() const { return nodes * ranksPerNode; }
    // The copies of the model the ranks hold: world / (tp x pp).
    int64_t dataParallel() const
    {
        return tp > 0 && pp > 0 ? worldSize() / (tp * pp) : worldSize();
    }
    // Ranks one copy of the sharded state is split over: ddp 1, hybrid the group, else all the
    // data-parallel ranks.
    int64_t shardDegree() const;
    int64_t replicas() const { return dataParallel() / shardDegree(); }
    bool shardsParameters() const
    {
        return strategy == Strategy::Zero3 || strategy == Strategy::Hybrid;
    }

    // Throws std::runtime_error naming the bad value and a fix; `ranks` is the noun the caller's
    // user counts in ("GPUs" in a plan, "ranks" in a run spec).
    void validate(const std::string& ranks = "ranks") const;
};

// "1, 2, 4, 8": the divisors of n (the first eight), for messages.
std::string divisorList(int64_t n);

} // namespace shard::protocol
