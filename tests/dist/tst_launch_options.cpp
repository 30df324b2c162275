// Resolution of the launcher's options: flags, Slurm's environment, and every bad input.
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "launch/launch_options.h"

using namespace shard::launch;

namespace {

int failures = 0;

void expect(bool ok, const std::string& what)
{
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

void expectThrows(const LaunchRequest& r, const Environment& env, const std::string& needle)
{
    try {
        resolveLaunchOptions(r, env);
        expect(false, "expected an error containing '" + needle + "'");
    } catch (const std::invalid_argument& e) {
        expect(std::string(e.what()).find(needle) != std::string::npos,
            "error '" + std::string(e.what()) + "' should contain '" + needle + "'");
    }
}

LaunchRequest basic()
{
    LaunchRequest r;
    r.nprocPerNode = 2;
    r.workerArgs = {"train", "--out", "/tmp/run1"};
    return r;
}

} // namespace

int main()
{
    // Defaults: one node on loopback, free port, run dir from the worker's --out.
    {
        auto o = resolveLaunchOptions(basic(), {});
        expect(o.nnodes == 1 && o.nodeRank == 0 && o.nprocPerNode == 2, "single-node defaults");
        expect(o.masterAddr == "127.0.0.1" && o.masterPort == 0, "loopback, free port");
        expect(o.runDir == "/tmp/run1", "run dir from --out");
        expect(o.worldSize() == 2 && o.globalRank(1) == 1, "world size and ranks");
    }
    {
        auto r = basic();
        r.workerArgs = {"train", "--out=/tmp/run2"};
        expect(resolveLaunchOptions(r, {}).runDir == "/tmp/run2", "run dir from --out=");
        r.runDir = "/tmp/explicit";
        expect(resolveLaunchOptions(r, {}).runDir == "/tmp/explicit", "--run-dir wins");
    }
    // Restarts in place: the launch flag, or the train flag (shard run -- ... --max-restarts N);
    // never negative.
    {
        auto r = basic();
        expect(resolveLaunchOptions(r, {}).maxRestarts == 0, "no restarts by default");
        r.maxRestarts = 3;
        expect(resolveLaunchOptions(r, {}).maxRestarts == 3, "--max-restarts 3");
        r.maxRestarts.reset();
        r.workerArgs = {"train", "--out", "/tmp/run1", "--max-restarts", "2"};
        expect(resolveLaunchOptions(r, {}).maxRestarts == 2, "the train flag --max-restarts 2");
        r.maxRestarts = -1;
        expectThrows(r, {}, "--max-restarts must be 0 (off) or a positive count");
        // Over several nodes too: node 0 decides and every node's ranks start again.
        r.maxRestarts = 1;
        r.nnodes = 2;
        r.masterPort = 29500;
        expect(resolveLaunchOptions(r, {}).maxRestarts == 1, "--max-restarts over two nodes");
    }
    // CPU ranks against the node's cores and memory (issue 32: 64 ranks on 2 cores started and
    // grew to 11 GB without a step).
    {
        auto refused = [](int nproc, int cores, int64_t bytes, const std::string& needle) {
            try {
                checkCpuRanks(nproc, cores, bytes);
                expect(false, std::to_string(nproc) + " CPU ranks accepted");
            } catch (const std::invalid_argument& e) {
                expect(std::string(e.what()).find(needle) != std::string::npos,
                    "error '" + std::string(e.what()) + "' should contain '" + needle + "'");
            }
        };
        const int64_t gib = int64_t(1) << 30;
        refused(64, 2, 16 * gib, "use --nproc-per-node 8 or less");
        refused(64, 2, 16 * gib, "11520 MiB of host memory");
        refused(8, 2, gib, "use --nproc-per-node 5 or less");
        checkCpuRanks(8, 2, 16 * gib);
        checkCpuRanks(4, 2, 0); // memory unknown: the cores decide
        checkCpuRanks(1, 1, 1); // one rank is always allowed
        auto r = basic();
        r.workerArgs = {"train", "--out", "/tmp/run1", "--device", "cpu"};
        expect(resolveLaunchOptions(r, {}).cpuRanks, "--device cpu: CPU ranks");
    }
    // No rank count given: one rank per visible GPU on a GPU node, else 1.
    {
        const std::string gpus = "/tmp/tst_launch_options_gpus." + std::to_string(::getpid());
        std::filesystem::remove_all(gpus);
        for (const char* id : {"0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"})
            std::filesystem::create_directories(gpus + "/" + id);
        expect(visibleGpuCount({}, gpus) == 3, "three GPUs listed by the driver");
        expect(visibleGpuCount({{"CUDA_VISIBLE_DEVICES", "2,0"}}, gpus) == 2,
            "CUDA_VISIBLE_DEVICES wins over the driver's list");
        expect(visibleGpuCount({{"CUDA_VISIBLE_DEVICES", ""}}, gpus) == 0, "empty: no GPU");
        expect(visibleGpuCount({{"CUDA_VISIBLE_DEVICES", "1,-1,0"}}, gpus) == 1,
            "the runtime stops at the first invalid entry");
        expect(visibleGpuCount({{"CUDA_VISIBLE_DEVICES", "GPU-8e0c,MIG-1a2b"}}, gpus) == 2,
            "UUIDs count");
        expect(visibleGpuCount({}, gpus + "/missing") == 0, "no driver: no GPU");
        std::filesystem::remove_all(gpus);
        LaunchRequest r;
        r.workerArgs = {"train", "--out", "/tmp/run1"};
        expect(resolveLaunchOptions(r, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}}).nprocPerNode == 4,
            "one rank per visible GPU");
        expect(resolveLaunchOptions(r, {{"CUDA_VISIBLE_DEVICES", "-1"}}).nprocPerNode == 1,
            "no visible GPU: one rank");
        r.workerArgs = {"train", "--device", "cpu", "--out", "/tmp/run1"};
        expect(resolveLaunchOptions(r, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}}).nprocPerNode == 1,
            "a CPU run keeps one rank");
        r.workerArgs = {"train", "--nproc-per-node", "2", "--out", "/tmp/run1"};
        expect(resolveLaunchOptions(r, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}}).nprocPerNode == 2,
            "the worker's count wins");
    }
    // Multi-node global ranks.
    {
        auto r = basic();
        r.nnodes = 3;
        r.nodeRank = 2;
        r.masterPort = 29500;
        r.masterAddr = "10.0.0.1";
        auto o = resolveLaunchOptions(r, {});
        expect(o.worldSize() == 6 && o.globalRank(0) == 4 && o.globalRank(1) == 5,
            "node 2 of 3 owns ranks 4 and 5");
    }
    // Slurm: one launcher per node.
    {
        Environment env = {{"SLURM_JOB_ID", "123456"}, {"SLURM_NNODES", "4"}, {"SLURM_NODEID", "3"},
            {"SLURM_JOB_NODELIST", "gpu[007-010],login1"}};
        auto o = resolveLaunchOptions(basic(), env);
        expect(o.nnodes == 4 && o.nodeRank == 3, "nodes and node rank from Slurm");
        expect(o.masterAddr == "gpu007", "master is the first node, got " + o.masterAddr);
        expect(o.masterPort == 20000 + 123456 % 20000, "port derived from the job id");
        auto r = basic();
        r.masterPort = 31000;
        r.nodeRank = 1;
        auto o2 = resolveLaunchOptions(r, env);
        expect(o2.masterPort == 31000 && o2.nodeRank == 1, "flags win over Slurm");
        Environment single = {{"SLURM_JOB_ID", "9"}, {"SLURM_NNODES", "1"}};
        expect(resolveLaunchOptions(basic(), single).masterPort == 0,
            "one Slurm node keeps the free-port default");
    }
    expect(firstSlurmHost("node1") == "node1", "plain host");
    expect(firstSlurmHost("a,b") == "a", "list");
    expect(firstSlurmHost("pre[001-004]-ib") == "pre001-ib", "range with suffix");
    expect(firstSlurmHost("x[5,7-9],y[1-2]") == "x5", "bracket list");

    // Bad input: one clear message each.
    {
        auto r = basic();
        r.workerArgs.clear();
        expectThrows(r, {}, "no worker command");
        r = basic();
        r.workerArgs = {"train"};
        expectThrows(r, {}, "no run directory");
        r = basic();
        r.nprocPerNode = 0;
        expectThrows(r, {}, "--nproc-per-node");
        r = basic();
        r.nnodes = 2;
        r.nodeRank = 2;
        r.masterPort = 29500;
        expectThrows(r, {}, "--node-rank 2 is outside 0..1");
        r = basic();
        r.nnodes = 2;
        expectThrows(r, {}, "works on one node only");
        r = basic();
        r.masterPort = 70000;
        expectThrows(r, {}, "--master-port must be 0..65535");
        r = basic();
        r.rdzvTimeoutSec = 0;
        expectThrows(r, {}, "--rdzv-timeout");
        r = basic();
        r.workerArgs = {"launch", "--out", "x"};
        expectThrows(r, {}, "cannot be 'launch'");
        r = basic();
        r.hangTimeoutSec = -1;
        expectThrows(r, {}, "--hang-timeout must be zero (off) or positive");
        r = basic();
        r.collectiveTimeoutSec = 0;
        expectThrows(r, {}, "--collective-timeout must be positive");
        r = basic();
        r.hangTimeoutSec = 0; // off: passed on to the ranks as given
        expect(resolveLaunchOptions(r, {}).hangTimeoutSec == 0, "--hang-timeout 0 kept");
        expect(resolveLaunchOptions(basic(), {}).hangTimeoutSec < 0, "no --hang-timeout: unset");
        Environment badSlurm = {{"SLURM_JOB_ID", "1"}, {"SLURM_NNODES", "two"}};
        expectThrows(basic(), badSlurm, "SLURM_NNODES");
    }
    // The worker's own --nproc-per-node sets the rank count when launch's is not given (it
    // used to start 1 rank); two different counts are refused.
    {
        LaunchRequest r;
        r.workerArgs = {"train", "--out", "/tmp/run1", "--nproc-per-node", "3"};
        expect(resolveLaunchOptions(r, {}).nprocPerNode == 3, "ranks from the worker's flag");
        r.workerArgs = {"train", "--out", "/tmp/run1", "--nproc-per-node=4"};
        expect(resolveLaunchOptions(r, {}).nprocPerNode == 4, "ranks from --nproc-per-node=");
        r.nprocPerNode = 4;
        expect(resolveLaunchOptions(r, {}).nprocPerNode == 4, "the same count twice is fine");
        r.nprocPerNode = 2;
        expectThrows(r, {}, "--nproc-per-node 2 but the worker command says --nproc-per-node 4");
        r.workerArgs = {"train", "--out", "/tmp/run1", "--nproc-per-node", "two"};
        r.nprocPerNode.reset();
        expectThrows(r, {}, "'two' is not an integer");
    }
    if (failures == 0)
        std::printf("tst_launch_options: all passed\n");
    return failures == 0 ? 0 : 1;
}
