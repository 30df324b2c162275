// Runs other tools trained, into the run store: TensorBoard event files (Hugging Face Trainer,
// torchtitan, DeepSpeed, Megatron-LM, Lightning, Keras, a bare SummaryWriter) and Hugging Face
// Trainer's trainer_state.json. A run is a folder holding event files (a restarted job's several
// files merge: by tag and step, the later wall time wins), or the newest trainer_state.json of a
// Trainer output folder that has no event files. Known tags fill the store's metric columns
// (tbio::knownTag); every scalar is also kept under its tag. Importing a path again updates
// the runs it holds, never duplicates them (a run is found again by its folder).
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>

#include "jobs/result.h"

namespace shard::jobs {

class RunStore;

struct ImportedRun {
    qint64 runId = 0;
    bool created = false; // false: an earlier import of the same folder was updated
    QString name;
    QString folder; // the run's folder (absolute)
    QString tool;   // "Hugging Face Trainer", "torchtitan", ... or "TensorBoard"
    QString format; // "tensorboard" or "trainer_state"
    int steps = 0;  // steps with a value of a known metric
    int tags = 0;   // scalar tags kept
    qint64 points = 0;
    QStringList notes; // skipped records, CRC failures, non-scalar data, files refused
};

struct ImportReport {
    QVector<ImportedRun> runs;
    QStringList skipped; // folders or files with nothing to import, and why
};

// Imports every run under `path` (a folder searched recursively, an event file, or a
// trainer_state.json). Fails with a message naming the path when it does not exist or holds no
// run, or a file in it cannot be read as what its name says it is.
Result<ImportReport> importRuns(RunStore& store, const QString& path);

} // namespace shard::jobs
