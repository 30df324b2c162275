#include "cmdline/command_line.h"

#include <cstdio>
#include <exception>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "shard/version.h"

namespace shard::cmdline {

std::vector<CommandSetup>& commandRegistry()
{
    static std::vector<CommandSetup> registry;
    return registry;
}

CLI::Validator positiveNumber()
{
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                size_t used = 0;
                const double v = std::stod(text, &used);
                if (used == text.size() && v > 0)
                    return {};
            } catch (const std::exception&) {
            }
            return "must be above 0 (got '" + text + "')";
        },
        "POSITIVE");
}

CLI::Validator nonNegativeNumber()
{
    return CLI::Validator(
        [](std::string& text) -> std::string {
            try {
                size_t used = 0;
                const double v = std::stod(text, &used);
                if (used == text.size() && v >= 0)
                    return {};
            } catch (const std::exception&) {
            }
            return "must be 0 or above (got '" + text + "')";
        },
        "NONNEGATIVE");
}

int& exitCode()
{
    static int code = 0;
    return code;
}

int runCommandLine(
    CLI::App& app, const std::string& program, int argc, char** argv, const std::string& buildInfo)
{
    std::string version = program + " " + SHARD_VERSION + " (" + SHARD_GIT_REV + ")";
    if (!buildInfo.empty())
        version += "\n" + buildInfo;
    app.set_version_flag("--version", version);
    app.require_subcommand(1);
    for (auto& setup : commandRegistry())
        setup(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: %s\n", program.c_str(), e.what());
        return 1;
    }
    return exitCode();
}

void logToStderr(const std::string& name, bool warningsOnly)
{
    spdlog::set_default_logger(spdlog::stderr_color_mt(name));
    if (warningsOnly)
        spdlog::set_level(spdlog::level::warn);
}

} // namespace shard::cmdline
