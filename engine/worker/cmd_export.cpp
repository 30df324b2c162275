// shard-worker export: a checkpoint (or a run directory's newest complete checkpoint) as a Hugging
// Face folder, written tensor by tensor; or, with --format gguf, a Hugging Face folder or a
// checkpoint (LoRA merged) as one GGUF file for llama.cpp / Ollama with a Modelfile beside it.
#if __has_include("ckpt/hf_export.h")

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "ckpt/checkpoint_store.h"
#include "ckpt/gguf_export.h"
#include "ckpt/hf_export.h"
#include "ckpt/manifest.h"
#include "command.h"

namespace {

struct ExportArgs {
    std::string format = "hf";
    std::string model;
    std::string type = "f16";
    std::string name;
    std::string checkpoint;
    std::string out;
    std::string dtype = "fp32";
    std::string tokenizer;
    int64_t maxShardMiB = 5 * 1024;
    bool merge = false;
};

// GGUF from a Hugging Face folder, or from a checkpoint through a temporary merged fp32 export
// beside the output (removed afterwards).
void exportGgufCommand(const ExportArgs& a)
{
    namespace fs = std::filesystem;
    if (a.model.empty() == a.checkpoint.empty())
        throw std::runtime_error("--format gguf takes one source: --model FOLDER (a Hugging Face "
                                 "folder) or --checkpoint (a checkpoint or run folder)");
    if (fs::path(a.out).extension() != ".gguf")
        throw std::runtime_error("--out '" + a.out + "': name the file NAME.gguf");
    if (fs::exists(a.out))
        throw std::runtime_error("--out '" + a.out + "' already exists; choose a new name");
    if (!shard::ckpt::isGgufType(a.type))
        throw std::runtime_error("--type '" + a.type + "': use " + shard::ckpt::ggufTypeList());
    shard::ckpt::GgufOptions o;
    o.type = a.type;
    o.name = a.name;
    // One line per tensor on stderr: the studio's export dialog reads them for its progress bar.
    o.progress = [](int64_t done, int64_t total) {
        std::fprintf(stderr, "export: tensor %lld/%lld\n", static_cast<long long>(done),
            static_cast<long long>(total));
    };
    // The temporary Hugging Face folder goes when this returns or throws.
    struct TempFolder {
        std::string path;
        ~TempFolder()
        {
            std::error_code ec;
            if (!path.empty())
                fs::remove_all(path, ec);
        }
    } temp;
    std::string source = a.model;
    if (!a.checkpoint.empty()) {
        const std::string dir = shard::ckpt::resolveResume(a.checkpoint, "");
        temp.path = a.out + ".hf-tmp";
        std::error_code ec;
        fs::remove_all(temp.path, ec);
        shard::ckpt::ExportOptions hf;
        hf.dtype = "fp32";
        hf.tokenizerDir = a.tokenizer;
        // LoRA: the base with the adapters merged (GGUF holds one model); full fine-tuning as is.
        hf.merge = shard::ckpt::readManifest(dir + "/manifest.json").trainState.contains("lora");
        shard::ckpt::exportHuggingFace(dir, temp.path, hf);
        source = temp.path;
        if (o.name.empty())
            o.name = fs::path(a.checkpoint).lexically_normal().filename().string();
    }
    const auto r = shard::ckpt::exportGguf(source, a.out, o);
    for (const auto& f : r.fallbacks)
        std::fprintf(stderr, "export: %s\n", f.c_str());
    std::string types;
    for (const auto& [name, count] : r.types)
        types += (types.empty() ? "" : ", ") + std::to_string(count) + " " + name;
    std::fprintf(stderr, "export: tensor types: %s\n", types.c_str());
    std::fprintf(stderr, "export: %s -> %s (%s, %s, tokenizer %s/%s, %lld tensors, %.1f MiB)%s%s\n",
        source.c_str(), r.file.c_str(), r.architecture.c_str(), a.type.c_str(),
        r.tokenizerModel.c_str(), r.pre.c_str(), static_cast<long long>(r.tensors),
        r.bytes / 1048576.0, r.modelfile.empty() ? "" : "; Modelfile ", r.modelfile.c_str());
}

const shard::worker::CommandRegistration kRegistration([](CLI::App& app) {
    auto a = std::make_shared<ExportArgs>();
    CLI::App* cmd = app.add_subcommand("export",
        "Export a checkpoint as a Hugging Face folder, or a model as GGUF (--format gguf)");
    cmd->add_option("--format", a->format,
        "hf (a Hugging Face folder, default) or gguf (one file "
        "for llama.cpp / Ollama, with an Ollama Modelfile)");
    cmd->add_option("--checkpoint", a->checkpoint,
        "Checkpoint folder (checkpoints/step-N) or a run folder (its newest complete one)");
    cmd->add_option("--model", a->model,
        "--format gguf: a Hugging Face model folder (a run's model/ folder, say) instead of a "
        "checkpoint");
    cmd->add_option("--out", a->out,
           "Output folder (hf: must not exist or be empty) or file (gguf: NAME.gguf)")
        ->required();
    cmd->add_option("--type", a->type,
        "--format gguf: f32, f16 (default), bf16, q8_0, q6_k or q4_k_m (llama-quantize's mix of "
        "4- and 6-bit k-quants)");
    cmd->add_option("--name", a->name, "--format gguf: general.name (default: the folder's)");
    cmd->add_option("--dtype", a->dtype, "hf: fp32 (default, bit-exact) or bf16");
    cmd->add_option("--tokenizer", a->tokenizer,
        "Folder with the tokenizer files (default: the run's model folder)");
    cmd->add_option("--max-shard-mib", a->maxShardMiB, "Largest safetensors shard (MiB)");
    cmd->add_flag("--merge", a->merge,
        "LoRA checkpoints: write the base with the adapters merged (W + scale B A) instead of the "
        "PEFT adapter folder (--format gguf always merges)");
    cmd->callback([a] {
        if (a->format == "gguf") {
            exportGgufCommand(*a);
            return;
        }
        if (a->format != "hf")
            throw std::runtime_error("--format '" + a->format + "': use hf or gguf");
        if (a->checkpoint.empty())
            throw std::runtime_error("--checkpoint is required (a checkpoint or a run folder)");
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
