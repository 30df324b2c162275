// A run's pace, one definition for the finish event, the run store (and so the Runs page and
// `shard runs`) and the Monitor (docs/ARCHITECTURE.md, "From a metric to a pixel").
#pragma once

#include <cstdint>
#include <map>

#include "protocol/records.h"

namespace shard::protocol {

// tokens/s is the tokens of a run's logged steps over the time those steps took (start-up,
// checkpoint writes and the idle gap between a stop and a resume are no step's); the active time
// is the run's clock (wall_time) at its last logged step, which a resume continues from the
// checkpoint's. A step logged again (after a resume from an earlier checkpoint) replaces its
// first record, as a step does in the run store (whose SQL adds up the same).
class RunPace {
public:
    void add(const MetricRecord& r);
    double tokensPerSec() const;
    double activeSec() const;

private:
    struct Step {
        double tokens = 0.0, sec = 0.0, wallSec = 0.0;
    };
    std::map<int64_t, Step> m_steps;
};

} // namespace shard::protocol
