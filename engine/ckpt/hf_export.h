// Export of a checkpoint's parameters as a Hugging Face model folder: config.json (from the
// manifest's model config), model.safetensors or shards + model.safetensors.index.json, and the
// tokenizer files of the run's model folder. Tensors are assembled and written one at a time, so
// at most one full tensor (plus its converted copy) is in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shard::ckpt {

struct ExportOptions {
    std::string dtype = "fp32";          // fp32 or bf16 (round to nearest even)
    uint64_t maxShardBytes = 5ull << 30; // split into shards above this size
    std::string tokenizerDir;            // "" = the manifest's tokenizer / model folder
    // LoRA checkpoints: false writes the PEFT adapter folder; true a full model folder with the
    // adapters merged into the base (read from the manifest's model folder).
    bool merge = false;
};

struct ExportResult {
    std::vector<std::string> weightFiles;    // relative to the output folder
    std::vector<std::string> tokenizerFiles; // copied
    std::string warning;                     // e.g. no tokenizer folder found
    int64_t bytes = 0;                       // weight bytes written
    int64_t peakTensorBytes = 0;             // largest single tensor held
};

// The tokenizer files a Hugging Face folder may carry (copied when present).
const std::vector<std::string>& tokenizerFileNames();

// Writes `outDir` (created; it must not exist or be empty) atomically through `<outDir>.tmp`.
// A LoRA checkpoint (its train state names the adapters' settings) exports as a PEFT adapter
// folder, or with options.merge as the merged model.
ExportResult exportHuggingFace(
    const std::string& checkpointDir, const std::string& outDir, const ExportOptions& options);

} // namespace shard::ckpt
