// A rank's heartbeat to its launcher, like torchrun's agent and PyTorch's NCCL watchdog: a
// thread writes "<step> <phase> <hang timeout s>" to the pipe the launcher handed over
// ($SHARD_HEARTBEAT_FD) every second, so the launcher tells a rank that stopped (SIGSTOP, a
// wedged process: no beats) from one that waits in a collective for it (beats, no progress).
#pragma once

#include <cstdint>
#include <string>

namespace shard::launch {

// What a rank is doing; set-up, checkpoint writes and the final model write are slow phases
// (the launcher allows them kSlowPhaseFactor times the hang timeout).
enum class RankPhase { Setup, Step, Checkpoint, Final };

inline constexpr const char* kHeartbeatFdEnv = "SHARD_HEARTBEAT_FD";
inline constexpr const char* kHangTimeoutEnv = "SHARD_HANG_TIMEOUT_S";
inline constexpr double kDefaultHangTimeoutSec = 300.0;
inline constexpr double kSlowPhaseFactor = 4.0;
// A rank that beats but makes no progress (waits in a collective, or is only slow) is hung after
// this many times as long.
inline constexpr double kStallFactor = 5.0;

// Beats go out this often: a fifth of the hang timeout, between 0.1 and 1 s.
double beatIntervalSec(double hangTimeoutSec);

std::string phaseName(RankPhase phase);
// Inverse of phaseName; Step for anything else.
RankPhase phaseFromName(const std::string& name);

class RankHeartbeat {
public:
    // Starts the beat thread when $SHARD_HEARTBEAT_FD names a pipe (under `shard-worker
    // launch`); otherwise every call is a no-op. `hangTimeoutSec` > 0 tells the launcher the
    // run spec's timeout (used when the launcher was given none).
    static void start(double hangTimeoutSec);
    // Progress: the step being run (0 before the first) and the phase. Beats go out at once.
    static void report(int64_t step, RankPhase phase);
    // Why the rank is about to fail, as one "error <message>" line on the same pipe: the
    // launcher names it even when the rank's log cannot be written (a full disk).
    static void reportError(const std::string& message);
};

} // namespace shard::launch
