// shard-worker export: a checkpoint (or a run directory's newest complete checkpoint) as a Hugging
// Face folder, written tensor by tensor.
#if __has_include("ckpt/hf_export.h")

#include <cstdio>
#include <memory>
#include <string>

#include "ckpt/checkpoint_store.h"
#include "ckpt/hf_export.h"
#include "command.h"

namespace {

struct ExportArgs {
    std::string checkpoint;
    std::string out;
    std::string dtype = "fp32";
    std::string tokenizer;
    int64_t maxShardMiB = 5 * 1024;
    bool merge = false;
};

const shard::worker::CommandRegistration kRegistration([](CLI::App& app) {
    auto a = std::make_shared<ExportArgs>();
    CLI::App* cmd = app.add_subcommand(
        "export", "Export a checkpoint as a Hugging Face folder (config, safetensors, tokenizer)");
    cmd->add_option("--checkpoint", a->checkpoint,
           "Checkpoint folder (checkpoints/step-N) or a run folder (its newest complete one)")
        ->required();
    cmd->add_option("--out", a->out, "Output folder (must not exist or be empty)")->required();
    cmd->add_option("--dtype", a->dtype, "fp32 (default, bit-exact) or bf16");
    cmd->add_option("--tokenizer", a->tokenizer,
        "Folder with the tokenizer files (default: the run's model folder)");
    cmd->add_option("--max-shard-mib", a->maxShardMiB, "Largest safetensors shard (MiB)");
    cmd->add_flag("--merge", a->merge,
        "LoRA checkpoints: write the base with the adapters merged (W + scale B A) instead of the "
        "PEFT adapter folder");
    cmd->callback([a] {
        if (a->maxShardMiB <= 0)
            throw std::runtime_error("--max-shard-mib must be positive");
        const std::string dir = shard::ckpt::resolveResume(a->checkpoint, "");
        shard::ckpt::ExportOptions o;
        o.dtype = a->dtype;
        o.tokenizerDir = a->tokenizer;
        o.merge = a->merge;
        o.maxShardBytes = static_cast<uint64_t>(a->maxShardMiB) << 20;
        const auto r = shard::ckpt::exportHuggingFace(dir, a->out, o);
        if (!r.warning.empty())
            std::fprintf(stderr, "export: warning: %s\n", r.warning.c_str());
        std::fprintf(stderr,
            "export: %s -> %s (%s, %.1f MiB in %zu file(s), %zu tokenizer file(s))\n", dir.c_str(),
            a->out.c_str(), a->dtype.c_str(), r.bytes / 1048576.0, r.weightFiles.size(),
            r.tokenizerFiles.size());
    });
});

} // namespace

#endif
