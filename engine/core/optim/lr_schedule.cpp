// Warmup then constant / linear / cosine decay.
#include "lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace shard::engine {

double LrSchedule::at(int64_t step) const
{
    const int64_t s = std::max<int64_t>(0, step - startStep);
    if (warmupSteps > 0 && s < warmupSteps)
        return baseLr * static_cast<double>(s + 1) / static_cast<double>(warmupSteps);
    if (kind == "constant")
        return baseLr;
    const int64_t decaySteps = std::max<int64_t>(1, totalSteps - startStep - warmupSteps - 1);
    const double progress = std::clamp(
        static_cast<double>(s - warmupSteps) / static_cast<double>(decaySteps), 0.0, 1.0);
    const double minLr = baseLr * minLrRatio;
    if (kind == "linear")
        return minLr + (baseLr - minLr) * (1.0 - progress);
    return minLr + (baseLr - minLr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

void validate(const LrSchedule& s)
{
    if (s.kind != "constant" && s.kind != "linear" && s.kind != "cosine")
        throw std::runtime_error(
            "unknown learning-rate schedule '" + s.kind + "' (use constant, linear or cosine)");
    if (!(s.baseLr > 0.0) || !std::isfinite(s.baseLr))
        throw std::runtime_error("learning rate must be a positive number");
    if (s.warmupSteps < 0)
        throw std::runtime_error("warmup steps must not be negative");
    if (s.minLrRatio < 0.0 || s.minLrRatio > 1.0)
        throw std::runtime_error("min_lr_ratio must be within [0, 1]");
}

} // namespace shard::engine
