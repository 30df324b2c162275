// Atomic publication, discovery and pruning of checkpoint directories.
#include "checkpoint_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

#include "ckpt/manifest.h"

namespace shard::ckpt {

namespace fs = std::filesystem;

namespace {

std::string errnoText(int err)
{
    return std::strerror(err);
}

} // namespace

std::optional<std::string> latestComplete(const std::string& runDir)
{
    if (auto latest = protocol::latestCompleteCheckpoint(runDir))
        return latest->dir;
    return std::nullopt;
}

std::string resolveResume(const std::string& arg, const std::string& runDir)
{
    if (arg.empty())
        return "";
    if (arg == "auto") {
        if (runDir.empty())
            throw std::runtime_error("--resume auto needs the run directory (--out RUNDIR)");
        return latestComplete(runDir).value_or("");
    }
    std::error_code ec;
    if (!fs::is_directory(arg, ec))
        throw std::runtime_error("--resume " + arg
            + ": no such directory (give a checkpoint folder, a run folder or 'auto')");
    if (fs::exists(fs::path(arg) / kManifestFile, ec)
        || protocol::checkpointStepOf(fs::path(arg).filename().string())) {
        if (!isCompleteCheckpoint(arg))
            throw std::runtime_error("--resume " + arg
                + ": checkpoint is incomplete (no DONE marker; it was interrupted while being "
                  "written); resume from an earlier one or use --resume auto");
        return arg;
    }
    if (fs::is_directory(fs::path(arg) / "checkpoints", ec)) {
        auto latest = latestComplete(arg);
        if (!latest)
            throw std::runtime_error(
                "--resume " + arg + ": this run directory holds no complete checkpoint");
        return *latest;
    }
    throw std::runtime_error("--resume " + arg
        + ": neither a checkpoint (manifest.json) nor a run directory (checkpoints/)");
}

std::string tempDirFor(const std::string& checkpointsDir, int64_t step)
{
    return (fs::path(checkpointsDir) / (".step-" + std::to_string(step) + ".tmp")).string();
}

std::string finalDirFor(const std::string& checkpointsDir, int64_t step)
{
    return (fs::path(checkpointsDir) / ("step-" + std::to_string(step))).string();
}

void fsyncPath(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        throw std::runtime_error(path + ": cannot open for fsync (" + errnoText(errno) + ")");
    if (::fsync(fd) != 0) {
        const int err = errno;
        ::close(fd);
        throw std::runtime_error(path + ": fsync failed (" + errnoText(err) + ")");
    }
    ::close(fd);
}

void writeFileDurable(const std::string& path, const std::string& contents)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        throw std::runtime_error(path + ": cannot create (" + errnoText(errno) + ")");
    size_t done = 0;
    while (done < contents.size()) {
        const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            ::close(fd);
            throw std::runtime_error(path + ": write failed (" + errnoText(err) + ")");
        }
        done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0) {
        const int err = errno;
        ::close(fd);
        throw std::runtime_error(path + ": fsync failed (" + errnoText(err) + ")");
    }
    if (::close(fd) != 0)
        throw std::runtime_error(path + ": close failed (" + errnoText(errno) + ")");
}

void removeStaleTemps(const std::string& checkpointsDir)
{
    std::error_code ec;
    if (!fs::is_directory(checkpointsDir, ec))
        return;
    for (const auto& e : fs::directory_iterator(checkpointsDir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() > 5 && name[0] == '.' && name.compare(0, 6, ".step-") == 0)
            fs::remove_all(e.path(), ec);
    }
}

void publishCheckpoint(const std::string& tempDir, const std::string& finalDir,
    const std::string& doneContents, const std::function<void()>& beforeDone)
{
    const fs::path parent = fs::path(finalDir).parent_path();
    fsyncPath(tempDir);
    std::error_code ec;
    std::string previous;
    if (fs::exists(finalDir, ec)) {
        previous = (parent / ("." + fs::path(finalDir).filename().string() + ".old")).string();
        fs::remove_all(previous, ec);
        fs::rename(finalDir, previous, ec);
        if (ec)
            throw std::runtime_error(
                finalDir + ": cannot move the previous checkpoint aside (" + ec.message() + ")");
    }
    fs::rename(tempDir, finalDir, ec);
    if (ec) {
        if (!previous.empty())
            fs::rename(previous, finalDir, ec);
        throw std::runtime_error(finalDir + ": cannot rename into place (" + ec.message() + ")");
    }
    try {
        fsyncPath(parent.string());
        if (beforeDone)
            beforeDone();
        writeFileDurable((fs::path(finalDir) / kDoneFile).string(), doneContents);
        fsyncPath(finalDir);
    } catch (...) {
        std::error_code ignore;
        fs::remove_all(finalDir, ignore);
        if (!previous.empty())
            fs::rename(previous, finalDir, ignore);
        throw;
    }
    if (!previous.empty())
        fs::remove_all(previous, ec);
}

std::vector<std::string> pruneCheckpoints(const std::string& checkpointsDir, int keep)
{
    std::vector<std::string> removed;
    const auto all = listCheckpoints(checkpointsDir);
    int64_t newestComplete = -1;
    int completeSeen = 0;
    std::error_code ec;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if (it->complete) {
            newestComplete = std::max(newestComplete, it->step);
            ++completeSeen;
            if (keep > 0 && completeSeen > keep) {
                // DONE first: a removal cut short leaves an ignored, incomplete directory.
                fs::remove(fs::path(it->dir) / kDoneFile, ec);
                fs::remove_all(it->dir, ec);
                removed.push_back(it->dir);
            }
        } else if (newestComplete >= 0 && it->step < newestComplete) {
            fs::remove_all(it->dir, ec);
            removed.push_back(it->dir);
        }
    }
    return removed;
}

} // namespace shard::ckpt
