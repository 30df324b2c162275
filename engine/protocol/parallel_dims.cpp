// The sharding vocabulary (see parallel_dims.h).
#include "protocol/parallel_dims.h"
#include "protocol/device_mesh.h"

#include <algorithm>
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
    // The mesh's dp_shard; a layout that does not divide (validate() says why) counts the hybrid
    // group as its own size, and every other strategy by its data-parallel ranks, until then.
    const int64_t dp = dataParallel();
    if (dp < 1)
        return 1;
    if (tp < 1 || pp < 1 || worldSize() % (tp * pp) != 0
        || (strategy == Strategy::Hybrid && (shardGroup < 1 || dp % shardGroup != 0)))
        return strategy == Strategy::Ddp   ? 1
            : strategy == Strategy::Hybrid ? std::max<int64_t>(1, shardGroup)
                                           : std::max<int64_t>(1, dp);
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
    const int64_t w = worldSize();
    if (tp < 1)
        throw std::runtime_error(
            "tensor parallel size must be 1 or more (got " + std::to_string(tp) + ")");
    if (pp < 1)
        throw std::runtime_error(
            "pipeline parallel size must be 1 or more (got " + std::to_string(pp) + ")");
    if (w % (tp * pp) != 0) {
        const std::string what = pp == 1 ? "tensor parallel size " + std::to_string(tp)
            : tp == 1                    ? "pipeline parallel size " + std::to_string(pp)
                      : "tensor x pipeline parallel " + std::to_string(tp) + " x "
                + std::to_string(pp) + " = " + std::to_string(tp * pp);
        throw std::runtime_error(what + " does not divide the " + std::to_string(w) + " " + ranks
            + "; use a divisor of " + std::to_string(w) + " (" + divisorList(w) + "), or a "
            + "multiple of " + std::to_string(tp * pp) + " " + ranks);
    }
    if (strategy != Strategy::Hybrid)
        return;
    const int64_t dp = w / (tp * pp);
    const std::string counted = tp * pp > 1 ? std::to_string(dp) + " data-parallel " + ranks + " ("
            + std::to_string(w) + " / " + std::to_string(tp * pp) + " " + ranks + " a model copy)"
                                            : std::to_string(w) + " " + ranks;
    if (shardGroup <= 0)
        throw std::runtime_error("hybrid needs a shard group size (--shard-group G), a divisor of "
            + std::string("the ") + counted + " (" + divisorList(dp) + ")");
    if (dp % shardGroup != 0)
        throw std::runtime_error("hybrid shard group " + std::to_string(shardGroup)
            + " does not divide the " + counted + "; use a divisor of " + std::to_string(dp) + " ("
            + divisorList(dp) + ")");
}

} // namespace shard::protocol
