// shard-worker make-data: writes the built-in demo task (arithmetic or copy) as JSONL.
#include <iostream>
#include <memory>

#include "command.h"
#include "data/demo_task.h"

namespace {

struct MakeDataOptions {
    std::string task;
    std::string out;
    int64_t count = 0;
    uint64_t seed = 0;
    std::string format = "chat";
};

shard::worker::CommandRegistration registration([](CLI::App& app) {
    auto opts = std::make_shared<MakeDataOptions>();
    CLI::App* cmd = app.add_subcommand("make-data",
        "Write a demo task with checkable answers as JSONL (chat, alpaca or preference pairs)");
    cmd->add_option("--task", opts->task, "arithmetic | copy")->required();
    cmd->add_option("--out", opts->out, "Output .jsonl file")->required();
    cmd->add_option("--count", opts->count, "Number of samples")->required();
    cmd->add_option("--seed", opts->seed, "Random seed (default 0)");
    cmd->add_option("--format", opts->format,
        "chat (default) | alpaca | preference (the right answer chosen over a wrong one, for "
        "--objective dpo|orpo)");
    cmd->callback([opts] {
        const auto task = shard::data::parseDemoTask(opts->task);
        const auto format = shard::data::parseDataFormat(opts->format);
        shard::data::writeDemoData(opts->out, task, opts->count, opts->seed, format);
        std::cerr << "make-data: wrote " << opts->count << " " << opts->task << " samples ("
                  << opts->format << ") to " << opts->out << "\n";
    });
});

} // namespace
