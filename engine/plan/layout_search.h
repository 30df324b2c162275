// Tensor / pipeline layouts searched for a model on a GPU count, and Megatron-LM's own memory
// formula beside the planner's (issue 29). The search plans every (tp, pp) the GPUs allow in the
// zero-paper accounting (the one that models tensor and pipeline parallelism), keeping the
// input's global batch, and recommends the fastest layout that fits, with the numbers that make
// it the answer. No Qt, no Torch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan/planner.h"

namespace shard::plan {

struct LayoutCandidate {
    int64_t tp = 1;
    int64_t pp = 1;
    int64_t dp = 1;        // data-parallel copies: GPUs / (tp x pp)
    int64_t gradAccum = 1; // micro-batches per step that keep the input's global batch
    std::optional<PlanResult> plan;
    std::string refused; // why the layout cannot run this model (heads, layers, batch), else ""
    bool fits() const { return plan && plan->fits; }
    // "DP 8 x TP 4 x PP 2".
    std::string name() const;
};

struct LayoutRecommendation {
    int64_t gpus = 0;
    int64_t globalBatch = 0; // sequences per optimizer step, as the input has it
    // Every tp dividing the GPUs of a node (tensor parallelism stays inside one) with every pp
    // dividing the rest, tp then pp ascending.
    std::vector<LayoutCandidate> candidates;
    int best = -1; // the recommended candidate, -1 when no layout fits
    // Why: the pick's memory and speed against the runner-up and data parallelism alone, or,
    // when nothing fits, the layout that comes closest and by how much it misses.
    std::string reason;
};

// Plans `in`'s model, strategy, precision, batch and devices at every layout of its GPUs
// (gpusPerNode x nodes) and picks the fastest that fits (roofline tokens/s; within 1% the one
// with fewer model-parallel GPUs). Throws std::runtime_error for an input that does not validate
// at tp = pp = 1.
LayoutRecommendation recommendLayout(const PlanInput& in);

// Megatron-LM's theoretical memory of one GPU (megatron/training/theoretical_memory_usage.py):
// weights and optimizer of the most loaded model shard (the first pipeline stage: its layers and
// the embedding, over tp; 18 bytes a parameter, or 6 + 12/dp with the distributed optimizer),
// and activations for sequence parallelism with selective recomputation (Korthikanti et al.,
// Table 2: s*b*h*(18 + 4*ffn/h) a layer, pp micro-batches in flight on stage 0, the output layer
// and loss when pp = 1, all over tp). The vocabulary is padded to a multiple of 128 x tp as
// Megatron pads it.
struct MegatronMemory {
    double parameters = 0;        // the model's, padded vocabulary; norms with a bias (+(2L+1)h)
    double mostLoadedShard = 0;   // parameters on the most loaded GPU
    double bytesPerParameter = 0; // 18, or 6 + 12 / dp
    double weightAndOptimizerBytes = 0;
    double activationBytes = 0;
    double totalBytes() const { return weightAndOptimizerBytes + activationBytes; }
};
MegatronMemory megatronTheoreticalMemory(const PlanInput& in, bool distributedOptimizer = true);

} // namespace shard::plan
