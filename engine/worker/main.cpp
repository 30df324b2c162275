// shard-worker: one process per rank (train), plus the launcher and the data/model tools.
#include <cstdio>
#include <exception>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "command.h"
#include "shard/version.h"

namespace shard::worker {

std::vector<CommandSetup>& commandRegistry()
{
    static std::vector<CommandSetup> registry;
    return registry;
}

int& exitCode()
{
    static int code = 0;
    return code;
}

} // namespace shard::worker

int main(int argc, char** argv)
{
    CLI::App app {"shard-worker: the Shard Studio engine (one process per rank)"};
    app.set_version_flag(
        "--version", std::string("shard-worker ") + SHARD_VERSION + " (" + SHARD_GIT_REV + ")");
    app.require_subcommand(1);
    // Logs go to stderr: the worker's stdout carries protocol records only.
    spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
    for (auto& setup : shard::worker::commandRegistry())
        setup(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shard-worker: error: %s\n", e.what());
        return 1;
    }
    return shard::worker::exitCode();
}
