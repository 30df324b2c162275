// Hugging Face model folders: reading config.json + safetensors with full validation, and
// writing config.json, model.safetensors (or shards + index) and the tokenizer files.
#pragma once

#include <memory>
#include <string>

#include "core/safetensors/safetensors_file.h"
#include "plan/model_spec.h"

namespace shard::engine {

struct HfModelFolder {
    std::string dir;
    plan::ModelSpec spec;
    std::unique_ptr<SafetensorsReader> weights;
};

// Validates the folder: it exists, config.json parses (fields named on error), the weights are
// present and every parameter the config implies exists with the right shape. Throws one clear
// message naming the folder, file and tensor. The layer count is checked against the weights
// before anything the size of the model is built (a config.json saying 10^9 layers is an error,
// not an allocation).
HfModelFolder openHfModelFolder(const std::string& dir);

// The first tensor of `weights` that holds NaN or Inf, as "tensor 'NAME' holds NaN" (its file
// named), or "" when every floating-point tensor is finite. Reads every tensor: for error paths.
std::string findNonFiniteTensor(const SafetensorsReader& weights);

// The tokenizer files copied from a model folder to an output folder when present.
extern const char* const kTokenizerFiles[];

// Writes config.json and copies the tokenizer files of `tokenizerSource` (if non-empty) into
// `dir`; the weights are written separately (writeSafetensorsFolder).
void writeHfConfigAndTokenizer(
    const std::string& dir, const plan::ModelSpec& spec, const std::string& tokenizerSource);

} // namespace shard::engine
