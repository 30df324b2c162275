// Tensor-parallel block (see tensor_parallel.h).
#include "core/model/tensor_parallel.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/model/chunked_loss.h"
#include "core/model/fused_ops.h"
#include "core/model/lora.h"
#include "plan/run_spec_bridge.h"

namespace shard::engine::tp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels through the autograd context as its address (the context holds IValues);
// the caller keeps the communicator alive across backward, as it does for every collective.
int64_t groupHandle(dist::Communicator& group)
{
    return static_cast<int64_t>(reinterpret_cast<intptr_t>(&group));
}

dist::Communicator& groupOf(AutogradContext* ctx)
{
    return *reinterpret_cast<dist::Communicator*>(
        static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

at::Tensor allReduced(const at::Tensor& t, dist::Communicator& group)
{
    at::Tensor sum = t.contiguous().clone();
    group.allReduce(sum)->wait();
    return sum;
}

// x itself (a view): the identity half of a conjugate pair.
at::Tensor passedThrough(const at::Tensor& x, dist::Communicator&)
{
    return x.view_as(x);
}

// The sequence (dim 1 of x) all-gathered over the group: every rank's positions in rank order.
at::Tensor allGatheredSequence(const at::Tensor& x, dist::Communicator& group)
{
    const at::Tensor mine = x.transpose(0, 1).contiguous(); // (positions, batch, ...)
    std::vector<int64_t> shape = mine.sizes().vec();
    shape[0] *= group.worldSize();
    at::Tensor all = at::empty(shape, mine.options());
    group.allGather(all.view({-1}), mine.view({-1}))->wait();
    return all.transpose(0, 1).contiguous();
}

// This rank's positions of x's sequence (dim 1) summed over the group.
at::Tensor reduceScatteredSequence(const at::Tensor& x, dist::Communicator& group)
{
    const int64_t t = group.worldSize();
    if (x.size(1) % t != 0)
        throw std::invalid_argument("sequence parallel: a sequence of " + std::to_string(x.size(1))
            + " positions does not split over " + std::to_string(t)
            + " tensor-parallel ranks; use a --seq-len that is a multiple of " + std::to_string(t));
    const at::Tensor whole = x.transpose(0, 1).contiguous(); // (positions, batch, ...)
    std::vector<int64_t> shape = whole.sizes().vec();
    shape[0] /= t;
    at::Tensor mine = at::empty(shape, whole.options());
    group.reduceScatter(mine.view({-1}), whole.view({-1}))->wait();
    return mine.transpose(0, 1).contiguous();
}

// A collective over the tensor-parallel group as an autograd function: `Forward` on the way in,
// its conjugate `Backward` on the gradient (Megatron-LM's pairs: identity / all-reduce,
// all-gather / reduce-scatter along the sequence).
using GroupOp = at::Tensor (*)(const at::Tensor&, dist::Communicator&);

template<GroupOp Forward, GroupOp Backward>
struct GroupCollective : torch::autograd::Function<GroupCollective<Forward, Backward>> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor x, int64_t group)
    {
        ctx->saved_data["group"] = group;
        return Forward(x, groupOf(ctx));
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        return {Backward(grads[0], groupOf(ctx)), at::Tensor()};
    }

    // x unchanged on one rank (no collective, no autograd node).
    static at::Tensor over(const at::Tensor& x, dist::Communicator& group)
    {
        if (group.worldSize() == 1)
            return x;
        return GroupCollective::apply(x, groupHandle(group));
    }
};

// Rows [rank * n / size, (rank + 1) * n / size) of dim `dim`, as a contiguous copy.
at::Tensor part(const at::Tensor& t, int64_t dim, int64_t rank, int64_t size)
{
    const int64_t n = t.size(dim) / size;
    return t.narrow(dim, rank * n, n).contiguous();
}

} // namespace

at::Tensor copyToGroup(const at::Tensor& x, dist::Communicator& group)
{
    return GroupCollective<passedThrough, allReduced>::over(x, group);
}

at::Tensor reduceFromGroup(const at::Tensor& x, dist::Communicator& group)
{
    return GroupCollective<allReduced, passedThrough>::over(x, group);
}

at::Tensor scatterSequence(const at::Tensor& x, dist::Communicator& group)
{
    return GroupCollective<reduceScatteredSequence, allGatheredSequence>::over(x, group);
}

at::Tensor gatherSequence(const at::Tensor& x, dist::Communicator& group)
{
    return GroupCollective<allGatheredSequence, reduceScatteredSequence>::over(x, group);
}

Split splitAt(const BlockLayout& L, int position)
{
    if (position < 0)
        return Split::Whole;
    for (int i : {L.q, L.k, L.v, L.qBias, L.kBias, L.vBias, L.gate, L.up})
        if (i == position)
            return Split::Rows;
    if (position == L.o || position == L.down)
        return Split::Columns;
    if (position == L.qNorm || position == L.kNorm)
        return Split::WholeSummed;
    return Split::Whole; // the two block norms; o's bias is added once, after the reduction
}

Split splitOf(const LlamaModel& model, int unit, int position, int64_t size, bool sequenceParallel)
{
    // Under sequence parallel a rank's norms (and o's bias) see its positions only.
    const Split onPositions = sequenceParallel && size > 1 ? Split::WholeSummed : Split::Whole;
    if (unit == 0) {
        const RootLayout& R = model.rootLayout();
        const bool table = position == R.embed || (R.lmHead >= 0 && position == R.lmHead);
        if (table)
            return plan::splitsVocabulary(model.spec(), size) ? Split::Rows : Split::Whole;
        return position == R.norm ? onPositions : Split::Whole;
    }
    // LoRA: an adapter splits with its base weight. A column-parallel projection's B [out, r]
    // splits by rows and its A [r, in] is whole (each rank's gradient of A is its rows' share);
    // a row-parallel one's A splits by columns and its B is whole (its output is a partial sum
    // until the reduction, and so is B's gradient).
    if (const lora::Adapters* adapters = model.adapters())
        for (int t = 0; t < lora::kTargetCount; ++t) {
            const bool rowParallel
                = lora::Target(t) == lora::Target::O || lora::Target(t) == lora::Target::Down;
            if (position == adapters->a[size_t(t)])
                return rowParallel ? Split::Columns : Split::WholeSummed;
            if (position == adapters->b[size_t(t)])
                return rowParallel ? Split::WholeSummed : Split::Rows;
        }
    const BlockLayout& L = model.blockLayout();
    if (position == L.inputNorm || position == L.postNorm || (L.oBias >= 0 && position == L.oBias))
        return onPositions;
    return splitAt(L, position);
}

std::vector<int64_t> partShape(const std::vector<int64_t>& shape, Split split, int64_t size)
{
    std::vector<int64_t> out = shape;
    const size_t dim = split == Split::Rows ? 0 : split == Split::Columns ? 1 : out.size();
    if (dim < out.size()) {
        if (out[dim] % size != 0)
            throw std::invalid_argument("tensor parallel size " + std::to_string(size)
                + " does not divide a dimension of " + std::to_string(out[dim]));
        out[dim] /= size;
    }
    return out;
}

at::Tensor partOf(const at::Tensor& whole, Split split, int64_t rank, int64_t size)
{
    if (split == Split::Rows)
        return part(whole, 0, rank, size);
    if (split == Split::Columns)
        return part(whole, 1, rank, size);
    return whole;
}

at::Tensor wholeFrom(
    const at::Tensor& parts, const std::vector<int64_t>& shape, Split split, int64_t size)
{
    if (split == Split::Rows) // parts of rows, end to end: the whole, row-major
        return parts.view(shape);
    if (split == Split::Columns) { // (size, rows, cols / size) -> (rows, size, cols / size)
        const std::vector<int64_t> p = partShape(shape, split, size);
        return parts.view({size, p[0], p[1]}).permute({1, 0, 2}).reshape(shape);
    }
    return parts.narrow(0, 0, parts.numel() / size).view(shape);
}

at::Tensor gatherWhole(const at::Tensor& part, const std::vector<int64_t>& shape, Split split,
    dist::Communicator& group)
{
    if (split != Split::Rows && split != Split::Columns)
        return part;
    const int64_t n = group.worldSize();
    at::Tensor parts = at::empty({n * part.numel()}, part.options());
    group.allGather(parts, part.contiguous().view({-1}))->wait();
    return wholeFrom(parts, shape, split, n);
}

std::vector<at::Tensor> blockSlice(
    const LlamaModel& model, const std::vector<at::Tensor>& w, int64_t rank, int64_t size)
{
    if (const std::string why = plan::whyNotSplitBlocks(model.spec(), size); !why.empty())
        throw std::invalid_argument(why);
    if (rank < 0 || rank >= size)
        throw std::invalid_argument("tensor parallel rank " + std::to_string(rank)
            + " is outside 0.." + std::to_string(size - 1));
    std::vector<at::Tensor> out(w.size());
    for (size_t i = 0; i < w.size(); ++i)
        out[i] = partOf(w[i], splitAt(model.blockLayout(), static_cast<int>(i)), rank, size);
    return out;
}

namespace {

// This rank's rows of the vocabulary: the first and the count.
VocabShard shardOf(const at::Tensor& table, dist::Communicator& group)
{
    VocabShard v;
    v.group = &group;
    v.first = static_cast<int64_t>(group.rank()) * table.size(0);
    return v;
}

// The head over this rank's rows of the vocabulary. Each rank's gradient of the normed state is
// its columns' share: summed over the group (by the gather's reduce-scatter under sequence
// parallel, which normed its positions only).
HeadSplit headSplit(const VocabShard& shard, dist::Communicator& group, bool sequenceParallel)
{
    HeadSplit split;
    split.shard = &shard;
    split.toGroup = [&group, sequenceParallel](const at::Tensor& normed) {
        return sequenceParallel ? gatherSequence(normed, group) : copyToGroup(normed, group);
    };
    return split;
}

} // namespace

at::Tensor embed(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& ids, dist::Communicator& group, bool sequenceParallel)
{
    const at::Tensor& table = root[size_t(model.rootLayout().embed)];
    const int64_t first = shardOf(table, group).first;
    const at::Tensor local = ids - first;
    const at::Tensor outside = local.lt(0).logical_or(local.ge(table.size(0)));
    // Rows of other ranks look up row 0 and are zeroed: their gradient there is zero too.
    const at::Tensor x
        = at::embedding(table, local.masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0);
    return sequenceParallel ? scatterSequence(x, group) : reduceFromGroup(x, group);
}

LossSum headLossSum(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& x, const at::Tensor& labels, double gradScale, dist::Communicator& group,
    bool sequenceParallel)
{
    const VocabShard shard = shardOf(model.headWeight(root), group);
    const HeadSplit split = headSplit(shard, group, sequenceParallel);
    return model.headLossSum(root, x, labels, gradScale, &split);
}

at::Tensor tokenLogProbs(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& x, const at::Tensor& labels, dist::Communicator& group, bool sequenceParallel)
{
    const VocabShard shard = shardOf(model.headWeight(root), group);
    const HeadSplit split = headSplit(shard, group, sequenceParallel);
    return model.headTokenLogProbs(root, x, labels, &split);
}

at::Tensor logits(const LlamaModel& model, const std::vector<at::Tensor>& root,
    const at::Tensor& mineOrWhole, dist::Communicator& group, bool sequenceParallel)
{
    at::NoGradGuard noGrad;
    const at::Tensor x = sequenceParallel ? gatherSequence(mineOrWhole, group) : mineOrWhole;
    const int64_t b = x.size(0), s = x.size(1);
    const at::Tensor& w = model.headWeight(root);
    const at::Tensor mine
        = fused::linear(model.rmsNorm(x, root[size_t(model.rootLayout().norm)]), w)
              .reshape({b * s, w.size(0)});
    return gatherWhole(mine, {b * s, w.size(0) * group.worldSize()}, Split::Columns, group)
        .view({b, s, -1});
}

at::Tensor block(const LlamaModel& model, const std::vector<at::Tensor>& w, const at::Tensor& x,
    const RopeTables& rope, dist::Communicator& group, bool sequenceParallel)
{
    const BlockLayout& L = model.blockLayout();
    // Into a column-parallel layer: the whole input (gathered from the positions under sequence
    // parallel); out of a row-parallel one: the sum (this rank's positions of it).
    const auto in = [&](const at::Tensor& t) {
        return sequenceParallel ? gatherSequence(t, group) : copyToGroup(t, group);
    };
    const auto out = [&](const at::Tensor& t) {
        return sequenceParallel ? scatterSequence(t, group) : reduceFromGroup(t, group);
    };
    // The attention's partial output without o's bias (a zero of its shape, not a parameter);
    // the bias itself is added to the sum.
    std::vector<at::Tensor> attnWeights = w;
    if (L.oBias >= 0)
        attnWeights[size_t(L.oBias)] = at::zeros_like(w[size_t(L.oBias)]).detach();
    at::Tensor attn
        = out(model.attention(attnWeights, in(model.rmsNorm(x, w[size_t(L.inputNorm)])), rope));
    if (L.oBias >= 0)
        attn = attn + w[size_t(L.oBias)];
    const at::Tensor h = x + attn;
    return h + out(model.mlp(w, in(model.rmsNorm(h, w[size_t(L.postNorm)]))));
}

} // namespace shard::engine::tp
