// LaunchRequest: the typed run spec to start, where its run directory goes and with which
// worker; shared by the local, SSH and Slurm launchers. The spec travels as
// <run>/launch-spec.json and the node launcher's command line is protocol::LaunchArgs, so what
// the Launch page previews is what runs (docs/ARCHITECTURE.md, "From a plan to the ranks").
#pragma once

#include <QByteArray>
#include <QString>
#include <QStringList>

#include "jobs/result.h"
#include "protocol/run_spec.h"

namespace shard::jobs {

struct LaunchRequest {
    QString name;           // shown in the store; free text (never used unquoted in a shell)
    protocol::RunSpec spec; // what runs (spec.procsPerNode ranks per node); uploaded as
                            // <run>/launch-spec.json with "out" set to the run directory
    QString runDir;         // the run directory on the target; empty: a default under runs/
    QString workerProgram = QStringLiteral("shard-worker"); // path or name on PATH (per target)
    int masterPort = 0;                                     // rendezvous port; 0: pick one
    QString masterAddr;  // rendezvous address; empty: node 0's address
    QStringList env;     // KEY=VALUE for the launcher's environment
    bool resume = false; // continue the run already in runDir (its spec says resume "auto")
    // SSH: copy the spec's model folder, tokenizer folder and data files from this machine into
    // <run>/inputs/ on every host and point the spec there (else they are expected on the host).
    bool copyInputs = false;
};

// The `shard-worker launch ... -- train --config <runDir>/launch-spec.json` arguments for one
// node (without the program itself), written by protocol::LaunchArgs::toArgv. nnodes == 1
// leaves out the multi-node flags.
QStringList workerLaunchArgs(const LaunchRequest& request, const QString& runDir,
    const QString& nodeRunDir, int nnodes, int nodeRank, const QString& masterAddr, int masterPort);

// <run>/launch-spec.json: the spec with "out" set to the run directory (so the engine writes
// where we read).
QByteArray launchSpecJson(const protocol::RunSpec& spec, const QString& runDir);

// What the store records for a request: its spec as run.json spells it.
QByteArray recordedSpecJson(const protocol::RunSpec& spec);

// What starts a run again in `runDir` from its latest complete checkpoint: its recorded spec
// (run.json) with resume "auto". A spec that is not a run spec is a clear error.
Result<LaunchRequest> resumeRequest(
    const QByteArray& specJson, const QString& name, const QString& runDir);

// A directory-name-safe version of a run name ([A-Za-z0-9._-], at most 60 chars).
QString safeDirName(const QString& name);
// The folder name of a new run: its safe name and the time, to the millisecond
// ("my-run-20261205-051500-123"); every launcher names the folders it makes with it.
QString newRunDirName(const QString& name);

// A random port in the dynamic range, for the rendezvous store.
int pickMasterPort();

} // namespace shard::jobs
