// Custom autograd functions that keep the bf16 tensors the autograd graph saves (as at::linear
// does: no extra activation memory) and widen them only around each GEMM.
#include "fused_ops.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "matvec.h"

namespace shard::engine::fused {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool detectBf16GemmThroughFp32()
{
    if (const char* v = std::getenv("SHARD_BF16_GEMM"); v && *v) {
        if (std::strcmp(v, "fp32") == 0)
            return true;
        if (std::strcmp(v, "native") == 0)
            return false;
        throw std::runtime_error(std::string("SHARD_BF16_GEMM='") + v
            + "' is not a bf16 GEMM path (use native or fp32, or leave it unset)");
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool onednnBf16 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
        && __builtin_cpu_supports("avx512dq");
    return !onednnBf16;
#else
    return false;
#endif
}

bool widened(const at::Tensor& a, const at::Tensor& b)
{
    return a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 && a.is_cpu()
        && bf16GemmThroughFp32();
}

constexpr int64_t kGrain = 32768;

// bf16 -> fp32 into out (contiguous, as many elements): the bf16 bits are the upper half of the
// fp32 value.
void widenInto(const at::Tensor& src, const at::Tensor& out)
{
    const auto* in = reinterpret_cast<const uint16_t*>(src.data_ptr<at::BFloat16>());
    auto* o = reinterpret_cast<uint32_t*>(out.data_ptr<float>());
    at::parallel_for(0, src.numel(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
            o[i] = static_cast<uint32_t>(in[i]) << 16;
    });
}

// fp32 -> bf16 into out, round to nearest even; NaN stays a quiet NaN
// (c10::round_to_nearest_even).
void narrowInto(const at::Tensor& src, const at::Tensor& out)
{
    const auto* in = reinterpret_cast<const uint32_t*>(src.data_ptr<float>());
    auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
    at::parallel_for(0, src.numel(), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
            const uint32_t u = in[i];
            const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
            const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
            o[i] = nan ? static_cast<uint16_t>(0x7fc0u) : static_cast<uint16_t>(rounded);
        }
    });
}

at::Tensor widen(const at::Tensor& t)
{
    const at::Tensor src = t.contiguous();
    at::Tensor out = at::empty(src.sizes(), src.options().dtype(at::kFloat));
    widenInto(src, out);
    return out;
}

at::Tensor narrow(const at::Tensor& t)
{
    const at::Tensor src = t.contiguous();
    at::Tensor out = at::empty(src.sizes(), src.options().dtype(at::kBFloat16));
    narrowInto(src, out);
    return out;
}

// Without autograd (inside a custom function, or on gradients).
at::Tensor convert(const at::Tensor& t, at::ScalarType dtype)
{
    if (t.scalar_type() == dtype)
        return t;
    if (t.is_cpu() && t.scalar_type() == at::kBFloat16 && dtype == at::kFloat)
        return widen(t);
    if (t.is_cpu() && t.scalar_type() == at::kFloat && dtype == at::kBFloat16)
        return narrow(t);
    return t.to(dtype);
}

at::Tensor f32(const at::Tensor& t)
{
    return convert(t, at::kFloat);
}

at::Tensor bf16(const at::Tensor& t)
{
    return convert(t, at::kBFloat16);
}

struct Cast : torch::autograd::Function<Cast> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor t, int64_t dtype)
    {
        ctx->saved_data["from"] = static_cast<int64_t>(t.scalar_type());
        return convert(t, static_cast<at::ScalarType>(dtype));
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        const auto from = static_cast<at::ScalarType>(ctx->saved_data["from"].toInt());
        return {grads[0].defined() ? convert(grads[0], from) : at::Tensor(), at::Tensor()};
    }
};

at::Tensor wideLinearForward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias)
{
    const at::Tensor x2 = f32(x).reshape({-1, x.size(-1)});
    at::Tensor y = bias.defined() ? at::addmm(f32(bias), x2, f32(w).t()) : at::mm(x2, f32(w).t());
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = w.size(0);
    return bf16(y).view(shape);
}

// What the gradients need, as autograd's own linear keeps it: x only for w's gradient (a frozen
// weight keeps no input alive), w only for x's.
void saveForLinear(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w)
{
    ctx->saved_data["x_shape"] = x.sizes().vec();
    const bool keepX = w.requires_grad();
    ctx->save_for_backward({keepX ? x : at::Tensor(), x.requires_grad() ? w : at::Tensor()});
}

// Gradients of x and w (and of the bias when `withBias`), each rounded to bf16 once.
variable_list wideLinearBackward(AutogradContext* ctx, const at::Tensor& gradOut, bool withBias)
{
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0]; // undefined unless w needs a gradient
    const at::Tensor& w = saved[1]; // undefined unless x needs a gradient
    const at::Tensor g = f32(gradOut).reshape({-1, gradOut.size(-1)});
    variable_list out(withBias ? 3 : 2);
    if (ctx->needs_input_grad(0))
        out[0] = bf16(at::mm(g, f32(w))).view(ctx->saved_data["x_shape"].toIntVector());
    if (ctx->needs_input_grad(1))
        out[1] = bf16(at::mm(g.t(), f32(x).reshape({-1, x.size(-1)})));
    if (withBias && ctx->needs_input_grad(2))
        out[2] = bf16(g.sum(0));
    return out;
}

struct WideLinear : torch::autograd::Function<WideLinear> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor w)
    {
        saveForLinear(ctx, x, w);
        return wideLinearForward(x, w, {});
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        return wideLinearBackward(ctx, grads[0], false);
    }
};

struct WideLinearBias : torch::autograd::Function<WideLinearBias> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor x, at::Tensor w, at::Tensor bias)
    {
        saveForLinear(ctx, x, w);
        return wideLinearForward(x, w, bias);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        return wideLinearBackward(ctx, grads[0], true);
    }
};

struct WideMatmul : torch::autograd::Function<WideMatmul> {
    static at::Tensor forward(AutogradContext* ctx, at::Tensor a, at::Tensor b)
    {
        ctx->save_for_backward({a, b});
        return bf16(at::matmul(f32(a), f32(b)));
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        const auto saved = ctx->get_saved_variables();
        const at::Tensor g = f32(grads[0]);
        at::Tensor ga, gb;
        if (ctx->needs_input_grad(0))
            ga = bf16(at::matmul(g, f32(saved[1]).transpose(-1, -2)));
        if (ctx->needs_input_grad(1))
            gb = bf16(at::matmul(f32(saved[0]).transpose(-1, -2), g));
        return {ga, gb};
    }
};

} // namespace

void copyCast(const at::Tensor& dst, const at::Tensor& src)
{
    const bool onePass = dst.is_cpu() && src.is_cpu() && dst.is_contiguous() && src.is_contiguous()
        && dst.numel() == src.numel();
    if (onePass && src.scalar_type() == at::kBFloat16 && dst.scalar_type() == at::kFloat)
        widenInto(src, dst);
    else if (onePass && src.scalar_type() == at::kFloat && dst.scalar_type() == at::kBFloat16)
        narrowInto(src, dst);
    else
        dst.copy_(src);
}

at::Tensor cast(const at::Tensor& t, at::ScalarType dtype)
{
    if (t.scalar_type() == dtype)
        return t;
    const bool fast = t.is_cpu()
        && ((t.scalar_type() == at::kBFloat16 && dtype == at::kFloat)
            || (t.scalar_type() == at::kFloat && dtype == at::kBFloat16));
    if (!fast)
        return t.to(dtype);
    if (!t.requires_grad() || !at::GradMode::is_enabled()) {
        at::NoGradGuard noGrad;
        return convert(t, dtype);
    }
    return Cast::apply(t, static_cast<int64_t>(dtype));
}

bool bf16GemmThroughFp32()
{
    static const bool value = detectBf16GemmThroughFp32();
    return value;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias)
{
    if (matvecApplies(x, w, bias)) // a decode step's one row: read the weights once, as stored
        return matvec(x, w, bias);
    if (widened(x, w) && !bias.defined())
        return WideLinear::apply(x, w);
    if (widened(x, w) && bias.scalar_type() == at::kBFloat16)
        return WideLinearBias::apply(x, w, bias);
    return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b)
{
    if (widened(a, b) && a.dim() == b.dim() && a.dim() >= 2
        && a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2))
        return WideMatmul::apply(a, b);
    return at::matmul(a, b);
}

} // namespace shard::engine::fused
