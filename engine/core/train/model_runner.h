// Runs the model's forward through a strategy: unit hooks at block boundaries (identity autograd
// functions give the pre-/post-backward points) and per-block activation checkpointing (only the
// block input is saved; the block is recomputed in backward).
#pragma once

#include <ATen/core/Tensor.h>

#include "core/model/llama_model.h"
#include "core/train/strategy.h"

namespace shard::engine {

struct ForwardConfig {
    at::ScalarType computeDtype = at::kFloat;
    bool checkpointing = false;
    // Where the strategy keeps the weights: ids, labels and the rotary tables go there too.
    c10::Device device = c10::Device(c10::DeviceType::CPU);
};

class ModelRunner {
public:
    ModelRunner(LlamaModel& model, Strategy& strategy, ForwardConfig config);
    // Logits (batch, seq, vocab) in the compute dtype, on config().device. ids: (batch, seq)
    // int64 on any device (moved to config().device).
    at::Tensor logits(const at::Tensor& ids);
    // Sum of the next-token loss (fp32) and its token count, through logits().
    LossSum lossSum(const at::Tensor& ids, const at::Tensor& labels);
    const ForwardConfig& config() const { return m_config; }

private:
    const RopeTables& ropeFor(int64_t seqLen);

    LlamaModel& m_model;
    Strategy& m_strategy;
    ForwardConfig m_config;
    RopeTables m_rope;
    int64_t m_ropeLen = 0;
    at::Tensor m_dummy; // requires grad: keeps the first block's post-backward marker in the graph
};

} // namespace shard::engine
