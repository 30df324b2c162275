// `shard generate`: text from a model folder, a run or a checkpoint, streamed to the terminal as
// `shard-worker generate` produces it (the CLI never links Torch). Every option after the CLI's
// own is passed to the worker unchanged; --json prints the worker's records as they come.
#include <cstdio>
#include <memory>

#include <QCoreApplication>
#include <QEventLoop>

#include "command.h"
#include "jobs/generate_process.h"

namespace shard::cli {
namespace {

struct GenerateCliOptions {
    std::string worker = "shard-worker";
    bool json = false;
};

int generateCommand(const GenerateCliOptions& o, const std::vector<std::string>& pass)
{
    QStringList args;
    for (const auto& a : pass)
        args << QString::fromStdString(a);
    jobs::GenerateProcess gen;
    QEventLoop loop;
    int rc = 1;
    if (o.json) {
        QObject::connect(&gen, &jobs::GenerateProcess::modelLoaded, [](const auto& r) {
            std::printf("%s\n", protocol::encodeLine(protocol::toJson(r)).c_str());
            std::fflush(stdout);
        });
    }
    QObject::connect(&gen, &jobs::GenerateProcess::token, [&](const auto& t) {
        if (o.json)
            std::printf("%s\n", protocol::encodeLine(protocol::toJson(t)).c_str());
        else
            std::fputs(t.text.c_str(), stdout);
        std::fflush(stdout);
    });
    QObject::connect(&gen, &jobs::GenerateProcess::summary, [&](const auto& s) {
        if (o.json) {
            std::printf("%s\n", protocol::encodeLine(protocol::toJson(s)).c_str());
        } else {
            std::printf("%s\n", s.tail.c_str());
            std::fprintf(stderr,
                "[%lld tokens, stop: %s; prompt %lld tokens at %.0f tok/s, decode %.1f tok/s]\n",
                static_cast<long long>(s.tokens), s.stopReason.c_str(),
                static_cast<long long>(s.promptTokens), s.prefillTokensPerSec,
                s.decodeTokensPerSec);
        }
        std::fflush(stdout);
    });
    QObject::connect(
        &gen, &jobs::GenerateProcess::finished, [&](bool ok, bool, const QString& message) {
            if (!ok)
                std::fprintf(stderr, "%s\n", qPrintable(message));
            rc = ok ? 0 : 1;
            loop.quit();
        });
    if (!gen.start(QString::fromStdString(o.worker), args))
        throw std::runtime_error(gen.error().toStdString());
    loop.exec();
    return rc;
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto o = std::make_shared<GenerateCliOptions>();
    auto* cmd = app.add_subcommand("generate",
        "generate text from a model folder, a run or a checkpoint (every option of "
        "`shard-worker generate --help`: --model, --checkpoint, --prompt, --chat, --temperature, "
        "--top-k, --top-p, --min-p, --seed, --stop, --dtype, ...)");
    cmd->add_option("--worker", o->worker, "shard-worker program");
    cmd->add_flag("--json", o->json, "print the worker's JSON-lines records");
    cmd->allow_extras();
    cmd->callback([o, cmd] { exitCode() = generateCommand(*o, cmd->remaining()); });
});

} // namespace
} // namespace shard::cli
