// The `shard-worker launch` command line as a value: what a launcher (local, SSH, Slurm) hands
// to the node launcher. toArgv() is the one place that writes these flags and fromArgv() the one
// place that reads them; jobs/ builds the command with the first, the worker's `launch` parses
// with the second (docs/ARCHITECTURE.md, "From a plan to the ranks").
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shard::protocol {

// The launcher opens the listening socket of the ranks' TCPStore itself and hands it to global
// rank 0 as this inherited descriptor, named by this variable: the port cannot be taken by
// another process between the launcher choosing it and rank 0 listening on it (a free port that
// was only probed could be, and was, under parallel tests), and a restart finds it still held.
inline constexpr const char* kStoreListenFdEnv = "SHARD_STORE_LISTEN_FD";
inline constexpr int kStoreListenFd = 4; // kRankHeartbeatFd (3) + 1
inline constexpr int kStoreBacklog = 1024;

struct LaunchArgs {
    std::optional<int> nprocPerNode;
    std::optional<int> nnodes;
    std::optional<int> nodeRank;
    std::optional<std::string> masterAddr;
    std::optional<int> masterPort;
    std::optional<std::string> runDir;
    double rdzvTimeoutSec = 60.0;
    double gracePeriodSec = 5.0;
    std::optional<double> hangTimeoutSec;
    std::optional<double> collectiveTimeoutSec;
    // Restarts in place: a failed or hung rank stops every rank, which start again with
    // `--resume auto` from the latest complete checkpoint, up to this many times.
    std::optional<int> maxRestarts;
    std::vector<std::string> workerArgs; // the worker command after "--" (e.g. train --config F)

    // "launch", every flag that is set (timeouts only when they differ from the default), "--"
    // and the worker command.
    std::vector<std::string> toArgv() const;
    // The inverse: the words after the program, with or without the leading "launch".
    // "--flag V" and "--flag=V"; everything after "--" is the worker command. Throws
    // std::invalid_argument naming an unknown flag or a bad value and the fix.
    static LaunchArgs fromArgv(const std::vector<std::string>& argv);
};

// One `launch` flag: its name, help text, and how it is read from and written to LaunchArgs.
struct LaunchFlag {
    const char* name;
    const char* help;
    void (*set)(LaunchArgs&, const std::string& value); // throws std::invalid_argument
    std::optional<std::string> (*get)(const LaunchArgs&);
};

// Every flag of `shard-worker launch`, in the order toArgv() writes them.
const std::vector<LaunchFlag>& launchFlags();

} // namespace shard::protocol
