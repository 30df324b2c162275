// `shard demo`: the main job on an embedded default: a tiny model on the built-in demo data,
// 2 ranks with zero3 on CPU, about a minute, with a progress bar; recorded in the run store;
// ends by printing the accuracy on held-out questions before and after training (greedy answers,
// `shard-worker eval-demo`) and where the charts and the run are.
#include <algorithm>
#include <cstdio>

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QProcess>

#include "command.h"
#include "protocol/records.h"
#include "protocol/run_spec.h"
#include "run_follow.h"

namespace shard::cli {
namespace {

struct DemoOptions {
    std::string store;
    std::string out;
    std::string preset = "tiny-1m";
    std::string worker = "shard-worker";
    int steps = 150;
    int ranks = 2;
    int evalCount = 100;
    std::string task = "copy";
    bool detach = false;
};

void runWorker(const QString& worker, const QStringList& args, const char* what)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(worker, args);
    if (!p.waitForStarted(10000))
        throw std::runtime_error(std::string("cannot run ") + worker.toStdString());
    if (!p.waitForFinished(300000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
        const QString out = QString::fromLocal8Bit(p.readAll()).trimmed();
        throw std::runtime_error(
            std::string(what) + " failed: " + out.section('\n', -1).toStdString());
    }
}

// The demo's training data: the installed set for the task when the package provides it (next
// to the worker: <prefix>/share/shard-studio/demo/<task>.jsonl), else generated into the assets
// folder.
QString demoData(const QString& worker, const QString& assets, const QString& task)
{
    const QString installed = QFileInfo(worker).absolutePath()
        + QStringLiteral("/../share/shard-studio/demo/") + task + QStringLiteral(".jsonl");
    if (QFileInfo(installed).isFile())
        return QFileInfo(installed).canonicalFilePath();
    const QString out = assets + QStringLiteral("/") + task + QStringLiteral(".jsonl");
    runWorker(worker, {"make-data", "--task", task, "--out", out, "--count", "4000", "--seed", "1"},
        "shard-worker make-data");
    return out;
}

// `shard-worker eval-demo` on a model folder: the fraction of held-out questions (seed 1000,
// the training data uses seed 1) the model answers right by greedy generation.
double evalDemo(const QString& worker, const QString& model, const QString& task, int count)
{
    QProcess p;
    p.start(worker,
        {"eval-demo", "--model", model, "--task", task, "--count", QString::number(count), "--seed",
            "1000", "--json"});
    if (!p.waitForFinished(300000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0)
        throw std::runtime_error("shard-worker eval-demo failed: "
            + QString::fromLocal8Bit(p.readAllStandardError()).trimmed().toStdString());
    const QByteArray out = p.readAllStandardOutput();
    auto j = nlohmann::json::parse(out.constData(), out.constData() + out.size(), nullptr, false);
    if (!j.is_object() || !j.contains("accuracy") || !j["accuracy"].is_number())
        throw std::runtime_error("shard-worker eval-demo gave no accuracy");
    return j["accuracy"].get<double>();
}

// Records the demo's accuracy in the run's events.jsonl (kind "eval", after the trainer's
// own records, at its last step and wall time).
void recordAccuracy(const QString& runDir, double before, double after, int count)
{
    QFile f(runDir + QStringLiteral("/events.jsonl"));
    protocol::EventRecord e;
    e.kind = "eval";
    if (f.open(QIODevice::ReadOnly)) {
        for (const QByteArray& raw : f.readAll().split('\n')) {
            auto j = nlohmann::json::parse(
                raw.constData(), raw.constData() + raw.size(), nullptr, false);
            if (j.is_object()) {
                e.step = std::max<int64_t>(e.step, j.value("step", int64_t(-1)));
                e.wallTimeSec = std::max(e.wallTimeSec, j.value("wall_time", 0.0));
            }
        }
        f.close();
    }
    e.message = "demo accuracy on held-out questions";
    e.data = {{"accuracy", after}, {"accuracy_before", before}, {"questions", count}};
    if (!f.open(QIODevice::Append))
        throw std::runtime_error("cannot append to " + f.fileName().toStdString());
    f.write(QByteArray::fromStdString(protocol::toJson(e).dump()) + '\n');
}

int demoCommand(const DemoOptions& o)
{
    const QString worker = jobs::LocalLauncher::findWorker(QString::fromStdString(o.worker));
    if (worker.isEmpty())
        throw std::runtime_error(
            "shard demo needs shard-worker: build it (cmake --build --preset "
            "release --target shard-worker), install it, or set $SHARD_WORKER");
    jobs::RunStore store = openStore(o.store);
    const QString root = o.out.empty()
        ? jobs::LocalLauncher::defaultRunsRoot() + QStringLiteral("/demo-")
            + QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"))
        : QString::fromStdString(o.out);
    const QString assets = root + QStringLiteral("/assets");
    if (!QDir().mkpath(assets))
        throw std::runtime_error("cannot create " + assets.toStdString());
    std::printf("demo: a %s model on the built-in %s task, %d ranks zero3 on CPU\n",
        o.preset.c_str(), o.task.c_str(), o.ranks);
    std::fflush(stdout);
    runWorker(worker,
        {"init-model", "--preset", QString::fromStdString(o.preset), "--out", assets + "/model",
            "--seed", "0"},
        "shard-worker init-model");
    const QString task = QString::fromStdString(o.task);
    const QString data = demoData(worker, assets, task);
    const double before = evalDemo(worker, assets + QStringLiteral("/model"), task, o.evalCount);

    // No in-training eval loss: the held-out accuracy below measures the result, and the
    // trainer's zero3 eval can stall when its last eval chunk has fewer rows than ranks.
    nlohmann::json spec = {{"name", "demo"}, {"model", (assets + "/model").toStdString()},
        {"data", {data.toStdString()}}, {"data_format", "chat"}, {"packing", true},
        {"strategy", "zero3"}, {"nodes", 1}, {"procs_per_node", o.ranks}, {"device", "cpu"},
        {"precision", "fp32"}, {"steps", o.steps}, {"micro_batch", 8}, {"seq_len", 128},
        {"lr", 3e-3}, {"warmup", 10}, {"schedule", "cosine"}, {"seed", 0}, {"log_every", 1},
        {"v", 1}};
    jobs::LaunchRequest req;
    req.name = QStringLiteral("demo");
    req.spec = protocol::runSpecFromJson(spec);
    req.runDir = root + QStringLiteral("/run");
    req.workerProgram = worker;
    auto id = jobs::LocalLauncher(&store).start(req);
    if (!id)
        throw std::runtime_error(id.error().toStdString());
    std::printf("run %lld started: %s\n", static_cast<long long>(*id), qPrintable(req.runDir));
    if (o.detach) {
        std::printf("detached: `shard attach %lld` to follow\n", static_cast<long long>(*id));
        return 0;
    }
    const jobs::RunRecord final = followRun(store, *id);
    if (!jobs::isTerminal(final.status))
        return 0; // detached with Ctrl-C
    printSummary(final);
    if (final.status == jobs::RunStatus::Finished) {
        std::printf("evaluating on %d held-out questions...\n", o.evalCount);
        std::fflush(stdout);
        const double after
            = evalDemo(worker, final.runDir + QStringLiteral("/model"), task, o.evalCount);
        recordAccuracy(final.runDir, before, after, o.evalCount);
        std::printf("accuracy: %.0f%% before training, %.0f%% after (%d held-out questions)\n",
            100.0 * before, 100.0 * after, o.evalCount);
    }
    const QString chart = root + QStringLiteral("/charts.png");
    writeComparePng(store, {final}, QStringLiteral("step"), chart);
    std::printf("charts: %s\nrun:    %s (store %s; `shard runs show %lld`)\n", qPrintable(chart),
        qPrintable(final.runDir), qPrintable(store.path()), static_cast<long long>(final.id));
    return exitCodeFor(final.status);
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto o = std::make_shared<DemoOptions>();
    auto* cmd = app.add_subcommand("demo",
        "fine-tune a tiny model on built-in data (2 ranks, "
        "zero3, CPU, about a minute) and chart it");
    cmd->add_option("--store", o->store, "run store");
    cmd->add_option("--out", o->out, "folder for the model, data, run and charts");
    cmd->add_option("--preset", o->preset, "model preset (default tiny-1m)");
    cmd->add_option("--steps", o->steps, "optimizer steps (default 150)")
        ->check(cmdline::positiveNumber());
    cmd->add_option("--ranks", o->ranks, "ranks (default 2)")->check(cmdline::positiveNumber());
    cmd->add_option("--eval-count", o->evalCount, "held-out questions to score (default 100)")
        ->check(cmdline::positiveNumber());
    cmd->add_option("--task", o->task, "demo task: copy (default) or arithmetic")
        ->check(CLI::IsMember({"copy", "arithmetic"}));
    cmd->add_option("--worker", o->worker, "shard-worker program");
    cmd->add_flag("--detach", o->detach, "return once started");
    cmd->callback([o] { exitCode() = demoCommand(*o); });
});

} // namespace
} // namespace shard::cli
