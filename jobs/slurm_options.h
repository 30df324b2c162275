// How a run asks Slurm for its job: the sbatch options the studio, the CLI and the Hosts page set
// (jobs/slurm_launcher.h writes them into the batch script).
#pragma once

#include <QString>
#include <QStringList>

namespace shard::jobs {

// The default lead, in seconds before the time limit, of Slurm's SIGUSR1 (checkpoint and requeue).
inline constexpr int kDefaultPreemptSignalSec = 120;

// A time limit as sbatch reads it: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS.
inline constexpr const char* kSlurmTimePattern
    = R"(^(\d+(:\d{1,2}){0,2}|\d+-\d{1,2}(:\d{1,2}){0,2})$)";

struct SlurmOptions {
    int nodes = 1;
    int gpusPerNode = 0;
    int cpusPerTask = 0;
    QString time; // e.g. 02:00:00
    QString partition;
    QString account;
    QStringList env;       // KEY=VALUE exported in the job
    QStringList clientEnv; // KEY=VALUE for the sbatch/squeue/scancel commands (e.g. SLURM_CONF)
    QString via;           // [user@]host[:port] of a login node; empty: this machine
    // Seconds before the time limit at which Slurm sends SIGUSR1 (--signal=USR1@N): the ranks
    // write a checkpoint and stop, and the job requeues itself to continue from it. 0: none.
    int preemptSignalSec = kDefaultPreemptSignalSec;
};

} // namespace shard::jobs
