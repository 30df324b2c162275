// The decoder-only transformer of the Llama family (Llama 2/3/3.1, Mistral, Qwen2/2.5, Qwen3
// dense) with Hugging Face parameter names. Parameters are plain tensors grouped into units (unit
// 0 = embeddings + final norm + LM head, unit 1 + i = block i) so that a sharding strategy can own
// their storage; the forward pieces take their weights explicitly for the same reason.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/safetensors/safetensors_file.h"
#include "plan/model_spec.h"

namespace shard::engine {

namespace lora {
class Adapters;
enum class Target;
} // namespace lora

struct Param {
    plan::ParamInfo info;   // HF name, shape, layer (-1 = root), isNormOrBias (no weight decay)
    int index = 0;          // position in the HF state dict order (parameterTable)
    at::Tensor value;       // undefined until materialized or placed by a strategy
    bool frozen = false;    // LoRA base weight: no gradient, no optimizer state (core/model/lora.h)
    bool quantized = false; // QLoRA: a frozen projection stored as NF4 (core/model/nf4.h)
};

struct Unit {
    int index = 0; // 0 = root, 1 + i = block i
    std::vector<Param> params;
};

// Where each weight of a block sits in its unit's params (-1 when absent).
struct BlockLayout {
    int inputNorm = -1, q = -1, k = -1, v = -1, o = -1;
    int qBias = -1, kBias = -1, vBias = -1, oBias = -1;
    int qNorm = -1, kNorm = -1;
    int postNorm = -1, gate = -1, up = -1, down = -1;
};

struct RootLayout {
    int embed = -1, norm = -1, lmHead = -1; // lmHead -1 when tied to embed
};

// cos/sin tables (seq, headDim) in the compute dtype.
struct RopeTables {
    at::Tensor cos;
    at::Tensor sin;
};

// One block's keys and values for incremental decoding, (batch, kvHeads, capacity, headDim) in
// the compute dtype; positions [0, length) are filled.
struct KvCache {
    at::Tensor k;
    at::Tensor v;
};

// A sum of the next-token cross entropy over positions whose label is not -100, in fp32, with the
// Hugging Face shift (logits at t predict labels at t + 1), and the number of those positions.
struct LossSum {
    at::Tensor sum; // 0-dim fp32, differentiable
    int64_t tokens = 0;
};

struct VocabShard; // core/model/chunked_loss.h

// The LM head's loss over a vocabulary split by tensor parallel (tp::headLossSum): this rank's
// rows of the table, and what the normed hidden state passes through on its way to them
// (tp::copyToGroup, or tp::gatherSequence under sequence parallel), so that its gradient sums
// every rank's columns' share.
struct HeadSplit {
    const VocabShard* shard = nullptr;
    std::function<at::Tensor(const at::Tensor&)> toGroup;
};

class LlamaModel {
public:
    // Builds the parameter table only; nothing is allocated. Throws when the architecture is one
    // the engine cannot train (MoE, an unsupported rope_scaling type, odd head_dim).
    explicit LlamaModel(plan::ModelSpec spec);

    const plan::ModelSpec& spec() const { return m_spec; }
    int numUnits() const { return static_cast<int>(m_units.size()); }
    Unit& unit(int u) { return m_units.at(u); }
    const Unit& unit(int u) const { return m_units.at(u); }
    const BlockLayout& blockLayout() const { return m_block; }
    const RootLayout& rootLayout() const { return m_root; }
    Param& param(const std::string& name);
    std::vector<Param*> params();
    int64_t numParams() const;
    int64_t numTrainableParams() const;
    // LoRA (core/model/lora.h): an extra parameter of a unit, indexed after all others, and the
    // adapters the forward applies to the projections.
    Param& addParam(int unit, plan::ParamInfo info);
    void setAdapters(std::shared_ptr<const lora::Adapters> adapters);
    const lora::Adapters* adapters() const { return m_adapters.get(); }

    // Allocates every parameter (uninitialized) in `dtype`.
    void materialize(at::ScalarType dtype = at::kFloat);
    // Hugging Face initialization (normal(0, 0.02) for matrices, ones for norms, zeros for
    // biases); every tensor has its own generator seeded from (seed, index), so the values do not
    // depend on how parameters are placed or sharded.
    static at::Tensor initialValue(const Param& p, uint64_t seed);
    // A seed for one of many independent streams (splitmix64 of the pair): per parameter here,
    // per adapter and per dropout mask in LoRA.
    static uint64_t mixSeed(uint64_t seed, uint64_t index);
    void initRandom(uint64_t seed);
    // Copies every parameter from `weights` tensor by tensor (shapes are checked, dtypes
    // converted).
    void load(const SafetensorsReader& weights);
    // The state dict in HF order (lm_head.weight omitted when tied).
    NamedTensors stateDict() const;

    // Forward pieces. Weights are the unit's tensors in unit order, already in the compute dtype.
    at::Tensor embed(const std::vector<at::Tensor>& root, const at::Tensor& ids) const;
    at::Tensor block(
        const std::vector<at::Tensor>& w, const at::Tensor& x, const RopeTables& rope) const;
    at::Tensor head(const std::vector<at::Tensor>& root, const at::Tensor& x) const;
    // The final norm, the LM head and the next-token loss in one step, without the batch's
    // logits (linearCrossEntropySum); gradScale is what the caller divides the sum by. The
    // result's tokens stay 0: the caller counts them where its labels are (countLossTokens).
    // The final norm, the LM head and each position's log-probability of its next-token target
    // (linearTokenLogProbs): (batch, seq - 1), fp32, 0 where the target is masked.
    at::Tensor headTokenLogProbs(const std::vector<at::Tensor>& root, const at::Tensor& x,
        const at::Tensor& labels, const HeadSplit* split = nullptr) const;
    // With `split`, this rank's rows of a vocabulary split over a tensor-parallel group.
    LossSum headLossSum(const std::vector<at::Tensor>& root, const at::Tensor& x,
        const at::Tensor& labels, double gradScale = 1.0, const HeadSplit* split = nullptr) const;
    // The LM head's weight among the root unit's: lm_head, or the embedding when tied.
    const at::Tensor& headWeight(const std::vector<at::Tensor>& root) const;
    RopeTables rope(int64_t seqLen, at::ScalarType dtype) const;
    // The inverse frequencies (headDim / 2) after rope_scaling, in fp32.
    at::Tensor inverseFrequencies() const;

    // The pieces of a block, exposed for the gradient checks.
    at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight) const;
    at::Tensor attention(
        const std::vector<at::Tensor>& w, const at::Tensor& x, const RopeTables& rope) const;
    at::Tensor mlp(const std::vector<at::Tensor>& w, const at::Tensor& x) const;

    // Incremental decoding: the block on x (batch, s, hidden) at positions [pos, pos + s),
    // attending to the cache's positions [0, pos) and to these; writes this step's keys and
    // values into the cache. `rope` covers at least pos + s positions.
    at::Tensor blockCached(const std::vector<at::Tensor>& w, const at::Tensor& x,
        const RopeTables& rope, int64_t pos, KvCache& cache) const;
    at::Tensor attentionCached(const std::vector<at::Tensor>& w, const at::Tensor& x,
        const RopeTables& rope, int64_t pos, KvCache& cache) const;

private:
    // The final norm of x and its positions that predict a next token, (batch x (seq - 1),
    // hidden); with `split`, through split->toGroup (the whole sequence under sequence parallel).
    at::Tensor predictingStates(
        const std::vector<at::Tensor>& root, const at::Tensor& x, const HeadSplit* split) const;
    at::Tensor proj(const at::Tensor& x, const std::vector<at::Tensor>& w, lora::Target t,
        int weight, int bias = -1) const;

    plan::ModelSpec m_spec;
    std::vector<Unit> m_units;
    std::map<std::string, std::pair<int, int>> m_byName; // name -> (unit, position)
    BlockLayout m_block;
    RootLayout m_root;
    std::shared_ptr<const lora::Adapters> m_adapters;
};

// The loss sum from logits (batch, seq, vocab).
LossSum nextTokenLossSum(const at::Tensor& logits, const at::Tensor& labels);
// Tokens that count in the loss for labels (batch, seq): positions 1.. whose label != -100.
int64_t countLossTokens(const at::Tensor& labels);

} // namespace shard::engine
