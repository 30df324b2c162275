// shard-worker: one process per rank (train), plus the launcher and the data/model tools.
#include "command.h"
#include "dist/build_info.h"

int main(int argc, char** argv)
{
    // Logs go to stderr: the worker's stdout carries protocol records only.
    shard::cmdline::logToStderr("worker");
    CLI::App app {"shard-worker: the Shard Studio engine (one process per rank)"};
    return shard::cmdline::runCommandLine(
        app, "shard-worker", argc, argv, shard::dist::buildInfo());
}
