// Export of a Hugging Face model folder (or a checkpoint, through a temporary Hugging Face
// export) as one GGUF file for llama.cpp, Ollama and LM Studio, with an Ollama Modelfile beside
// it. docs/ARCHITECTURE.md, "GGUF export", says what is mapped and how.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace shard::ckpt {

struct GgufOptions {
    // f32, f16, bf16, q8_0, q6_k or q4_k_m (llama-quantize's mix of q4_K and q6_K); norms,
    // biases and 1-D tensors stay f32.
    std::string type = "f16";
    std::string name;      // general.name (default: the folder's name)
    bool modelfile = true; // write <out without .gguf>.Modelfile beside the file
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
    // Tensors written in each ggml type ("q4_K": 12, "f32": 9, ...).
    std::map<std::string, int64_t> types;
    // Matrices written in another type than asked because their rows are not whole blocks of
    // it, as llama.cpp's tools do ("blk.0.ffn_down.weight: q5_0 instead of q4_K (rows of 172
    // values are not whole 256-value blocks)").
    std::vector<std::string> fallbacks;
};

// The --type values exportGguf takes, and them as "f32, f16, ... or q4_k_m" for messages.
bool isGgufType(const std::string& type);
std::string ggufTypeList();

// Reads `modelDir` (config.json, safetensors, tokenizer.json, tokenizer_config.json) and writes
// `outFile` through `<outFile>.partial`, renamed once complete (a failed or interrupted export
// leaves nothing under the final name). Throws with a message naming what GGUF cannot express.
GgufResult exportGguf(
    const std::string& modelDir, const std::string& outFile, const GgufOptions& options);

} // namespace shard::ckpt
