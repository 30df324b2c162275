// The per-node rank supervisor behind `shard-worker launch` (docs/ARCHITECTURE.md, "From a plan to
// the ranks").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launch/launch_options.h"

namespace shard::protocol {
class RunLock;
}

namespace shard::launch {

// Written next to launcher.pid: one line "rank pid" per rank of this node. Every rank leads
// its own process group (pgid == pid), so `kill -- -pid` reaches anything it started.
std::string rankPidsFile(const std::string& runDir, int nodeRank);

class Launcher {
public:
    explicit Launcher(LaunchOptions options);
    ~Launcher();

    // Spawns the ranks and supervises them until they all exit or one fails (with
    // --max-restarts, a failed or hung rank stops them all and they start again from the latest
    // complete checkpoint, each restart a "restart" event; over several nodes, node 0 decides
    // and every node's ranks start again). Returns the exit
    // status for the launcher: 0 when every rank exited 0; otherwise the failed rank's exit code,
    // 128 + signal for a rank killed by a signal (or for a launcher stopped by a signal), or 1.
    // Throws std::runtime_error for set-up errors (busy port, rendezvous timeout, run dir, a run
    // folder another launcher holds). A rank that exits with 74 failed to write the run
    // directory (a full disk); the launcher returns 74 when its own writes there fail. SIGUSR1
    // is forwarded to the ranks (preemption): they write a checkpoint and exit with 75
    // (protocol::kPreemptedExitCode), which the launcher returns too.
    int run();

private:
    struct Session; // one run's ranks, pipes and stop sequence (launcher.cpp)

    // The driver: set-up, the store, the ranks, the loop, the write-up.
    int supervise();
    // The run folder and its lock, the launcher's log, the pid file and the supervised signals.
    void setUp(Session& s);
    // Where the ranks' TCPStore listens: the node rendezvous (more than one node) or a port.
    void openStore(Session& s);
    // A Slurm job that Slurm started again (SLURM_RESTART_COUNT > 0: requeued after a
    // preemption, a node failure or `scontrol requeue`): `train` continues from the latest
    // complete checkpoint (--resume auto), and a "requeued" event says so; refused when steps
    // were recorded but no checkpoint was written.
    void continueRequeuedJob(Session& s);
    // Forks and execs this node's ranks (each leading its own process group) and writes their
    // pids.
    void spawnRanks(Session& s);
    // Watches the ranks until they are all gone: signals, heartbeats and hangs, exits, rank 0's
    // output, the other nodes, the stop sequence; then releases the signals and pipes.
    void watchRanks(Session& s);
    // After a failed attempt (every rank down): whether to start the ranks again
    // (--max-restarts), with the restart event written; when not, a failure that could have
    // been restarted says why it was not.
    bool restartAfterFailure(Session& s);
    // Node 0 (or the one node): whether this failure is restarted; the restart event is written
    // here.
    bool decideRestart(Session& s);
    // Other nodes: report this node's ranks down (STOPPED) and follow node 0's RESTART or END.
    bool followRestartVerdict(Session& s);
    // After the last attempt: the other nodes learn this one is done; the signals go back.
    void tearDown(Session& s);
    // The final error and finish events of a failed run (written once everything is down) and
    // the launcher's exit status.
    int finish(Session& s);

    LaunchOptions m_options;
    int m_restarts = 0;           // restarts done so far
    std::string m_lastFailureKey; // cause and step of the failure the last restart followed
    std::unique_ptr<protocol::RunLock> m_lock; // the run folder's, for the run's lifetime
};

} // namespace shard::launch
