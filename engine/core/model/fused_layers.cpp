// RMSNorm, rotary embeddings and SwiGLU as single autograd functions (fused_ops.h). On the CPU
// each is one pass over its rows forward and one backward where the composed ATen ops make five to
// ten; on other devices the same functions run ATen ops, so every device saves the same tensors
// for backward (what the planner's activation coefficients count).
#include "fused_ops.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

namespace shard::engine::fused {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Profiler scopes (bench_engine_train --profile-steps): the kernels' time under one name each.
#define SHARD_FUSED_SCOPE(name) RECORD_FUNCTION(name, std::vector<c10::IValue>())

// The arithmetic type of a storage type: fp64 stays fp64, everything narrower computes in fp32
// (as ATen's CPU kernels do for bf16 and fp16).
template<typename T> using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Rows per parallel task: about 64 KiB of input each.
int64_t rowGrain(int64_t width)
{
    return std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1));
}

// The sum of term(i) for i in [0, n) in a fixed order (8 interleaved partial sums, then the
// tail), so a row's result does not depend on the thread count.
template<typename A, typename Term> A fixedOrderSum(int64_t n, Term term)
{
    constexpr int64_t kLanes = 8;
    A part[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int64_t l = 0; l < kLanes; ++l)
            part[l] += term(i + l);
    A s = 0;
    for (int64_t l = 0; l < kLanes; ++l)
        s += part[l];
    for (; i < n; ++i)
        s += term(i);
    return s;
}

// --- RMSNorm: y = w * (x / sqrt(mean(x^2) + eps)) with the normalized value rounded to x's dtype
// before the product (Hugging Face's LlamaRMSNorm). Saved: x, w and 1/rms per row (fp32).

// 1/rms of every row of x (rows, d), in x's arithmetic type, as ATen computes
// rsqrt(pow(x, 2).mean(-1) + eps) (up to the mean's summation order).
template<typename T>
void rmsNormForwardCpu(
    const T* x, const T* w, T* y, Acc<T>* rstd, int64_t rows, int64_t d, double eps)
{
    using A = Acc<T>;
    at::parallel_for(0, rows, rowGrain(d), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const T* xr = x + r * d;
            T* yr = y + r * d;
            const A meanSquare = fixedOrderSum<A>(d, [&](int64_t i) {
                const A v = static_cast<A>(xr[i]);
                return v * v;
            }) / static_cast<A>(d);
            const A inv = A(1) / std::sqrt(meanSquare + static_cast<A>(eps));
            rstd[r] = inv;
            for (int64_t i = 0; i < d; ++i) {
                const T normed = static_cast<T>(static_cast<A>(xr[i]) * inv);
                yr[i] = static_cast<T>(static_cast<A>(w[i]) * static_cast<A>(normed));
            }
        }
    });
}

// Rows per block of the weight gradient's partial sums: a fixed partition, so the gradient's
// summation order does not depend on the thread count either.
constexpr int64_t kWeightGradRows = 32;

// gx (rows, d) and gw's partial sums (blocks, d) when wanted (null otherwise):
//   gn = (g * w) rounded to x's dtype and widened (the gradient reaching the normalized value),
//   n = x / rms,  gx = (gn - n * mean(gn * n)) / rms,  gw = sum over rows of g * round(n).
template<typename T>
void rmsNormBackwardCpu(const T* g, const T* x, const T* w, const Acc<T>* rstd, T* gx,
    Acc<T>* gwPartial, int64_t rows, int64_t d)
{
    using A = Acc<T>;
    const int64_t blocks = (rows + kWeightGradRows - 1) / kWeightGradRows;
    at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
        std::vector<A> gn(static_cast<size_t>(d));
        for (int64_t blk = begin; blk < end; ++blk) {
            A* gwp = gwPartial ? gwPartial + blk * d : nullptr;
            if (gwp)
                std::fill(gwp, gwp + d, A(0));
            const int64_t rEnd = std::min(rows, (blk + 1) * kWeightGradRows);
            for (int64_t r = blk * kWeightGradRows; r < rEnd; ++r) {
                const T* gr = g + r * d;
                const T* xr = x + r * d;
                const A inv = rstd[r];
                if (gx) {
                    for (int64_t i = 0; i < d; ++i)
                        gn[i] = static_cast<A>(
                            static_cast<T>(static_cast<A>(gr[i]) * static_cast<A>(w[i])));
                    const A meanDot = fixedOrderSum<A>(d, [&](int64_t i) {
                        return gn[i] * (static_cast<A>(xr[i]) * inv);
                    }) / static_cast<A>(d);
                    T* gxr = gx + r * d;
                    for (int64_t i = 0; i < d; ++i) {
                        const A n = static_cast<A>(xr[i]) * inv;
                        gxr[i] = static_cast<T>(inv * (gn[i] - n * meanDot));
                    }
                }
                if (gwp)
                    for (int64_t i = 0; i < d; ++i) {
                        const T normed = static_cast<T>(static_cast<A>(xr[i]) * inv);
                        gwp[i] += static_cast<A>(gr[i]) * static_cast<A>(normed);
                    }
            }
        }
    });
}

bool cpuKernel(const at::Tensor& a, const at::Tensor& b)
{
    return a.is_cpu() && b.is_cpu() && a.scalar_type() == b.scalar_type();
}

// y and 1/rms per row (x's arithmetic type), by the kernel on the CPU, else by ATen ops.
std::pair<at::Tensor, at::Tensor> rmsNormForward(
    const at::Tensor& x, const at::Tensor& w, double eps)
{
    const at::ScalarType accType = at::promoteTypes(x.scalar_type(), at::kFloat);
    if (!cpuKernel(x, w)) {
        const at::Tensor xf = x.to(accType);
        at::Tensor rstd = at::rsqrt(xf.pow(2).mean(-1) + eps);
        return {w * (xf * rstd.unsqueeze(-1)).to(x.scalar_type()), rstd};
    }
    const int64_t d = x.size(-1);
    const at::Tensor wc = w.contiguous();
    at::Tensor y = at::empty_like(x);
    at::Tensor rstd = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(accType));
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kBFloat16, at::kHalf, x.scalar_type(), "shard_rms_norm", [&] {
            rmsNormForwardCpu<scalar_t>(x.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(),
                y.data_ptr<scalar_t>(), rstd.data_ptr<Acc<scalar_t>>(), x.numel() / d, d, eps);
        });
    return {y, rstd};
}

struct RmsNorm : torch::autograd::Function<RmsNorm> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor w, double eps)
    {
        SHARD_FUSED_SCOPE("shard::rms_norm");
        const at::Tensor xc = x.contiguous();
        auto [y, rstd] = rmsNormForward(xc, w, eps);
        ctx->save_for_backward({xc, w, rstd});
        return y;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        SHARD_FUSED_SCOPE("shard::rms_norm_backward");
        const auto saved = ctx->get_saved_variables();
        const at::Tensor& x = saved[0];
        const at::Tensor& w = saved[1];
        const at::Tensor& rstd = saved[2];
        const bool wantX = ctx->needs_input_grad(0), wantW = ctx->needs_input_grad(1);
        const at::Tensor g = grads[0].contiguous();
        const int64_t d = x.size(-1), rows = x.numel() / d;
        at::Tensor gx, gw;
        if (cpuKernel(x, w) && g.scalar_type() == x.scalar_type()) {
            const at::Tensor wc = w.contiguous();
            if (wantX)
                gx = at::empty_like(x);
            const int64_t blocks = (rows + kWeightGradRows - 1) / kWeightGradRows;
            at::Tensor partial = wantW ? at::empty({blocks, d}, rstd.options()) : at::Tensor();
            if (wantW)
                gw = at::empty({d}, w.options());
            AT_DISPATCH_FLOATING_TYPES_AND2(
                at::kBFloat16, at::kHalf, x.scalar_type(), "shard_rms_norm_backward", [&] {
                    using A = Acc<scalar_t>;
                    A* part = wantW ? partial.data_ptr<A>() : nullptr;
                    rmsNormBackwardCpu<scalar_t>(g.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(),
                        wc.data_ptr<scalar_t>(), rstd.data_ptr<A>(),
                        wantX ? gx.data_ptr<scalar_t>() : nullptr, part, rows, d);
                    if (!wantW)
                        return;
                    // The blocks' partial sums in block order, then one rounding.
                    scalar_t* out = gw.data_ptr<scalar_t>();
                    for (int64_t i = 0; i < d; ++i) {
                        A sum = 0;
                        for (int64_t blk = 0; blk < blocks; ++blk)
                            sum += part[blk * d + i];
                        out[i] = static_cast<scalar_t>(sum);
                    }
                });
        } else {
            const at::Tensor r = rstd.unsqueeze(-1);
            const at::Tensor n = x.to(rstd.scalar_type()) * r;
            if (wantX) {
                const at::Tensor gn = (g * w).to(x.scalar_type()).to(rstd.scalar_type());
                gx = (r * (gn - n * (gn * n).mean(-1, /*keepdim=*/true))).to(x.scalar_type());
            }
            if (wantW)
                gw = (g.to(rstd.scalar_type()) * n.to(x.scalar_type()).to(rstd.scalar_type()))
                         .reshape({rows, d})
                         .sum(0)
                         .to(w.scalar_type());
        }
        return {gx, gw, at::Tensor()};
    }
};

// --- Rotary embeddings, rotate-half form: y = x * cos + rotate_half(x) * sin with
// rotate_half(x) = [-x2, x1] over the last dimension's halves. Every product and the sum are
// rounded to x's dtype as the composed ops round them, so results are the same bit for bit.
// Saved: cos and sin only (the tables; nothing of x).

// x (outer, s, heads, d) contiguous; cos and sin (s, d) contiguous. With `transposed`, the
// backward: gx1 = g1 * cos1 + g2 * sin2, gx2 = g2 * cos2 - g1 * sin1 (each product rounded).
template<typename T>
void ropeCpu(const T* x, const T* cos, const T* sin, T* y, int64_t outer, int64_t s, int64_t heads,
    int64_t d, bool transposed)
{
    using A = Acc<T>;
    const int64_t half = d / 2;
    auto mul = [](T a, T b) { return static_cast<A>(static_cast<T>(static_cast<A>(a) * b)); };
    at::parallel_for(0, outer * s, rowGrain(heads * d), [&](int64_t begin, int64_t end) {
        for (int64_t os = begin; os < end; ++os) {
            const int64_t pos = os % s;
            const T* c = cos + pos * d;
            const T* sn = sin + pos * d;
            for (int64_t h = 0; h < heads; ++h) {
                const T* xr = x + (os * heads + h) * d;
                T* yr = y + (os * heads + h) * d;
                for (int64_t i = 0; i < half; ++i) {
                    const T x1 = xr[i], x2 = xr[half + i];
                    if (!transposed) {
                        yr[i] = static_cast<T>(mul(x1, c[i]) + mul(-x2, sn[i]));
                        yr[half + i] = static_cast<T>(mul(x2, c[half + i]) + mul(x1, sn[half + i]));
                    } else {
                        yr[i] = static_cast<T>(mul(x1, c[i]) + mul(x2, sn[half + i]));
                        yr[half + i] = static_cast<T>(mul(x2, c[half + i]) + -mul(x1, sn[i]));
                    }
                }
            }
        }
    });
}

// The composed ops on (outer, s, heads, d), the tables broadcast over heads.
at::Tensor ropeComposed(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin)
{
    const at::Tensor c = cos.unsqueeze(1), sn = sin.unsqueeze(1);
    return x * c + rotateHalf(x) * sn;
}

at::Tensor ropeComposedBackward(const at::Tensor& g, const at::Tensor& cos, const at::Tensor& sin)
{
    const at::Tensor c = cos.unsqueeze(1), sn = sin.unsqueeze(1);
    const at::Tensor gs = g * sn;
    const int64_t half = g.size(-1) / 2;
    // rotate_half's transpose: [x1, x2] -> [x2, -x1].
    const at::Tensor back = at::cat({gs.narrow(-1, half, half), -gs.narrow(-1, 0, half)}, -1);
    return g * c + back;
}

// The loop for fp32 and fp64 on the CPU. 16-bit dtypes take ATen's ops (their vectorized
// kernels convert in AVX-512 registers; this loop's c10::BFloat16 conversions do not vectorize,
// which made a bf16 step slower) inside the same autograd function, which saves the same.
bool ropeKernel(const at::Tensor& x, const at::Tensor& cos)
{
    return x.is_cpu() && cos.is_cpu() && x.scalar_type() == cos.scalar_type()
        && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble);
}

at::Tensor ropeApply(
    const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transposed)
{
    if (!ropeKernel(x, cos))
        return transposed ? ropeComposedBackward(x, cos, sin) : ropeComposed(x, cos, sin);
    const at::Tensor xc = x.contiguous(), cc = cos.contiguous(), sc = sin.contiguous();
    at::Tensor y = at::empty_like(xc);
    const int64_t s = xc.size(1), heads = xc.size(2), d = xc.size(3);
    AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "shard_rope", [&] {
        ropeCpu<scalar_t>(xc.data_ptr<scalar_t>(), cc.data_ptr<scalar_t>(), sc.data_ptr<scalar_t>(),
            y.data_ptr<scalar_t>(), xc.size(0), s, heads, d, transposed);
    });
    return y;
}

struct Rope : torch::autograd::Function<Rope> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor cos, at::Tensor sin)
    {
        SHARD_FUSED_SCOPE("shard::rope");
        ctx->save_for_backward({cos, sin});
        return ropeApply(x, cos, sin, false);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        SHARD_FUSED_SCOPE("shard::rope_backward");
        const auto saved = ctx->get_saved_variables();
        return {ropeApply(grads[0], saved[0], saved[1], true), at::Tensor(), at::Tensor()};
    }
};

// --- SwiGLU: silu(gate) * up. Saved: gate and up; silu(gate) is recomputed in the backward
// instead of kept (the composed ops keep it too: one intermediate-wide tensor per token less).
// The arithmetic is ATen's own silu, silu_backward and products, so results are the same.
struct SwiGlu : torch::autograd::Function<SwiGlu> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor gate, at::Tensor up)
    {
        SHARD_FUSED_SCOPE("shard::swiglu");
        ctx->save_for_backward({gate, up});
        // The product goes into silu's output: no second intermediate-wide tensor.
        return at::silu(gate).mul_(up);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        SHARD_FUSED_SCOPE("shard::swiglu_backward");
        const auto saved = ctx->get_saved_variables();
        const at::Tensor& gate = saved[0];
        const at::Tensor& up = saved[1];
        const at::Tensor& g = grads[0];
        at::Tensor gGate, gUp;
        if (ctx->needs_input_grad(1))
            gUp = at::silu(gate).mul_(g);
        if (ctx->needs_input_grad(0))
            gGate = at::silu_backward(g * up, gate);
        return {gGate, gUp};
    }
};

bool tracked(std::initializer_list<const at::Tensor*> ts)
{
    if (!at::GradMode::is_enabled())
        return false;
    for (const at::Tensor* t : ts)
        if (t->requires_grad())
            return true;
    return false;
}

} // namespace

at::Tensor rotateHalf(const at::Tensor& x)
{
    const int64_t half = x.size(-1) / 2;
    return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps)
{
    if (tracked({&x, &weight}))
        return RmsNorm::apply(x, weight, eps);
    at::NoGradGuard noGrad;
    SHARD_FUSED_SCOPE("shard::rms_norm");
    return rmsNormForward(x.contiguous(), weight, eps).first;
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin)
{
    if (tracked({&x}))
        return Rope::apply(x, cos, sin);
    at::NoGradGuard noGrad;
    SHARD_FUSED_SCOPE("shard::rope");
    return ropeApply(x, cos, sin, false);
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up)
{
    if (tracked({&gate, &up}))
        return SwiGlu::apply(gate, up);
    at::NoGradGuard noGrad;
    return at::silu(gate).mul_(up);
}

} // namespace shard::engine::fused
