// A run that is a command instead of the engine: `shard run --command 'torchrun ... train.py'`.
// Its folder holds command.json (the command, its working folder and environment), the
// command's output (logs/stdout.log, logs/stderr.log, and both in logs/rank-0.log for the
// Monitor's log pane) and the studio's records: metrics.jsonl from the metric lines the command
// prints (Hugging Face Trainer's dicts, torchtitan's step lines: tbio::parseLogLine) and
// events.jsonl (start; finish with the exit status and, from torchrun's or deepspeed's own
// failure report, the rank that failed). A supervisor process (`shard supervise-command DIR`,
// detached, the run's recorded pid) runs the command in its process group, so the run is
// followed, stopped and re-attached like any local run (docs/ARCHITECTURE.md, "Your command as
// a run").
#pragma once

#include <optional>

#include <QByteArray>
#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>

#include "jobs/launcher.h"
#include "jobs/result.h"

namespace shard::jobs {

class RunStore;

struct CommandSpec {
    QString command; // run by /bin/sh -c in `workdir`
    QString workdir; // absolute; the run folder when empty
    QStringList env; // KEY=VALUE added to the command's environment
    // A TensorBoard log folder the command writes (absolute; empty: none). Its event files are
    // followed while the command runs and their scalars are the run's points, at the steps the
    // files give; Hugging Face's stdout lines (which carry no step) are then not stored.
    QString logdir;
    int graceMs = 10000; // after TERM, how long the command has before KILL

    QByteArray toJson() const; // command.json, and the run's recorded spec
    // Throws std::runtime_error naming what is wrong.
    static CommandSpec fromJson(const QByteArray& json);
};

// Whether a recorded spec is a command run's.
bool isCommandSpec(const QByteArray& specJson);

struct CommandRunRequest {
    QString name;
    CommandSpec spec;
    // Where the command runs: this machine; one SSH host (a multi-node command reaches the
    // others itself, as torchrun --nnodes or deepspeed --hostfile do); or a Slurm job whose
    // batch script runs the supervisor on the first node (a command with `srun` spreads over
    // the job's nodes; MASTER_ADDR and MASTER_PORT are set for its rendezvous).
    LaunchTarget target;
    // Empty: a new folder under LocalLauncher::defaultRunsRoot() here (also for Slurm on this
    // machine), shard-runs/<name>-<time> in the home folder of an SSH host or login node.
    QString runDir;
    bool resume = false; // run the command again in runDir, in the same store record
    // The `shard` program that supervises the command where it runs. Empty: findShardCli() on
    // this machine (and for Slurm submitted from it), `shard` on the PATH of an SSH host or
    // login node.
    QString supervisor;
    int masterPort = 0; // Slurm: MASTER_PORT for the job (0: a free port here)
    // Slurm: the batch script to submit instead of commandSbatchScript()'s, as the user edited
    // it (module loads, more #SBATCH lines); it must still run the supervisor on the run folder.
    QString sbatchScript;
};

// Records the run (target local, ssh or slurm) and starts its supervisor detached (or submits
// its batch job); returns the run id. On SSH and Slurm the run folder, the working folder and
// command.json live there, and the run is followed, stopped (TERM to the supervisor's process
// group; scancel) and resumed like an engine run there.
Result<qint64> startCommandRun(RunStore& store, const CommandRunRequest& request,
    const SshOptions& sshOptions = SshOptions::fromEnvironment());

// The batch script of a command run's Slurm job: the options' #SBATCH lines and environment,
// MASTER_ADDR (the first node) and MASTER_PORT exported, then the supervisor in the job's batch
// step (`exec SHARD supervise-command RUNDIR`).
Result<QString> commandSbatchScript(const QString& name, const SlurmOptions& options,
    const QString& supervisor, const QString& runDir, int masterPort);

// The batch script a Slurm command run submits for `request`: its edited one, else the one
// commandSbatchScript() writes (MASTER_PORT 29500 when none is chosen: the run picks a free one).
Result<QString> commandRunSbatch(const CommandRunRequest& request);

// Whether an edited batch script still runs the supervisor on `runDir` (absolute): the reason
// when it does not.
Status checkEditedSbatch(const QString& script, const QString& runDir);

// What startCommandRun() will do for `request`, as a user reads it (the Launch page's preview).
Result<QString> describeCommandRun(const CommandRunRequest& request);

// The request that runs a recorded command run again in its folder, on its target, with its
// supervisor (the Monitor's Resume, `shard run --command --resume`).
Result<CommandRunRequest> commandRerunRequest(const RunRecord& run);

// The `shard` command-line program: $SHARD_CLI, beside this program (or the build tree's
// app/shard from app/studio), or on PATH; empty when none is found.
QString findShardCli();

// What a launcher's failure report says: torchrun's "Root Cause (first observed failure)"
// block (rank, exitcode) or deepspeed's launcher line; nullopt when the text has neither.
struct LauncherFailure {
    int rank = -1; // torchrun's root cause ("first observed failure"); -1 unknown
    int exitCode = 0;
    QString source; // "torchrun" or "deepspeed"
    // Every failed rank the report lists (rank, exit code), the root cause first: a rank that
    // exits on purpose and the peers that then lose it fail within the same second, so the
    // root cause alone may name a peer.
    QList<QPair<int, int>> failures;
};
std::optional<LauncherFailure> parseLauncherFailure(const QByteArray& stderrText);

// The supervisor's loop (`shard supervise-command RUNDIR`): runs command.json's command,
// writes the run folder as above, forwards TERM (then KILL after the grace period) to the
// command's processes. Returns the command's exit status (128 + signal when signalled).
int superviseCommand(const QString& runDir);

} // namespace shard::jobs
