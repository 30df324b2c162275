// shard-worker subcommands register themselves here; each lives in its own cmd_<name>.cpp.
#pragma once

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

namespace shard::worker {

// Adds one subcommand to the top-level app. The callback may throw std::exception (printed as
// one line, exit 1) or set exitCode() for a specific status.
using CommandSetup = std::function<void(CLI::App& app)>;

std::vector<CommandSetup>& commandRegistry();
int& exitCode();

struct CommandRegistration {
    explicit CommandRegistration(CommandSetup setup)
    {
        commandRegistry().push_back(std::move(setup));
    }
};

} // namespace shard::worker
