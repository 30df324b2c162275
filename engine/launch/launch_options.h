// What `shard-worker launch` needs to start the ranks of one node, resolved from flags and
// (under Slurm) the environment.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "protocol/launch_args.h"

namespace shard::launch {

// The flags as the user gave them (the one `launch` command line, protocol::LaunchArgs); unset
// fields are filled from Slurm or defaults.
using LaunchRequest = protocol::LaunchArgs;

struct LaunchOptions {
    int nprocPerNode = 1;
    int nnodes = 1;
    int nodeRank = 0;
    std::string masterAddr = "127.0.0.1";
    int masterPort = 0; // 0: pick a free port (single node only)
    std::string runDir;
    double rdzvTimeoutSec = 60.0;
    double gracePeriodSec = 5.0;
    std::vector<std::string> workerArgs;
    // < 0: not given; the ranks then use SHARD_HANG_TIMEOUT_S / SHARD_COLLECTIVE_TIMEOUT_S or
    // the run spec. Given, they are passed to the ranks through those variables.
    double hangTimeoutSec = -1.0;
    double collectiveTimeoutSec = -1.0;
    // Restarts in place (one node): up to this many, each from the latest complete checkpoint.
    int maxRestarts = 0;

    // The ranks run on the CPU (no visible GPU, or the worker says --device cpu).
    bool cpuRanks = false;

    int worldSize() const { return nprocPerNode * nnodes; }
    int globalRank(int localRank) const { return nodeRank * nprocPerNode + localRank; }
};

using Environment = std::map<std::string, std::string>;

// The current process environment as a map.
Environment currentEnvironment();

// Flags win; the ranks per node default to the worker's --nproc-per-node, else to the visible
// GPU count on a GPU node (one rank per GPU) unless the worker says --device cpu, else 1. Under
// Slurm (SLURM_JOB_ID set) missing --nnodes/--node-rank/--master-addr/
// --master-port come from SLURM_NNODES, SLURM_NODEID, the first host of SLURM_JOB_NODELIST and
// a port derived from SLURM_JOB_ID. The run directory defaults to the worker's `--out DIR`.
// Throws std::invalid_argument with a one-line message naming the bad value and the fix.
LaunchOptions resolveLaunchOptions(const LaunchRequest& request, const Environment& env);

// Host memory a CPU rank takes besides its model and data: a process with its own LibTorch
// runtime and Gloo context (LibTorch 1.13: a tiny-1m rank holds ~197 MiB resident, ~16 MiB of it
// tensors; 64 such ranks reached the 11 GB the fault probe saw).
inline constexpr int64_t kCpuRankBaseBytes = int64_t(180) << 20;
// CPU ranks per core past which a node is refused (they would share the cores and memory).
inline constexpr int kMaxCpuRanksPerCore = 4;

// A CPU node's rank count against its cores and available memory: refused with a one-line
// std::invalid_argument naming the figures and the largest count that fits (64 ranks on 2 cores
// used to start and grow to 11 GB without finishing a step).
void checkCpuRanks(int nprocPerNode, int cores, int64_t availableBytes);

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
int64_t availableHostBytes();

// The NVIDIA GPUs this process may use, without CUDA: the entries of CUDA_VISIBLE_DEVICES when
// it is set (up to the first invalid one, as the CUDA runtime reads it; "" or "-1" = none), else
// the GPUs the driver lists under `driverGpus` (/proc/driver/nvidia/gpus, one folder each).
int visibleGpuCount(
    const Environment& env, const std::string& driverGpus = "/proc/driver/nvidia/gpus");

// First host name of a Slurm node list such as "gpu[003-005,7],login1" -> "gpu003".
std::string firstSlurmHost(const std::string& nodeList);

} // namespace shard::launch
