// The `shard-worker launch` flags, listed once (see launch_args.h).
#include "protocol/launch_args.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace shard::protocol {

namespace {

int toInt(const std::string& flag, const std::string& value)
{
    try {
        size_t used = 0;
        const long v = std::stol(value, &used);
        if (used == value.size())
            return static_cast<int>(v);
    } catch (const std::exception&) {
    }
    throw std::invalid_argument("launch: " + flag + " '" + value + "' is not an integer");
}

double toSeconds(const std::string& flag, const std::string& value)
{
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0')
        throw std::invalid_argument(
            "launch: " + flag + " '" + value + "' is not a number of seconds");
    return v;
}

// The shortest text that reads back as the same double.
std::string number(double v)
{
    char buf[64];
    for (int precision = 6; precision <= 17; ++precision) {
        std::snprintf(buf, sizeof buf, "%.*g", precision, v);
        if (std::strtod(buf, nullptr) == v)
            break;
    }
    return buf;
}

template<typename T> std::optional<std::string> text(const std::optional<T>& v)
{
    if (!v)
        return std::nullopt;
    if constexpr (std::is_same_v<T, std::string>)
        return *v;
    else if constexpr (std::is_same_v<T, double>)
        return number(*v);
    else
        return std::to_string(*v);
}

} // namespace

const std::vector<LaunchFlag>& launchFlags()
{
    static const std::vector<LaunchFlag> flags = {
        {"--nproc-per-node", "ranks on this node",
            [](LaunchArgs& a, const std::string& v) {
                a.nprocPerNode = toInt("--nproc-per-node", v);
            },
            [](const LaunchArgs& a) { return text(a.nprocPerNode); }},
        {"--nnodes", "number of nodes (default 1)",
            [](LaunchArgs& a, const std::string& v) { a.nnodes = toInt("--nnodes", v); },
            [](const LaunchArgs& a) { return text(a.nnodes); }},
        {"--node-rank", "this node's index 0..M-1",
            [](LaunchArgs& a, const std::string& v) { a.nodeRank = toInt("--node-rank", v); },
            [](const LaunchArgs& a) { return text(a.nodeRank); }},
        {"--master-addr", "node 0's address (default 127.0.0.1)",
            [](LaunchArgs& a, const std::string& v) { a.masterAddr = v; },
            [](const LaunchArgs& a) { return text(a.masterAddr); }},
        {"--master-port", "rendezvous port on node 0; 0 picks a free port (single node only)",
            [](LaunchArgs& a, const std::string& v) { a.masterPort = toInt("--master-port", v); },
            [](const LaunchArgs& a) { return text(a.masterPort); }},
        {"--run-dir", "run directory for logs/ and events.jsonl (default: worker's --out)",
            [](LaunchArgs& a, const std::string& v) { a.runDir = v; },
            [](const LaunchArgs& a) { return text(a.runDir); }},
        {"--rdzv-timeout", "seconds to wait for all nodes / ranks to join (default 60)",
            [](LaunchArgs& a, const std::string& v) {
                a.rdzvTimeoutSec = toSeconds("--rdzv-timeout", v);
            },
            [](const LaunchArgs& a) {
                return a.rdzvTimeoutSec == 60.0 ? std::nullopt
                                                : std::optional(number(a.rdzvTimeoutSec));
            }},
        {"--grace-period", "seconds between SIGTERM and SIGKILL when stopping ranks (default 5)",
            [](LaunchArgs& a, const std::string& v) {
                a.gracePeriodSec = toSeconds("--grace-period", v);
            },
            [](const LaunchArgs& a) {
                return a.gracePeriodSec == 5.0 ? std::nullopt
                                               : std::optional(number(a.gracePeriodSec));
            }},
        {"--hang-timeout",
            "seconds without a heartbeat after which a rank counts as hung and the run is stopped "
            "(5x as long for a rank that beats but makes no progress; 4x during set-up, the first "
            "step and checkpoint writes; 0 = off; default: $SHARD_HANG_TIMEOUT_S, else the run "
            "spec's hang_timeout_sec, 300)",
            [](LaunchArgs& a, const std::string& v) {
                a.hangTimeoutSec = toSeconds("--hang-timeout", v);
            },
            [](const LaunchArgs& a) { return text(a.hangTimeoutSec); }},
        {"--collective-timeout",
            "seconds one collective may wait for the other ranks (default: "
            "$SHARD_COLLECTIVE_TIMEOUT_S, else 1800)",
            [](LaunchArgs& a, const std::string& v) {
                a.collectiveTimeoutSec = toSeconds("--collective-timeout", v);
            },
            [](const LaunchArgs& a) { return text(a.collectiveTimeoutSec); }},
        {"--max-restarts",
            "when a rank dies or hangs, stop every rank and start them again with --resume auto "
            "from the latest complete checkpoint, up to N times (default 0; a failure that "
            "repeats at the same step with the same cause is not restarted again)",
            [](LaunchArgs& a, const std::string& v) { a.maxRestarts = toInt("--max-restarts", v); },
            [](const LaunchArgs& a) { return text(a.maxRestarts); }},
    };
    return flags;
}

std::vector<std::string> LaunchArgs::toArgv() const
{
    std::vector<std::string> argv {"launch"};
    for (const LaunchFlag& f : launchFlags())
        if (auto v = f.get(*this)) {
            argv.push_back(f.name);
            argv.push_back(*v);
        }
    argv.push_back("--");
    argv.insert(argv.end(), workerArgs.begin(), workerArgs.end());
    return argv;
}

LaunchArgs LaunchArgs::fromArgv(const std::vector<std::string>& argv)
{
    LaunchArgs a;
    size_t i = !argv.empty() && argv.front() == "launch" ? 1 : 0;
    for (; i < argv.size(); ++i) {
        const std::string& word = argv[i];
        if (word == "--") {
            a.workerArgs.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
            return a;
        }
        const auto eq = word.find('=');
        const std::string name = word.substr(0, eq);
        const LaunchFlag* flag = nullptr;
        for (const LaunchFlag& f : launchFlags())
            if (name == f.name)
                flag = &f;
        if (!flag)
            throw std::invalid_argument("launch: unknown flag '" + word
                + "'; the worker command goes after '--' (see `shard-worker launch --help`)");
        std::string value;
        if (eq != std::string::npos) {
            value = word.substr(eq + 1);
        } else {
            if (i + 1 >= argv.size())
                throw std::invalid_argument("launch: " + name + " needs a value");
            value = argv[++i];
        }
        flag->set(a, value);
    }
    return a;
}

} // namespace shard::protocol
