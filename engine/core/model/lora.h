// LoRA adapters (PEFT's LoRA: y = W x + s * B A dropout(x), A Kaiming-uniform with a = sqrt(5), B
// zero) on the projections of a LlamaModel. The adapters are ordinary parameters of their block's
// unit (appended after the base weights), so every strategy places, gathers, reduces and updates
// them like any weight; the base weights are marked frozen (no gradient, no optimizer state).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "protocol/run_spec.h"

namespace shard::engine {

class LlamaModel;
struct Param;

namespace lora {

// The projections an adapter can target, in PEFT's module names' order within a block.
enum class Target { Q, K, V, O, Gate, Up, Down };
constexpr int kTargetCount = 7;

// "q", "k", ... as in --lora-targets.
const char* targetFlag(Target t);
// "self_attn.q_proj", "mlp.gate_proj", ...: the module path within a block.
const char* targetModule(Target t);
// "q_proj", ...: PEFT's target_modules entry.
const char* targetShortModule(Target t);

struct LoraConfig {
    int64_t rank = 8;
    double alpha = 16.0;
    double dropout = 0.0;
    std::vector<Target> targets; // in Target order, no repeats
    bool rslora = false;

    // alpha / r, or alpha / sqrt(r) with rsLoRA (PEFT's `scaling`).
    double scale() const;
    bool has(Target t) const;
};

// Parses "q,k,v,o" (any of q,k,v,o,gate,up,down); throws naming the bad entry.
std::vector<Target> parseTargets(const std::string& list);
// The spec's lora_* fields (the spec must already be validated).
LoraConfig configFromSpec(const protocol::RunSpec& spec);

// Adapter parameter names (Hugging Face module path + ".lora_A.weight" / ".lora_B.weight").
bool isAdapterName(const std::string& name);
bool isAdapterA(const std::string& name);
// PEFT's key in adapter_model.safetensors: "base_model.model." + name.
std::string peftKey(const std::string& name);

// Which unit parameters are the adapters of each target (-1 when not adapted) and how the
// forward applies them. Dropout masks come from a generator seeded by (forward seed, layer,
// target), so an activation-checkpointing recompute draws the same mask as the forward.
class Adapters {
public:
    explicit Adapters(LoraConfig config);
    const LoraConfig& config() const { return m_config; }

    std::array<int, kTargetCount> a {};
    std::array<int, kTargetCount> b {};

    // y + s * B A dropout(x) when target t is adapted (w: the unit's tensors), else y.
    at::Tensor apply(
        const at::Tensor& y, const at::Tensor& x, const std::vector<at::Tensor>& w, Target t) const;

    // What the next block calls see: training (dropout on), the forward's seed and the layer.
    struct Context {
        bool training = false;
        uint64_t seed = 0;
        int layer = 0;
        bool off = false; // the base alone (DPO's reference with LoRA): no adapter term
    };
    void setContext(const Context& c) const { m_context = c; }
    const Context& context() const { return m_context; }

private:
    LoraConfig m_config;
    double m_scale = 1.0;
    mutable Context m_context;
};

// Appends the adapters of every targeted projection to each block's unit (after the base
// weights, indices after every base parameter), marks every base parameter frozen and installs
// the Adapters on the model. Throws when the rank exceeds a projection's dimensions.
// quantizeBase (QLoRA): every block projection is also marked quantized (stored as NF4 by the
// strategy); embeddings, norms and the LM head are not. Throws when a projection's input size is
// not a multiple of the NF4 block.
void attach(LlamaModel& model, const LoraConfig& config, bool quantizeBase = false);

// PEFT's initial value of an adapter parameter, fp32: A ~ U(-1/sqrt(in), 1/sqrt(in)) (Kaiming
// uniform with a = sqrt(5)) from a generator seeded by (seed, parameter index); B zero.
at::Tensor initialValue(const Param& p, uint64_t seed);

} // namespace lora

} // namespace shard::engine
