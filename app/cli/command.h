// `shard` subcommands register themselves here; each lives in its own cmd_<name>.cpp.
#pragma once

#include "cmdline/command_line.h"

namespace shard::cli {

using cmdline::CommandRegistration;
using cmdline::CommandSetup;
using cmdline::exitCode;

} // namespace shard::cli
