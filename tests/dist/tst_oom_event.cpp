// Out of memory as a clear event, with the real launcher and two training ranks (tiny-1m, Gloo):
// a memory limit on every rank ($SHARD_MEMORY_LIMIT_BYTES, enforced by the counting allocator
// as a GPU's caching allocator enforces the device's size) that the first step exceeds stops
// the run with an error event naming the rank, the bytes asked for and what to change; the
// launcher fails, and no process of the run stays behind.
#include <filesystem>
#include <unistd.h>

#include "process_runner.h"

using namespace shard::testing;

namespace {

std::string g_root;

std::vector<std::string> launchArgs(const std::string& out)
{
    return {workerPath(), "launch", "--nproc-per-node", "2", "--grace-period", "2", "--", "train",
        "--model", g_root + "/model", "--data", g_root + "/data.jsonl", "--out", out, "--steps",
        "2", "--micro-batch", "8", "--seq-len", "64", "--seed", "3", "--threads", "1", "--strategy",
        "zero3"};
}

bool mentions(const nlohmann::json& e, const std::string& text)
{
    return e.value("message", "").find(text) != std::string::npos
        || (e.contains("data")
            && e["data"].value("rank_error", "").find(text) != std::string::npos);
}

void testOutOfMemory()
{
    // The same run without a limit: what one step needs on each rank.
    const std::string free = makeTempDir("oom-free");
    auto ok = spawnProcess(launchArgs(free));
    SHARD_EXPECT(ok.wait(240) && ok.exitCode() == 0, "the run without a limit failed: " + ok.err);
    std::ifstream metrics(free + "/metrics.jsonl");
    std::string line;
    std::getline(metrics, line);
    const auto first = nlohmann::json::parse(line, nullptr, false);
    SHARD_EXPECT(first.contains("memory") && first["memory"].size() == 2, line);
    if (!first.contains("memory") || first["memory"].size() != 2)
        return;
    int64_t current = 0, peak = 0;
    for (const auto& m : first["memory"]) {
        current = std::max<int64_t>(current, m.value("current", int64_t(0)));
        peak = std::max<int64_t>(peak, m.value("peak", int64_t(0)));
    }
    SHARD_EXPECT(peak > current && current > 0,
        "step 1 peaks above what stays live: " + std::to_string(peak) + " > "
            + std::to_string(current));
    // Between what stays live (masters, optimizer state) and the step's peak (activations):
    // set-up fits, the first step does not.
    const int64_t limit = current + (peak - current) / 2;
    const std::string dir = makeTempDir("oom");
    const auto started = Clock::now();
    auto run = spawnProcess(launchArgs(dir), {"SHARD_MEMORY_LIMIT_BYTES=" + std::to_string(limit)});
    const auto pids = rankPids(dir, 60);
    SHARD_EXPECT(run.wait(240), "the launcher did not stop after an out-of-memory");
    SHARD_EXPECT(run.exitCode() != 0, "the run failed: exit " + std::to_string(run.exitCode()));
    SHARD_EXPECT(pids.size() == 2, "two ranks started");
    SHARD_EXPECT(noneRemain(dir, pids, 10), "a process of the run stayed behind");
    SHARD_EXPECT(since(started) < 200, "the run stopped promptly");
    SHARD_EXPECT(countLines(dir + "/metrics.jsonl") == 0, "no step finished under the limit");

    const auto ev = events(dir);
    const nlohmann::json* oom = nullptr;
    for (const auto& e : ev)
        if (e.value("kind", "") == "error" && mentions(e, "ran out of memory"))
            oom = &e;
    SHARD_EXPECT(oom, "an error event says out of memory: " + readFile(dir + "/events.jsonl"));
    if (!oom)
        return;
    const std::string text
        = oom->value("message", "") + " " + (*oom)["data"].value("rank_error", "");
    SHARD_EXPECT(text.find("rank ") != std::string::npos, text);
    SHARD_EXPECT(text.find(" on cpu at step 1") != std::string::npos, text);
    SHARD_EXPECT(text.find("it asked for ") != std::string::npos, text);
    SHARD_EXPECT(text.find("limit (SHARD_MEMORY_LIMIT_BYTES)") != std::string::npos, text);
    SHARD_EXPECT(text.find("--micro-batch") != std::string::npos, text);
    SHARD_EXPECT(text.find("--checkpointing full") != std::string::npos, text);
    // Rank 0's own event carries the numbers as data.
    for (const auto& e : ev)
        if (e.value("kind", "") == "error" && e["data"].value("reason", "") == "out_of_memory") {
            const int64_t asked = e["data"].value("requested_bytes", int64_t(0));
            SHARD_EXPECT(asked > 0, e.dump());
            // The bytes of the refused allocation, as the allocator said them.
            SHARD_EXPECT(
                e.value("message", "").find("it asked for " + std::to_string(asked) + " bytes")
                        != std::string::npos
                    && e.value("message", "")
                            .find("tried to allocate " + std::to_string(asked) + " bytes")
                        != std::string::npos,
                e.dump());
            SHARD_EXPECT(e["data"].value("capacity_bytes", int64_t(0)) == limit, e.dump());
            SHARD_EXPECT(e["data"].value("rank", -1) == 0, e.dump());
            SHARD_EXPECT(e["data"].value("micro_batch", 0) == 8, e.dump());
        }
    // A bad limit is refused with the fix.
    const std::string badDir = makeTempDir("oom-bad");
    auto bad = spawnProcess(launchArgs(badDir), {"SHARD_MEMORY_LIMIT_BYTES=lots"});
    SHARD_EXPECT(bad.wait(120) && bad.exitCode() != 0, "a bad limit is refused");
    SHARD_EXPECT(readFile(badDir + "/events.jsonl")
                     .find("SHARD_MEMORY_LIMIT_BYTES='lots' is not a byte count")
            != std::string::npos,
        readFile(badDir + "/events.jsonl"));
}

} // namespace

int main()
{
    g_root = makeTempDir("oom-inputs");
    if (!makeTinyRunInputs(g_root))
        return 1;
    testOutOfMemory();
    if (g_failures == 0)
        removeTempDirs();
    std::printf("%s\n", g_failures ? "FAILED" : "all out-of-memory checks passed");
    return g_failures ? 1 : 0;
}
