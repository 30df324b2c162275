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
// the embedding and head by vocabulary when splitsVocabulary, the final norm whole).
Split splitOf(const LlamaModel& model, int unit, int position, int64_t size);
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

// Whether a tensor-parallel group of `size` splits the embedding and the LM head by vocabulary:
// size > 1 and it divides the vocabulary.
bool splitsVocabulary(const plan::ModelSpec& spec, int64_t size);

// The embedding of ids (batch, seq) from this rank's rows of the table (root unit weights in the
// compute dtype, split by vocabulary over `group`): equal to LlamaModel::embed with the whole
// table, bit for bit (one rank's row plus zeros).
at::Tensor embed(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& ids, dist::Communicator& group);

// The final norm, this rank's columns of the LM head and the next-token cross entropy over the
// group (linearCrossEntropySum with a VocabShard): LlamaModel::headLossSum's sum, the same on
// every rank, with gradients for this rank's rows of the head and the whole hidden state.
LossSum headLossSum(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& x, const at::Tensor& labels, double gradScale, dist::Communicator& group);

// The whole logits (batch, seq, vocab), gathered over the group (no gradient): for callers that
// need every column, such as a sample.
at::Tensor logits(const LlamaModel& model, const std::vector<at::Tensor>& root, const at::Tensor& x,
    dist::Communicator& group);

// The block's forward on x (batch, seq, hidden), the same on every rank of `group`, with this
// rank's blockSlice: equal to LlamaModel::block with the whole weights up to summation order,
// forward and backward.
at::Tensor block(const LlamaModel& model, const std::vector<at::Tensor>& w, const at::Tensor& x,
    const RopeTables& rope, dist::Communicator& group);

} // namespace shard::engine::tp
