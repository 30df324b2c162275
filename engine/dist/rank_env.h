// Who this process is in the run: from the launcher's environment (RANK, WORLD_SIZE, ...),
// from Slurm when srun starts one process per rank, or a single process.
#pragma once

#include <map>
#include <string>

namespace shard::dist {

struct RankEnv {
    int rank = 0;
    int worldSize = 1;
    int localRank = 0;
    int localWorldSize = 1;
    int nodeRank = 0;
    std::string masterAddr = "127.0.0.1";
    int masterPort = 0;
    double rdzvTimeoutSec = 60.0;       // SHARD_RDZV_TIMEOUT_S
    double collectiveTimeoutSec = 1800; // SHARD_COLLECTIVE_TIMEOUT_S
    std::string source = "single";      // "launcher", "slurm" or "single"

    // RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/NODE_RANK/MASTER_ADDR/MASTER_PORT when RANK
    // is set; otherwise SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/SLURM_NODEID (with MASTER_ADDR
    // and MASTER_PORT from the environment) under srun; otherwise rank 0 of 1. Throws
    // std::runtime_error naming the variable that is missing or out of range.
    static RankEnv fromEnvironment(const std::map<std::string, std::string>& env);
    static RankEnv fromEnvironment();
};

} // namespace shard::dist
