// PEFT adapter folders (adapter_config.json + adapter_model.safetensors, Hugging Face PEFT's
// layout and tensor names): writing them, reading one to continue training (--lora-init), and
// merging adapters into the base weights (W + s * B A) for a full model folder.
#pragma once

#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "core/model/lora.h"
#include "core/safetensors/safetensors_file.h"

namespace shard::engine {

struct Param;

namespace lora {

// Writes `dir` (replaced whole): adapter_config.json (peft_type LORA, r, lora_alpha,
// lora_dropout, target_modules, use_rslora, bias none, base_model_name_or_path) and
// adapter_model.safetensors with `adapters` (engine names) under PEFT's keys, in fp32.
void writePeftFolder(const std::string& dir, const LoraConfig& config, const std::string& baseModel,
    const NamedTensors& adapters);

// The LoRA settings of a PEFT folder's adapter_config.json (throws naming the file and field).
LoraConfig readPeftConfig(const std::string& dir);

// Initial adapter values: PEFT's initialisation, or the tensors of a PEFT folder whose settings
// must equal the run's (a difference is an error naming the flag to change).
class AdapterSource {
public:
    AdapterSource(const LoraConfig& config, const std::string& peftDir, uint64_t seed);
    at::Tensor value(const Param& p) const;

private:
    uint64_t m_seed = 0;
    std::string m_dir;
    std::unique_ptr<SafetensorsReader> m_reader;
};

// Removes the adapters from `tensors` (an exported state dict with engine names) and adds
// s * B A to each adapted base weight, computed in fp64 and stored as fp32. Returns the removed
// adapters.
NamedTensors mergeInto(NamedTensors& tensors, const LoraConfig& config);

} // namespace lora

} // namespace shard::engine
