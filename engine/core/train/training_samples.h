// Sample completions during training (run spec sample_every / sample_prompts /
// sample_max_tokens): every N steps and at the end, greedy completions of the prompts of a file,
// decoded through the training strategy (sharded strategies gather each unit as in the forward,
// so every rank takes part); rank 0 writes them as "sample" events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/model/llama_model.h"
#include "core/train/strategy.h"
#include "protocol/records.h"
#include "protocol/run_spec.h"
#include "tokenizer/tokenizer.h"

namespace shard::engine {

// The prompts of a file: one per non-empty line, or {"prompt": "..."} per line. Throws naming the
// file and line.
std::vector<std::string> readSamplePrompts(const std::string& path);

class TrainingSamples {
public:
    // Loads the prompts and the tokenizer (spec.tokenizer, else the model folder); throws
    // naming what is missing.
    TrainingSamples(const protocol::RunSpec& spec, const std::string& modelDir);

    bool due(int64_t step, bool last) const;
    // The completions at `step`. Every rank must call it (the same number of forwards on every
    // rank: with several ranks the decode runs to the token limit and is cut at EOS after).
    // The decode runs on `device`, the rank's.
    std::vector<protocol::SampleEvent> run(const LlamaModel& model, Strategy& strategy,
        at::ScalarType dtype, at::Device device, int64_t step) const;

private:
    int64_t m_every = 0;
    int64_t m_maxTokens = 32;
    std::vector<std::string> m_prompts;
    tokenizer::Tokenizer m_tokenizer;
};

} // namespace shard::engine
