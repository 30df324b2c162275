// Restart in place (`shard-worker launch --max-restarts N`, issue 32) with real ranks: a 2-rank
// zero3 run whose rank 1 is SIGKILLed mid-run restarts from its latest complete checkpoint,
// finishes with exit 0, records one "restart" event (cause, rank, checkpoint step, steps lost),
// and its losses equal an uninterrupted run's bit for bit; a stopped (hung) rank restarts the
// same way after the hang timeout; the same kill at the same step after the restart ends the
// run with the repeat named instead of looping; over two nodes, both nodes' ranks restart.
#include "process_runner.h"
#include "protocol/checkpoint_discovery.h"
#include "protocol/run_dir.h"

using namespace shard::testing;

namespace {

constexpr int kSteps = 10;

std::string g_root;

// `extra`: train flags (a flag given again replaces its value); `launchFlags`: more of the
// launcher's, before the nproc default (which one given there replaces).
Process launch(const std::string& out, int maxRestarts, const std::string& hangTimeoutSec = "",
    const std::vector<std::string>& extra = {}, const std::vector<std::string>& launchFlags = {})
{
    std::vector<std::string> argv = {workerPath(), "launch"};
    argv.insert(argv.end(), launchFlags.begin(), launchFlags.end());
    if (std::find(launchFlags.begin(), launchFlags.end(), "--nproc-per-node") == launchFlags.end())
        argv.insert(argv.end(), {"--nproc-per-node", "2"});
    argv.insert(argv.end(), {"--grace-period", "2", "--max-restarts", std::to_string(maxRestarts)});
    if (!hangTimeoutSec.empty())
        argv.insert(argv.end(), {"--hang-timeout", hangTimeoutSec});
    argv.insert(argv.end(),
        {"--", "train", "--model", g_root + "/model", "--data", g_root + "/data.jsonl", "--out",
            out, "--steps", std::to_string(kSteps), "--micro-batch", "2", "--seq-len", "64", "--lr",
            "3e-3", "--seed", "3", "--threads", "1", "--strategy", "zero3", "--warmup", "2",
            "--checkpoint-every", "2", "--keep-checkpoints", "2"});
    for (size_t i = 0; i + 1 < extra.size(); i += 2) { // a flag given again replaces its value
        auto it = std::find(argv.begin(), argv.end(), extra[i]);
        if (it != argv.end())
            *(it + 1) = extra[i + 1];
        else
            argv.insert(argv.end(), {extra[i], extra[i + 1]});
    }
    return spawnProcess(argv);
}

// One node's launcher of a two-node run on loopback, one rank each, --max-restarts 2, sharing the
// run folder `dir` as the SSH and Slurm launchers' nodes do.
Process launchNode(const std::string& dir, const std::string& port, int nodeRank)
{
    return launch(dir, 2, "", {},
        {"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", std::to_string(nodeRank),
            "--master-addr", "127.0.0.1", "--master-port", port, "--rdzv-timeout", "60",
            "--run-dir", dir});
}

// The step of the last record in metrics.jsonl (0 when there is none).
int64_t lastStep(const std::string& dir)
{
    const std::string text = readFile(dir + "/metrics.jsonl");
    const auto end = text.rfind('\n');
    if (end == std::string::npos)
        return 0;
    const auto begin = text.rfind('\n', end - 1);
    const auto j = nlohmann::json::parse(
        text.substr(begin == std::string::npos ? 0 : begin + 1, end), nullptr, false);
    return j.is_object() ? j.value("step", int64_t(0)) : 0;
}

std::vector<nlohmann::json> eventsOfKind(const std::string& dir, const std::string& kind)
{
    std::vector<nlohmann::json> out;
    for (const auto& e : events(dir))
        if (e.value("kind", "") == kind)
            out.push_back(e);
    return out;
}

// Waits until the run's last metric record is for `step` or later (false when it ended first).
bool waitForLastStep(Process& p, const std::string& dir, int64_t step)
{
    const auto deadline = Clock::now() + std::chrono::seconds(180);
    while (lastStep(dir) < step)
        if (p.pump(2) || Clock::now() > deadline)
            return false;
    return true;
}

// The pid of rank 1 once the launcher has recorded one other than `previous`.
pid_t rank1Pid(const std::string& dir, pid_t previous)
{
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
        for (auto [rank, pid] : rankPids(dir, 1))
            if (rank == 1 && pid != previous)
                return pid;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
}

// Freezes rank 1 right after the record of `step` (SIGSTOP: rank 0 then waits for it in the
// next step's first collective), waits until no record comes for a second, and kills it. The
// failure's step is then the one after the last record, whatever the machine's load. Returns
// the last recorded step.
int64_t killRank1After(Process& p, const std::string& dir, int64_t step, pid_t rank1)
{
    if (!waitForLastStep(p, dir, step))
        return -1;
    shard::protocol::signalProcess(rank1, SIGSTOP);
    int64_t last = lastStep(dir);
    auto stableSince = Clock::now();
    while (since(stableSince) < 1.0) {
        p.pump(20);
        if (lastStep(dir) != last) {
            last = lastStep(dir);
            stableSince = Clock::now();
        }
    }
    shard::protocol::signalProcess(rank1, SIGKILL);
    return last;
}

void testKilledRankRestartsExactly(const std::map<int64_t, double>& reference)
{
    const std::string dir = makeTempDir("restart-once");
    auto p = launch(dir, 2);
    const pid_t first = rank1Pid(dir, -1);
    SHARD_EXPECT(first > 0, "rank 1 never started: " + p.err);
    // Step 5: after the checkpoint at step 4, before the last step.
    SHARD_EXPECT(waitForLastStep(p, dir, 5), "the run ended before step 5: " + p.err);
    shard::protocol::signalProcess(first, SIGKILL);
    SHARD_EXPECT(rank1Pid(dir, first) > 0, "rank 1 was not started again");
    SHARD_EXPECT(p.wait(240), "the launcher did not exit");
    SHARD_EXPECT(p.exitCode() == 0,
        "the restarted run failed (exit " + std::to_string(p.exitCode()) + "): " + p.err);

    const auto restarts = eventsOfKind(dir, "restart");
    SHARD_EXPECT(restarts.size() == 1,
        std::to_string(restarts.size()) + " restart events: " + readFile(dir + "/events.jsonl"));
    if (!restarts.empty()) {
        const auto& d = restarts.front()["data"];
        SHARD_EXPECT(d.value("cause", "") == "rank_failed", d.dump());
        SHARD_EXPECT(d.value("rank", -1) == 1 && d.value("signal", 0) == SIGKILL, d.dump());
        const int64_t ckpt = d.value("checkpoint_step", int64_t(-1));
        SHARD_EXPECT(ckpt >= 4 && ckpt % 2 == 0, "checkpoint step " + std::to_string(ckpt));
        SHARD_EXPECT(d.value("steps_lost", int64_t(-1)) >= 0, d.dump());
        SHARD_EXPECT(d.value("restart", 0) == 1 && d.value("max_restarts", 0) == 2, d.dump());
        SHARD_EXPECT(restarts.front()
                         .value("message", "")
                         .find("restarting every rank from the "
                               "checkpoint at step")
                != std::string::npos,
            restarts.front().dump());
    }
    // The surviving rank's lost connection is no error of the run's: the launcher's restart
    // event is the one record of the failure (issue 32, probe 7).
    SHARD_EXPECT(eventsOfKind(dir, "error").empty(),
        "error events in a run that restarted and finished: " + readFile(dir + "/events.jsonl"));
    const auto finishes = eventsOfKind(dir, "finish");
    SHARD_EXPECT(!finishes.empty() && finishes.back()["data"].value("reason", "") != "failed",
        "the run's last finish event is not a success: " + readFile(dir + "/events.jsonl"));

    // The losses after the restart are the uninterrupted run's, bit for bit.
    const auto losses = stepLosses(dir);
    SHARD_EXPECT(losses.size() == reference.size(),
        std::to_string(losses.size()) + " steps, not " + std::to_string(reference.size()));
    for (const auto& [s, loss] : reference) {
        auto it = losses.find(s);
        SHARD_EXPECT(it != losses.end() && it->second == loss,
            "step " + std::to_string(s) + " loss differs from the uninterrupted run");
    }
    std::printf("SIGKILL of rank 1 at step %lld: restarted once, finished, losses bit-exact\n",
        restarts.empty()
            ? -1LL
            : static_cast<long long>(restarts.front()["data"].value("failed_step", int64_t(-1))));
}

// A hung rank (SIGSTOP, never continued) is found by its silence after the hang timeout and the
// run restarts from its checkpoint like after a death, still bit-exact.
void testHungRankRestarts(const std::map<int64_t, double>& reference)
{
    const std::string dir = makeTempDir("restart-hang");
    auto p = launch(dir, 1, "3");
    const pid_t first = rank1Pid(dir, -1);
    SHARD_EXPECT(first > 0, "rank 1 never started: " + p.err);
    SHARD_EXPECT(waitForLastStep(p, dir, 5), "the run ended before step 5: " + p.err);
    shard::protocol::signalProcess(first, SIGSTOP);
    SHARD_EXPECT(rank1Pid(dir, first) > 0, "rank 1 was not started again");
    SHARD_EXPECT(p.wait(240), "the launcher did not exit");
    SHARD_EXPECT(p.exitCode() == 0,
        "the restarted run failed (exit " + std::to_string(p.exitCode()) + "): " + p.err);
    const auto restarts = eventsOfKind(dir, "restart");
    SHARD_EXPECT(restarts.size() == 1 && restarts.front()["data"].value("cause", "") == "rank_hung"
            && restarts.front()["data"].value("rank", -1) == 1,
        "no restart event for the hung rank 1: " + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(stepLosses(dir) == reference, "losses differ from the uninterrupted run");
    std::printf("SIGSTOP of rank 1: restarted after the hang timeout, finished, bit-exact\n");
}

void testRepeatedFailureStops()
{
    const std::string dir = makeTempDir("restart-repeat");
    auto p = launch(dir, 2);
    const pid_t first = rank1Pid(dir, -1);
    SHARD_EXPECT(first > 0, "rank 1 never started: " + p.err);
    // An odd step: the next one is a training step, not a checkpoint write.
    const int64_t at = killRank1After(p, dir, 5, first);
    SHARD_EXPECT(at > 0, "the run ended before step 5: " + p.err);
    // Nothing more is recorded until the ranks start again (rank 0 waits for the dead rank).
    const size_t recordedBytes = readFile(dir + "/metrics.jsonl").size();
    const pid_t second = rank1Pid(dir, first);
    SHARD_EXPECT(second > 0, "rank 1 was not started again: " + readFile(dir + "/events.jsonl"));
    // The restarted ranks redo the steps after the checkpoint; the same kill at the same step,
    // counted from the resumed run's first record.
    const auto restartedAt = Clock::now();
    while (readFile(dir + "/metrics.jsonl").size() == recordedBytes && since(restartedAt) < 180
        && !p.pump(2)) { }
    const int64_t again = killRank1After(p, dir, at, second);
    SHARD_EXPECT(again == at,
        "the second kill landed after step " + std::to_string(again) + ", not " + std::to_string(at)
            + " (a step faster than the test's polling)");
    SHARD_EXPECT(p.wait(120), "the launcher did not exit");
    SHARD_EXPECT(p.exitCode() == 128 + SIGKILL,
        "exit " + std::to_string(p.exitCode()) + " after the repeat: " + p.err);
    SHARD_EXPECT(eventsOfKind(dir, "restart").size() == 1,
        "a second restart: " + readFile(dir + "/events.jsonl"));
    bool named = false;
    for (const auto& e : eventsOfKind(dir, "error"))
        named = named
            || (e["data"].value("repeated", false)
                && e.value("message", "").find("repeated after a restart") != std::string::npos);
    SHARD_EXPECT(named, "no error event naming the repeat: " + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(p.err.find("repeated after a restart") != std::string::npos,
        "the launcher's stderr does not name the repeat: " + p.err);
    SHARD_EXPECT(noneRemain(dir, rankPids(dir, 1), 10), "processes of the run remain");
    std::printf("the same kill at step %lld after the restart: stopped, repeat named\n",
        static_cast<long long>(at + 1));
}

// Over two nodes (two launchers of one rank each on loopback, sharing the run folder as the SSH
// and Slurm launchers' nodes do): the rank of node 1 is SIGKILLed; node 1 reports it, node 0
// decides and writes the one restart event (naming node 1's rank, not node 0's rank that lost
// its peer), both nodes' ranks start again from the checkpoint, both launchers exit 0, and the
// losses equal the uninterrupted 2-rank run's bit for bit.
void testTwoNodesRestart(const std::map<int64_t, double>& reference)
{
    const std::string dir = makeTempDir("restart-nodes");
    const std::string port = std::to_string(freePort());
    auto node = [&](int rank) { return launchNode(dir, port, rank); };
    auto n1 = node(1);
    auto n0 = node(0);
    const auto node1Rank = [&](pid_t previous) {
        const auto deadline = Clock::now() + std::chrono::seconds(60);
        while (Clock::now() < deadline) {
            for (auto [rank, pid] : rankPids(dir, 1, "launcher-ranks-node1.pids"))
                if (rank == 1 && pid != previous)
                    return pid;
            n1.pump(20);
        }
        return pid_t(-1);
    };
    const pid_t first = node1Rank(-1);
    SHARD_EXPECT(first > 0, "node 1's rank never started: " + n1.err);
    SHARD_EXPECT(waitForLastStep(n0, dir, 5), "the run ended before step 5: " + n0.err);
    shard::protocol::signalProcess(first, SIGKILL);
    SHARD_EXPECT(node1Rank(first) > 0, "node 1's rank was not started again: " + n1.err);
    SHARD_EXPECT(n0.wait(240) && n1.wait(60), "the launchers did not exit");
    SHARD_EXPECT(n0.exitCode() == 0 && n1.exitCode() == 0,
        "the restarted two-node run failed (exit " + std::to_string(n0.exitCode()) + " and "
            + std::to_string(n1.exitCode()) + "): " + n0.err + n1.err);
    const auto restarts = eventsOfKind(dir, "restart");
    SHARD_EXPECT(restarts.size() == 1,
        std::to_string(restarts.size()) + " restart events: " + readFile(dir + "/events.jsonl"));
    if (!restarts.empty()) {
        const auto& d = restarts.front()["data"];
        SHARD_EXPECT(d.value("cause", "") == "rank_failed" && d.value("rank", -1) == 1
                && d.value("node", -1) == 1 && d.value("signal", 0) == SIGKILL,
            "the restart does not name node 1's killed rank: " + restarts.front().dump());
        SHARD_EXPECT(d.value("checkpoint_step", int64_t(-1)) >= 4, d.dump());
    }
    SHARD_EXPECT(eventsOfKind(dir, "error").empty(),
        "error events in a run that restarted and finished: " + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(stepLosses(dir) == reference,
        "losses of the restarted two-node run differ from the uninterrupted run");
    SHARD_EXPECT(n1.err.find("node 0 restarts the run (restart 1 of 2)") != std::string::npos,
        "node 1 does not say it followed node 0's restart: " + n1.err);
    std::printf("SIGKILL of node 1's rank: both nodes restarted once, finished, bit-exact\n");
}

// A node that cannot come back (its launcher SIGKILLed: its rank dies with it) ends the run
// with its name, restarts left or not, instead of node 0 restarting a world that lacks it.
void testLostNodeEndsRun()
{
    const std::string dir = makeTempDir("restart-lost-node");
    const std::string port = std::to_string(freePort());
    auto node = [&](int rank) { return launchNode(dir, port, rank); };
    auto n1 = node(1);
    auto n0 = node(0);
    SHARD_EXPECT(waitForLastStep(n0, dir, 3), "the run ended before step 3: " + n0.err);
    shard::protocol::signalProcess(n1.pid, SIGKILL);
    SHARD_EXPECT(n0.wait(120), "node 0 did not end the run after node 1 was lost: " + n0.err);
    SHARD_EXPECT(n0.exitCode() != 0, "node 0 exited 0 without node 1");
    SHARD_EXPECT(eventsOfKind(dir, "restart").empty(),
        "node 0 restarted without node 1: " + readFile(dir + "/events.jsonl"));
    const auto errors = eventsOfKind(dir, "error");
    SHARD_EXPECT(errors.size() == 1 && errors.front()["data"].value("reason", "") == "node_lost"
            && errors.front()["data"].value("node", -1) == 1
            && errors.front().value("message", "").find("lost the launcher of node 1")
                != std::string::npos
            && errors.front().value("message", "").find("not restarted") != std::string::npos,
        "the error does not name the lost node: " + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(noneRemain(dir, rankPids(dir, 1), 10)
            && noneRemain(dir, rankPids(dir, 1, "launcher-ranks-node1.pids"), 10),
        "processes of the run remain");
    std::printf("node 1's launcher SIGKILLed: the run ended, node 1 named, no restart\n");
}

// Preemption (SIGUSR1 to the launcher, what Slurm's --signal=USR1@N sends before a time
// limit): the ranks agree on a step and write a checkpoint there (also with --checkpoint-every
// 0), the launcher exits 75 with a "preempted" event and no error or finish; --resume auto
// continues from that checkpoint, bit-exact.
void testPreemptionSignalCheckpointsAndResumes(const std::map<int64_t, double>& reference)
{
    const std::string dir = makeTempDir("preempt");
    // No periodic checkpoints: the preemption's is the only one.
    auto p = launch(dir, 0, "", {"--checkpoint-every", "0"});
    SHARD_EXPECT(waitForLastStep(p, dir, 3), "the run ended before step 3: " + p.err);
    const std::string pid = readFile(dir + "/launcher.pid");
    shard::protocol::signalProcess(static_cast<pid_t>(std::stol(pid)), SIGUSR1);
    SHARD_EXPECT(p.wait(120), "the launcher did not exit after SIGUSR1");
    SHARD_EXPECT(p.exitCode() == shard::protocol::kPreemptedExitCode,
        "exit " + std::to_string(p.exitCode()) + " after SIGUSR1, not 75: " + p.err);
    const auto preempted = eventsOfKind(dir, "preempted");
    SHARD_EXPECT(preempted.size() == 1, readFile(dir + "/events.jsonl"));
    int64_t at = -1;
    if (!preempted.empty()) {
        at = preempted.front()["data"].value("checkpoint_step", int64_t(-1));
        SHARD_EXPECT(at >= 3 && at < kSteps, "preempted at step " + std::to_string(at));
        SHARD_EXPECT(shard::protocol::latestCompleteCheckpoint(dir)
                && shard::protocol::latestCompleteCheckpoint(dir)->step == at,
            "the newest complete checkpoint is not the preemption's (step " + std::to_string(at)
                + ")");
        SHARD_EXPECT(lastStep(dir) == at, "steps recorded after the preemption's checkpoint");
    }
    SHARD_EXPECT(eventsOfKind(dir, "error").empty() && eventsOfKind(dir, "finish").empty(),
        "a preempted run wrote an error or finish event: " + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(noneRemain(dir, rankPids(dir, 1), 10), "processes of the run remain");

    auto resumed = launch(dir, 0, "", {"--resume", "auto"});
    SHARD_EXPECT(resumed.wait(180) && resumed.exitCode() == 0,
        "the resume after the preemption failed: " + resumed.err);
    SHARD_EXPECT(stepLosses(dir) == reference,
        "losses after the preemption differ from the uninterrupted run");
    std::printf("SIGUSR1 to the launcher: checkpoint at step %lld, exit 75, resumed bit-exact\n",
        static_cast<long long>(at));
}

// SIGUSR1 at once, while the ranks are still starting (they ignore it until `train` has set
// its handler): the launcher sends it again until they take it, and the run still stops at a
// checkpoint with 75 instead of training to its end.
void testPreemptionWhileStarting()
{
    const std::string dir = makeTempDir("preempt-early");
    auto p = launch(dir, 0, "", {"--steps", "100000", "--checkpoint-every", "0"});
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    std::string pid;
    while ((pid = readFile(dir + "/launcher.pid")).empty() && Clock::now() < deadline)
        p.pump(5);
    SHARD_EXPECT(!pid.empty(), "no launcher.pid: " + p.err);
    if (pid.empty())
        return;
    shard::protocol::signalProcess(static_cast<pid_t>(std::stol(pid)), SIGUSR1);
    SHARD_EXPECT(p.wait(120), "the launcher did not exit after an early SIGUSR1: " + p.err);
    SHARD_EXPECT(p.exitCode() == shard::protocol::kPreemptedExitCode,
        "exit " + std::to_string(p.exitCode()) + " after an early SIGUSR1, not 75: " + p.err);
    SHARD_EXPECT(eventsOfKind(dir, "preempted").size() == 1, readFile(dir + "/events.jsonl"));
    std::printf("SIGUSR1 while the ranks start: forwarded until taken, stopped at step %lld\n",
        static_cast<long long>(lastStep(dir)));
}

} // namespace

int main()
{
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    g_root = makeTempDir("restart");
    if (!makeTinyRunInputs(g_root))
        return 1;
    const std::string refDir = g_root + "/reference";
    auto ref = launch(refDir, 0);
    if (!ref.wait(180) || ref.exitCode() != 0) {
        std::fprintf(stderr, "the uninterrupted run failed: %s\n", ref.err.c_str());
        return 1;
    }
    const auto reference = stepLosses(refDir);
    SHARD_EXPECT(reference.size() == kSteps, "reference has every step");
    testKilledRankRestartsExactly(reference);
    testHungRankRestarts(reference);
    testRepeatedFailureStops();
    testTwoNodesRestart(reference);
    testLostNodeEndsRun();
    testPreemptionSignalCheckpointsAndResumes(reference);
    testPreemptionWhileStarting();
    if (g_failures == 0) {
        std::printf("tst_restart: all passed\n");
        removeTempDirs();
    }
    return g_failures ? 1 : 0;
}
