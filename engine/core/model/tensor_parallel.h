// Tensor parallelism of a transformer block, Megatron style (docs/ARCHITECTURE.md, "Tensor
// parallel"): the attention's q, k, v projections are split by heads (column-parallel: each rank
// holds whole heads' rows) and o by the same columns (row-parallel); the MLP's gate and up by
// rows of the intermediate dimension and down by its columns. Each rank computes its heads and
// its slice of the intermediate activation from the whole input, and one all-reduce per
// sub-layer sums the row-parallel outputs. Norms and biases added after a reduction are
// replicated across the group.
//
// The embedding and the LM head are split by vocabulary when the group's size divides it
// (Megatron-LM's vocabulary-parallel embedding and parallel cross entropy): rank r holds rows
// [r V/t, (r+1) V/t) of each (of the one table when tied). The embedding looks up the ids in its
// rows, zeros the others and sums over the group; the head computes its columns of the logits,
// chunk by chunk, and the cross entropy needs only each row's max, sum of exponentials and
// target logit from every rank (one all-gather of three numbers a row): no rank holds a row's
// whole logits. A vocabulary the size does not divide keeps the embedding and head whole on
// every rank.
//
// The two collectives are autograd functions: before a column-parallel layer the input is the
// same on every rank (identity forward) and its gradient is the sum of each rank's part
// (all-reduce backward); after a row-parallel layer the partial outputs are summed (all-reduce
// forward) and each rank's gradient is the whole (identity backward).
//
// Sequence parallel (Korthikanti et al. 2022, Megatron-LM's --sequence-parallel): between the
// blocks' matrix products the residual stream is split along the sequence, rank r holding
// positions [r s/t, (r+1) s/t), so the norms, the residual adds and the activations a block
// saves are 1/t per rank. Before a column-parallel layer the normed shards are all-gathered
// (reduce-scatter backward); after a row-parallel one the partial outputs are reduce-scattered
// (all-gather backward): the same bytes as the all-reduce they replace. The vocabulary-split
// embedding reduce-scatters its lookup; the head gathers the normed shards. Each rank's
// gradient of a norm's weight (and of a bias added to the shard) is its positions' share,
// summed over the group after backward (Split::WholeSummed). It needs the vocabulary split and
// a sequence length the group divides (plan::tensorParallelRefusal says so before a run).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/model/llama_model.h"
#include "dist/communicator.h"

namespace shard::engine::tp {

// Identity forward; the gradient summed over `group` backward.
at::Tensor copyToGroup(const at::Tensor& x, dist::Communicator& group);
// Sum over `group` forward; identity backward.
at::Tensor reduceFromGroup(const at::Tensor& x, dist::Communicator& group);

// Positions [r s/t, (r+1) s/t) of x (batch, seq, ...) along dim 1 summed over `group`
// forward (a reduce-scatter; every rank holds a partial sum of the whole sequence); the
// gradient all-gathered backward.
at::Tensor scatterSequence(const at::Tensor& x, dist::Communicator& group);
// The whole sequence from every rank's positions (an all-gather along dim 1) forward; backward,
// each rank's positions of the gradient summed over the group (a reduce-scatter).
at::Tensor gatherSequence(const at::Tensor& x, dist::Communicator& group);

// How a parameter is placed over a tensor-parallel group: whole on every rank (norms, o's bias,
// the embedding and head when the vocabulary is not split), split along dim 0 (column-parallel:
// q, k, v, their biases, gate, up; the embedding and head by vocabulary) or dim 1 (row-parallel:
// o, down) into contiguous equal parts, rank r holding part r.
// WholeSummed: whole on every rank, but each rank's gradient is only its heads' share, summed
// over the group after backward (q/k norms, applied per head inside the split heads).
enum class Split { Whole, Rows, Columns, WholeSummed };

// The split of the parameter at `position` of a block unit (BlockLayout's indices).
Split splitAt(const BlockLayout& layout, int position);
// The split of `model`'s parameter `position` of unit `unit` over a group of `size` (unit 0:
// the embedding and head by vocabulary when plan::splitsVocabulary, the final norm whole). With
// `sequenceParallel` the norms and o's bias act on a rank's positions only: WholeSummed.
Split splitOf(
    const LlamaModel& model, int unit, int position, int64_t size, bool sequenceParallel = false);
// The shape rank's part has (the whole shape for Whole and WholeSummed).
std::vector<int64_t> partShape(const std::vector<int64_t>& shape, Split split, int64_t size);
// Part `rank` of `size` of a whole value, as a contiguous copy (the value itself when whole).
at::Tensor partOf(const at::Tensor& whole, Split split, int64_t rank, int64_t size);
// The whole value from every rank's part laid end to end in rank order (`parts`: size x the
// part's elements, flat, as an all-gather leaves them), in the part's dtype.
at::Tensor wholeFrom(
    const at::Tensor& parts, const std::vector<int64_t>& shape, Split split, int64_t size);

// The whole value (of `shape`) from this rank's part: a split part all-gathered over `group`
// and laid out by wholeFrom; a Whole or WholeSummed value is returned as it is.
at::Tensor gatherWhole(const at::Tensor& part, const std::vector<int64_t>& shape, Split split,
    dist::Communicator& group);

// The part of one block's weights (in the unit's order, BlockLayout) that TP rank `rank` of
// `size` holds: q, k, v (and their biases) by heads, o by the same columns, gate and up by
// rows, down by columns; norms and o's bias whole. Slices are contiguous copies.
std::vector<at::Tensor> blockSlice(
    const LlamaModel& model, const std::vector<at::Tensor>& w, int64_t rank, int64_t size);

// The embedding of ids (batch, seq) from this rank's rows of the table (root unit weights in the
// compute dtype, split by vocabulary over `group`): equal to LlamaModel::embed with the whole
// table, bit for bit (one rank's row plus zeros); with `sequenceParallel`, this rank's
// positions of it.
at::Tensor embed(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& ids, dist::Communicator& group, bool sequenceParallel = false);

// The final norm, this rank's columns of the LM head and the next-token cross entropy over the
// group (linearCrossEntropySum with a VocabShard): LlamaModel::headLossSum's sum, the same on
// every rank, with gradients for this rank's rows of the head and the whole hidden state (with
// `sequenceParallel`, x and its gradient are this rank's positions).
LossSum headLossSum(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& x, const at::Tensor& labels, double gradScale, dist::Communicator& group,
    bool sequenceParallel = false);

// Each position's log-probability of its next-token target over the group's split vocabulary
// (LlamaModel::headTokenLogProbs with a VocabShard), the same on every rank: for DPO and ORPO.
at::Tensor tokenLogProbs(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& x, const at::Tensor& labels, dist::Communicator& group,
    bool sequenceParallel = false);

// The whole logits (batch, seq, vocab), gathered over the group (no gradient): for callers that
// need every column, such as a sample.
at::Tensor logits(const LlamaModel& model, const std::vector<at::Tensor>& root, const at::Tensor& x,
    dist::Communicator& group, bool sequenceParallel = false);

// The block's forward on x (batch, seq, hidden), the same on every rank of `group`, with this
// rank's blockSlice: equal to LlamaModel::block with the whole weights up to summation order,
// forward and backward. With `sequenceParallel`, x and the output are this rank's positions.
at::Tensor block(const LlamaModel& model, const std::vector<at::Tensor>& w, const at::Tensor& x,
    const RopeTables& rope, dist::Communicator& group, bool sequenceParallel = false);

} // namespace shard::engine::tp
