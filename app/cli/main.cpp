// shard: the command-line face of Shard Studio (plan, run, monitor, compare). Never links Torch.
#include <QCoreApplication>

#include "command.h"

int main(int argc, char** argv)
{
    QCoreApplication qapp(argc, argv);
    QCoreApplication::setApplicationName("shard-studio");
    QCoreApplication::setOrganizationName("ShardStudio");
    shard::cmdline::logToStderr("shard", /*warningsOnly=*/true);
    CLI::App app {"shard: plan, launch and compare sharded fine-tuning runs"};
    return shard::cmdline::runCommandLine(app, "shard", argc, argv);
}
