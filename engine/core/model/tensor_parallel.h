// Tensor parallelism of a transformer block, Megatron style (docs/ARCHITECTURE.md, "Tensor
// parallel"): the attention's q, k, v projections are split by heads (column-parallel: each rank
// holds whole heads' rows) and o by the same columns (row-parallel); the MLP's gate and up by
// rows of the intermediate dimension and down by its columns. Each rank computes its heads and
// its slice of the intermediate activation from the whole input, and one all-reduce per
// sub-layer sums the row-parallel outputs. Norms, biases added after a reduction, and
// everything outside the blocks are replicated across the group.
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

// Why `size` ranks cannot split this model's blocks ("" when they can): the heads, the
// key/value heads and the intermediate size must divide by it. The message names the numbers
// and the sizes that would.
std::string whyNotSplit(const plan::ModelSpec& spec, int64_t size);

// The part of one block's weights (in the unit's order, BlockLayout) that TP rank `rank` of
// `size` holds: q, k, v (and their biases) by heads, o by the same columns, gate and up by
// rows, down by columns; norms and o's bias whole. Slices are contiguous copies.
std::vector<at::Tensor> blockSlice(
    const LlamaModel& model, const std::vector<at::Tensor>& w, int64_t rank, int64_t size);

// The block's forward on x (batch, seq, hidden), the same on every rank of `group`, with this
// rank's blockSlice: equal to LlamaModel::block with the whole weights up to summation order,
// forward and backward.
at::Tensor block(const LlamaModel& model, const std::vector<at::Tensor>& w, const at::Tensor& x,
    const RopeTables& rope, dist::Communicator& group);

} // namespace shard::engine::tp
