// LoRA adapters: configuration, placement in the model's units, PEFT's initialisation and the
// adapter term of a projection.
#include "core/model/lora.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "core/model/fused_ops.h"
#include "core/model/llama_model.h"
#include "core/model/nf4.h"

namespace shard::engine::lora {

namespace {

struct TargetInfo {
    Target target;
    const char* flag;
    const char* module;
    const char* shortModule;
};

constexpr TargetInfo kTargets[kTargetCount] = {
    {Target::Q, "q", "self_attn.q_proj", "q_proj"},
    {Target::K, "k", "self_attn.k_proj", "k_proj"},
    {Target::V, "v", "self_attn.v_proj", "v_proj"},
    {Target::O, "o", "self_attn.o_proj", "o_proj"},
    {Target::Gate, "gate", "mlp.gate_proj", "gate_proj"},
    {Target::Up, "up", "mlp.up_proj", "up_proj"},
    {Target::Down, "down", "mlp.down_proj", "down_proj"},
};

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size()
        && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int weightSlot(const BlockLayout& L, Target t)
{
    switch (t) {
    case Target::Q:
        return L.q;
    case Target::K:
        return L.k;
    case Target::V:
        return L.v;
    case Target::O:
        return L.o;
    case Target::Gate:
        return L.gate;
    case Target::Up:
        return L.up;
    case Target::Down:
        return L.down;
    }
    return -1;
}

} // namespace

const char* targetFlag(Target t)
{
    return kTargets[static_cast<int>(t)].flag;
}

const char* targetModule(Target t)
{
    return kTargets[static_cast<int>(t)].module;
}

const char* targetShortModule(Target t)
{
    return kTargets[static_cast<int>(t)].shortModule;
}

double LoraConfig::scale() const
{
    return rslora ? alpha / std::sqrt(static_cast<double>(rank))
                  : alpha / static_cast<double>(rank);
}

bool LoraConfig::has(Target t) const
{
    for (Target x : targets)
        if (x == t)
            return true;
    return false;
}

std::vector<Target> parseTargets(const std::string& list)
{
    std::vector<bool> seen(kTargetCount, false);
    std::stringstream in(list);
    std::string item;
    while (std::getline(in, item, ',')) {
        const auto b = item.find_first_not_of(" \t");
        const auto e = item.find_last_not_of(" \t");
        item = b == std::string::npos ? std::string() : item.substr(b, e - b + 1);
        bool known = false;
        for (const auto& t : kTargets)
            if (item == t.flag || item == t.shortModule) {
                seen[static_cast<int>(t.target)] = true;
                known = true;
            }
        if (!known)
            throw std::runtime_error("lora targets: '" + item
                + "' is not a projection (use a comma-separated list of q,k,v,o,gate,up,down)");
    }
    std::vector<Target> out;
    for (const auto& t : kTargets)
        if (seen[static_cast<int>(t.target)])
            out.push_back(t.target);
    if (out.empty())
        throw std::runtime_error("lora targets: none given (e.g. --lora-targets q,k,v,o)");
    return out;
}

LoraConfig configFromSpec(const protocol::RunSpec& spec)
{
    LoraConfig c;
    c.rank = spec.loraRank;
    c.alpha = spec.loraAlpha;
    c.dropout = spec.loraDropout;
    c.rslora = spec.loraRslora;
    c.targets = parseTargets(spec.loraTargets);
    return c;
}

bool isAdapterName(const std::string& name)
{
    return endsWith(name, ".lora_A.weight") || endsWith(name, ".lora_B.weight");
}

bool isAdapterA(const std::string& name)
{
    return endsWith(name, ".lora_A.weight");
}

std::string peftKey(const std::string& name)
{
    return "base_model.model." + name;
}

Adapters::Adapters(LoraConfig config)
    : m_config(std::move(config))
    , m_scale(m_config.scale())
{
    a.fill(-1);
    b.fill(-1);
}

at::Tensor Adapters::apply(
    const at::Tensor& y, const at::Tensor& x, const std::vector<at::Tensor>& w, Target t) const
{
    const int i = static_cast<int>(t);
    if (a[i] < 0 || m_context.off)
        return y;
    at::Tensor in = x;
    const double p = m_config.dropout;
    if (p > 0 && m_context.training) {
        // A generator per (forward, layer, target): the recompute of a checkpointed block
        // draws the mask its forward drew.
        auto gen = at::make_generator<at::CPUGeneratorImpl>(LlamaModel::mixSeed(
            LlamaModel::mixSeed(m_context.seed, static_cast<uint64_t>(m_context.layer)), i));
        at::Tensor keep = at::empty(x.sizes(), x.options().device(at::kCPU).dtype(at::kFloat));
        keep.bernoulli_(1.0 - p, gen);
        in = x * (keep.to(x.options()) * (1.0 / (1.0 - p)));
    }
    return y + fused::linear(fused::linear(in, w[a[i]]), w[b[i]]) * m_scale;
}

void attach(LlamaModel& model, const LoraConfig& config, bool quantizeBase)
{
    if (model.adapters())
        throw std::runtime_error("LoRA adapters are already attached");
    if (config.rank < 1)
        throw std::runtime_error("lora rank must be at least 1 (--lora-rank R)");
    if (config.targets.empty())
        throw std::runtime_error("lora targets: none given (e.g. --lora-targets q,k,v,o)");
    auto adapters = std::make_shared<Adapters>(config);
    for (Param* p : model.params())
        p->frozen = true;
    const BlockLayout& L = model.blockLayout();
    if (quantizeBase)
        for (int u = 1; u < model.numUnits(); ++u)
            for (int t = 0; t < kTargetCount; ++t) {
                const int slot = weightSlot(L, static_cast<Target>(t));
                if (slot < 0)
                    continue;
                Param& p = model.unit(u).params.at(slot);
                if (p.info.shape.at(1) % nf4::kBlockSize != 0)
                    throw std::runtime_error("qlora: " + p.info.name + " has "
                        + std::to_string(p.info.shape.at(1)) + " inputs, not a multiple of "
                        + std::to_string(nf4::kBlockSize) + " (NF4 blocks); use --method lora");
                p.quantized = true;
            }
    const int64_t r = config.rank;
    for (int u = 1; u < model.numUnits(); ++u) {
        const int layer = u - 1;
        for (Target t : config.targets) {
            const int slot = weightSlot(L, t);
            if (slot < 0)
                throw std::runtime_error(std::string("lora target '") + targetFlag(t)
                    + "': the model has no such projection");
            // Copy: addParam may move the unit's parameters.
            const plan::ParamInfo base = model.unit(u).params.at(slot).info;
            const int64_t out = base.shape.at(0), in = base.shape.at(1);
            if (r > std::min(in, out))
                throw std::runtime_error("lora rank " + std::to_string(r) + " exceeds "
                    + targetModule(t) + "'s dimensions (" + std::to_string(out) + " x "
                    + std::to_string(in) + "); use --lora-rank " + std::to_string(std::min(in, out))
                    + " or less");
            const std::string prefix
                = "model.layers." + std::to_string(layer) + "." + targetModule(t);
            plan::ParamInfo ia;
            ia.name = prefix + ".lora_A.weight";
            ia.shape = {r, in};
            ia.layer = layer;
            plan::ParamInfo ib;
            ib.name = prefix + ".lora_B.weight";
            ib.shape = {out, r};
            ib.layer = layer;
            model.addParam(u, ia);
            model.addParam(u, ib);
            if (u == 1) {
                const int n = static_cast<int>(model.unit(u).params.size());
                adapters->a[static_cast<int>(t)] = n - 2;
                adapters->b[static_cast<int>(t)] = n - 1;
            }
        }
    }
    model.setAdapters(adapters);
}

at::Tensor initialValue(const Param& p, uint64_t seed)
{
    at::Tensor t = at::zeros(p.info.shape, at::kFloat);
    if (isAdapterA(p.info.name)) {
        // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / fan_in)
        // = 1 / sqrt(fan_in).
        const double bound = 1.0 / std::sqrt(static_cast<double>(p.info.shape.at(1)));
        auto gen = at::make_generator<at::CPUGeneratorImpl>(
            LlamaModel::mixSeed(seed ^ 0x4C6F5241ull, static_cast<uint64_t>(p.index)));
        t.uniform_(-bound, bound, gen);
    }
    return t;
}

} // namespace shard::engine::lora
