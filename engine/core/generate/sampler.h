// Next-token selection from a logits vector: greedy, or sampling after repetition penalty,
// temperature, top-k, top-p (nucleus) and min-p, with a seeded generator so a seed reproduces.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

namespace shard::engine {

struct SamplingOptions {
    double temperature = 0.0;       // 0 = greedy (argmax)
    int64_t topK = 0;               // keep the k most likely tokens (0 = all)
    double topP = 1.0;              // keep the smallest set whose probability is >= topP
    double minP = 0.0;              // drop tokens below minP * the largest probability
    double repetitionPenalty = 1.0; // > 1 makes tokens already in the sequence less likely
    uint64_t seed = 0;
};

// Throws naming the option when a value is out of range.
void validate(const SamplingOptions& o);

// Logits (vocab) after the repetition penalty on the tokens of `history` (as Hugging Face: a
// positive logit is divided by the penalty, a negative one multiplied). fp32.
at::Tensor penalizedLogits(
    const at::Tensor& logits, const SamplingOptions& o, const std::vector<int32_t>& history);

// The distribution sampling draws from (vocab, fp32, sums to 1): softmax(logits / temperature)
// with the entries top-k, top-p and min-p remove set to 0 and the rest renormalized. The most
// likely token always survives. Needs temperature > 0.
at::Tensor samplingProbs(
    const at::Tensor& logits, const SamplingOptions& o, const std::vector<int32_t>& history);

class Sampler {
public:
    explicit Sampler(SamplingOptions options);
    const SamplingOptions& options() const { return m_options; }
    // The next token for one sequence; logits (vocab) on any device, any float dtype.
    int32_t next(const at::Tensor& logits, const std::vector<int32_t>& history);

private:
    SamplingOptions m_options;
    at::Generator m_gen;
};

} // namespace shard::engine
