// LaunchRequest: what to start (a run spec or the worker's train flags), where its run
// directory goes, and how many ranks per node; shared by the local, SSH and Slurm launchers.
#pragma once

#include <QByteArray>
#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

namespace shard::jobs {

struct LaunchRequest {
    QString name;          // shown in the store; free text (never used unquoted in a shell)
    QByteArray specJson;   // a run spec (run.json); uploaded as <run>/launch-spec.json
    QStringList trainArgs; // or: the worker's `train` flags (used when specJson is empty)
    QString runDir;        // the run directory on the target; empty: a default under runs/
    int procsPerNode = 1;  // ranks per node (from the spec's procs_per_node when it has one)
    QString workerProgram = QStringLiteral("shard-worker"); // path or name on PATH (per target)
    int masterPort = 0;                                     // rendezvous port; 0: pick one
    QString masterAddr;  // rendezvous address; empty: node 0's address
    QStringList env;     // KEY=VALUE for the launcher's environment
    bool resume = false; // continue the run already in runDir (its spec says resume "auto")
    // SSH: copy the spec's model folder, tokenizer folder and data files from this machine into
    // <run>/inputs/ on every host and point the spec there (else they are expected on the host).
    bool copyInputs = false;
};

// The `shard-worker launch ...` arguments for one node (without the program itself).
// nnodes == 1 leaves out the multi-node flags. The train part is `--config <run>/launch-spec.json`
// for a spec, else the train flags plus `--out <run>` unless they name --out already.
QStringList workerLaunchArgs(const LaunchRequest& request, const QString& runDir,
    const QString& nodeRunDir, int nnodes, int nodeRank, const QString& masterAddr, int masterPort);

// The spec with "out" set to the run directory (so the engine writes where we read).
QByteArray specWithOut(const QByteArray& specJson, const QString& runDir);

// What the store records for a run started from train flags: {"args": [...]} plus the keys it
// can read from them (steps, strategy, model), until the engine's run.json replaces it.
QByteArray specForTrainArgs(const QStringList& trainArgs);

// What starts a run again in `runDir` from its latest complete checkpoint: `spec` (a JSON object)
// with "resume": "auto", or, for a run started from the worker's flags (a spec {"args": [...]},
// see specForTrainArgs), the same flags with --resume auto.
LaunchRequest resumeRequest(nlohmann::json spec, const QString& name, const QString& runDir);

// procs_per_node from the spec, or `fallback`.
int specProcsPerNode(const QByteArray& specJson, int fallback);

// A directory-name-safe version of a run name ([A-Za-z0-9._-], at most 60 chars).
QString safeDirName(const QString& name);

// A random port in the dynamic range, for the rendezvous store.
int pickMasterPort();

} // namespace shard::jobs
