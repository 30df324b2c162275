// Shared by the jobs tests (and the studio's run tests): the `shard` CLI of this build, the shell
// workload that speaks `shard-worker launch`, and running the CLI as a user would.
#pragma once

#include <QFile>
#include <QProcess>
#include <QString>
#include <QStringList>

#include <nlohmann/json.hpp>

#include "jobs/launch_request.h"

namespace shard::test {

inline const QString kShard = QStringLiteral(SHARD_BINARY_DIR "/app/shard");
inline const QString kFakeWorker
    = QStringLiteral(SHARD_SOURCE_DIR "/tests/jobs/fake-shard-worker.sh");

struct CliOut {
    int code = -1; // -1: it crashed or did not exit in time
    QString out;
    QString err;
};

// Runs `shard args...` in `env` and waits for it (killing it after timeoutMs).
inline CliOut runShard(
    const QProcessEnvironment& env, const QStringList& args, int timeoutMs = 60000)
{
    QProcess p;
    p.setProcessEnvironment(env);
    p.start(kShard, args);
    CliOut o;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        o.err = "shard " + args.join(' ') + ": no exit within the time limit";
        return o;
    }
    o.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    o.out = QString::fromUtf8(p.readAllStandardOutput());
    o.err = QString::fromUtf8(p.readAllStandardError());
    return o;
}

// A run of the shell workload (kFakeWorker): `steps` metric records, one per `stepSec`, on
// `procs` ranks.
inline jobs::LaunchRequest fakeRunRequest(
    const QString& name, const QString& runDir, int steps, double stepSec = 0.02, int procs = 2)
{
    jobs::LaunchRequest r;
    r.name = name;
    r.runDir = runDir;
    r.workerProgram = kFakeWorker;
    r.spec.procsPerNode = procs;
    r.spec.model = "m";
    r.spec.data = {"d.jsonl"};
    r.spec.steps = steps;
    r.env = {QString("FAKE_STEP_SEC=%1").arg(stepSec)};
    return r;
}

// Lines in a file (0 when it cannot be read).
inline int countLines(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? int(f.readAll().count('\n')) : 0;
}

// This build's engine, and what a test trains with it: a tiny-1m model (seed 1) in `model` and
// 256 pre-tokenized rows of a repeating 7-token pattern, 32 tokens each, in `data` (the loss
// falls). False, with the reason in `why`, when the worker could not write the model.
inline const QString kRealWorker = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");

// A zero3 run spec for those inputs: `steps` steps of micro-batch 2 x 32 tokens at a constant
// lr 3e-3, one record per step, one thread per rank, a checkpoint every `checkpointEvery` steps
// (0: none).
inline shard::protocol::RunSpec tinyRunSpec(const QString& model, const QString& data, int steps,
    int nodes, int procsPerNode, int checkpointEvery = 0)
{
    return shard::protocol::runSpecFromJson(nlohmann::json::parse(
        QString(R"({"name":"tiny","model":"%1","data":["%2"],"data_format":"tokenized",
        "strategy":"zero3","nodes":%3,"procs_per_node":%4,"steps":%5,"micro_batch":2,
        "seq_len":32,"lr":0.003,"schedule":"constant","log_every":1,"threads":1,
        "checkpoint_every":%6})")
            .arg(model, data)
            .arg(nodes)
            .arg(procsPerNode)
            .arg(steps)
            .arg(checkpointEvery)
            .toStdString()));
}

inline bool makeTinyRunInputs(const QString& model, const QString& data, QString* why)
{
    if (QProcess::execute(
            kRealWorker, {"init-model", "--preset", "tiny-1m", "--out", model, "--seed", "1"})
        != 0) {
        *why = "shard-worker init-model failed";
        return false;
    }
    QFile f(data);
    if (!f.open(QIODevice::WriteOnly)) {
        *why = "cannot write " + data;
        return false;
    }
    for (int i = 0; i < 256; ++i) {
        QStringList ids;
        for (int t = 0; t < 32; ++t)
            ids << QString::number(10 + (i + t) % 7);
        f.write(QString("{\"input_ids\":[%1]}\n").arg(ids.join(',')).toUtf8());
    }
    return true;
}

} // namespace shard::test

// In a Qt Test initTestCase: skips the test case without this build's engine, else writes the
// tiny model and data (shard::test::makeTinyRunInputs) to the paths `model` and `data`.
#define SHARD_REQUIRE_TINY_RUN_INPUTS(model, data)                                                 \
    do {                                                                                           \
        if (!QFile::exists(shard::test::kRealWorker))                                              \
            QSKIP("shard-worker is not built here (SHARD_BUILD_ENGINE=OFF)");                      \
        QString tinyInputsWhy;                                                                     \
        QVERIFY2(shard::test::makeTinyRunInputs(model, data, &tinyInputsWhy),                      \
            qPrintable(tinyInputsWhy));                                                            \
    } while (false)
