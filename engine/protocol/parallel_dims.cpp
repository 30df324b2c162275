// The sharding vocabulary (see parallel_dims.h).
#include "protocol/parallel_dims.h"
#include "protocol/device_mesh.h"

#include <stdexcept>

namespace shard::protocol {

const std::vector<Strategy>& allStrategies()
{
    static const std::vector<Strategy> all {
        Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3, Strategy::Hybrid};
    return all;
}

const std::vector<std::string>& strategyNames()
{
    static const std::vector<std::string> names {"ddp", "zero1", "zero2", "zero3", "hybrid"};
    return names;
}

std::string strategyName(Strategy s)
{
    return strategyNames().at(static_cast<size_t>(s));
}

bool isStrategyName(const std::string& name)
{
    for (const auto& n : strategyNames())
        if (n == name)
            return true;
    return false;
}

Strategy parseStrategyName(const std::string& name)
{
    const auto& names = strategyNames();
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == name)
            return allStrategies()[i];
    std::string list;
    for (const auto& n : names)
        list += (list.empty() ? "" : ", ") + n;
    throw std::runtime_error("unknown strategy '" + name + "' (use one of: " + list + ")");
}

int64_t ParallelDims::shardDegree() const
{
    // The mesh's dp_shard; a hybrid group that does not divide the ranks (validate() says why)
    // counts as its own size until then.
    if (worldSize() < 1)
        return 1;
    if (strategy == Strategy::Hybrid && (shardGroup < 1 || worldSize() % shardGroup != 0))
        return shardGroup > 0 ? shardGroup : 1;
    return DeviceMesh::of(*this).dpShard;
}

std::string divisorList(int64_t n)
{
    std::string out;
    int shown = 0;
    for (int64_t d = 1; d <= n && shown < 8; ++d)
        if (n % d == 0) {
            out += (out.empty() ? "" : ", ") + std::to_string(d);
            ++shown;
        }
    return out;
}

void ParallelDims::validate(const std::string& ranks) const
{
    if (strategy != Strategy::Hybrid)
        return;
    const int64_t w = worldSize();
    if (shardGroup <= 0)
        throw std::runtime_error(
            "hybrid needs a shard group size (--shard-group G), a divisor of the "
            + std::to_string(w) + " " + ranks + " (" + divisorList(w) + ")");
    if (w % shardGroup != 0)
        throw std::runtime_error("hybrid shard group " + std::to_string(shardGroup)
            + " does not divide the " + std::to_string(w) + " " + ranks + "; use a divisor of "
            + std::to_string(w) + " (" + divisorList(w) + ")");
}

} // namespace shard::protocol
