// `shard-worker eval-demo`: greedy generation on held-out demo questions. A random init model
// answers (almost) nothing right and the command runs cleanly with plain and JSON output; bad
// inputs (missing folder, folder without a tokenizer, unknown task, non-positive count) fail with
// one clear error line.
#include <cstdio>
#include <string>

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

namespace {

const QString kWorker = QStringLiteral(SHARD_BINARY_DIR "/engine/worker/shard-worker");
int g_failures = 0;

void check(bool ok, const std::string& what)
{
    if (!ok) {
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
        ++g_failures;
    }
}

struct Result {
    int code = -1;
    QString out;
    QString err;
};

Result run(const QStringList& args)
{
    QProcess p;
    p.start(kWorker, args);
    Result r;
    if (!p.waitForFinished(60000) || p.exitStatus() != QProcess::NormalExit)
        return r;
    r.code = p.exitCode();
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError()).trimmed();
    return r;
}

} // namespace

int main()
{
    if (!QFile::exists(kWorker)) {
        std::printf("SKIP: shard-worker is not built here\n");
        return 0;
    }
    QTemporaryDir dir;
    const QString model = dir.filePath("model");
    const Result init = run({"init-model", "--preset", "tiny-1m", "--out", model, "--seed", "3"});
    check(init.code == 0, "init-model: " + init.err.toStdString());

    // JSON: a random model gets (almost) nothing right; the samples show its outputs.
    const Result json
        = run({"eval-demo", "--model", model, "--task", "arithmetic", "--count", "20", "--json"});
    check(json.code == 0, "eval-demo --json: " + json.err.toStdString());
    const auto j = nlohmann::json::parse(json.out.toStdString(), nullptr, false);
    check(j.is_object() && j.contains("accuracy"), "eval-demo --json prints an accuracy");
    if (j.is_object() && j.contains("accuracy")) {
        const double acc = j["accuracy"].get<double>();
        check(acc >= 0.0 && acc <= 0.1, "random init accuracy is low, got " + std::to_string(acc));
        check(j["count"] == 20 && j["task"] == "arithmetic", "eval-demo echoes task and count");
        check(j["samples"].is_array() && j["samples"].size() == 5
                && j["samples"][0]["prompt"].get<std::string>().find("What is") == 0,
            "eval-demo shows sample prompts");
    }
    // Same seed, same questions, same (deterministic) answers.
    const Result again
        = run({"eval-demo", "--model", model, "--task", "arithmetic", "--count", "20", "--json"});
    check(again.out == json.out, "eval-demo is deterministic");
    // Plain output: the copy task too.
    const Result plain = run({"eval-demo", "--model", model, "--task", "copy", "--count", "5"});
    check(plain.code == 0 && plain.out.contains("accuracy ") && plain.out.contains("copy"),
        "eval-demo plain output: " + plain.out.toStdString() + plain.err.toStdString());

    // Bad inputs: one clear line, non-zero exit.
    const auto expectError = [](const Result& r, const char* needle, const std::string& what) {
        check(r.code != 0 && r.code != -1 && r.err.contains(needle) && !r.err.contains('\n'),
            what + ": got code " + std::to_string(r.code) + " '" + r.err.toStdString() + "'");
    };
    expectError(run({"eval-demo", "--model", dir.filePath("missing")}), "no such folder",
        "missing model folder");
    QDir().mkpath(dir.filePath("empty"));
    expectError(run({"eval-demo", "--model", dir.filePath("empty")}), "no tokenizer.json",
        "folder without tokenizer");
    QFile::copy(model + "/tokenizer.json", dir.filePath("empty/tokenizer.json"));
    QFile::copy(model + "/tokenizer_config.json", dir.filePath("empty/tokenizer_config.json"));
    expectError(run({"eval-demo", "--model", dir.filePath("empty")}), "config.json",
        "folder without config.json");
    expectError(run({"eval-demo", "--model", model, "--task", "poetry"}), "unknown demo task",
        "unknown task");
    expectError(run({"eval-demo", "--model", model, "--count", "0"}), "--count", "zero count");

    if (g_failures == 0)
        std::printf("tst_demo_eval: all checks passed\n");
    return g_failures == 0 ? 0 : 1;
}
