// shard: the command-line face of Shard Studio (plan, run, monitor, compare). Never links Torch.
#include <cstdio>
#include <exception>

#include <QCoreApplication>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "command.h"
#include "shard/version.h"

namespace shard::cli {

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

} // namespace shard::cli

int main(int argc, char** argv)
{
    QCoreApplication qapp(argc, argv);
    QCoreApplication::setApplicationName("shard-studio");
    QCoreApplication::setOrganizationName("ShardStudio");
    CLI::App app {"shard: plan, launch and compare sharded fine-tuning runs"};
    app.set_version_flag(
        "--version", std::string("shard ") + SHARD_VERSION + " (" + SHARD_GIT_REV + ")");
    app.require_subcommand(1);
    spdlog::set_default_logger(spdlog::stderr_color_mt("shard"));
    spdlog::set_level(spdlog::level::warn);
    for (auto& setup : shard::cli::commandRegistry())
        setup(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shard: error: %s\n", e.what());
        return 1;
    }
    return shard::cli::exitCode();
}
