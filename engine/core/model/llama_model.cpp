// Llama-family forward in ATen ops, following Hugging Face's modeling_llama / modeling_qwen2
// numerics (RMSNorm in fp32, softmax in fp32, rotate-half RoPE).
#include "llama_model.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "core/model/chunked_loss.h"
#include "core/model/fused_ops.h"
#include "core/model/lora.h"
#include "core/torch_compat.h"
#include "core/train/host_sync.h"

namespace shard::engine {

namespace {

// fp32 for 16-bit inputs (as Hugging Face computes norms, softmax and loss), else unchanged
// (fp64 in the gradient checks).
at::ScalarType atLeastFloat(at::ScalarType t)
{
    return at::promoteTypes(t, at::kFloat);
}

// The labels (batch, seq) that positions 0 .. seq-2 predict, flattened, as int64 (the Hugging
// Face shift).
at::Tensor nextTokenTargets(const at::Tensor& labels)
{
    return labels.narrow(1, 1, labels.size(1) - 1).reshape({-1}).to(at::kLong);
}

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size()
        && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

LlamaModel::LlamaModel(plan::ModelSpec spec)
    : m_spec(std::move(spec))
{
    const auto& s = m_spec;
    const std::string who = "model '" + s.name + "'";
    if (s.isMoe())
        throw std::runtime_error(who + ": mixture-of-experts models (" + s.modelType
            + ") can be planned but not trained by this engine");
    if (s.hiddenSize <= 0 || s.numLayers <= 0 || s.numHeads <= 0 || s.numKvHeads <= 0
        || s.vocabSize <= 0 || s.intermediateSize <= 0 || s.headDim <= 0)
        throw std::runtime_error(who + ": sizes must be positive");
    if (s.numHeads % s.numKvHeads != 0)
        throw std::runtime_error(who + ": num_attention_heads (" + std::to_string(s.numHeads)
            + ") must be a multiple of num_key_value_heads (" + std::to_string(s.numKvHeads) + ")");
    if (s.headDim % 2 != 0)
        throw std::runtime_error(who + ": head_dim must be even for rotary embeddings");
    const auto& rs = s.ropeScaling.type;
    if (!rs.empty() && rs != "llama3" && rs != "linear" && rs != "default")
        throw std::runtime_error(who + ": rope_scaling type '" + rs
            + "' is not supported for training (supported: llama3, linear, none)");

    m_units.resize(1 + s.numLayers);
    for (int u = 0; u < numUnits(); ++u)
        m_units[u].index = u;
    int index = 0;
    for (auto& info : plan::parameterTable(s)) {
        const int u = info.layer < 0 ? 0 : static_cast<int>(info.layer) + 1;
        Param p;
        p.info = std::move(info);
        p.index = index++;
        m_byName[p.info.name] = {u, static_cast<int>(m_units[u].params.size())};
        m_units[u].params.push_back(std::move(p));
    }
    // Roles by name suffix, from block 0 (all blocks are laid out alike).
    const auto& b0 = m_units.at(1).params;
    for (int i = 0; i < static_cast<int>(b0.size()); ++i) {
        const std::string& n = b0[i].info.name;
        struct {
            const char* suffix;
            int* slot;
        } roles[] = {{".input_layernorm.weight", &m_block.inputNorm},
            {".q_proj.weight", &m_block.q}, {".k_proj.weight", &m_block.k},
            {".v_proj.weight", &m_block.v}, {".o_proj.weight", &m_block.o},
            {".q_proj.bias", &m_block.qBias}, {".k_proj.bias", &m_block.kBias},
            {".v_proj.bias", &m_block.vBias}, {".o_proj.bias", &m_block.oBias},
            {".q_norm.weight", &m_block.qNorm}, {".k_norm.weight", &m_block.kNorm},
            {".post_attention_layernorm.weight", &m_block.postNorm},
            {".gate_proj.weight", &m_block.gate}, {".up_proj.weight", &m_block.up},
            {".down_proj.weight", &m_block.down}};
        bool known = false;
        for (auto& r : roles)
            if (endsWith(n, r.suffix)) {
                *r.slot = i;
                known = true;
            }
        if (!known)
            throw std::runtime_error(who + ": unexpected parameter '" + n + "'");
    }
    const auto& root = m_units[0].params;
    for (int i = 0; i < static_cast<int>(root.size()); ++i) {
        const std::string& n = root[i].info.name;
        if (n == "model.embed_tokens.weight")
            m_root.embed = i;
        else if (n == "model.norm.weight")
            m_root.norm = i;
        else if (n == "lm_head.weight")
            m_root.lmHead = i;
    }
    if (m_root.embed < 0 || m_root.norm < 0 || (m_root.lmHead < 0 && !s.tieWordEmbeddings))
        throw std::runtime_error(who + ": parameter table lacks the embeddings, norm or head");
}

Param& LlamaModel::param(const std::string& name)
{
    auto it = m_byName.find(name);
    if (it == m_byName.end())
        throw std::runtime_error("model '" + m_spec.name + "' has no parameter '" + name + "'");
    return m_units[it->second.first].params[it->second.second];
}

std::vector<Param*> LlamaModel::params()
{
    std::vector<Param*> out(m_byName.size());
    for (auto& u : m_units)
        for (auto& p : u.params)
            out[p.index] = &p;
    return out;
}

int64_t LlamaModel::numParams() const
{
    int64_t n = 0;
    for (const auto& u : m_units)
        for (const auto& p : u.params)
            n += p.info.numel();
    return n;
}

int64_t LlamaModel::numTrainableParams() const
{
    int64_t n = 0;
    for (const auto& u : m_units)
        for (const auto& p : u.params)
            n += p.frozen ? 0 : p.info.numel();
    return n;
}

Param& LlamaModel::addParam(int unit, plan::ParamInfo info)
{
    if (m_byName.count(info.name))
        throw std::runtime_error("model '" + m_spec.name + "' already has '" + info.name + "'");
    Param p;
    p.info = std::move(info);
    p.index = static_cast<int>(m_byName.size());
    auto& params = m_units.at(unit).params;
    m_byName[p.info.name] = {unit, static_cast<int>(params.size())};
    params.push_back(std::move(p));
    return params.back();
}

void LlamaModel::setAdapters(std::shared_ptr<const lora::Adapters> adapters)
{
    m_adapters = std::move(adapters);
}

void LlamaModel::materialize(at::ScalarType dtype)
{
    for (auto& u : m_units)
        for (auto& p : u.params)
            p.value = at::empty(p.info.shape, at::TensorOptions().dtype(dtype));
}

uint64_t LlamaModel::mixSeed(uint64_t seed, uint64_t index)
{
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

at::Tensor LlamaModel::initialValue(const Param& p, uint64_t seed)
{
    at::Tensor t = at::empty(p.info.shape, at::kFloat);
    const std::string& n = p.info.name;
    if (endsWith(n, "norm.weight")) {
        t.fill_(1.0);
    } else if (endsWith(n, ".bias")) {
        t.zero_();
    } else {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(mixSeed(seed, p.index));
        t.normal_(0.0, 0.02, gen);
    }
    return t;
}

void LlamaModel::initRandom(uint64_t seed)
{
    at::NoGradGuard noGrad;
    for (auto& u : m_units)
        for (auto& p : u.params) {
            if (!p.value.defined())
                throw std::runtime_error("initRandom: parameter '" + p.info.name
                    + "' has no storage; call materialize() first");
            p.value.copy_(initialValue(p, seed));
        }
}

void LlamaModel::load(const SafetensorsReader& weights)
{
    at::NoGradGuard noGrad;
    for (auto* p : params()) {
        if (!p->value.defined())
            throw std::runtime_error("load: parameter '" + p->info.name + "' has no storage");
        if (!weights.contains(p->info.name))
            throw std::runtime_error(weights.files().front() + ": missing tensor '" + p->info.name
                + "' required by the model's config.json");
        weights.readInto(p->info.name, p->value);
    }
}

NamedTensors LlamaModel::stateDict() const
{
    NamedTensors out(m_byName.size());
    for (const auto& u : m_units)
        for (const auto& p : u.params)
            out[p.index] = {p.info.name, p.value};
    return out;
}

at::Tensor LlamaModel::inverseFrequencies() const
{
    const int64_t dim = m_spec.headDim;
    at::Tensor exponent
        = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
    at::Tensor inv = 1.0 / at::pow(m_spec.ropeTheta, exponent);
    const auto& rs = m_spec.ropeScaling;
    if (rs.type == "linear") {
        inv = inv / rs.factor;
    } else if (rs.type == "llama3") {
        const double oldLen = static_cast<double>(rs.originalMaxPositionEmbeddings);
        const double lowWavelen = oldLen / rs.lowFreqFactor;
        const double highWavelen = oldLen / rs.highFreqFactor;
        at::Tensor wavelen = 2.0 * M_PI / inv;
        at::Tensor scaled = at::where(wavelen > lowWavelen, inv / rs.factor, inv);
        at::Tensor smooth
            = (oldLen / wavelen - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
        at::Tensor smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
        at::Tensor medium = (wavelen >= highWavelen).logical_and(wavelen <= lowWavelen);
        inv = at::where(medium, smoothed, scaled);
    }
    return inv;
}

RopeTables LlamaModel::rope(int64_t seqLen, at::ScalarType dtype) const
{
    at::Tensor pos = at::arange(seqLen, at::kLong).to(at::kFloat);
    at::Tensor freqs = at::outer(pos, inverseFrequencies());
    at::Tensor emb = at::cat({freqs, freqs}, -1);
    return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor LlamaModel::rmsNorm(const at::Tensor& x, const at::Tensor& weight) const
{
    return fused::rmsNorm(x, weight, m_spec.rmsNormEps);
}

at::Tensor LlamaModel::proj(const at::Tensor& x, const std::vector<at::Tensor>& w, lora::Target t,
    int weight, int bias) const
{
    at::Tensor y = fused::linear(x, w[weight], bias >= 0 ? w[bias] : at::Tensor());
    return m_adapters ? m_adapters->apply(y, x, w, t) : y;
}

at::Tensor LlamaModel::attention(
    const std::vector<at::Tensor>& w, const at::Tensor& x, const RopeTables& rope) const
{
    const auto& L = m_block;
    const int64_t b = x.size(0), s = x.size(1), D = m_spec.headDim;
    // The heads are those the projections give: all of the model's, or a tensor-parallel
    // rank's share (tensor_parallel.h).
    at::Tensor q = proj(x, w, lora::Target::Q, L.q, L.qBias).view({b, s, -1, D});
    at::Tensor k = proj(x, w, lora::Target::K, L.k, L.kBias).view({b, s, -1, D});
    at::Tensor v = proj(x, w, lora::Target::V, L.v, L.vBias).view({b, s, -1, D});
    const int64_t H = q.size(2), KV = k.size(2);
    if (L.qNorm >= 0) {
        q = rmsNorm(q, w[L.qNorm]);
        k = rmsNorm(k, w[L.kNorm]);
    }
    const at::Tensor cos = rope.cos.narrow(0, 0, s);
    const at::Tensor sin = rope.sin.narrow(0, 0, s);
    // The composed RoPE ops here; fused::rope serves the KV-cache decode. (It was taken out of
    // this path on a suspicion about LibTorch 2.6's attention keeping copies of q and k, which
    // the measurements then did not bear out; putting it back is to be measured.)
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    q = q * cos + fused::rotateHalf(q) * sin;
    k = k * cos + fused::rotateHalf(k) * sin;
    if (KV != H) {
        const int64_t rep = H / KV;
        k = k.unsqueeze(2).expand({b, KV, rep, s, D}).reshape({b, H, s, D});
        v = v.unsqueeze(2).expand({b, KV, rep, s, D}).reshape({b, H, s, D});
    }
    // Causal mask (and Mistral's sliding window): key j is visible from query i when
    // 0 <= i - j < window.
    const bool windowed = m_spec.slidingWindow > 0 && m_spec.slidingWindow < s;
    auto hiddenKeys = [&] {
        const auto longs = at::TensorOptions().dtype(at::kLong).device(q.device());
        at::Tensor i = at::arange(s, longs).unsqueeze(1);
        at::Tensor j = at::arange(s, longs).unsqueeze(0);
        at::Tensor hidden = j > i;
        return windowed ? hidden.logical_or((i - j) >= m_spec.slidingWindow) : hidden;
    };
#if SHARD_TORCH_HAS_SDPA
    // One fused kernel (on the CPU a flash-attention loop that never holds the scores). On the
    // CPU LibTorch 2.6's bf16 kernel is slow, with or without AVX-512 (its backward took 0.74 s of
    // a 1.1 s tiny-15m step on an AVX-512 BF16 machine), so attention runs in fp32 there, from and
    // back to the compute dtype (exact widening; one rounding of the output).
    const bool widen = q.scalar_type() == at::kBFloat16 && q.device().is_cpu();
    auto in = [&](const at::Tensor& t) { return widen ? fused::cast(t, at::kFloat) : t; };
    at::Tensor out = windowed
        ? at::scaled_dot_product_attention(in(q), in(k), in(v), hiddenKeys().logical_not())
        : at::scaled_dot_product_attention(in(q), in(k), in(v), {}, 0.0, /*is_causal=*/true);
    if (widen)
        out = fused::cast(out, q.scalar_type());
#else
    at::Tensor scores
        = fused::matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(D)));
    scores = scores.masked_fill(hiddenKeys(), -std::numeric_limits<double>::infinity());
    at::Tensor probs
        = fused::cast(at::softmax(scores, -1, atLeastFloat(scores.scalar_type())), q.scalar_type());
    at::Tensor out = fused::matmul(probs, v);
#endif
    out = out.transpose(1, 2).reshape({b, s, H * D});
    return proj(out, w, lora::Target::O, L.o, L.oBias);
}

at::Tensor LlamaModel::mlp(const std::vector<at::Tensor>& w, const at::Tensor& x) const
{
    const auto& L = m_block;
    const at::Tensor h
        = fused::swiglu(proj(x, w, lora::Target::Gate, L.gate), proj(x, w, lora::Target::Up, L.up));
    return proj(h, w, lora::Target::Down, L.down);
}

at::Tensor LlamaModel::block(
    const std::vector<at::Tensor>& w, const at::Tensor& x, const RopeTables& rope) const
{
    at::Tensor h = x + attention(w, rmsNorm(x, w[m_block.inputNorm]), rope);
    return h + mlp(w, rmsNorm(h, w[m_block.postNorm]));
}

at::Tensor LlamaModel::attentionCached(const std::vector<at::Tensor>& w, const at::Tensor& x,
    const RopeTables& rope, int64_t pos, KvCache& cache) const
{
    const auto& L = m_block;
    const int64_t b = x.size(0), s = x.size(1), total = pos + s;
    const int64_t H = m_spec.numHeads, KV = m_spec.numKvHeads, D = m_spec.headDim, rep = H / KV;
    if (total > cache.k.size(2))
        throw std::runtime_error("KV cache holds " + std::to_string(cache.k.size(2))
            + " positions; position " + std::to_string(total - 1) + " does not fit");
    at::Tensor q = proj(x, w, lora::Target::Q, L.q, L.qBias).view({b, s, H, D});
    at::Tensor k = proj(x, w, lora::Target::K, L.k, L.kBias).view({b, s, KV, D});
    at::Tensor v = proj(x, w, lora::Target::V, L.v, L.vBias).view({b, s, KV, D});
    if (L.qNorm >= 0) {
        q = rmsNorm(q, w[L.qNorm]);
        k = rmsNorm(k, w[L.kNorm]);
    }
    const at::Tensor cos = rope.cos.narrow(0, pos, s);
    const at::Tensor sin = rope.sin.narrow(0, pos, s);
    q = fused::rope(q, cos, sin).transpose(1, 2);
    k = fused::rope(k, cos, sin).transpose(1, 2);
    v = v.transpose(1, 2);
    cache.k.narrow(2, pos, s).copy_(k);
    cache.v.narrow(2, pos, s).copy_(v);
    const at::Tensor keys = cache.k.narrow(2, 0, total);
    const at::Tensor values = cache.v.narrow(2, 0, total);
    // The query heads sharing a KV head are stacked as rows (head h = kv * rep + r, as the
    // training forward's expand orders them), so the cache is never copied per head.
    at::Tensor qg = q.reshape({b, KV, rep * s, D});
    at::Tensor scores
        = fused::matmul(qg, keys.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(D)));
    // Row r * s + i is the query at position pos + i; key j is visible when
    // 0 <= pos + i - j < window.
    const auto longs = at::TensorOptions().dtype(at::kLong).device(x.device());
    at::Tensor i = (at::arange(s, longs) + pos).repeat({rep}).unsqueeze(1);
    at::Tensor j = at::arange(total, longs).unsqueeze(0);
    at::Tensor hidden = j > i;
    if (m_spec.slidingWindow > 0 && m_spec.slidingWindow < total)
        hidden = hidden.logical_or((i - j) >= m_spec.slidingWindow);
    scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    at::Tensor probs
        = fused::cast(at::softmax(scores, -1, atLeastFloat(scores.scalar_type())), q.scalar_type());
    at::Tensor out
        = fused::matmul(probs, values).view({b, H, s, D}).transpose(1, 2).reshape({b, s, H * D});
    return proj(out, w, lora::Target::O, L.o, L.oBias);
}

at::Tensor LlamaModel::blockCached(const std::vector<at::Tensor>& w, const at::Tensor& x,
    const RopeTables& rope, int64_t pos, KvCache& cache) const
{
    at::Tensor h = x + attentionCached(w, rmsNorm(x, w[m_block.inputNorm]), rope, pos, cache);
    return h + mlp(w, rmsNorm(h, w[m_block.postNorm]));
}

at::Tensor LlamaModel::embed(const std::vector<at::Tensor>& root, const at::Tensor& ids) const
{
    return at::embedding(root[m_root.embed], ids);
}

at::Tensor LlamaModel::head(const std::vector<at::Tensor>& root, const at::Tensor& x) const
{
    at::Tensor h = rmsNorm(x, root[m_root.norm]);
    return fused::linear(h, headWeight(root));
}

const at::Tensor& LlamaModel::headWeight(const std::vector<at::Tensor>& root) const
{
    return root[m_root.lmHead >= 0 ? m_root.lmHead : m_root.embed];
}

at::Tensor LlamaModel::predictingStates(
    const std::vector<at::Tensor>& root, const at::Tensor& x, const HeadSplit* split) const
{
    at::Tensor normed = rmsNorm(x, root[m_root.norm]);
    if (split)
        normed = split->toGroup(normed);
    // The positions that predict a next token (the Hugging Face shift), one row each.
    const int64_t s = normed.size(1), H = normed.size(2);
    return normed.narrow(1, 0, s - 1).reshape({-1, H});
}

LossSum LlamaModel::headLossSum(const std::vector<at::Tensor>& root, const at::Tensor& x,
    const at::Tensor& labels, double gradScale, const HeadSplit* split) const
{
    const at::Tensor h = predictingStates(root, x, split);
    LossSum out;
    out.sum = linearCrossEntropySum(h, headWeight(root), nextTokenTargets(labels), gradScale, 0,
        split ? split->shard : nullptr);
    return out; // tokens: counted by the caller where its labels are (countLossTokens)
}

at::Tensor LlamaModel::headTokenLogProbs(const std::vector<at::Tensor>& root, const at::Tensor& x,
    const at::Tensor& labels, const HeadSplit* split) const
{
    const at::Tensor h = predictingStates(root, x, split);
    const int64_t b = x.size(0), s = labels.size(1);
    return linearTokenLogProbs(
        h, headWeight(root), nextTokenTargets(labels), 0, split ? split->shard : nullptr)
        .reshape({b, s - 1});
}

LossSum nextTokenLossSum(const at::Tensor& logits, const at::Tensor& labels)
{
    const int64_t s = logits.size(1), V = logits.size(2);
    at::Tensor l = fused::cast(logits.narrow(1, 0, s - 1), atLeastFloat(logits.scalar_type()))
                       .reshape({-1, V});
    at::Tensor t = nextTokenTargets(labels);
    LossSum out;
    out.sum = at::cross_entropy_loss(l, t, {}, at::Reduction::Sum, -100);
    out.tokens = t.ne(-100).sum().item<int64_t>();
    return out;
}

int64_t countLossTokens(const at::Tensor& labels)
{
    // Labels on the host are counted there; on a device the count is a counted host read.
    const at::Tensor n = labels.narrow(1, 1, labels.size(1) - 1).ne(-100).sum();
    return n.is_cpu() ? n.item<int64_t>() : static_cast<int64_t>(hostsync::readValue(n));
}

} // namespace shard::engine
