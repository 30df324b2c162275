// On the CPU, one fused pass per tensor (parallel over chunks): the update is memory bound, so a
// single read of p, g, m, v and one write of p, m, v beats separate ATen ops. On a GPU, LibTorch's
// multi-tensor fused kernel (one launch per group of tensors) where it exists.
#include "adamw.h"

#include <cmath>
#include <optional>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "core/torch_compat.h"
#include "core/train/host_sync.h"

namespace shard::engine {

bool fusedAdamWAvailable()
{
    return SHARD_TORCH_HAS_FUSED_ADAMW != 0;
}

AdamW::State& AdamW::stateFor(const OptimTarget& t)
{
    State& st = m_state[t.name];
    if (!st.m.defined())
        st = {at::zeros_like(t.master), at::zeros_like(t.master)};
    return st;
}

void AdamW::reserve(const std::vector<OptimTarget>& targets)
{
    for (const auto& t : targets)
        if (t.master.defined())
            stateFor(t);
}

void AdamW::step(const std::vector<OptimTarget>& targets, double lr, double gradScale)
{
    update(targets, lr, gradScale, at::Tensor());
}

void AdamW::step(const std::vector<OptimTarget>& targets, double lr, const at::Tensor& gradScale)
{
    update(targets, lr, 1.0, gradScale);
}

void AdamW::update(const std::vector<OptimTarget>& targets, double lr, double hostScale,
    const at::Tensor& deviceScale)
{
    if (m_config.kernel == AdamWKernel::Fused && !fusedAdamWAvailable())
        throw std::runtime_error("AdamW: this LibTorch (" + std::to_string(TORCH_VERSION_MAJOR)
            + "." + std::to_string(TORCH_VERSION_MINOR)
            + ") has no fused AdamW kernel (2.4 and later have it)");
    ++m_step;
    const float b1 = static_cast<float>(m_config.beta1);
    const float b2 = static_cast<float>(m_config.beta2);
    const double bc1 = 1.0 - std::pow(m_config.beta1, static_cast<double>(m_step));
    const double bc2 = 1.0 - std::pow(m_config.beta2, static_cast<double>(m_step));
    const float stepSize = static_cast<float>(lr / bc1);
    const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
    const float eps = static_cast<float>(m_config.eps);
    at::NoGradGuard noGrad;
    // Clipping's factor: a host value, or a one-element fp64 tensor on the device that only the
    // host loop reads (a host tensor directly; from a GPU one counted read, as offload waits for
    // the gradients there anyway).
    const bool onDevice = deviceScale.defined();
    std::optional<float> hostFactor;
    if (!onDevice)
        hostFactor = static_cast<float>(hostScale);
    auto loopScale = [&]() -> float {
        if (!hostFactor)
            hostFactor = static_cast<float>(deviceScale.is_cpu()
                    ? deviceScale.to(at::kDouble).contiguous().data_ptr<double>()[0]
                    : hostsync::readValue(deviceScale));
        return *hostFactor;
    };
    // The fused kernel's two groups (decayed, not), each as parallel lists.
    struct Group {
        std::vector<at::Tensor> p, g, m, v;
    };
    Group fused[2];
    for (const auto& t : targets) {
        if (!t.grad.defined())
            continue;
        if (t.master.scalar_type() != at::kFloat || t.grad.scalar_type() != at::kFloat
            || !t.master.is_contiguous() || !t.grad.is_contiguous()
            || t.master.numel() != t.grad.numel())
            throw std::runtime_error("AdamW: target '" + t.name
                + "' must be contiguous fp32 with a gradient of the same size");
        State& st = stateFor(t);
        AdamWKernel kernel = m_config.kernel;
        if (kernel == AdamWKernel::Auto)
            kernel = t.master.is_cpu()  ? AdamWKernel::Loop
                : fusedAdamWAvailable() ? AdamWKernel::Fused
                                        : AdamWKernel::Ops;
        if (kernel == AdamWKernel::Loop && !t.master.is_cpu())
            throw std::runtime_error("AdamW: the loop kernel runs on host tensors only; '" + t.name
                + "' is on " + t.master.device().str());
        if (kernel == AdamWKernel::Fused) {
            Group& g = fused[t.decay ? 0 : 1];
            g.p.push_back(t.master);
            g.g.push_back(t.grad);
            g.m.push_back(st.m);
            g.v.push_back(st.v);
            continue;
        }
        const float decay = t.decay ? static_cast<float>(1.0 - lr * m_config.weightDecay) : 1.0f;
        if (kernel == AdamWKernel::Ops) {
            // The same update, in fp32, as a few in-place ATen kernels on the tensors' device.
            const at::Tensor g = onDevice
                ? t.grad * deviceScale.to(t.grad.device(), at::kFloat).reshape({})
                : t.grad * *hostFactor;
            t.master.mul_(decay);
            st.m.add_(g - st.m, 1.0f - b1);
            st.v.mul_(b2).addcmul_(g, g, 1.0f - b2);
            t.master.addcdiv_(st.m, st.v.sqrt().div_(bc2Sqrt).add_(eps), -stepSize);
            continue;
        }
        const float scale = loopScale();
        float* p = t.master.data_ptr<float>();
        const float* g = t.grad.data_ptr<float>();
        float* m = st.m.data_ptr<float>();
        float* v = st.v.data_ptr<float>();
        at::parallel_for(0, t.master.numel(), 16384, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) {
                const float gi = g[i] * scale;
                p[i] *= decay;
                m[i] += (gi - m[i]) * (1.0f - b1);
                v[i] = v[i] * b2 + (1.0f - b2) * gi * gi;
                const float denom = std::sqrt(v[i]) / bc2Sqrt + eps;
                p[i] -= stepSize * m[i] / denom;
            }
        });
    }
    for (int decayed = 0; decayed < 2; ++decayed) {
        Group& g = fused[decayed];
        if (g.p.empty())
            continue;
#if SHARD_TORCH_HAS_FUSED_ADAMW
        // One launch per group over every tensor (the lists may mix sizes). The kernel reads the
        // step count from a tensor on the parameters' device and divides the gradient by
        // grad_scale, so clipping's factor goes in as its inverse and no gradient is copied.
        const at::TensorOptions on = g.p.front().options();
        const at::Tensor step = at::full({}, static_cast<double>(m_step), on);
        const std::vector<at::Tensor> steps(g.p.size(), step);
        std::optional<at::Tensor> unscale;
        if (onDevice)
            unscale = deviceScale.reshape({}).to(at::kDouble).reciprocal().to(on);
        else if (hostScale != 1.0)
            unscale = at::full({}, 1.0 / hostScale, on);
        at::_fused_adamw_(g.p, g.g, g.m, g.v, {}, steps, lr, m_config.beta1, m_config.beta2,
            decayed == 0 ? m_config.weightDecay : 0.0, m_config.eps, /*amsgrad=*/false,
            /*maximize=*/false, unscale, std::nullopt);
#endif
    }
}

int64_t AdamW::stateBytes() const
{
    int64_t n = 0;
    for (const auto& [name, st] : m_state)
        n += (st.m.numel() + st.v.numel()) * 4;
    return n;
}

} // namespace shard::engine
