// AdamW with decoupled weight decay (Loshchilov & Hutter), elementwise on whatever fp32 tensors
// it is given (whole parameters or a rank's shards), numerically as torch.optim.AdamW.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/train/strategy.h"

namespace shard::engine {

// How the update runs. Auto: the vectorized loop on host tensors (CPU ranks, offloaded state),
// LibTorch's fused multi-tensor kernel on a GPU where LibTorch has it, else in-place ATen ops.
// The others force one (tests run each on the CPU); Fused throws where LibTorch lacks it.
enum class AdamWKernel { Auto, Loop, Ops, Fused };

// Whether this LibTorch has the fused multi-tensor AdamW (at::_fused_adamw_).
bool fusedAdamWAvailable();

struct AdamWConfig {
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weightDecay = 0.0; // applied only to targets with decay = true
    AdamWKernel kernel = AdamWKernel::Auto;
};

class AdamW {
public:
    explicit AdamW(AdamWConfig config)
        : m_config(config)
    {
    }
    // One update of every target with a gradient; state (m, v) is created on first use and
    // keyed by target name. `gradScale` multiplies the gradient first (clipping); the fused
    // kernel does so in place, so a gradient is spent once the step is taken.
    void step(const std::vector<OptimTarget>& targets, double lr, double gradScale = 1.0);
    // The same with the factor as a one-element fp64 tensor on the device (undefined = 1), so
    // the step reads nothing back to the host on a GPU.
    void step(const std::vector<OptimTarget>& targets, double lr, const at::Tensor& gradScale);
    // Creates the zero state (m, v) of every target that has none yet, as the first step would:
    // the trainer calls it before the first step so that the optimizer's memory is in place
    // from the start (a step's footprint is the same from the first step on, and a run that
    // cannot hold its optimizer state fails before it trains, not after its first step).
    void reserve(const std::vector<OptimTarget>& targets);
    int64_t stepCount() const { return m_step; }
    int64_t stateBytes() const;

    struct State {
        at::Tensor m;
        at::Tensor v;
    };
    std::map<std::string, State>& state() { return m_state; }
    void setStepCount(int64_t step) { m_step = step; }

private:
    // Target t's state, made zero (of t.master's shape) where it has none yet.
    State& stateFor(const OptimTarget& t);
    void update(const std::vector<OptimTarget>& targets, double lr, double hostScale,
        const at::Tensor& deviceScale);

    AdamWConfig m_config;
    int64_t m_step = 0;
    std::map<std::string, State> m_state;
};

} // namespace shard::engine
