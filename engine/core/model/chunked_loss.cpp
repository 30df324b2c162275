// The fused LM head and cross entropy (see chunked_loss.h).
#include "core/model/chunked_loss.h"

#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/model/fused_ops.h"
#include "dist/communicator.h"
#include "plan/planner.h"

namespace shard::engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Sums {
    at::Tensor loss;  // 0-dim, fp32 (fp64 for fp64 inputs)
    at::Tensor gradH; // (N, H) in h's dtype, or undefined
    at::Tensor gradW; // (V, H) in W's dtype, or undefined
};

// acc += a b in acc's (the compute) dtype: in place, except where bf16 products go through the
// fp32 GEMM (fused_ops.h), where the rounded product is added.
void addProduct(at::Tensor& acc, const at::Tensor& a, const at::Tensor& b)
{
    if (a.scalar_type() == at::kBFloat16 && fused::bf16GemmThroughFp32())
        acc.add_(fused::matmul(a, b));
    else
        acc.addmm_(a, b);
}

// A chunk's log-sum-exp over the whole vocabulary and its targets' logits (0 where the target is
// another rank's), from this rank's columns z (rows, V / t) and every rank's three numbers a row.
// `safe`/`mine`: the targets' column here (0 when not here) and whether it is here.
std::pair<at::Tensor, at::Tensor> shardedLse(
    const at::Tensor& z, const at::Tensor& safe, const at::Tensor& mine, dist::Communicator& group)
{
    const int64_t rows = z.size(0), t = group.worldSize();
    const at::Tensor m = std::get<0>(z.max(1));
    const at::Tensor sent = at::stack({m, (z - m.unsqueeze(1)).exp().sum(1),
        z.gather(1, safe).squeeze(1) * mine.to(z.scalar_type())});
    at::Tensor all = at::empty({t * 3 * rows}, z.options());
    group.allGather(all, sent.contiguous().view({-1}))->wait();
    all = all.view({t, 3, rows});
    const at::Tensor maxes = all.select(1, 0);
    const at::Tensor top = std::get<0>(maxes.max(0));
    const at::Tensor sum = (all.select(1, 1) * (maxes - top).exp()).sum(0);
    return {top + sum.log(), all.select(1, 2).sum(0)};
}

// Where a chunk's targets `tc` fall among this rank's `columns` columns from `first` (a
// shard's first row; 0 without): whether each row's target is here and not masked (`mine`),
// and its column here, 0 where not (`safe`, (rows, 1) for gather and scatter).
struct TargetColumns {
    at::Tensor mine, safe;
};
TargetColumns targetColumns(const at::Tensor& tc, int64_t first, int64_t columns)
{
    const at::Tensor local = tc - first;
    TargetColumns t;
    t.mine = tc.ne(-100).logical_and(local.ge(0)).logical_and(local.lt(columns));
    t.safe = at::where(t.mine, local, at::zeros_like(local)).unsqueeze(1);
    return t;
}

// A chunk's logits' log-sum-exp and its targets' logits (0 where masked; with a shard, summed
// over the group so every rank has them), and the targets' columns here and whether here.
struct ChunkLogits {
    at::Tensor lse, picked, safe, mine;
};
ChunkLogits chunkLogits(const at::Tensor& z, const at::Tensor& tc, const VocabShard* shard)
{
    ChunkLogits c;
    const at::Tensor valid = tc.ne(-100);
    if (shard) { // this rank's columns [first, first + V / t)
        TargetColumns here = targetColumns(tc, shard->first, z.size(1));
        c.mine = std::move(here.mine);
        c.safe = std::move(here.safe);
        std::tie(c.lse, c.picked) = shardedLse(z, c.safe, c.mine, *shard->group);
    } else {
        c.mine = valid;
        c.safe = at::where(valid, tc, at::zeros_like(tc)).unsqueeze(1);
        c.lse = at::logsumexp(z, 1);
        c.picked = z.gather(1, c.safe).squeeze(1);
    }
    return c;
}

Sums chunkedSums(const at::Tensor& h, const at::Tensor& w, const at::Tensor& targets,
    double gradScale, int64_t chunkRows, bool wantH, bool wantW, const VocabShard* shard)
{
    at::NoGradGuard noGrad;
    const int64_t n = h.size(0), vocab = w.size(0);
    const at::ScalarType compute = h.scalar_type();
    const at::ScalarType wide = at::promoteTypes(compute, at::kFloat);
    if (chunkRows <= 0)
        chunkRows = plan::lossChunkRows(n, h.size(1), vocab);
    const bool chunked = chunkRows < n;
    Sums s;
    s.loss = at::zeros({}, h.options().dtype(wide));
    if (wantH)
        s.gradH = at::empty_like(h);
    // W's gradient: one product when there is one chunk, else the chunks' products summed.
    at::Tensor accW;
    if (wantW && chunked)
        accW = at::zeros_like(w);
    for (int64_t r0 = 0; r0 < n; r0 += chunkRows) {
        const int64_t rows = std::min(chunkRows, n - r0);
        const at::Tensor hc = h.narrow(0, r0, rows);
        const at::Tensor tc = targets.narrow(0, r0, rows);
        at::Tensor z = fused::cast(fused::linear(hc, w), wide); // (rows, V)
        const at::Tensor weight = tc.ne(-100).to(wide);
        const auto [lse, picked, safe, mine] = chunkLogits(z, tc, shard);
        const at::Tensor hit = mine.to(wide);
        s.loss.add_(((lse - picked) * weight).sum());
        if (!wantH && !wantW)
            continue;
        // d loss / d z = softmax(z) - onehot(target) on counted rows, scaled; in place on z.
        z.sub_(lse.unsqueeze(1)).exp_();
        z.scatter_add_(1, safe, hit.neg().unsqueeze(1));
        z.mul_((weight * gradScale).unsqueeze(1));
        const at::Tensor g = fused::cast(z, compute);
        z = at::Tensor(); // the fp32 chunk goes before the products allocate
        if (wantH)
            s.gradH.narrow(0, r0, rows).copy_(fused::matmul(g, w));
        if (wantW) {
            if (chunked)
                addProduct(accW, g.t(), hc);
            else
                s.gradW = fused::matmul(g.t(), hc);
        }
    }
    if (accW.defined())
        s.gradW = accW;
    return s;
}

struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& w,
        const at::Tensor& targets, double gradScale, int64_t chunkRows, int64_t shardAddress)
    {
        // The shard travels as its address (the context holds IValues); it is read here only.
        const auto* shard
            = reinterpret_cast<const VocabShard*>(static_cast<intptr_t>(shardAddress));
        Sums s = chunkedSums(
            h, w, targets, gradScale, chunkRows, h.requires_grad(), w.requires_grad(), shard);
        ctx->saved_data["scale"] = gradScale;
        ctx->save_for_backward({s.gradH, s.gradW});
        return s.loss;
    }

    static variable_list backward(AutogradContext* ctx, variable_list gradOutputs)
    {
        auto saved = ctx->get_saved_variables();
        const double made = ctx->saved_data["scale"].toDouble();
        // The gradients were made for `made`; rescaled only when another gradient arrives. The
        // comparison runs on the device (no host read in backward): the factor is exactly 1
        // when the gradient is the one they were made for, which leaves them bit for bit.
        if (made == 0.0) {
            for (at::Tensor& g : saved)
                if (g.defined())
                    g = at::zeros_like(g);
        } else {
            const at::Tensor got = gradOutputs[0].detach().reshape({}).to(at::kDouble);
            const at::Tensor ratio = got.div(at::full({}, made, got.options()));
            const at::Tensor factor
                = at::where(ratio.sub(1.0).abs() < 1e-6, at::ones_like(ratio), ratio);
            for (at::Tensor& g : saved)
                if (g.defined())
                    g.mul_(factor.to(g.scalar_type()));
        }
        return {saved[0], saved[1], at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

// The rows' log-probabilities of their targets (chunked, no gradient) and, with a shard, each
// row's log-sum-exp (for the backward).
std::pair<at::Tensor, at::Tensor> chunkedLogProbs(const at::Tensor& h, const at::Tensor& w,
    const at::Tensor& targets, int64_t chunkRows, const VocabShard* shard)
{
    at::NoGradGuard noGrad;
    const int64_t n = h.size(0);
    const at::ScalarType wide = at::promoteTypes(h.scalar_type(), at::kFloat);
    at::Tensor out = at::empty({n}, h.options().dtype(wide));
    at::Tensor lses = shard ? at::empty({n}, h.options().dtype(wide)) : at::Tensor();
    for (int64_t r0 = 0; r0 < n; r0 += chunkRows) {
        const int64_t rows = std::min(chunkRows, n - r0);
        const at::Tensor tc = targets.narrow(0, r0, rows);
        const at::Tensor z = fused::cast(fused::linear(h.narrow(0, r0, rows), w), wide);
        const ChunkLogits c = chunkLogits(z, tc, shard);
        out.narrow(0, r0, rows).copy_((c.picked - c.lse) * tc.ne(-100).to(wide));
        if (shard)
            lses.narrow(0, r0, rows).copy_(c.lse);
    }
    return {out, lses};
}

struct LinearTokenLogProbs : torch::autograd::Function<LinearTokenLogProbs> {
    static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& w,
        const at::Tensor& targets, int64_t chunkRows, int64_t shardAddress)
    {
        // The shard travels as its address (the context holds IValues); it is read here only:
        // the backward needs its first row, and the log-sum-exps saved here.
        const auto* shard
            = reinterpret_cast<const VocabShard*>(static_cast<intptr_t>(shardAddress));
        auto [out, lses] = chunkedLogProbs(h, w, targets, chunkRows, shard);
        ctx->saved_data["chunk"] = chunkRows;
        ctx->saved_data["first"] = shard ? shard->first : int64_t(-1);
        ctx->save_for_backward({h, w, targets, lses});
        return out;
    }

    static variable_list backward(AutogradContext* ctx, variable_list gradOutputs)
    {
        at::NoGradGuard noGrad;
        auto saved = ctx->get_saved_variables();
        const at::Tensor& h = saved[0];
        const at::Tensor& w = saved[1];
        const at::Tensor& targets = saved[2];
        const at::Tensor& lses = saved[3];
        const int64_t chunkRows = ctx->saved_data["chunk"].toInt();
        const int64_t first = ctx->saved_data["first"].toInt();
        const bool wantH = ctx->needs_input_grad(0), wantW = ctx->needs_input_grad(1);
        const int64_t n = h.size(0), vocab = w.size(0);
        const at::ScalarType compute = h.scalar_type();
        const at::ScalarType wide = at::promoteTypes(compute, at::kFloat);
        const at::Tensor g = gradOutputs[0].to(wide);
        at::Tensor gradH, gradW;
        if (wantH)
            gradH = at::empty_like(h);
        if (wantW)
            gradW = at::zeros_like(w);
        for (int64_t r0 = 0; r0 < n; r0 += chunkRows) {
            const int64_t rows = std::min(chunkRows, n - r0);
            const at::Tensor hc = h.narrow(0, r0, rows);
            const at::Tensor tc = targets.narrow(0, r0, rows);
            at::Tensor z = fused::cast(fused::linear(hc, w), wide);
            const at::Tensor valid = tc.ne(-100);
            // The target's column among this rank's (every column without a shard).
            const auto [mine, safe] = targetColumns(tc, std::max<int64_t>(first, 0), vocab);
            const at::Tensor lse = first >= 0 ? lses.narrow(0, r0, rows) : at::logsumexp(z, 1);
            // d logp / d z = onehot(target) - softmax(z), times the row's gradient; in place.
            z.sub_(lse.unsqueeze(1)).exp_().neg_();
            z.scatter_add_(1, safe, mine.to(wide).unsqueeze(1));
            z.mul_((g.narrow(0, r0, rows) * valid.to(wide)).unsqueeze(1));
            const at::Tensor gc = fused::cast(z, compute);
            z = at::Tensor();
            if (wantH)
                gradH.narrow(0, r0, rows).copy_(fused::matmul(gc, w));
            if (wantW)
                addProduct(gradW, gc.t(), hc);
        }
        return {gradH, gradW, at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

} // namespace

at::Tensor linearTokenLogProbs(const at::Tensor& h, const at::Tensor& weight,
    const at::Tensor& targets, int64_t chunkRows, const VocabShard* shard)
{
    TORCH_CHECK(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1),
        "linearTokenLogProbs: h (N, H) and W (V, H) expected");
    TORCH_CHECK(targets.dim() == 1 && targets.size(0) == h.size(0),
        "linearTokenLogProbs: one target per row of h expected");
    if (chunkRows <= 0)
        chunkRows = plan::lossChunkRows(h.size(0), h.size(1), weight.size(0));
    chunkRows = std::max<int64_t>(1, chunkRows);
    const bool grads = at::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad());
    if (!grads)
        return chunkedLogProbs(h, weight, targets, chunkRows, shard).first;
    return LinearTokenLogProbs::apply(
        h, weight, targets, chunkRows, static_cast<int64_t>(reinterpret_cast<intptr_t>(shard)));
}

at::Tensor linearCrossEntropySum(const at::Tensor& h, const at::Tensor& weight,
    const at::Tensor& targets, double gradScale, int64_t chunkRows, const VocabShard* shard)
{
    TORCH_CHECK(h.dim() == 2 && weight.dim() == 2 && h.size(1) == weight.size(1),
        "linearCrossEntropySum: h (N, H) and W (V, H) expected");
    TORCH_CHECK(targets.dim() == 1 && targets.size(0) == h.size(0),
        "linearCrossEntropySum: one target per row of h expected");
    const bool grads = at::GradMode::is_enabled() && (h.requires_grad() || weight.requires_grad());
    if (!grads)
        return chunkedSums(h, weight, targets, gradScale, chunkRows, false, false, shard).loss;
    return LinearCrossEntropy::apply(h, weight, targets, gradScale, chunkRows,
        static_cast<int64_t>(reinterpret_cast<intptr_t>(shard)));
}

} // namespace shard::engine
