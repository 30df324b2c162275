// Chaos: a 2-rank zero3 run (tiny-1m, real launcher and ranks) gets one fault at a step drawn
// from a seed: SIGKILL of a rank, SIGSTOP of a rank, SIGKILL of the launcher, a disk that fills
// (tmpfs), SIGKILL of a rank while it writes a checkpoint, or a preemption (SIGUSR1 to the
// launcher, what Slurm sends before a time limit: a checkpoint, exit 75, no error). For each:
// every process of the run is gone within the bound, the event (or the launcher's reason) names
// the cause, `--resume auto` continues, and the losses are bit-identical to an uninterrupted run.
// Seeds from $SHARD_CHAOS_SEEDS ("0-39" or "1,5,7"; the fault is seed % 6; default 1,3,4,5:
// SIGSTOP, disk full, kill in a checkpoint, preemption, as tst_launcher and tst_ckpt_resume
// cover the other two); the
// summary line counts faults injected and recovered exactly (bench/dist/chaos_bench.sh). The
// restart path: seeds from $SHARD_CHAOS_RESTART_SEEDS (default 0,1,4 unless $SHARD_CHAOS_SEEDS
// is set) run under `launch --max-restarts 1`, and a dead, hung or mid-checkpoint-killed rank
// must be healed in place: exit 0, one restart event, losses bit-identical, nobody resuming.
// (A killed launcher, a full disk or a preemption is not restarted in place: those seeds are
// skipped; a preempted Slurm job requeues itself, tst_slurm_requeue.)
#include <filesystem>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <unistd.h>

#include "process_runner.h"
#include "protocol/run_dir.h"

using namespace shard::testing;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 10;
constexpr int kCheckpointEvery = 2;
constexpr double kGoneWithinSec = 25; // hang timeout 3 s (x4 in a checkpoint) + grace

enum class Fault { KillRank, StopRank, KillLauncher, DiskFull, KillInCheckpoint, Preempt };
const char* const kFaultNames[] = {"SIGKILL rank", "SIGSTOP rank", "SIGKILL launcher", "disk full",
    "kill in checkpoint", "SIGUSR1 launcher (preemption)"};
constexpr int kFaultKinds = 6;

std::string g_root;

std::vector<std::string> trainArgs(const std::string& out, bool resume)
{
    std::vector<std::string> a
        = {"train", "--model", g_root + "/model", "--data", g_root + "/data.jsonl", "--out", out,
            "--steps", std::to_string(kSteps), "--micro-batch", "2", "--seq-len", "64", "--lr",
            "3e-3", "--seed", "3", "--threads", "1", "--strategy", "zero3", "--warmup", "2",
            "--checkpoint-every", std::to_string(kCheckpointEvery), "--keep-checkpoints", "2"};
    if (resume) {
        a.push_back("--resume");
        a.push_back("auto");
    }
    return a;
}

Process launch(const std::string& out, bool resume, int maxRestarts = 0)
{
    std::vector<std::string> argv
        = {workerPath(), "launch", "--nproc-per-node", "2", "--grace-period", "2", "--hang-timeout",
            "3", "--max-restarts", std::to_string(maxRestarts), "--"};
    for (auto& a : trainArgs(out, resume))
        argv.push_back(a);
    return spawnProcess(argv);
}

std::vector<int> seedsFromEnv(const char* name, const char* ciDefault)
{
    const char* v = std::getenv(name);
    std::string text = v && *v ? v : ciDefault;
    std::vector<int> seeds;
    std::istringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        const auto dash = item.find('-');
        const int a = std::stoi(item.substr(0, dash));
        const int b = dash == std::string::npos ? a : std::stoi(item.substr(dash + 1));
        for (int s = a; s <= b; ++s)
            seeds.push_back(s);
    }
    return seeds;
}

// Waits until metrics.jsonl has `lines` records (false when the run ended first).
bool waitForStep(Process& p, const std::string& dir, int lines)
{
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (countLines(dir + "/metrics.jsonl") < lines)
        if (p.pump(20) || Clock::now() > deadline)
            return false;
    return true;
}

// Waits for the temporary folder of a checkpoint at `fromStep` or later to appear (inotify: the
// fault lands while the ranks write their shards). False when the run ended first.
bool waitForCheckpointWrite(Process& p, const std::string& dir, int fromStep)
{
    const std::string ckpt = dir + "/checkpoints";
    fs::create_directories(ckpt);
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ::inotify_add_watch(fd, ckpt.c_str(), IN_CREATE);
    bool seen = false;
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (!seen && Clock::now() < deadline) {
        pollfd pfd {fd, POLLIN, 0};
        if (::poll(&pfd, 1, 20) > 0) {
            alignas(inotify_event) char buf[4096];
            const ssize_t n = ::read(fd, buf, sizeof buf);
            for (ssize_t at = 0; at < n;) {
                const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
                const std::string name = e->len ? e->name : "";
                int step = 0;
                if (std::sscanf(name.c_str(), ".step-%d.tmp", &step) == 1 && step >= fromStep)
                    seen = true;
                at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
            }
        } else if (p.pump(0)) {
            break;
        }
    }
    ::close(fd);
    return seen;
}

const nlohmann::json* lastError(const std::vector<nlohmann::json>& ev)
{
    const nlohmann::json* found = nullptr;
    for (const auto& e : ev)
        if (e.value("kind", "") == "error" && e["data"].contains("rank"))
            found = &e;
    return found;
}

struct Outcome {
    bool injected = false;
    bool recovered = false;
    std::string why; // the first check that failed
};

// Whether a launcher given --max-restarts heals this fault in place (a dead or hung rank); a
// killed launcher or a full disk still needs a person.
bool restartable(Fault fault)
{
    return fault == Fault::KillRank || fault == Fault::StopRank || fault == Fault::KillInCheckpoint;
    // (Preempt stops with a checkpoint on purpose: Slurm requeues the job, tst_slurm_requeue.)
}

Outcome runSeed(int seed, const std::map<int64_t, double>& reference, bool restart)
{
    std::mt19937 rng(static_cast<unsigned>(seed) * 2654435761u + 1);
    const Fault fault = static_cast<Fault>(seed % kFaultKinds);
    const int rank = static_cast<int>(rng() % 2);
    // After the first checkpoint (step 2), before the last step; a preemption lands with steps
    // left after it (the ranks stop at the next record after they see it).
    const int drawn = 3 + static_cast<int>(rng() % (kSteps - 4));
    const int step = fault == Fault::Preempt ? std::min(drawn, kSteps - 5) : drawn;
    Outcome out;
    auto check = [&](bool ok, const std::string& what) {
        if (!ok && out.why.empty())
            out.why = what;
        return ok;
    };

    struct Mount {
        std::string dir;
        ~Mount()
        {
            if (!dir.empty())
                ::umount2(dir.c_str(), MNT_DETACH);
        }
    } mount;
    std::string dir = makeTempDir("chaos-" + std::to_string(seed));
    const std::string mnt = dir + "/small";
    if (fault == Fault::DiskFull) {
        std::string why;
        if (!mountTmpfs(mnt, "48m", &why)) {
            out.why = "SKIP: " + why;
            return out;
        }
        mount.dir = mnt;
        dir = mnt + "/run";
    }

    if (restart && !restartable(fault)) {
        out.why = "SKIP: " + std::string(kFaultNames[static_cast<int>(fault)])
            + " is not restarted in place";
        return out;
    }
    auto p = launch(dir, false, restart ? 1 : 0);
    const bool reached = fault == Fault::KillInCheckpoint ? waitForCheckpointWrite(p, dir, step)
                                                          : waitForStep(p, dir, step);
    const auto pids = rankPids(dir, 5);
    if (!reached || pids.size() != 2) {
        p.wait(120);
        out.why = "the run ended before the fault (" + p.err.substr(0, 300) + ")";
        return out;
    }
    const pid_t target = pids.at(static_cast<size_t>(rank)).second;
    const auto at = Clock::now();
    switch (fault) {
    case Fault::KillRank:
    case Fault::KillInCheckpoint:
        shard::protocol::signalProcess(target, SIGKILL);
        break;
    case Fault::StopRank:
        shard::protocol::signalProcess(target, SIGSTOP);
        break;
    case Fault::KillLauncher:
        shard::protocol::signalProcess(p.pid, SIGKILL);
        break;
    case Fault::DiskFull:
        fillDisk(mnt + "/filler");
        break;
    case Fault::Preempt:
        shard::protocol::signalProcess(p.pid, SIGUSR1);
        break;
    }
    out.injected = true;

    if (restart) {
        // Restart in place: the launcher stops every rank and starts them again from the latest
        // complete checkpoint; the run finishes with nobody resuming it.
        check(p.wait(240) && p.exitCode() == 0,
            "the run did not finish after the restart: " + p.err.substr(0, 400));
        int restarts = 0;
        for (const auto& e : events(dir))
            restarts += e.value("kind", "") == "restart" ? 1 : 0;
        check(restarts == 1, std::to_string(restarts) + " restart events");
        const auto losses = stepLosses(dir);
        check(losses == reference, "the losses differ from the uninterrupted run's");
        out.recovered = out.why.empty();
        std::printf("seed %d (restart in place): %s of rank %d at step %d: %s\n", seed,
            kFaultNames[static_cast<int>(fault)], rank, step,
            out.recovered ? "restarted, finished bit-exact" : ("FAILED: " + out.why).c_str());
        return out;
    }
    // 1. Everything is gone within the bound.
    check(p.wait(kGoneWithinSec), "the launcher did not exit");
    check(noneRemain(dir, pids, std::max(0.0, kGoneWithinSec - since(at))),
        "processes of the run remain");
    const double tookSec = since(at);
    if (fault == Fault::DiskFull)
        fs::remove(mnt + "/filler"); // the operator frees space before resuming

    // 2. The cause is named.
    const auto ev = events(dir);
    const nlohmann::json* err = lastError(ev);
    switch (fault) {
    case Fault::KillRank:
    case Fault::KillInCheckpoint:
        check(err && (*err)["data"].value("rank", -1) == rank
                && (*err)["data"].value("signal", 0) == SIGKILL,
            "no error event naming rank " + std::to_string(rank) + " and SIGKILL");
        break;
    case Fault::StopRank:
        check(err && (*err)["data"].value("reason", "") == "rank_hung"
                && (*err)["data"].value("rank", -1) == rank,
            "no rank_hung event naming rank " + std::to_string(rank) + ": "
                + (err ? err->dump() : std::string("none")));
        break;
    case Fault::KillLauncher:
        // Nothing runs in a SIGKILLed launcher: the run ends without a finish event, which
        // readers show as interrupted.
        check(p.termSignal() == SIGKILL, "the launcher was not the one killed");
        check(ev.empty() || ev.back().value("kind", "") != "finish",
            "a finish event after the launcher was killed");
        break;
    case Fault::DiskFull:
        // The rank whose write failed may be one whose own log is on the full disk: then the
        // launcher knows it by its exit status (74) only.
        check(p.exitCode() == 74
                && (p.err.find("No space left on device") != std::string::npos
                    || p.err.find("a write to the run directory failed") != std::string::npos),
            "exit " + std::to_string(p.exitCode()) + " without the disk named: " + p.err);
        break;
    case Fault::Preempt: {
        // A checkpoint at the agreed step, exit 75, a "preempted" event and no error or finish.
        check(p.exitCode() == shard::protocol::kPreemptedExitCode,
            "exit " + std::to_string(p.exitCode()) + " after SIGUSR1, not 75: " + p.err);
        int preempted = 0;
        for (const auto& e : ev) {
            preempted += e.value("kind", "") == "preempted" ? 1 : 0;
            check(e.value("kind", "") != "error" && e.value("kind", "") != "finish",
                "a preempted run wrote " + e.dump());
        }
        check(preempted == 1, std::to_string(preempted) + " preempted events");
        break;
    }
    }
    for (const auto& e : ev)
        check(e.value("step", int64_t(0)) >= 0, "an event with step -1");
    // Only the launcher's verdict is the run's error: a surviving rank whose connection to the
    // dead one broke writes none (it wrote an unnamed "Connection reset by peer" error 4 times in
    // 34, issue 32).
    if (fault == Fault::KillRank || fault == Fault::KillInCheckpoint || fault == Fault::StopRank)
        for (const auto& e : ev)
            check(e.value("kind", "") != "error" || e["data"].contains("rank"),
                "an error event that names no rank: " + e.dump());

    // 3. `--resume auto` continues; 4. the losses equal the uninterrupted run's, bit for bit.
    auto resumed = launch(dir, true);
    check(resumed.wait(180) && resumed.exitCode() == 0,
        "the resume failed: " + resumed.err.substr(0, 400));
    const auto losses = stepLosses(dir);
    check(losses.size() == reference.size(),
        "the resumed run has " + std::to_string(losses.size()) + " steps, not "
            + std::to_string(reference.size()));
    for (const auto& [s, loss] : reference) {
        auto it = losses.find(s);
        if (!check(it != losses.end() && it->second == loss,
                "step " + std::to_string(s) + " loss differs from the uninterrupted run"))
            break;
    }
    out.recovered = out.why.empty();
    std::printf("seed %d: %s of rank %d at step %d: gone after %.2f s, %s\n", seed,
        kFaultNames[static_cast<int>(fault)],
        fault == Fault::KillLauncher || fault == Fault::Preempt ? -1 : rank, step, tookSec,
        out.recovered ? "resumed bit-exact" : ("FAILED: " + out.why).c_str());
    return out;
}

} // namespace

int main()
{
    std::setvbuf(stdout, nullptr, _IOLBF, 0); // one line per seed as it ends
    g_root = makeTempDir("chaos");
    if (!makeTinyRunInputs(g_root))
        return 1;
    const std::string refDir = g_root + "/reference";
    auto ref = launch(refDir, false);
    if (!ref.wait(180) || ref.exitCode() != 0) {
        std::fprintf(stderr, "the uninterrupted run failed: %s\n", ref.err.c_str());
        return 1;
    }
    const auto reference = stepLosses(refDir);
    SHARD_EXPECT(reference.size() == kSteps, "reference has every step");

    int injected = 0, recovered = 0, skipped = 0;
    // CI: the four faults no other test covers, resumed by hand, and the three a launcher with
    // --max-restarts heals in place (a few minutes of CPU on 2 cores); the benchmark runs all
    // kinds over many seeds.
    std::vector<std::pair<int, bool>> runs;
    for (int seed : seedsFromEnv("SHARD_CHAOS_SEEDS", "1,3,4,5"))
        runs.emplace_back(seed, false);
    const char* chosen = std::getenv("SHARD_CHAOS_SEEDS"); // a benchmark's own list alone
    for (int seed : seedsFromEnv("SHARD_CHAOS_RESTART_SEEDS", chosen && *chosen ? "" : "0,1,4"))
        runs.emplace_back(seed, true);
    for (auto [seed, restart] : runs) {
        const Outcome o = runSeed(seed, reference, restart);
        if (o.why.rfind("SKIP", 0) == 0) {
            std::printf("seed %d: %s\n", seed, o.why.c_str());
            ++skipped;
            continue;
        }
        injected += o.injected ? 1 : 0;
        recovered += o.recovered ? 1 : 0;
        SHARD_EXPECT(o.injected && o.recovered, "seed " + std::to_string(seed) + ": " + o.why);
    }
    std::printf("chaos: %d fault(s) injected, %d recovered exactly, %d skipped\n", injected,
        recovered, skipped);
    if (g_failures == 0)
        removeTempDirs();
    return g_failures ? 1 : 0;
}
