// The single-process strategy: every parameter is a whole fp32 leaf tensor; gradients
// accumulate in place across micro-steps; nothing is communicated.
#pragma once

#include <map>
#include <utility>

#include "core/model/nf4.h"
#include "core/train/strategy.h"

namespace shard::engine {

class SingleStrategy : public Strategy {
public:
    explicit SingleStrategy(StrategyOptions options)
        : m_options(std::move(options))
    {
    }
    std::string name() const override { return "single"; }
    void setup(LlamaModel& model, const ParamSource& source) override;
    std::vector<at::Tensor> unitWeights(int unit) override;
    // QLoRA: the hooks free each unit's dequantised weights after its forward and its backward
    // and refill them before its backward.
    bool wantsUnitHooks() const override { return !m_nf4.empty(); }
    void postForward(int unit) override;
    void preBackward(int unit) override;
    void postBackward(int unit) override;
    std::vector<OptimTarget> optimizerTargets() override;
    void zeroGrad() override;
    MemoryBreakdown memory() const override;
    void exportParams(LlamaModel& model,
        const std::function<void(const std::string&, const at::Tensor&)>& sink) override;

private:
    StrategyOptions m_options;
    LlamaModel* m_model = nullptr;
    // QLoRA: the NF4 form of each quantized parameter, by Param::index (its value stays
    // undefined; the forward dequantizes it to the compute dtype when the unit runs).
    std::map<int, nf4::Rows> m_nf4;
    std::vector<nf4::Dequantized> m_dequant; // per unit, by position in Unit::params
};

} // namespace shard::engine
