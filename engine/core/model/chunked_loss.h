// The LM head and the next-token cross entropy in one step, over chunks of tokens, so the fp32
// logits of the whole batch never exist at once (the design of Liger's fused linear cross
// entropy). The loss is the graph's last node and its gradient a scalar, so each chunk's
// gradients are made in the forward, while its logits exist: logits = h W^T in the compute
// dtype, widened, their log-sum-exp and the loss summed; softmax minus the one-hot target, times
// `gradScale` (the 1/tokens the caller divides the loss by, so the gradient is rounded as an
// unfused backward rounds it), narrowed, times W into h's gradient and, when W is trained, its
// transpose times h into W's (the chunks' products summed in the compute dtype, as Liger does:
// a narrower dtype rounds each chunk's product; an fp32 copy of W's gradient would cost more
// memory than the logits it saves on large vocabularies).
// The backward only rescales them when the gradient it receives is not gradScale. Memory: one
// chunk's logits, h's gradient and W's, instead of the batch's logits and their gradient. The
// result equals the unfused head and cross entropy up to summation order (and, in bf16, the
// rounding of W's gradient per chunk).
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace shard::dist {
class Communicator;
}

namespace shard::engine {

// The vocabulary-parallel cross entropy (Megatron-LM's, chunked): W holds this rank's rows
// [first, first + W.size(0)) of the vocabulary, the other rows are on the other ranks of `group`
// (equal counts, rank r's first = r * count). Per chunk each rank sends its rows' max logit,
// their sum of exponentials and the target's logit where the target is its (one all-gather of
// three numbers a row); every rank then has each row's log-sum-exp and target logit, so the loss
// is the same on every rank and each rank's logits' gradient (softmax minus one-hot, its
// columns) is made locally. h's gradient is this rank's columns' share: the caller sums it over
// the group (tp::copyToGroup before the call).
struct VocabShard {
    dist::Communicator* group = nullptr;
    int64_t first = 0;
};

// The 0-dim fp32 sum of -log softmax(h W^T)[target] over rows whose target is not -100.
// h: (N, H) in the compute dtype, W: (V, H) in the same dtype, targets: (N,) long.
// Gradients are made only in grad mode for the inputs that require them. chunkRows <= 0 picks
// plan::lossChunkRows(N, H, V). With `shard`, W is this rank's rows of a vocabulary split over
// the shard's group (VocabShard), and the sum is the whole vocabulary's on every rank.
at::Tensor linearCrossEntropySum(const at::Tensor& h, const at::Tensor& weight,
    const at::Tensor& targets, double gradScale = 1.0, int64_t chunkRows = 0,
    const VocabShard* shard = nullptr);

// Per row, log softmax(h W^T)[target] (0 where the target is -100): (N,) in fp32 (fp64 for fp64
// inputs), for losses of whole sequences (DPO, ORPO). The logits exist one chunk at a time, as in
// linearCrossEntropySum; the gradient of each row is known only once the caller's loss has seen
// every row, so the backward computes each chunk's logits again (one more head GEMM) instead of
// keeping them. chunkRows <= 0 picks plan::lossChunkRows(N, H, V). With `shard`, W is this rank's
// rows of a vocabulary split over the shard's group (as in linearCrossEntropySum): the
// log-probabilities are the whole vocabulary's on every rank (each chunk's log-sum-exp kept from
// the forward, so the backward needs no collective), and h's gradient is this rank's columns'
// share, which the caller sums over the group. The gradient coming in must be the same on every
// rank of the group (a loss every rank computes alike).
at::Tensor linearTokenLogProbs(const at::Tensor& h, const at::Tensor& weight,
    const at::Tensor& targets, int64_t chunkRows = 0, const VocabShard* shard = nullptr);

} // namespace shard::engine
