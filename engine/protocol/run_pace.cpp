// RunPace: a map by step, so that a step logged twice counts once.
#include "protocol/run_pace.h"

namespace shard::protocol {

void RunPace::add(const MetricRecord& r)
{
    Step& s = m_steps[r.step];
    s.wallSec = r.wallTimeSec;
    const double tps = r.tokensPerSec.value_or(0.0);
    const bool timed = tps > 0 && r.stepTimeSec > 0;
    s.tokens = timed ? tps * r.stepTimeSec : 0.0;
    s.sec = timed ? r.stepTimeSec : 0.0;
}

double RunPace::tokensPerSec() const
{
    double tokens = 0.0;
    double sec = 0.0;
    for (const auto& [step, s] : m_steps) {
        tokens += s.tokens;
        sec += s.sec;
    }
    return sec > 0 ? tokens / sec : 0.0;
}

double RunPace::activeSec() const
{
    return m_steps.empty() ? 0.0 : m_steps.rbegin()->second.wallSec;
}

} // namespace shard::protocol
