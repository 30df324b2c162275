// Parsing and validation of the per-rank environment.
#include "dist/rank_env.h"

#include <stdexcept>

extern char** environ;

namespace shard::dist {

namespace {

using Env = std::map<std::string, std::string>;

const std::string* find(const Env& env, const std::string& name)
{
    auto it = env.find(name);
    return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

long parseNumber(const Env& env, const std::string& name, long fallback, bool required)
{
    const std::string* v = find(env, name);
    if (!v) {
        if (required)
            throw std::runtime_error(name
                + " is not set; start ranks with 'shard-worker launch' "
                  "or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT");
        return fallback;
    }
    try {
        size_t used = 0;
        long n = std::stol(*v, &used);
        if (used != v->size())
            throw std::invalid_argument(name);
        return n;
    } catch (const std::exception&) {
        throw std::runtime_error(name + "='" + *v + "' is not an integer");
    }
}

double parseSeconds(const Env& env, const std::string& name, double fallback)
{
    const std::string* v = find(env, name);
    if (!v)
        return fallback;
    try {
        double s = std::stod(*v);
        if (!(s > 0))
            throw std::invalid_argument(name);
        return s;
    } catch (const std::exception&) {
        throw std::runtime_error(name + "='" + *v + "' is not a positive number of seconds");
    }
}

} // namespace

RankEnv RankEnv::fromEnvironment()
{
    Env env;
    for (char** e = environ; e && *e; ++e) {
        std::string entry(*e);
        auto eq = entry.find('=');
        if (eq != std::string::npos)
            env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    return fromEnvironment(env);
}

RankEnv RankEnv::fromEnvironment(const Env& env)
{
    RankEnv r;
    r.rdzvTimeoutSec = parseSeconds(env, "SHARD_RDZV_TIMEOUT_S", r.rdzvTimeoutSec);
    r.collectiveTimeoutSec
        = parseSeconds(env, "SHARD_COLLECTIVE_TIMEOUT_S", r.collectiveTimeoutSec);
    if (find(env, "RANK")) {
        r.source = "launcher";
        r.rank = static_cast<int>(parseNumber(env, "RANK", 0, true));
        r.worldSize = static_cast<int>(parseNumber(env, "WORLD_SIZE", 0, true));
        r.localRank = static_cast<int>(parseNumber(env, "LOCAL_RANK", r.rank, false));
        r.localWorldSize
            = static_cast<int>(parseNumber(env, "LOCAL_WORLD_SIZE", r.worldSize, false));
        r.nodeRank = static_cast<int>(parseNumber(env, "NODE_RANK", 0, false));
    } else if (find(env, "SLURM_PROCID") && find(env, "SLURM_NTASKS")) {
        r.source = "slurm";
        r.rank = static_cast<int>(parseNumber(env, "SLURM_PROCID", 0, true));
        r.worldSize = static_cast<int>(parseNumber(env, "SLURM_NTASKS", 0, true));
        r.localRank = static_cast<int>(parseNumber(env, "SLURM_LOCALID", 0, false));
        r.nodeRank = static_cast<int>(parseNumber(env, "SLURM_NODEID", 0, false));
        long nodes = parseNumber(env, "SLURM_NNODES", 1, false);
        r.localWorldSize = static_cast<int>(
            parseNumber(env, "SLURM_NTASKS_PER_NODE", nodes > 0 ? r.worldSize / nodes : 1, false));
    } else {
        return r; // one process, no network
    }
    if (r.worldSize < 1)
        throw std::runtime_error(
            "WORLD_SIZE must be at least 1, got " + std::to_string(r.worldSize));
    if (r.rank < 0 || r.rank >= r.worldSize)
        throw std::runtime_error(
            "RANK " + std::to_string(r.rank) + " is outside 0.." + std::to_string(r.worldSize - 1));
    if (r.localRank < 0 || r.localWorldSize < 1 || r.localRank >= r.localWorldSize)
        throw std::runtime_error("LOCAL_RANK " + std::to_string(r.localRank) + " is outside 0.."
            + std::to_string(r.localWorldSize - 1));
    if (const std::string* addr = find(env, "MASTER_ADDR"))
        r.masterAddr = *addr;
    r.masterPort = static_cast<int>(parseNumber(env, "MASTER_PORT", 0, r.worldSize > 1));
    if (r.worldSize > 1 && (r.masterPort < 1 || r.masterPort > 65535))
        throw std::runtime_error(
            "MASTER_PORT " + std::to_string(r.masterPort) + " is outside 1..65535");
    return r;
}

} // namespace shard::dist
