// A PEFT adapter folder's shape (adapter_config.json), read without the engine so that
// `shard run -- --lora-init DIR` and the worker's `train --lora-init DIR` resolve it the same way
// before a spec is written or trained.
#pragma once

#include <set>
#include <string>

#include "protocol/run_spec.h"

namespace shard::protocol {

// Continuing an adapter (spec.loraInit) takes its rank, alpha, dropout, rsLoRA and targets from
// its adapter_config.json, as PEFT's from_pretrained does, except the fields in `userSet` (run
// spec keys: lora_rank, lora_alpha, lora_dropout, lora_targets, lora_rslora); one of those that
// disagrees with the adapter is an error naming its flag. Without loraInit, or with a folder
// whose config cannot be read (the engine then says why), it changes nothing.
void adoptAdapterShape(RunSpec& spec, const std::set<std::string>& userSet);

} // namespace shard::protocol
