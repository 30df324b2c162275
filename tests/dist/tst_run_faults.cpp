// Faults a real run must survive, with the real launcher and training ranks (tiny-1m, Gloo): a
// second start into a run folder that is in use (refused, naming the holder; released when the
// holder dies), a rank stopped with SIGSTOP (the launcher names it within seconds), a disk that
// fills during a 2-rank run (the run stops at once with the reason, every record whole) or is
// full from the start (a clear error, no empty files). Events never carry "step": -1 and a
// checkpoint's size counts every rank's part.
#include <filesystem>
#include <sys/mount.h>
#include <unistd.h>

#include "process_runner.h"

using namespace shard::testing;
namespace fs = std::filesystem;

namespace {

std::string g_root;

std::vector<std::string> trainArgs(
    const std::string& out, const std::string& steps, std::vector<std::string> extra = {})
{
    std::vector<std::string> a = {"train", "--model", g_root + "/model", "--data",
        g_root + "/data.jsonl", "--out", out, "--steps", steps, "--micro-batch", "2", "--seq-len",
        "64", "--lr", "3e-3", "--seed", "3", "--threads", "1", "--strategy", "zero3"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

Process launch(int nproc, const std::vector<std::string>& worker,
    const std::vector<std::string>& launchFlags = {})
{
    std::vector<std::string> argv = {
        workerPath(), "launch", "--nproc-per-node", std::to_string(nproc), "--grace-period", "2"};
    argv.insert(argv.end(), launchFlags.begin(), launchFlags.end());
    argv.push_back("--");
    argv.insert(argv.end(), worker.begin(), worker.end());
    return spawnProcess(argv);
}

bool waitForLines(const std::string& path, int lines, Process& p, double timeoutSec)
{
    const auto deadline = Clock::now() + std::chrono::milliseconds(int(timeoutSec * 1000));
    while (countLines(path) < lines) {
        if (Clock::now() > deadline || p.pump(50))
            return countLines(path) >= lines;
    }
    return true;
}

void expectNoUnknownStep(const std::string& dir)
{
    const std::string text = readFile(dir + "/events.jsonl");
    SHARD_EXPECT(text.find("\"step\":-1") == std::string::npos, "an event with step -1: " + text);
}

const nlohmann::json* findEvent(
    const std::vector<nlohmann::json>& ev, const std::string& kind, const std::string& reason = "")
{
    for (const auto& e : ev)
        if (e.value("kind", "") == kind
            && (reason.empty() || e["data"].value("reason", "") == reason))
            return &e;
    return nullptr;
}

void testSecondStartRefused()
{
    const std::string dir = makeTempDir("lock");
    auto first = launch(1, {"dist-selftest", "--mode", "loop"}, {"--run-dir", dir});
    SHARD_EXPECT(first.waitForOutput("\"looping\"", 60), "first run never started: " + first.err);
    const std::string pidBefore = readFile(dir + "/launcher.pid");
    const std::string eventsBefore = readFile(dir + "/events.jsonl");

    // A second launcher into the same folder, 0.3 s later: refused at once, naming the holder.
    auto second = launch(1, {"dist-selftest"}, {"--run-dir", dir});
    SHARD_EXPECT(second.wait(30), "second launcher hung");
    SHARD_EXPECT(
        second.exitCode() == 1, "second start refused: exit " + std::to_string(second.exitCode()));
    const std::string holder = "pid " + std::to_string(first.pid) + " on host ";
    SHARD_EXPECT(second.err.find("in use") != std::string::npos
            && second.err.find(holder) != std::string::npos
            && second.err.find(" since 20") != std::string::npos,
        "the refusal names pid, host and start time: " + second.err);
    SHARD_EXPECT(readFile(dir + "/launcher.pid") == pidBefore, "launcher.pid overwritten");
    SHARD_EXPECT(readFile(dir + "/events.jsonl") == eventsBefore,
        "the refused start wrote into the live run's events");

    // `train --resume auto` into the live run (no launcher): refused the same way.
    auto resume = spawnProcess(
        {workerPath(), "train", "--model", g_root + "/model", "--data", g_root + "/data.jsonl",
            "--out", dir, "--steps", "4", "--threads", "1", "--resume", "auto"});
    SHARD_EXPECT(resume.wait(60), "resume into a live run hung");
    SHARD_EXPECT(resume.exitCode() == 1 && resume.err.find(holder) != std::string::npos,
        "resume into a live run refused: " + resume.err);

    // The holder dies (SIGKILL: nothing runs in it): the kernel releases the lock.
    auto pids = rankPids(dir);
    shard::protocol::signalProcess(first.pid, SIGKILL);
    SHARD_EXPECT(first.wait(30), "first launcher did not die");
    SHARD_EXPECT(noneRemain(dir, pids, 10), "ranks of the killed launcher remain");
    auto third = launch(1, {"dist-selftest"}, {"--run-dir", dir});
    SHARD_EXPECT(third.wait(60) && third.exitCode() == 0,
        "a start after the holder died is accepted: " + third.err);
    std::printf("second start refused: %s\n", second.err.substr(0, second.err.find('\n')).c_str());
}

void testHungRank()
{
    const std::string dir = makeTempDir("hung");
    auto p
        = launch(2, trainArgs(dir, "100000", {"--checkpoint-every", "2"}), {"--hang-timeout", "3"});
    SHARD_EXPECT(waitForLines(dir + "/metrics.jsonl", 4, p, 120),
        "the run never got going: " + p.err + readFile(dir + "/logs/rank-0.log"));
    const auto pids = rankPids(dir);
    SHARD_EXPECT(pids.size() == 2, "two rank pids");
    if (pids.size() != 2)
        return;
    const auto at = Clock::now();
    shard::protocol::signalProcess(pids.at(1).second, SIGSTOP);
    SHARD_EXPECT(p.wait(60), "launcher did not stop a run with a stopped rank");
    const double took = since(at);
    // 3 s of silence (x4 while it writes a checkpoint), a poll, the other rank's grace period.
    SHARD_EXPECT(took < 20, "took " + std::to_string(took) + " s");
    SHARD_EXPECT(noneRemain(dir, pids, 10), "processes of the run remain");
    const auto ev = events(dir);
    const auto* hung = findEvent(ev, "error", "rank_hung");
    SHARD_EXPECT(hung && (*hung)["data"].value("rank", -1) == 1
            && hung->value("message", "").find("rank 1 ") != std::string::npos
            && hung->value("step", -1) >= 4,
        "the error names rank 1 (the stopped one) and the step: "
            + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(p.exitCode() != 0, "launcher exit non-zero");
    expectNoUnknownStep(dir);

    // The checkpoint event's size is the whole checkpoint (both ranks): 3 fp32 values (weight,
    // Adam m and v) per parameter of tiny-1m's 984,192.
    const auto* saved = findEvent(ev, "checkpoint");
    const int64_t bytes = saved ? (*saved)["data"].value("bytes", int64_t(0)) : 0;
    SHARD_EXPECT(bytes >= 12 * 984192 && bytes < 13 * 984192,
        "checkpoint bytes " + std::to_string(bytes) + " (per rank would be half)");
    std::printf("SIGSTOP of rank 1: launcher stopped the run after %.2f s: %s\n", took,
        hung ? hung->value("message", "").c_str() : "(no event)");
}

void testDiskFills()
{
    const std::string mnt = g_root + "/small";
    std::string why;
    if (!mountTmpfs(mnt, "2m", &why)) {
        std::printf("SKIP disk-full run: %s\n", why.c_str());
        return;
    }
    const std::string dir = mnt + "/run";
    auto p = launch(2, trainArgs(dir, "100000", {"--log-every", "1"}));
    SHARD_EXPECT(waitForLines(dir + "/metrics.jsonl", 5, p, 120), "run never started: " + p.err);
    const std::string before = readFile(dir + "/metrics.jsonl");
    const auto pids = rankPids(dir);
    fillDisk(mnt + "/filler");
    const int linesAtFull = countLines(dir + "/metrics.jsonl");
    const auto at = Clock::now();
    SHARD_EXPECT(p.wait(60), "the run went on with a full disk");
    const double took = since(at);
    SHARD_EXPECT(took < 10, "stopped " + std::to_string(took) + " s after the disk filled");
    SHARD_EXPECT(p.exitCode() == 74,
        "launcher exit 74 (write failed), got " + std::to_string(p.exitCode()) + ": " + p.err);
    SHARD_EXPECT(p.err.find("No space left on device") != std::string::npos,
        "the launcher's stderr says why: " + p.err);
    SHARD_EXPECT(noneRemain(dir, pids, 10), "processes of the run remain");
    const std::string after = readFile(dir + "/metrics.jsonl");
    SHARD_EXPECT(after.compare(0, before.size(), before) == 0, "metrics written before were lost");
    SHARD_EXPECT(!after.empty() && after.back() == '\n', "metrics.jsonl ends in a partial line");
    // One page of the file system may still take a few lines; then the run stops.
    SHARD_EXPECT(countLines(dir + "/metrics.jsonl") <= linesAtFull + 8,
        std::to_string(countLines(dir + "/metrics.jsonl") - linesAtFull)
            + " steps recorded after the disk filled");
    for (const auto& line : {readFile(dir + "/events.jsonl"), after}) {
        std::istringstream in(line);
        for (std::string l; std::getline(in, l);)
            SHARD_EXPECT(nlohmann::json::parse(l, nullptr, false).is_object(), "a cut line: " + l);
    }
    SHARD_EXPECT(!fs::exists(dir + "/model.tmp"), "model.tmp left behind");
    std::printf("disk full during a 2-rank run: stopped after %.2f s, %d lines recorded after it "
                "filled: %s",
        took, countLines(dir + "/metrics.jsonl") - linesAtFull, p.err.c_str());

    // Full from the start: a clear error, no empty run files.
    const std::string fresh = mnt + "/fresh";
    auto q = launch(1, trainArgs(fresh, "4"));
    SHARD_EXPECT(q.wait(60), "a start on a full disk hung");
    SHARD_EXPECT(q.exitCode() != 0 && q.err.find("No space left on device") != std::string::npos,
        "a start on a full disk fails naming the cause: " + q.err);
    for (const char* f : {"run.json", "metrics.jsonl", "events.jsonl"})
        SHARD_EXPECT(!fs::exists(fresh + "/" + f) || fs::file_size(fresh + "/" + f) > 0,
            std::string("an empty ") + f + " was left");
    ::umount2(mnt.c_str(), MNT_DETACH);
}

// A write error on a rank other than 0 (its log; the records are rank 0's): the run stops with
// exit 74 and the launcher says which rank and why, though that rank's log took nothing.
void testRankLogFails()
{
    const std::string dir = g_root + "/rank1-log";
    fs::create_directories(dir + "/logs");
    std::error_code ec;
    fs::create_symlink("/dev/full", dir + "/logs/rank-1.log", ec);
    if (ec) {
        std::printf("SKIP rank log write error: %s\n", ec.message().c_str());
        return;
    }
    auto p = launch(2, trainArgs(dir, "100000", {"--log-every", "1"}));
    SHARD_EXPECT(p.wait(120), "the run went on though rank 1 cannot write its log");
    SHARD_EXPECT(p.exitCode() == 74,
        "launcher exit 74 (write failed), got " + std::to_string(p.exitCode()) + ": " + p.err);
    SHARD_EXPECT(p.err.find("rank 1") != std::string::npos
            && p.err.find("No space left on device") != std::string::npos,
        "the launcher names rank 1 and the reason: " + p.err);
    const auto ev = events(dir);
    const auto* failed = findEvent(ev, "error", "write_failed");
    SHARD_EXPECT(failed && (*failed)["data"].value("rank", -1) == 1
            && failed->value("message", "").find("No space left on device") != std::string::npos,
        "events.jsonl names rank 1's write error: " + readFile(dir + "/events.jsonl"));
    if (failed)
        std::printf("rank 1's log fails: %s\n", failed->value("message", "").c_str());
}

} // namespace

int main()
{
    g_root = makeTempDir("faults");
    if (!makeTinyRunInputs(g_root))
        return 1;
    testSecondStartRefused();
    testHungRank();
    testDiskFills();
    testRankLogFails();
    if (g_failures == 0)
        removeTempDirs();
    std::printf("%s\n", g_failures ? "FAILED" : "all run fault checks passed");
    return g_failures ? 1 : 0;
}
