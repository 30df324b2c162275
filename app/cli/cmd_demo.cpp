// `shard demo`: the main job on an embedded default: a tiny model on the built-in demo data,
// 2 ranks with zero3 on CPU, about a minute, with a progress bar; recorded in the run store;
// ends by printing where the charts and the run are.
#include <cstdio>

#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QProcess>

#include "command.h"
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

// The trainer reads pre-tokenized samples: the demo turns the generated Q/A pairs into one
// text, tokenizes it with the model's own tokenizer (`shard-worker tokenize`) and cuts it into
// windows of seqLen tokens, so the model learns the task's format and its answers.
QString tokenizeDemoData(const QString& worker, const QString& assets, int seqLen)
{
    QFile chat(assets + "/data.jsonl");
    if (!chat.open(QIODevice::ReadOnly))
        throw std::runtime_error("cannot read " + chat.fileName().toStdString());
    QByteArray text;
    while (!chat.atEnd()) {
        const QByteArray line = chat.readLine().trimmed();
        auto j = nlohmann::json::parse(
            line.constData(), line.constData() + line.size(), nullptr, false);
        if (!j.is_object() || !j.contains("messages"))
            continue;
        for (const auto& m : j["messages"])
            text += QByteArray::fromStdString(
                (m.value("role", "") == "user" ? "Q: " : "A: ") + m.value("content", "") + "\n");
    }
    QFile textFile(assets + "/data.txt");
    if (!textFile.open(QIODevice::WriteOnly) || textFile.write(text) != text.size())
        throw std::runtime_error("cannot write " + textFile.fileName().toStdString());
    textFile.close();
    QProcess p;
    p.start(worker,
        {"tokenize", "--tokenizer", assets + "/model", "--text-file", textFile.fileName(), "--json",
            "--no-special"});
    if (!p.waitForFinished(120000) || p.exitCode() != 0)
        throw std::runtime_error("shard-worker tokenize failed: "
            + QString::fromLocal8Bit(p.readAllStandardError()).trimmed().toStdString());
    const QByteArray out = p.readAllStandardOutput();
    auto j = nlohmann::json::parse(out.constData(), out.constData() + out.size(), nullptr, false);
    if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array())
        throw std::runtime_error("shard-worker tokenize gave no ids");
    const auto& ids = j["ids"];
    QFile tokenized(assets + "/data.tokenized.jsonl");
    if (!tokenized.open(QIODevice::WriteOnly))
        throw std::runtime_error("cannot write " + tokenized.fileName().toStdString());
    int windows = 0;
    for (size_t start = 0; start + size_t(seqLen) <= ids.size(); start += size_t(seqLen)) {
        nlohmann::json w = nlohmann::json::array();
        for (size_t i = start; i < start + size_t(seqLen); ++i)
            w.push_back(ids[i]);
        tokenized.write(QByteArray::fromStdString(nlohmann::json {{"input_ids", w}}.dump()) + '\n');
        ++windows;
    }
    if (windows == 0)
        throw std::runtime_error("the demo data is shorter than one sequence");
    return tokenized.fileName();
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
    std::printf("demo: a %s model on the built-in arithmetic task, %d ranks zero3 on CPU\n",
        o.preset.c_str(), o.ranks);
    std::fflush(stdout);
    runWorker(worker,
        {"init-model", "--preset", QString::fromStdString(o.preset), "--out", assets + "/model",
            "--seed", "0"},
        "shard-worker init-model");
    runWorker(worker,
        {"make-data", "--task", "arithmetic", "--out", assets + "/data.jsonl", "--count", "4000",
            "--seed", "0"},
        "shard-worker make-data");

    const QString data = tokenizeDemoData(worker, assets, 64);

    nlohmann::json spec = {{"name", "demo"}, {"model", (assets + "/model").toStdString()},
        {"data", {data.toStdString()}}, {"data_format", "tokenized"}, {"strategy", "zero3"},
        {"nodes", 1}, {"procs_per_node", o.ranks}, {"device", "cpu"}, {"precision", "fp32"},
        {"steps", o.steps}, {"micro_batch", 8}, {"seq_len", 64}, {"lr", 3e-3}, {"warmup", 10},
        {"schedule", "cosine"}, {"seed", 0}, {"log_every", 1}, {"eval_fraction", 0.05},
        {"eval_every", 50}, {"v", 1}};
    jobs::LaunchRequest req;
    req.name = QStringLiteral("demo");
    req.specJson = QByteArray::fromStdString(spec.dump(2));
    req.procsPerNode = o.ranks;
    req.runDir = root + QStringLiteral("/run");
    req.workerProgram = worker;
    auto id = jobs::LocalLauncher(store).start(req);
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
        ->check(CLI::PositiveNumber);
    cmd->add_option("--ranks", o->ranks, "ranks (default 2)")->check(CLI::PositiveNumber);
    cmd->add_option("--worker", o->worker, "shard-worker program");
    cmd->add_flag("--detach", o->detach, "return once started");
    cmd->callback([o] { exitCode() = demoCommand(*o); });
});

} // namespace
} // namespace shard::cli
