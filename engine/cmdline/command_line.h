// Self-registering subcommands for shard (the CLI) and shard-worker: each cmd_<name>.cpp adds
// its subcommand with a static CommandRegistration, and main() calls runCommandLine(). Each
// executable has its own registry (this library's state is per executable).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace shard::cmdline {

// Adds one subcommand to the top-level app. Its callback may throw std::exception (printed as
// one line, exit 1) or set exitCode() for a specific status.
using CommandSetup = std::function<void(CLI::App& app)>;

std::vector<CommandSetup>& commandRegistry();
int& exitCode();

// For an option that counts or measures something (ranks, steps, seconds): above zero, refused
// in words ("--nproc: must be above 0 (got '0')"), where CLI11's PositiveNumber prints its range
// as 0 to 1.8e308.
CLI::Validator positiveNumber();
// The same for a number that may be 0 ("must be 0 or above (got '-1')").
CLI::Validator nonNegativeNumber();

struct CommandRegistration {
    explicit CommandRegistration(CommandSetup setup)
    {
        commandRegistry().push_back(std::move(setup));
    }
};

// Runs the command line: --version prints "<program> <version> (<git revision>)" (then
// `buildInfo` on a second line when given), exactly one
// registered subcommand is required, a usage error exits as CLI11 reports it, an exception from
// a command prints "<program>: error: <what>" and exits 1; otherwise the command's exitCode().
int runCommandLine(CLI::App& app, const std::string& program, int argc, char** argv,
    const std::string& buildInfo = {});

// spdlog's default logger becomes `name` on stderr (coloured on a terminal), from warnings up
// when warningsOnly. Here rather than in main(): shard-worker's main.cpp is compiled with
// LibTorch's include directories, and a PyTorch wheel's carry their own {fmt}, which must not
// meet spdlog's (docs/ARCHITECTURE.md, "Building against a PyTorch wheel").
void logToStderr(const std::string& name, bool warningsOnly = false);

} // namespace shard::cmdline
