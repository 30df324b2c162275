// Checkpoint discovery (see checkpoint_discovery.h).
#include "protocol/checkpoint_discovery.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "protocol/run_dir.h"

#include <nlohmann/json.hpp>

namespace shard::protocol {

namespace fs = std::filesystem;

std::optional<int64_t> checkpointStepOf(const std::string& name)
{
    const std::string prefix = "step-";
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0)
        return std::nullopt;
    int64_t v = 0;
    for (size_t i = prefix.size(); i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9' || v > (INT64_MAX - 9) / 10)
            return std::nullopt;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

std::vector<CheckpointEntry> listCheckpoints(const std::string& checkpointsDir)
{
    std::vector<CheckpointEntry> out;
    std::error_code ec;
    if (!fs::is_directory(checkpointsDir, ec))
        return out;
    for (const auto& e : fs::directory_iterator(checkpointsDir, ec)) {
        if (!e.is_directory(ec))
            continue;
        const auto step = checkpointStepOf(e.path().filename().string());
        if (!step)
            continue;
        out.push_back({*step, e.path().string(), isCompleteCheckpoint(e.path().string())});
    }
    std::sort(out.begin(), out.end(),
        [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
    return out;
}

bool isCompleteCheckpoint(const std::string& dir)
{
    std::error_code ec;
    return fs::is_regular_file(fs::path(dir) / kCheckpointDoneFile, ec)
        && fs::is_regular_file(fs::path(dir) / kCheckpointManifestFile, ec);
}

std::optional<CheckpointEntry> latestCompleteCheckpoint(const std::string& runDir)
{
    const auto all = listCheckpoints(RunDir(runDir).checkpointsDir());
    for (auto it = all.rbegin(); it != all.rend(); ++it)
        if (it->complete)
            return *it;
    return std::nullopt;
}

bool hasStepsLeftToResume(const std::string& runDir)
{
    const auto latest = latestCompleteCheckpoint(runDir);
    if (!latest)
        return false;
    // A run whose latest checkpoint is at its last step has nothing left to train (its steps
    // may have been raised in run.json since: then it has).
    std::ifstream in(RunDir(runDir).specFile());
    const nlohmann::json spec = nlohmann::json::parse(in, nullptr, false);
    const int64_t steps = spec.is_object() ? spec.value("steps", int64_t(0)) : 0;
    return steps <= 0 || latest->step < steps;
}

std::string runFolderOf(const std::string& path)
{
    if (path.empty())
        return {};
    std::error_code ec;
    fs::path dir = fs::absolute(path, ec).lexically_normal();
    if (ec)
        return {};
    for (int up = 0; up < 3 && !dir.empty(); ++up) {
        std::ifstream in(dir / "run.json");
        if (in) {
            const auto j = nlohmann::json::parse(in, nullptr, false);
            if (j.is_object() && j.contains("data"))
                return dir.string();
        }
        if (!dir.has_relative_path())
            break; // the root has no parent
        dir = dir.parent_path();
    }
    return {};
}

} // namespace shard::protocol
