// Single-process placement and the strategy registry.
#include "single_strategy.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/model/nf4.h"
#include "core/train/host_sync.h"
#include "protocol/parallel_dims.h"

namespace shard::engine {

namespace {

std::map<std::string, StrategyFactory>& registry()
{
    static std::map<std::string, StrategyFactory> r;
    return r;
}

std::mutex& registryMutex()
{
    static std::mutex m;
    return m;
}

int64_t bytesOf(const at::Tensor& t)
{
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

} // namespace

void addSquaredSum(at::Tensor& acc, const at::Tensor& t)
{
    // fp32 and bf16 squares are exact in fp64; the sums are fp64 in a fixed chunking, so the
    // result depends on the elements and not on the thread count.
    constexpr int64_t kChunk = int64_t(1) << 20;
    const at::Tensor flat = t.detach().reshape({-1});
    const int64_t n = flat.numel();
    for (int64_t begin = 0; begin < n; begin += kChunk) {
        at::Tensor c = flat.narrow(0, begin, std::min(kChunk, n - begin)).to(at::kDouble);
        c.mul_(c);
        acc.add_(c.sum());
    }
}

at::Tensor Strategy::gradSquaredNorm(const std::vector<OptimTarget>& targets)
{
    at::Tensor local;
    for (const auto& t : targets)
        if (t.grad.defined()) {
            if (!local.defined())
                local = at::zeros({1}, t.grad.options().dtype(at::kDouble));
            addSquaredSum(local, t.grad);
        }
    if (!local.defined())
        local = at::zeros({1}, at::kDouble);
    allReduceSumInPlace(local);
    return local;
}

double Strategy::globalGradSquaredNorm(const std::vector<OptimTarget>& targets)
{
    return hostsync::readValue(gradSquaredNorm(targets));
}

void registerStrategy(const std::string& name, StrategyFactory factory)
{
    std::lock_guard<std::mutex> lock(registryMutex());
    registry()[name] = std::move(factory);
}

std::vector<std::string> registeredStrategies()
{
    std::lock_guard<std::mutex> lock(registryMutex());
    std::vector<std::string> names {"single"};
    for (const auto& [name, f] : registry())
        if (name != "single")
            names.push_back(name);
    return names;
}

std::unique_ptr<Strategy> makeStrategy(const StrategyOptions& options, int worldSize)
{
    {
        std::lock_guard<std::mutex> lock(registryMutex());
        auto it = registry().find(options.name);
        if (it != registry().end())
            return it->second(options);
    }
    const bool known = options.name == "single" || protocol::isStrategyName(options.name);
    if (known && worldSize == 1)
        return std::make_unique<SingleStrategy>(options);
    std::string names;
    for (const auto& n : registeredStrategies())
        names += (names.empty() ? "" : ", ") + n;
    if (known)
        throw std::runtime_error("strategy '" + options.name + "' with " + std::to_string(worldSize)
            + " ranks needs the sharded engine (shard_fsdp), which "
              "this build lacks; available: "
            + names);
    throw std::runtime_error("unknown strategy '" + options.name + "' (available: " + names
        + "; at 1 rank also ddp, zero1, zero2, zero3, hybrid)");
}

void SingleStrategy::setup(LlamaModel& model, const ParamSource& source)
{
    if (m_options.spec.offload != "none")
        throw std::runtime_error("--offload " + m_options.spec.offload
            + " needs the sharded engine (shard_fsdp), which this build lacks: use --offload none");
    m_model = &model;
    at::NoGradGuard noGrad;
    m_nf4.clear();
    m_dequant.assign(static_cast<size_t>(model.numUnits()), {});
    for (Param* p : model.params()) {
        if (p->quantized) {
            nf4::Rows q
                = nf4::quantizeRows(source(*p).to(at::kFloat), m_options.spec.qloraDoubleQuant);
            q.packed = q.packed.to(m_options.device).contiguous();
            q.absmax = q.absmax.to(m_options.device).contiguous();
            if (q.nested.defined())
                q.nested.scale = q.nested.scale.to(m_options.device);
            m_nf4[p->index] = q;
            p->value = at::Tensor();
            continue;
        }
        // A frozen (LoRA base) weight is kept in the compute dtype and has no gradient.
        p->value = at::empty(p->info.shape,
            at::TensorOptions()
                .dtype(p->frozen ? m_options.computeDtype : at::kFloat)
                .device(m_options.device));
        p->value.copy_(source(*p));
        p->value.requires_grad_(!p->frozen);
    }
}

std::vector<at::Tensor> SingleStrategy::unitWeights(int unit)
{
    std::vector<at::Tensor> out;
    const auto& params = m_model->unit(unit).params;
    for (size_t i = 0; i < params.size(); ++i) {
        const Param& p = params[i];
        if (p.quantized) {
            const auto& q = m_nf4.at(p.index);
            out.push_back(m_dequant.at(static_cast<size_t>(unit))
                              .get(i, q.packed, q.absmax, m_options.computeDtype, q.nested));
        } else {
            out.push_back(p.value);
        }
    }
    return out;
}

void SingleStrategy::postForward(int unit)
{
    m_dequant.at(static_cast<size_t>(unit)).release();
}

void SingleStrategy::preBackward(int unit)
{
    unitWeights(unit); // refills what the unit's saved graph points at
}

void SingleStrategy::postBackward(int unit)
{
    m_dequant.at(static_cast<size_t>(unit)).release();
}

std::vector<OptimTarget> SingleStrategy::optimizerTargets()
{
    std::vector<OptimTarget> out;
    for (Param* p : m_model->params())
        if (!p->frozen)
            out.push_back({p->info.name, p->value, p->value.grad(), !p->info.isNormOrBias});
    return out;
}

void SingleStrategy::zeroGrad()
{
    for (Param* p : m_model->params())
        if (!p->frozen && p->value.defined())
            p->value.mutable_grad() = at::Tensor();
}

MemoryBreakdown SingleStrategy::memory() const
{
    MemoryBreakdown m;
    if (!m_model)
        return m;
    for (Param* p : const_cast<LlamaModel*>(m_model)->params()) {
        (p->frozen ? m.frozenParams : m.shardedParams) += bytesOf(p->value);
        if (p->quantized) {
            const auto& q = m_nf4.at(p->index);
            m.frozenParams += bytesOf(q.packed) + bytesOf(q.absmax) + bytesOf(q.nested.scale);
        }
        if (p->value.defined())
            m.grads += bytesOf(p->value.grad());
    }
    for (const auto& copies : m_dequant)
        m.gatheredParams += copies.bytes();
    return m;
}

void SingleStrategy::exportParams(
    LlamaModel& model, const std::function<void(const std::string&, const at::Tensor&)>& sink)
{
    for (Param* p : model.params()) {
        if (p->quantized) {
            const auto& q = m_nf4.at(p->index);
            sink(p->info.name, nf4::dequantizeRows(q.packed, q.absmax, at::kFloat, q.nested));
        } else {
            sink(p->info.name, p->value.detach());
        }
    }
}

} // namespace shard::engine
