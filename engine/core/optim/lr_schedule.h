// Learning-rate schedules: constant, linear or cosine decay, each after a linear warmup.
#pragma once

#include <cstdint>
#include <string>

namespace shard::engine {

struct LrSchedule {
    std::string kind = "cosine"; // constant, linear, cosine
    double baseLr = 1e-3;
    int64_t warmupSteps = 0;
    int64_t totalSteps = 1;  // the decay ends at step totalSteps - 1; constant after it
    int64_t startStep = 0;   // warm-up begins here (a continued run's restarted schedule)
    double minLrRatio = 0.0; // the floor of linear/cosine decay, as a fraction of baseLr

    // The learning rate of 0-based step `step`: warmup rises linearly to baseLr at step
    // warmupSteps - 1 (step 0 already trains, at baseLr / warmupSteps); decay then falls from
    // baseLr to minLrRatio * baseLr at the last step. Steps count from startStep.
    double at(int64_t step) const;
};

// Throws for an unknown kind.
void validate(const LrSchedule& schedule);

} // namespace shard::engine
