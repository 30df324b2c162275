// Export of a Hugging Face model folder (or a checkpoint, through a temporary Hugging Face
// export) as one GGUF file for llama.cpp, Ollama and LM Studio, with an Ollama Modelfile beside
// it. docs/ARCHITECTURE.md, "GGUF export", says what is mapped and how.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace shard::ckpt {

struct GgufOptions {
    std::string type = "f16"; // f32, f16, bf16 or q8_0 (norms, biases and 1-D tensors stay f32)
    std::string name;         // general.name (default: the folder's name)
    bool modelfile = true;    // write <out without .gguf>.Modelfile beside the file
    // Called after each tensor is written (done of total).
    std::function<void(int64_t done, int64_t total)> progress;
};

struct GgufResult {
    std::string file;
    std::string modelfile;      // "" when not written
    std::string architecture;   // llama, qwen2, qwen3
    std::string tokenizerModel; // llama (SentencePiece-style) or gpt2 (byte-level BPE)
    std::string pre;            // tokenizer.ggml.pre
    int64_t tensors = 0;
    int64_t bytes = 0; // file size
    // q8_0: matrices written as f16 instead because their rows are not whole 32-value blocks
    // (llama.cpp's converter does the same).
    int64_t f16Fallbacks = 0;
};

// Reads `modelDir` (config.json, safetensors, tokenizer.json, tokenizer_config.json) and writes
// `outFile` through `<outFile>.partial`, renamed once complete (a failed or interrupted export
// leaves nothing under the final name). Throws with a message naming what GGUF cannot express.
GgufResult exportGguf(
    const std::string& modelDir, const std::string& outFile, const GgufOptions& options);

} // namespace shard::ckpt
