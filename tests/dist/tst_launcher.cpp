// `shard-worker launch` with real ranks: a rank killed with SIGKILL mid-collective, a rank
// exiting with an error, the launcher stopped by SIGTERM or killed outright, a busy port, a
// node or a rank that never joins, and a two-node run on loopback. After each, no process of
// the run may remain (checked by the pids the launcher recorded, their process groups, and a
// scan of /proc for the run directory in a process's environment).
#include <arpa/inet.h>
#include <dirent.h>
#include <fstream>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <thread>

#include <nlohmann/json.hpp>

#include "process_runner.h"
#include "protocol/process_signal.h"
#include "run_outputs.h"

using namespace shard::testing;

namespace {

Process startLoop(const std::string& dir, int nproc, std::vector<std::string> extra = {})
{
    std::vector<std::string> argv = {workerPath(), "launch", "--nproc-per-node",
        std::to_string(nproc), "--run-dir", dir, "--grace-period", "3"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const char* a : {"--", "dist-selftest", "--mode", "loop"})
        argv.push_back(a);
    return spawnProcess(argv);
}

void testRankKilled()
{
    const std::string dir = makeTempDir("kill");
    auto launcher = startLoop(dir, 3);
    SHARD_EXPECT(launcher.waitForOutput("\"looping\"", 60), "ranks never started: " + launcher.err);
    auto pids = rankPids(dir);
    SHARD_EXPECT(pids.size() == 3, "three rank pids recorded");
    std::this_thread::sleep_for(std::chrono::milliseconds(500)); // mid-collective
    const auto killedAt = Clock::now();
    shard::protocol::signalProcess(pids.at(1).second, SIGKILL);
    SHARD_EXPECT(launcher.wait(30), "launcher did not exit");
    const double took = since(killedAt);
    SHARD_EXPECT(took < 10.0, "launcher took " + std::to_string(took) + " s");
    SHARD_EXPECT(launcher.exitCode() != 0, "launcher exit code must be non-zero");
    SHARD_EXPECT(launcher.exitCode() == 128 + SIGKILL,
        "exit 137 for SIGKILL, got " + std::to_string(launcher.exitCode()));
    SHARD_EXPECT(noneRemain(dir, pids, 10.0 - took), "processes of the run remain");
    auto ev = events(dir);
    bool named = false, finish = false;
    for (const auto& e : ev) {
        if (e.value("kind", "") == "error" && e["data"].value("rank", -1) == 1
            && e["data"].value("signal", 0) == SIGKILL
            && e.value("message", "").find("SIGKILL") != std::string::npos)
            named = true;
        if (e.value("kind", "") == "finish" && e["data"].value("reason", "") == "failed")
            finish = true;
    }
    SHARD_EXPECT(named, "error event names rank 1 and SIGKILL: " + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(finish, "finish event with reason failed");
    SHARD_EXPECT(readFile(dir + "/logs/rank-2.log").find("[launch]") == std::string::npos,
        "rank logs are separate from the launcher's");
    SHARD_EXPECT(!readFile(dir + "/launcher.pid").empty(), "launcher.pid written");
    std::printf("SIGKILL of rank 1: launcher exited %d after %.2f s\n", launcher.exitCode(), took);
}

void testRankExitCode()
{
    const std::string dir = makeTempDir("exit");
    auto p = spawnProcess({workerPath(), "launch", "--nproc-per-node", "2", "--run-dir", dir, "--",
        "dist-selftest", "--mode", "exit", "--exit-rank", "1", "--exit-code", "7"});
    SHARD_EXPECT(p.wait(60), "launcher did not exit");
    SHARD_EXPECT(
        p.exitCode() == 7, "launcher returns the rank's code, got " + std::to_string(p.exitCode()));
    bool named = false;
    for (const auto& e : events(dir))
        named = named
            || (e.value("kind", "") == "error" && e["data"].value("rank", -1) == 1
                && e["data"].value("exit_code", -1) == 7);
    SHARD_EXPECT(named, "error event names rank 1 and exit code 7");
    SHARD_EXPECT(p.err.find("rank 1") != std::string::npos, "stderr names rank 1: " + p.err);
    SHARD_EXPECT(noneRemain(dir, rankPids(dir), 5), "processes remain");
}

// A refusal every rank shares (a bad train flag, read before any set-up): the launcher's error
// says what was refused, not only "rank 1 exited with code 1; see rank-1.log" (issue 32).
void testSharedRefusal()
{
    const std::string dir = makeTempDir("refusal");
    auto p = spawnProcess({workerPath(), "launch", "--nproc-per-node", "2", "--run-dir", dir, "--",
        "train", "--model", dir + "/no-model", "--data", dir + "/no-data.jsonl", "--out", dir,
        "--steps", "2", "--micro-batch", "nan"});
    SHARD_EXPECT(p.wait(60), "launcher did not exit");
    SHARD_EXPECT(p.exitCode() == 1, "exit " + std::to_string(p.exitCode()));
    const std::string reason = "--micro-batch: 'nan' is not an integer";
    bool named = false;
    for (const auto& e : events(dir))
        named = named
            || (e.value("kind", "") == "error"
                && e.value("message", "").find(reason) != std::string::npos
                && e["data"].value("rank_error", "").find(reason) != std::string::npos);
    SHARD_EXPECT(named, "the error event names the refusal: " + readFile(dir + "/events.jsonl"));
    SHARD_EXPECT(p.err.find(reason) != std::string::npos, "stderr names the refusal: " + p.err);
}

void testLauncherSignalled(int sig)
{
    const std::string dir = makeTempDir(sig == SIGKILL ? "lkill" : "lterm");
    auto launcher = startLoop(dir, 2);
    SHARD_EXPECT(launcher.waitForOutput("\"looping\"", 60), "ranks never started");
    auto pids = rankPids(dir);
    const auto at = Clock::now();
    shard::protocol::signalProcess(launcher.pid, sig);
    SHARD_EXPECT(launcher.wait(30), "launcher did not exit");
    if (sig == SIGTERM) {
        SHARD_EXPECT(launcher.exitCode() == 128 + SIGTERM, "exit 143 after SIGTERM");
        bool stopped = false;
        for (const auto& e : events(dir))
            stopped = stopped
                || (e.value("kind", "") == "finish" && e["data"].value("reason", "") == "stopped"
                    && e["data"].value("signal", 0) == SIGTERM);
        SHARD_EXPECT(stopped, "finish event: stopped by SIGTERM");
    }
    // With SIGKILL nothing runs in the launcher: PR_SET_PDEATHSIG takes the ranks down.
    SHARD_EXPECT(noneRemain(dir, pids, 10),
        std::string("processes remain after ") + (sig == SIGKILL ? "SIGKILL" : "SIGTERM")
            + " to the launcher");
    std::printf("%s to the launcher: run gone after %.2f s\n",
        sig == SIGKILL ? "SIGKILL" : "SIGTERM", since(at));
}

void testBusyPort()
{
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd, 1);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    const int port = ntohs(addr.sin_port);
    const std::string dir = makeTempDir("busy");
    const auto at = Clock::now();
    auto p = spawnProcess({workerPath(), "launch", "--nproc-per-node", "2", "--master-port",
        std::to_string(port), "--run-dir", dir, "--", "dist-selftest"});
    SHARD_EXPECT(p.wait(20), "busy port: launcher hung");
    SHARD_EXPECT(p.exitCode() == 1, "busy port: exit 1");
    SHARD_EXPECT(
        p.err.find("port " + std::to_string(port) + " on 127.0.0.1 is in use") != std::string::npos,
        "busy port message: " + p.err);
    SHARD_EXPECT(since(at) < 5, "busy port reported at once");
    SHARD_EXPECT(readFile(dir + "/events.jsonl").find("launch_failed") != std::string::npos,
        "error event for a launch that failed to start");
    ::close(fd);
    // Two-node rendezvous on a busy port fails the same way.
    int fd2 = ::socket(AF_INET, SOCK_STREAM, 0);
    ::bind(fd2, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd2, 1);
    auto q = spawnProcess(
        {workerPath(), "launch", "--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "0",
            "--master-port", std::to_string(port), "--run-dir", dir, "--", "dist-selftest"});
    SHARD_EXPECT(q.wait(20) && q.exitCode() == 1 && q.err.find("is in use") != std::string::npos,
        "busy rendezvous port: " + q.err);
    ::close(fd2);
}

void testNodeNeverJoins()
{
    const std::string dir = makeTempDir("nojoin");
    const int port = freePort();
    const auto at = Clock::now();
    auto p = spawnProcess({workerPath(), "launch", "--nproc-per-node", "1", "--nnodes", "3",
        "--node-rank", "0", "--master-port", std::to_string(port), "--rdzv-timeout", "2",
        "--run-dir", dir, "--", "dist-selftest"});
    SHARD_EXPECT(p.wait(20), "rendezvous did not time out");
    const double took = since(at);
    SHARD_EXPECT(p.exitCode() == 1, "exit 1");
    SHARD_EXPECT(p.err.find("node(s) 1, 2 of 3 never joined") != std::string::npos,
        "names the missing nodes: " + p.err);
    SHARD_EXPECT(took >= 1.9 && took < 8, "timed out after ~2 s, took " + std::to_string(took));

    // A non-zero node whose master never appears.
    auto q = spawnProcess({workerPath(), "launch", "--nproc-per-node", "1", "--nnodes", "2",
        "--node-rank", "1", "--master-port", std::to_string(port), "--rdzv-timeout", "1.5",
        "--run-dir", dir, "--", "dist-selftest"});
    SHARD_EXPECT(
        q.wait(20) && q.exitCode() == 1 && q.err.find("node 0 never answered") != std::string::npos,
        "node 1 without master: " + q.err);

    // A rank that never meets the others (started by hand, world size 2): the store times out.
    const auto at2 = Clock::now();
    auto r = spawnProcess({workerPath(), "dist-selftest"},
        {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
            "SHARD_RDZV_TIMEOUT_S=2"});
    SHARD_EXPECT(r.wait(30), "rank rendezvous hung");
    SHARD_EXPECT(r.exitCode() == 1 && r.err.find("rendezvous on 127.0.0.1:") != std::string::npos,
        "rank rendezvous timeout message: " + r.err);
    SHARD_EXPECT(since(at2) < 15, "rank rendezvous bounded, took " + std::to_string(since(at2)));
}

void testTwoNodes()
{
    const std::string dir0 = makeTempDir("node0");
    const std::string dir1 = makeTempDir("node1");
    const std::string port = std::to_string(freePort());
    auto common = [&](int node, const std::string& dir, std::vector<std::string> worker) {
        std::vector<std::string> argv
            = {workerPath(), "launch", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank",
                std::to_string(node), "--master-addr", "127.0.0.1", "--master-port", port,
                "--rdzv-timeout", "30", "--grace-period", "2", "--run-dir", dir, "--"};
        argv.insert(argv.end(), worker.begin(), worker.end());
        return spawnProcess(argv);
    };
    // Node 1 first: it must wait for node 0.
    auto n1 = common(1, dir1, {"dist-selftest"});
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto n0 = common(0, dir0, {"dist-selftest"});
    SHARD_EXPECT(n0.wait(120) && n1.wait(120), "two-node run hung");
    SHARD_EXPECT(
        n0.exitCode() == 0 && n1.exitCode() == 0, "two-node run exits 0: " + n0.err + n1.err);
    SHARD_EXPECT(n0.out.find("\"world_size\":4") != std::string::npos, "world of 4: " + n0.out);
    SHARD_EXPECT(n1.out.empty(), "only global rank 0's records are forwarded");
    SHARD_EXPECT(readFile(dir1 + "/logs/rank-3.log").find("\"rank\":3") != std::string::npos,
        "node 1 logs global ranks 2..3");

    // A rank on node 1 fails: both launchers stop and exit non-zero.
    const std::string port2 = std::to_string(freePort());
    const std::string dir2 = makeTempDir("node0b");
    const std::string dir3 = makeTempDir("node1b");
    auto start = [&](int node, const std::string& dir) {
        return spawnProcess({workerPath(), "launch", "--nproc-per-node", "2", "--nnodes", "2",
            "--node-rank", std::to_string(node), "--master-port", port2, "--grace-period", "2",
            "--run-dir", dir, "--", "dist-selftest", "--mode", "exit", "--exit-rank", "3",
            "--exit-code", "5"});
    };
    auto a = start(0, dir2);
    auto b = start(1, dir3);
    SHARD_EXPECT(a.wait(60) && b.wait(60), "launchers did not stop after a remote failure");
    SHARD_EXPECT(b.exitCode() == 5, "node 1 exits with its rank's code");
    SHARD_EXPECT(a.exitCode() != 0, "node 0 exits non-zero");
    // Node 0's error names the rank that failed on node 1 (from node 1's ABORT), not only the node.
    SHARD_EXPECT(readFile(dir2 + "/events.jsonl").find("node 1: rank 3 (pid") != std::string::npos,
        "node 0 records that node 1's rank 3 failed: " + readFile(dir2 + "/events.jsonl"));
    SHARD_EXPECT(noneRemain(dir2, rankPids(dir2), 5)
            && noneRemain(dir3, rankPids(dir3, 10, "launcher-ranks-node1.pids"), 5),
        "processes remain after a remote failure");
}

// Ranks started one process each by srun (SLURM_PROCID..., no RANK): the trainer and its process
// groups read the same identity, so rank 1 does not take itself for rank 0 (one metric record
// per step, not two; an epoch of 64 records in steps of 2 x 2 ranks, not of 2 x 1), and the
// losses equal a `shard-worker launch` run's of the same world size.
void testRanksFromSrun()
{
    const std::string root = makeTempDir("srun");
    if (!makeTinyRunInputs(root)) {
        SHARD_EXPECT(false, "srun: no inputs");
        return;
    }
    auto trainArgs = [&](const std::string& out) {
        return std::vector<std::string> {"train", "--model", root + "/model", "--data",
            root + "/data.jsonl", "--out", out, "--epochs", "1", "--micro-batch", "2", "--seq-len",
            "64", "--lr", "1e-3", "--strategy", "zero3", "--threads", "1"};
    };
    const std::string ref = root + "/launch";
    trainWithWorker("launch reference", 2, trainArgs(ref), ref, 240);
    const std::string out = root + "/srun";
    const std::string port = std::to_string(freePort());
    std::vector<Process> ranks;
    for (int r = 0; r < 2; ++r) {
        std::vector<std::string> argv = {workerPath()};
        const auto args = trainArgs(out);
        argv.insert(argv.end(), args.begin(), args.end());
        ranks.push_back(spawnProcess(argv,
            {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "NODE_RANK=",
                "SLURM_PROCID=" + std::to_string(r), "SLURM_NTASKS=2",
                "SLURM_LOCALID=" + std::to_string(r), "SLURM_NODEID=0", "SLURM_NNODES=1",
                "SLURM_NTASKS_PER_NODE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port}));
    }
    for (int r = 0; r < 2; ++r)
        SHARD_EXPECT(ranks[r].wait(240) && ranks[r].exitCode() == 0,
            "srun rank " + std::to_string(r) + " exits 0: " + ranks[r].err);
    int records = 0;
    std::istringstream lines(readFile(out + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);)
        records += line.find("\"type\":\"metric\"") != std::string::npos;
    SHARD_EXPECT(records == 16,
        "16 steps, one metric record each from rank 0 alone, got " + std::to_string(records) + ":\n"
            + readFile(out + "/metrics.jsonl"));
    const auto a = stepLosses(ref), b = stepLosses(out);
    SHARD_EXPECT(a.size() == 16 && a == b, "srun ranks train as launched ranks do");
    const auto spec = nlohmann::json::parse(readFile(out + "/run.json"), nullptr, false);
    SHARD_EXPECT(!spec.is_discarded() && spec.value("procs_per_node", 0) == 2,
        "run.json records srun's 2 ranks: " + readFile(out + "/run.json").substr(0, 400));
}

} // namespace

int main()
{
    testRankKilled();
    testRankExitCode();
    testSharedRefusal();
    testLauncherSignalled(SIGTERM);
    testLauncherSignalled(SIGKILL);
    testBusyPort();
    testNodeNeverJoins();
    testTwoNodes();
    testRanksFromSrun();
    if (g_failures == 0) {
        std::printf("tst_launcher: all passed\n");
        removeTempDirs();
    }
    return g_failures == 0 ? 0 : 1;
}
