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
    // Sequence parallel over the tensor-parallel group (core/model/tensor_parallel.h): between
    // the blocks' matrix products each rank holds its positions of the residual stream.
    bool sequenceParallel = false;
};

// Which part of the model a pipeline stage's forward runs (ModelRunner::stage).
struct StagePart {
    std::pair<int64_t, int64_t> layers {0, -1}; // blocks [first, end); end -1 = every block
    bool first = true;                          // embeds the ids (else starts from the input)
    bool last = true;                           // ends in the head and the loss
    // The last stage ends in each position's log-probability of its label (tokenLogProbs)
    // instead of the loss sum: preference objectives.
    bool logProbs = false;
};

// A pipeline stage's forward (ModelRunner::stage): the blocks' output on every stage but the
// last, the loss sum (or with StagePart::logProbs the token log-probabilities) on the last.
struct StageOut {
    at::Tensor hidden; // (batch, seq, hidden), compute dtype
    LossSum loss;
    at::Tensor tokenLogProbs; // (batch, seq - 1) fp32, as ModelRunner::tokenLogProbs
};

class ModelRunner {
public:
    ModelRunner(LlamaModel& model, Strategy& strategy, ForwardConfig config);
    // Logits (batch, seq, vocab) in the compute dtype, on config().device. ids: (batch, seq)
    // int64 on any device (moved to config().device).
    at::Tensor logits(const at::Tensor& ids);
    // Sum of the next-token loss (fp32) and its token count: the same forward, ending in the fused
    // head and loss (LlamaModel::headLossSum), so the batch's logits are never kept. gradScale:
    // what the caller divides the sum by before its backward.
    LossSum lossSum(const at::Tensor& ids, const at::Tensor& labels, double gradScale = 1.0);
    // Each position's log-probability of its next-token target, (batch, seq - 1) fp32 on
    // config().device, 0 where the label is masked (LlamaModel::headTokenLogProbs): the
    // sequence log-probabilities of preference objectives.
    at::Tensor tokenLogProbs(const at::Tensor& ids, const at::Tensor& labels);
    // Pipeline parallel: one (virtual) stage's part of lossSum(). The first embeds `ids`; a
    // later one runs its blocks on `input`, the previous stage's output (requires grad in
    // training). The last ends in the fused head and loss (labels on any device).
    StageOut stage(const StagePart& part, const at::Tensor& ids, const at::Tensor& input,
        const at::Tensor& labels, double gradScale = 1.0);
    // LoRA: the forwards that follow run the base alone (adapters off), e.g. DPO's reference.
    void setAdaptersOff(bool off) { m_adaptersOff = off; }
    const ForwardConfig& config() const { return m_config; }
    // Whether the residual stream between blocks is this rank's positions only (sequence
    // parallel): the one rule the forwards and the trainer's pipeline buffers follow.
    bool sequenceParallel() const;

private:
    const RopeTables& ropeFor(int64_t seqLen);
    // The forward through the embedding and every block (the root unit's pre-forward included);
    // `root` gets the root unit's weights in the compute dtype for the head.
    // With `input` defined (a later pipeline stage), the blocks run on it instead of the
    // embedding; only `layers` run ([first, end), end -1: to the last).
    at::Tensor trunk(const at::Tensor& ids, std::vector<at::Tensor>& root,
        const at::Tensor& input = {}, std::pair<int64_t, int64_t> layers = {0, -1});
    // The head's log-probability of each label after the trunk's output x, and the root's end.
    at::Tensor headLogProbs(
        std::vector<at::Tensor>& root, const at::Tensor& x, const at::Tensor& labels);
    // The root unit's post-forward and, in grad mode, its pre-backward marker on `out`.
    at::Tensor endRoot(at::Tensor out);
    // The tensor-parallel group when it splits the embedding and head by vocabulary, else null.
    dist::Communicator* vocabularyGroup() const;

    LlamaModel& m_model;
    Strategy& m_strategy;
    ForwardConfig m_config;
    RopeTables m_rope;
    int64_t m_ropeLen = 0;
    bool m_adaptersOff = false;
    at::Tensor m_dummy; // requires grad: keeps the first block's post-backward marker in the graph
};

} // namespace shard::engine
