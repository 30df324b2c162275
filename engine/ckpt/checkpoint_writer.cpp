// The save protocol: temp dir (rank 0) -> shard files (every rank) -> manifest + rename + DONE
// (rank 0), with an all-ranks agreement after each phase so that one rank's failure stops all.
#include "checkpoint_writer.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include <ATen/ops/zeros.h>

#include "ckpt/checkpoint_store.h"
#include "core/safetensors/safetensors_file.h"
#include "protocol/run_dir.h"

namespace shard::ckpt {

namespace fs = std::filesystem;

namespace {

std::string utcNow()
{
    const std::time_t t = std::time(nullptr);
    std::tm tm {};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string shapeText(const std::vector<int64_t>& s)
{
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i)
        out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

// The rows of a local buffer that this rank stores, checked against the layout.
at::Tensor storedRows(const LocalTensor& t, const char* kind, const at::Tensor& buffer,
    const RowRange& rows, const SaveRequest& req)
{
    std::vector<int64_t> want = t.shape;
    want[0] = rows.padded;
    if (!buffer.defined())
        return at::zeros(
            [&] {
                auto s = t.shape;
                s[0] = rows.rows();
                return s;
            }(),
            at::kFloat);
    if (buffer.sizes().vec() != want || buffer.scalar_type() != at::kFloat)
        throw std::runtime_error("rank " + std::to_string(req.rank) + " holds " + kind + " of '"
            + t.name + "' as " + c10::toString(buffer.scalar_type())
            + shapeText(buffer.sizes().vec()) + ", but strategy " + req.strategy + " at "
            + std::to_string(req.worldSize) + " ranks places Float" + shapeText(want) + " there");
    // A device buffer is copied to the host here, one tensor at a time (.cpu() is a no-op on
    // the CPU).
    return buffer.detach().narrow(0, 0, rows.rows()).cpu();
}

} // namespace

SaveResult saveCheckpoint(const SaveRequest& req, const std::vector<LocalTensor>& tensors)
{
    const auto t0 = std::chrono::steady_clock::now();
    const std::string label = "checkpoint step-" + std::to_string(req.step);
    const std::string tempDir = tempDirFor(req.checkpointsDir, req.step);
    const std::string finalDir = finalDirFor(req.checkpointsDir, req.step);
    const bool leader = req.rank == 0;
    auto phase = [&](const std::string& name) {
        if (req.onPhase)
            req.onPhase(name);
    };
    // Runs `fn` on the ranks that `participate`, then agrees across all ranks; on failure every
    // rank throws, the failing one with its cause.
    auto step = [&](bool participate, const auto& fn, const auto& cleanup) {
        std::string error;
        if (participate) {
            try {
                fn();
            } catch (const std::exception& e) {
                error = e.what();
            }
        }
        const bool allOk = req.agree ? req.agree(error.empty()) : error.empty();
        if (allOk)
            return;
        if (leader)
            cleanup();
        if (error.empty())
            throw std::runtime_error(label
                + ": another rank failed to write its part (see its log); the previous "
                  "checkpoints are intact");
        // This rank's own part failed: a write to the run directory (a full disk, mostly).
        throw protocol::RunDirWriteError(
            label + ": " + error + "; the previous checkpoints are intact");
    };
    auto removeTemp = [&] {
        std::error_code ec;
        fs::remove_all(tempDir, ec);
    };

    // Phase 1: a clean temporary directory.
    step(
        leader,
        [&] {
            if (req.worldSize < 1 || req.rank < 0 || req.rank >= req.worldSize)
                throw std::runtime_error("rank " + std::to_string(req.rank) + " of "
                    + std::to_string(req.worldSize) + " is not a valid rank");
            std::error_code ec;
            fs::create_directories(req.checkpointsDir, ec);
            if (ec)
                throw std::runtime_error(
                    req.checkpointsDir + ": cannot create (" + ec.message() + ")");
            removeStaleTemps(req.checkpointsDir);
            fs::create_directory(tempDir, ec);
            if (ec)
                throw std::runtime_error(tempDir + ": cannot create (" + ec.message() + ")");
            fsyncPath(req.checkpointsDir);
        },
        removeTemp);
    phase("temp-created");

    // Phase 2: every rank writes its shard file.
    SaveResult result;
    step(
        true,
        [&] {
            const auto [p, tp] = placementWithTp(req.strategy, req.rank, req.worldSize,
                req.shardGroup, req.tensorParallel, req.pipelineParallel);
            engine::NamedTensors out;
            for (const auto& t : tensors) {
                if (t.shape.empty())
                    throw std::runtime_error("tensor '" + t.name + "' has no dimensions");
                const RowRange rows = heldRows(t.shape[0], p, t.split, tp);
                // Every rank checks its buffers; replica 0 of each non-empty chunk stores them.
                at::Tensor param = storedRows(t, kParam, t.param, rows, req);
                at::Tensor m = storedRows(t, kExpAvg, t.expAvg, rows, req);
                at::Tensor v = storedRows(t, kExpAvgSq, t.expAvgSq, rows, req);
                if (!storesRows(p, t.split, tp, rows))
                    continue;
                out.push_back({tensorKey(kParam, t.name), param});
                out.push_back({tensorKey(kExpAvg, t.name), m});
                out.push_back({tensorKey(kExpAvgSq, t.name), v});
            }
            if (req.rng.defined())
                out.push_back({"rng/cpu", req.rng.detach().contiguous().view(at::kByte)});
            for (const auto& [name, t] : out)
                result.bytesWritten += t.numel() * static_cast<int64_t>(t.element_size());
            const std::map<std::string, std::string> meta {{"format", kManifestFormat},
                {"run_id", req.runId}, {"step", std::to_string(req.step)},
                {"rank", std::to_string(req.rank)}, {"world_size", std::to_string(req.worldSize)},
                {"rank_state", req.rankState.dump()}};
            engine::writeSafetensors(
                (fs::path(tempDir) / rankFileName(req.rank)).string(), out, meta);
        },
        removeTemp);
    phase("shard-written");

    // Phase 3: rank 0 writes the manifest, publishes the directory and prunes.
    step(
        leader,
        [&] {
            Manifest m;
            m.runId = req.runId;
            m.step = req.step;
            m.worldSize = req.worldSize;
            m.strategy = req.strategy;
            m.shardGroup = req.shardGroup;
            m.tensorParallel = req.tensorParallel;
            m.pipelineParallel = req.pipelineParallel;
            m.modelConfig = req.modelConfig;
            m.modelConfigHash = configHash(req.modelConfig);
            m.modelSource = req.modelSource;
            m.tokenizerSource = req.tokenizerSource;
            m.data = req.data;
            m.trainState = req.trainState;
            m.createdUtc = utcNow();
            for (int r = 0; r < req.worldSize; ++r)
                m.rankFiles.push_back(rankFileName(r));
            std::vector<TensorSpec> specs = req.layout;
            if (specs.empty())
                for (const auto& t : tensors)
                    specs.push_back({t.name, t.shape, t.decay, t.split});
            m.tensors = layoutTensors(specs, req.strategy, req.worldSize, req.shardGroup,
                req.tensorParallel, req.pipelineParallel);
            writeFileDurable(
                (fs::path(tempDir) / kManifestFile).string(), toJson(m).dump(1) + "\n");
            phase("manifest-written");
            nlohmann::json done = {{"step", req.step}, {"run_id", req.runId}};
            publishCheckpoint(tempDir, finalDir, done.dump() + "\n", [&] { phase("renamed"); });
            phase("published");
            result.pruned = pruneCheckpoints(req.checkpointsDir, req.keep);
        },
        removeTemp);
    result.dir = finalDir;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

} // namespace shard::ckpt
