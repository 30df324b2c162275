// Resolution and validation of the launcher's options (flags, Slurm environment, defaults).
#include "launch/launch_options.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "protocol/run_spec.h"

extern char** environ;

namespace shard::launch {

namespace {

std::optional<std::string> lookup(const Environment& env, const std::string& name)
{
    auto it = env.find(name);
    if (it == env.end() || it->second.empty())
        return std::nullopt;
    return it->second;
}

int parseInt(const std::string& value, const std::string& what)
{
    try {
        size_t used = 0;
        long v = std::stol(value, &used);
        if (used != value.size())
            throw std::invalid_argument(what);
        return static_cast<int>(v);
    } catch (const std::exception&) {
        throw std::invalid_argument(what + ": '" + value + "' is not an integer");
    }
}

} // namespace

Environment currentEnvironment()
{
    Environment env;
    for (char** e = environ; e && *e; ++e) {
        std::string entry(*e);
        auto eq = entry.find('=');
        if (eq != std::string::npos)
            env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    return env;
}

std::string firstSlurmHost(const std::string& nodeList)
{
    // The first item at bracket depth 0.
    int depth = 0;
    size_t end = nodeList.size();
    for (size_t i = 0; i < nodeList.size(); ++i) {
        if (nodeList[i] == '[')
            ++depth;
        else if (nodeList[i] == ']')
            --depth;
        else if (nodeList[i] == ',' && depth == 0) {
            end = i;
            break;
        }
    }
    std::string item = nodeList.substr(0, end);
    auto open = item.find('[');
    if (open == std::string::npos)
        return item;
    auto close = item.find(']', open);
    if (close == std::string::npos)
        throw std::invalid_argument("SLURM_JOB_NODELIST: unbalanced '[' in '" + nodeList + "'");
    std::string range = item.substr(open + 1, close - open - 1);
    std::string first = range.substr(0, range.find_first_of(",-"));
    return item.substr(0, open) + first + item.substr(close + 1);
}

int visibleGpuCount(const Environment& env, const std::string& driverGpus)
{
    auto it = env.find("CUDA_VISIBLE_DEVICES");
    if (it != env.end()) {
        // Comma-separated indices or GPU-/MIG- UUIDs; the runtime stops at the first entry it
        // cannot read (so "-1" hides every GPU).
        int n = 0;
        size_t begin = 0;
        const std::string& v = it->second;
        while (begin < v.size()) {
            size_t end = v.find(',', begin);
            if (end == std::string::npos)
                end = v.size();
            std::string item = v.substr(begin, end - begin);
            while (!item.empty() && item.front() == ' ')
                item.erase(0, 1);
            const bool index
                = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
            const bool uuid = item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0;
            if (!index && !uuid)
                break;
            ++n;
            begin = end + 1;
        }
        return n;
    }
    std::error_code ec;
    int n = 0;
    for (std::filesystem::directory_iterator d(driverGpus, ec), end; !ec && d != end;
         d.increment(ec))
        ++n;
    return n;
}

void checkCpuRanks(int nprocPerNode, int cores, int64_t availableBytes)
{
    const auto mib = [](int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
    const int byCores = kMaxCpuRanksPerCore * std::max(1, cores);
    const int byMemory = availableBytes > 0
        ? static_cast<int>(std::min<int64_t>(1024, availableBytes / kCpuRankBaseBytes))
        : 1024;
    const int most = std::max(1, std::min(byCores, byMemory));
    if (nprocPerNode <= most)
        return;
    std::string why = std::to_string(nprocPerNode) + " CPU ranks on this node would need at least "
        + mib(nprocPerNode * kCpuRankBaseBytes) + " of host memory before the model ("
        + mib(kCpuRankBaseBytes) + " per rank: each is a process with its own LibTorch runtime)";
    why += availableBytes > 0 ? ", " + mib(availableBytes) + " is available," : "";
    why += " and share " + std::to_string(cores) + (cores == 1 ? " core" : " cores");
    throw std::invalid_argument("launch: --nproc-per-node " + std::to_string(nprocPerNode)
        + " is too many: " + why + "; use --nproc-per-node " + std::to_string(most)
        + " or less (at most " + std::to_string(kMaxCpuRanksPerCore)
        + " per core, within the available memory), or GPUs");
}

int64_t availableHostBytes()
{
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    int64_t kb = 0;
    while (in >> key >> kb >> unit)
        if (key == "MemAvailable:")
            return kb * 1024;
    return 0;
}

LaunchOptions resolveLaunchOptions(const LaunchRequest& request, const Environment& env)
{
    LaunchOptions o;
    const bool slurm = lookup(env, "SLURM_JOB_ID").has_value();

    // The ranks per node: launch's flag, else the worker's own --nproc-per-node (so that one
    // setting, given either way, starts that many ranks); both must agree.
    const auto workerProcs = protocol::flagValue(request.workerArgs, "--nproc-per-node");
    std::optional<int> fromWorker;
    if (workerProcs)
        fromWorker = parseInt(*workerProcs, "the worker's --nproc-per-node");
    if (request.nprocPerNode && fromWorker && *fromWorker != *request.nprocPerNode)
        throw std::invalid_argument("launch: --nproc-per-node "
            + std::to_string(*request.nprocPerNode)
            + " but the worker command says --nproc-per-node " + std::to_string(*fromWorker)
            + "; give the rank count once (to launch)");
    // Neither given: one rank per GPU on a GPU node (unless the worker trains on the CPU).
    const auto workerDevice = protocol::flagValue(request.workerArgs, "--device");
    const int gpus = workerDevice && *workerDevice == "cpu" ? 0 : visibleGpuCount(env);
    o.nprocPerNode = request.nprocPerNode.value_or(fromWorker.value_or(std::max(1, gpus)));
    o.cpuRanks = gpus == 0;
    if (request.nnodes)
        o.nnodes = *request.nnodes;
    else if (slurm && lookup(env, "SLURM_NNODES"))
        o.nnodes = parseInt(*lookup(env, "SLURM_NNODES"), "SLURM_NNODES");
    if (request.nodeRank)
        o.nodeRank = *request.nodeRank;
    else if (slurm && o.nnodes > 1 && lookup(env, "SLURM_NODEID"))
        o.nodeRank = parseInt(*lookup(env, "SLURM_NODEID"), "SLURM_NODEID");
    if (request.masterAddr)
        o.masterAddr = *request.masterAddr;
    else if (slurm && o.nnodes > 1 && lookup(env, "SLURM_JOB_NODELIST"))
        o.masterAddr = firstSlurmHost(*lookup(env, "SLURM_JOB_NODELIST"));
    if (request.masterPort)
        o.masterPort = *request.masterPort;
    else if (slurm && o.nnodes > 1)
        o.masterPort = 20000 + parseInt(*lookup(env, "SLURM_JOB_ID"), "SLURM_JOB_ID") % 20000;

    o.rdzvTimeoutSec = request.rdzvTimeoutSec;
    o.gracePeriodSec = request.gracePeriodSec;
    o.workerArgs = request.workerArgs;
    o.hangTimeoutSec = request.hangTimeoutSec.value_or(-1.0);
    o.collectiveTimeoutSec = request.collectiveTimeoutSec.value_or(-1.0);
    // Given to launch, or as the train flag (a spec's max_restarts comes as the launch flag).
    const auto workerRestarts = protocol::flagValue(request.workerArgs, "--max-restarts");
    o.maxRestarts = request.maxRestarts.value_or(
        workerRestarts ? parseInt(*workerRestarts, "the worker's --max-restarts") : 0);

    if (request.runDir)
        o.runDir = *request.runDir;
    else
        o.runDir = protocol::flagValue(o.workerArgs, "--out").value_or("");

    if (o.workerArgs.empty())
        throw std::invalid_argument(
            "launch: no worker command; add it after '--', e.g. 'launch --nproc-per-node 2 -- "
            "train --model DIR ...'");
    if (o.workerArgs.front() == "launch")
        throw std::invalid_argument("launch: the worker command cannot be 'launch' again");
    if (o.runDir.empty())
        throw std::invalid_argument(
            "launch: no run directory; pass --run-dir DIR or give the worker '--out DIR'");
    if (o.nprocPerNode < 1 || o.nprocPerNode > 1024)
        throw std::invalid_argument("launch: --nproc-per-node must be between 1 and 1024, got "
            + std::to_string(o.nprocPerNode));
    if (o.nnodes < 1)
        throw std::invalid_argument(
            "launch: --nnodes must be at least 1, got " + std::to_string(o.nnodes));
    if (o.nodeRank < 0 || o.nodeRank >= o.nnodes)
        throw std::invalid_argument("launch: --node-rank " + std::to_string(o.nodeRank)
            + " is outside 0.." + std::to_string(o.nnodes - 1) + " (--nnodes "
            + std::to_string(o.nnodes) + ")");
    if (o.masterPort < 0 || o.masterPort > 65535)
        throw std::invalid_argument(
            "launch: --master-port must be 0..65535, got " + std::to_string(o.masterPort));
    if (o.nnodes > 1 && o.masterPort == 0)
        throw std::invalid_argument(
            "launch: --master-port 0 (pick a free port) works on one node only; give every node "
            "the same explicit --master-port");
    if (o.masterAddr.empty())
        throw std::invalid_argument("launch: --master-addr is empty");
    if (!(o.rdzvTimeoutSec > 0))
        throw std::invalid_argument("launch: --rdzv-timeout must be positive (seconds)");
    if (!(o.gracePeriodSec >= 0))
        throw std::invalid_argument("launch: --grace-period must be zero or positive (seconds)");
    if (request.hangTimeoutSec && !(*request.hangTimeoutSec >= 0))
        throw std::invalid_argument(
            "launch: --hang-timeout must be zero (off) or positive (seconds)");
    if (o.maxRestarts < 0)
        throw std::invalid_argument("launch: --max-restarts must be 0 (off) or a positive count, "
                                    "got "
            + std::to_string(o.maxRestarts));
    if (request.collectiveTimeoutSec && !(*request.collectiveTimeoutSec > 0))
        throw std::invalid_argument("launch: --collective-timeout must be positive (seconds)");
    return o;
}

} // namespace shard::launch
