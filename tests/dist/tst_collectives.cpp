// Every collective at 1, 2, 3 and 4 ranks on Gloo, through real processes started by
// `shard-worker launch`: values against hand-computed expectations (all dtypes incl. bf16,
// odd sizes, padded dim-0 shards, async in flight, hybrid groups), byte counters against the
// formulas, and the counters against the bytes the kernel saw on the sockets.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "process_runner.h"

using namespace shard::testing;

namespace {

std::string tail(const std::string& dir, int rank)
{
    std::ifstream f(dir + "/logs/rank-" + std::to_string(rank) + ".log");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string s = ss.str();
    return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
}

void runCollectives(int world)
{
    const std::string dir = makeTempDir("coll" + std::to_string(world));
    auto p = spawnProcess({workerPath(), "launch", "--nproc-per-node", std::to_string(world),
        "--run-dir", dir, "--", "dist-selftest", "--mode", "collectives"});
    bool finished = p.wait(120);
    SHARD_EXPECT(finished, "collectives at " + std::to_string(world) + " ranks timed out");
    SHARD_EXPECT(p.exitCode() == 0,
        "launcher exit " + std::to_string(p.exitCode()) + "; rank 0 log: " + tail(dir, 0));
    auto report = lastSelftestReport(p.out);
    SHARD_EXPECT(report.value("failures", -1) == 0, "rank 0 reported failures: " + p.out);
    SHARD_EXPECT(report.value("world_size", 0) == world, "world size in the report");
    SHARD_EXPECT(report.value("widening_reduce_scatter", false),
        "a bf16 / fp16 input summed into an fp32 output was tested");
    if (world == 4)
        SHARD_EXPECT(report.value("hybrid_groups", false), "hybrid groups were tested");
    std::printf(
        "collectives at %d ranks: %s\n", world, finished && p.exitCode() == 0 ? "ok" : "FAILED");
}

void runWire(int world)
{
    // The kernel's per-socket counters can pick up a burst of unrelated traffic on a loaded
    // machine (seen once in CI: +27% on one collective); one fresh run, with the same bounds,
    // tells that apart from a wrong count.
    std::string dir;
    Process p;
    for (int attempt = 0; attempt < 2; ++attempt) {
        dir = makeTempDir("wire" + std::to_string(world) + "-" + std::to_string(attempt));
        p = spawnProcess({workerPath(), "launch", "--nproc-per-node", std::to_string(world),
            "--run-dir", dir, "--", "dist-selftest", "--mode", "wire"});
        SHARD_EXPECT(p.wait(120), "wire test timed out");
        if (p.exitCode() == 0 || tail(dir, 0).find("wire bytes") == std::string::npos)
            break;
        std::printf("  wire run %d: kernel counters disagreed; measuring once more\n", attempt);
    }
    // Every rank checks its own kernel-measured bytes; a mismatch makes it exit 1.
    SHARD_EXPECT(p.exitCode() == 0,
        "launcher exit " + std::to_string(p.exitCode()) + "; rank 0 log: " + tail(dir, 0)
            + "\nrank 1 log: " + tail(dir, 1));
    auto report = lastSelftestReport(p.out);
    const int64_t n = int64_t(3) << 19; // the selftest's buffer: fp32 elements
    const int64_t w = world;
    const std::map<std::string, int64_t> expected = {
        {"all_gather", (w - 1) * (n / w) * 4},
        {"reduce_scatter", (w - 1) * (n / w) * 4},
        {"all_reduce", 2 * (w - 1) * (n / w) * 4},
        {"all_reduce_bf16", 2 * (w - 1) * (n / w) * 2},
        {"broadcast", (world == 2 ? 1 : 2) * n * 4}, // rank 0 is the root: ceil(log2 W) copies
        {"broadcast_root1", 0},                      // rank 0 is a leaf when rank 1 is the root
        // bf16 gradients into an fp32 reduce: the bf16 bytes cross the socket
        {"reduce_scatter_bf16_into_fp32", (w - 1) * (n / w) * 2},
    };
    SHARD_EXPECT(
        report.contains("wire") && report["wire"].size() == expected.size(), "wire rows: " + p.out);
    for (const auto& row : report.value("wire", nlohmann::json::array())) {
        const std::string name = row.value("collective", "");
        const int64_t counted = row.value("counted", int64_t(-1));
        const int64_t measured = row.value("measured", int64_t(-1));
        auto it = expected.find(name);
        int64_t want = it == expected.end() ? -1 : it->second;
        if (name == "broadcast_root1" && world == 3)
            want = 0;
        SHARD_EXPECT(counted == want,
            name + ": counted " + std::to_string(counted) + ", formula " + std::to_string(want));
        const double diff = std::abs(static_cast<double>(measured - counted));
        SHARD_EXPECT(diff <= 0.02 * static_cast<double>(counted) + 16384.0,
            name + ": kernel measured " + std::to_string(measured) + " vs counted "
                + std::to_string(counted));
        std::printf("  %d ranks %-29s counted %10lld  kernel %10lld\n", world, name.c_str(),
            static_cast<long long>(counted), static_cast<long long>(measured));
    }
}

} // namespace

int main()
{
    // One process, no launcher: no network at all.
    {
        auto p = spawnProcess({workerPath(), "dist-selftest"},
            {"RANK=", "WORLD_SIZE=", "SLURM_PROCID=", "SLURM_NTASKS="});
        SHARD_EXPECT(p.wait(60) && p.exitCode() == 0, "single process selftest: " + p.err);
        SHARD_EXPECT(lastSelftestReport(p.out).value("world_size", 0) == 1, "world size 1");
    }
    for (int world : {2, 3, 4})
        runCollectives(world);
    for (int world : {2, 4})
        runWire(world);
    // The GPU script's bf16 ZeRO-3 step, here on Gloo: gather bf16 shards (67 rows: padding),
    // autograd, fp32 reduce-scatter, update; against a full-batch fp32 reference.
    {
        const std::string dir = makeTempDir("z3step");
        auto p = spawnProcess({workerPath(), "launch", "--nproc-per-node", "2", "--run-dir", dir,
            "--", "dist-selftest", "--mode", "zero3-step"});
        SHARD_EXPECT(p.wait(120) && p.exitCode() == 0, "zero3-step: " + p.err);
        auto report = lastSelftestReport(p.out);
        SHARD_EXPECT(
            report.value("failures", -1) == 0 && report.value("zero3_step_rel_error", 1.0) < 0.05,
            "zero3 bf16 step matches the reference: " + p.out);
    }
    // A backend this machine cannot run is one clear line, not a crash.
    {
        auto p = spawnProcess(
            {workerPath(), "dist-selftest", "--backend", "nccl"}, {"RANK=", "WORLD_SIZE="});
        SHARD_EXPECT(p.wait(60) && p.exitCode() == 1, "nccl without GPU exits 1: " + p.err);
        SHARD_EXPECT(p.err.find("shard-worker: error:") != std::string::npos
                && (p.err.find("CUDA") != std::string::npos
                    || p.err.find("NCCL") != std::string::npos),
            "nccl without GPU names the cause: " + p.err);
        auto q = spawnProcess({workerPath(), "dist-selftest", "--backend", "mpi"});
        SHARD_EXPECT(q.wait(60) && q.exitCode() == 1
                && q.err.find("unknown communication backend 'mpi'") != std::string::npos,
            "unknown backend: " + q.err);
    }
    if (g_failures == 0) {
        std::printf("tst_collectives: all passed\n");
        removeTempDirs();
    }
    return g_failures == 0 ? 0 : 1;
}
