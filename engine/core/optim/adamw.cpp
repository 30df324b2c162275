// One fused pass per tensor (parallel over chunks): the update is memory bound, so a single
// read of p, g, m, v and one write of p, m, v beats separate ATen ops.
#include "adamw.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

namespace shard::engine {

void AdamW::step(const std::vector<OptimTarget>& targets, double lr, double gradScale)
{
    ++m_step;
    const float b1 = static_cast<float>(m_config.beta1);
    const float b2 = static_cast<float>(m_config.beta2);
    const double bc1 = 1.0 - std::pow(m_config.beta1, static_cast<double>(m_step));
    const double bc2 = 1.0 - std::pow(m_config.beta2, static_cast<double>(m_step));
    const float stepSize = static_cast<float>(lr / bc1);
    const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
    const float eps = static_cast<float>(m_config.eps);
    const float scale = static_cast<float>(gradScale);
    at::NoGradGuard noGrad;
    for (const auto& t : targets) {
        if (!t.grad.defined())
            continue;
        if (t.master.scalar_type() != at::kFloat || t.grad.scalar_type() != at::kFloat
            || !t.master.is_contiguous() || !t.grad.is_contiguous()
            || t.master.numel() != t.grad.numel())
            throw std::runtime_error("AdamW: target '" + t.name
                + "' must be contiguous fp32 with a gradient of the same size");
        auto& st = m_state[t.name];
        if (!st.m.defined()) {
            st.m = at::zeros_like(t.master);
            st.v = at::zeros_like(t.master);
        }
        const float decay = t.decay ? static_cast<float>(1.0 - lr * m_config.weightDecay) : 1.0f;
        if (!t.master.is_cpu()) {
            // On a GPU: the same update, in fp32, as a few in-place ATen kernels on the device.
            const at::Tensor g = t.grad * scale;
            t.master.mul_(decay);
            st.m.add_(g - st.m, 1.0f - b1);
            st.v.mul_(b2).addcmul_(g, g, 1.0f - b2);
            t.master.addcdiv_(st.m, st.v.sqrt().div_(bc2Sqrt).add_(eps), -stepSize);
            continue;
        }
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
}

int64_t AdamW::stateBytes() const
{
    int64_t n = 0;
    for (const auto& [name, st] : m_state)
        n += (st.m.numel() + st.v.numel()) * 4;
    return n;
}

} // namespace shard::engine
