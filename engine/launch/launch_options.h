// What `shard-worker launch` needs to start the ranks of one node, resolved from flags and
// (under Slurm) the environment.
#pragma once

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

// The NVIDIA GPUs this process may use, without CUDA: the entries of CUDA_VISIBLE_DEVICES when
// it is set (up to the first invalid one, as the CUDA runtime reads it; "" or "-1" = none), else
// the GPUs the driver lists under `driverGpus` (/proc/driver/nvidia/gpus, one folder each).
int visibleGpuCount(
    const Environment& env, const std::string& driverGpus = "/proc/driver/nvidia/gpus");

// First host name of a Slurm node list such as "gpu[003-005,7],login1" -> "gpu003".
std::string firstSlurmHost(const std::string& nodeList);

} // namespace shard::launch
