// The checkpoint directory protocol (no Torch): <run>/checkpoints/step-<n>/ is complete only when
// its DONE marker exists. A checkpoint is written into a hidden temporary directory, fsync'd,
// renamed into place, then marked DONE (fsync'd); directories without DONE are ignored. Discovery
// (latest complete checkpoint, --resume auto|PATH) and pruning (keep the last K) live here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "protocol/checkpoint_discovery.h"

namespace shard::ckpt {

// Discovery is part of the run-directory protocol (protocol/checkpoint_discovery.h).
using protocol::CheckpointEntry;
using protocol::isCompleteCheckpoint;
using protocol::listCheckpoints;

// The newest complete checkpoint of a run directory (<runDir>/checkpoints/step-<n>).
std::optional<std::string> latestComplete(const std::string& runDir);

// --resume: "" = no resume; "auto" = the newest complete checkpoint of `runDir` or "" when there
// is none (a fresh start); otherwise PATH is a checkpoint directory (it must be complete) or a run
// directory (its newest complete checkpoint). Throws a one-line error saying what is wrong.
std::string resolveResume(const std::string& arg, const std::string& runDir);

// The hidden temporary directory a checkpoint of `step` is written into.
std::string tempDirFor(const std::string& checkpointsDir, int64_t step);
std::string finalDirFor(const std::string& checkpointsDir, int64_t step);

// Durable file-system steps; each throws std::runtime_error naming the path and errno text
// ("No space left on device" on a full disk).
void fsyncPath(const std::string& path); // a file or a directory
void writeFileDurable(const std::string& path, const std::string& contents);
// Removes leftovers of interrupted writes: hidden temporary directories.
void removeStaleTemps(const std::string& checkpointsDir);
// Moves a fully written and fsync'd temporary directory to step-<n> and writes the DONE marker.
// An existing step-<n> (a re-save of the same step) is replaced only once the new one is in place.
// `beforeDone` runs between the rename and the DONE marker (a test stops a writer there).
void publishCheckpoint(const std::string& tempDir, const std::string& finalDir,
    const std::string& doneContents, const std::function<void()>& beforeDone = {});
// Keeps the newest `keep` complete checkpoints (keep <= 0: keep all); removes older complete
// ones and incomplete step directories older than the newest complete one. Returns what it removed.
std::vector<std::string> pruneCheckpoints(const std::string& checkpointsDir, int keep);

} // namespace shard::ckpt
