// shard: the command-line face of Shard Studio (plan, run, monitor, compare). Never links Torch.
#include <QCoreApplication>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "command.h"

int main(int argc, char** argv)
{
    QCoreApplication qapp(argc, argv);
    QCoreApplication::setApplicationName("shard-studio");
    QCoreApplication::setOrganizationName("ShardStudio");
    spdlog::set_default_logger(spdlog::stderr_color_mt("shard"));
    spdlog::set_level(spdlog::level::warn);
    CLI::App app {"shard: plan, launch and compare sharded fine-tuning runs"};
    return shard::cmdline::runCommandLine(app, "shard", argc, argv);
}
