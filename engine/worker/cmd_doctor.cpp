// `shard-worker doctor [--json] [--worker PATH]`: `shard doctor`'s checks (plan/doctor.h) for a
// machine that has the worker alone: a cluster's compute node, a GPU machine without Qt (the GPU
// script prints it). The worker checked is this program unless --worker names another.
#include <climits>
#include <cstdio>
#include <memory>
#include <string>

#include <unistd.h>

#include "command.h"
#include "plan/doctor.h"

namespace shard::worker {

namespace {

std::string thisProgram()
{
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, size_t(n)) : std::string("shard-worker");
}

const CommandRegistration kRegistration([](CLI::App& app) {
    auto* cmd = app.add_subcommand("doctor",
        "What this machine can train with, and how to fix the rest (shard doctor's checks)");
    auto asJson = std::make_shared<bool>(false);
    auto worker = std::make_shared<std::string>();
    cmd->add_flag(
        "--json", *asJson, "One JSON object: {\"checks\": [{name, status, detail, fix}]}");
    cmd->add_option("--worker", *worker, "The worker program to check (default: this one)");
    cmd->callback([asJson, worker] {
        const auto checks = doctor::runLocal(worker->empty() ? thisProgram() : *worker);
        const std::string text = *asJson ? doctor::toJson(checks) + "\n" : doctor::format(checks);
        std::fwrite(text.data(), 1, text.size(), stdout);
        exitCode() = doctor::workerMissing(checks) ? 1 : 0;
    });
});

} // namespace

} // namespace shard::worker
