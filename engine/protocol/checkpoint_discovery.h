// Checkpoint discovery in a run directory, part of the run-directory protocol (no Torch):
// <run>/checkpoints/step-<n>/ is complete only when its manifest and DONE marker exist;
// directories without them are being written, or were cut short, and are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shard::protocol {

inline constexpr const char* kCheckpointManifestFile = "manifest.json";
inline constexpr const char* kCheckpointDoneFile = "DONE";

struct CheckpointEntry {
    int64_t step = 0;
    std::string dir;
    bool complete = false; // manifest and DONE marker present
};

// n for a directory named step-<n>; none for any other name.
std::optional<int64_t> checkpointStepOf(const std::string& name);

// The step-<n> directories of `checkpointsDir`, ascending by step (missing folder = none).
std::vector<CheckpointEntry> listCheckpoints(const std::string& checkpointsDir);
bool isCompleteCheckpoint(const std::string& dir);
// The newest complete checkpoint of a run directory (<runDir>/checkpoints/step-<n>).
std::optional<CheckpointEntry> latestCompleteCheckpoint(const std::string& runDir);

// Whether a resume has work: a complete checkpoint before the last step of the run's spec
// (run.json; its steps may have been raised since the run ended).
bool hasStepsLeftToResume(const std::string& runDir);

// The run directory a model path belongs to: the path itself, its parent or its grandparent
// (a run, <run>/model, <run>/checkpoints/step-<n>), the first holding a run.json that is a
// run's spec (a JSON object with "data"); empty when none does. Absolute and normalised.
std::string runFolderOf(const std::string& path);

} // namespace shard::protocol
