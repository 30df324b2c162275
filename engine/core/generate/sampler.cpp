// Filters in Hugging Face's order (repetition penalty, temperature, top-k, top-p, min-p); the
// draw is at::multinomial on the CPU with the sampler's own generator.
#include "sampler.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace shard::engine {

void validate(const SamplingOptions& o)
{
    if (!(o.temperature >= 0.0))
        throw std::runtime_error("--temperature must be >= 0 (0 = greedy)");
    if (o.topK < 0)
        throw std::runtime_error("--top-k must be >= 0 (0 = no limit)");
    if (!(o.topP > 0.0 && o.topP <= 1.0))
        throw std::runtime_error("--top-p must be in (0, 1]");
    if (!(o.minP >= 0.0 && o.minP < 1.0))
        throw std::runtime_error("--min-p must be in [0, 1)");
    if (!(o.repetitionPenalty > 0.0))
        throw std::runtime_error("--repetition-penalty must be > 0 (1 = none)");
}

at::Tensor penalizedLogits(
    const at::Tensor& logits, const SamplingOptions& o, const std::vector<int32_t>& history)
{
    at::Tensor l = logits.to(at::kCPU, at::kFloat).reshape({-1}).clone();
    if (o.repetitionPenalty == 1.0 || history.empty())
        return l;
    std::vector<int64_t> ids(history.begin(), history.end());
    at::Tensor idx = at::tensor(ids, at::kLong).clamp(0, l.size(0) - 1);
    at::Tensor seen = l.index_select(0, idx);
    seen = at::where(seen > 0, seen / o.repetitionPenalty, seen * o.repetitionPenalty);
    return l.index_copy_(0, idx, seen);
}

at::Tensor samplingProbs(
    const at::Tensor& logits, const SamplingOptions& o, const std::vector<int32_t>& history)
{
    if (!(o.temperature > 0.0))
        throw std::runtime_error("samplingProbs needs a temperature > 0");
    at::Tensor probs = at::softmax(penalizedLogits(logits, o, history) / o.temperature, 0);
    const int64_t V = probs.size(0);
    auto [sorted, order] = probs.sort(0, /*descending=*/true);
    at::Tensor keep = at::ones({V}, at::kBool);
    if (o.topK > 0 && o.topK < V)
        keep.narrow(0, o.topK, V - o.topK).fill_(false);
    if (o.topP < 1.0) {
        // Keep a token while the mass before it is below topP (the first always).
        at::Tensor before = sorted.cumsum(0) - sorted;
        keep = keep.logical_and(before < o.topP);
    }
    if (o.minP > 0.0)
        keep = keep.logical_and(sorted >= o.minP * sorted[0].item<double>());
    keep[0] = true;
    at::Tensor kept = at::where(keep, sorted, at::zeros_like(sorted));
    at::Tensor out = at::zeros_like(probs).scatter_(0, order, kept);
    return out / out.sum();
}

Sampler::Sampler(SamplingOptions options)
    : m_options(options)
    , m_gen(at::make_generator<at::CPUGeneratorImpl>(options.seed))
{
    validate(m_options);
}

int32_t Sampler::next(const at::Tensor& logits, const std::vector<int32_t>& history)
{
    if (m_options.temperature <= 0.0)
        return static_cast<int32_t>(
            penalizedLogits(logits, m_options, history).argmax().item<int64_t>());
    const at::Tensor probs = samplingProbs(logits, m_options, history);
    return static_cast<int32_t>(at::multinomial(probs, 1, false, m_gen).item<int64_t>());
}

} // namespace shard::engine
