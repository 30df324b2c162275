// Both paths use the model's own pieces (embed, block / blockCached, head), so the cached path
// differs from the training forward only in where keys and values come from.
#include "decoder.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace shard::engine {

namespace {

std::vector<at::Tensor> castTo(std::vector<at::Tensor> w, at::ScalarType dtype)
{
    for (auto& t : w)
        if (t.scalar_type() != dtype)
            t = t.to(dtype);
    return w;
}

void release(const UnitAccess& a, int unit)
{
    if (a.release)
        a.release(unit);
}

} // namespace

UnitAccess modelWeights(const LlamaModel& model)
{
    UnitAccess a;
    a.acquire = [&model](int unit) {
        std::vector<at::Tensor> w;
        for (const auto& p : model.unit(unit).params)
            w.push_back(p.value);
        return w;
    };
    return a;
}

Decoder::Decoder(const LlamaModel& model, UnitAccess access, at::ScalarType dtype,
    at::Device device, int64_t capacity, int64_t batch)
    : m_model(model)
    , m_access(std::move(access))
    , m_dtype(dtype)
    , m_capacity(capacity)
{
    const auto& s = model.spec();
    const RopeTables r = model.rope(capacity, dtype);
    m_rope = {r.cos.to(device), r.sin.to(device)};
    const auto opts = at::TensorOptions().dtype(dtype).device(device);
    for (int64_t l = 0; l < s.numLayers; ++l)
        m_cache.push_back({at::empty({batch, s.numKvHeads, capacity, s.headDim}, opts),
            at::empty({batch, s.numKvHeads, capacity, s.headDim}, opts)});
}

int64_t Decoder::cacheBytesFor(
    const plan::ModelSpec& spec, at::ScalarType dtype, int64_t capacity, int64_t batch)
{
    return 2 * spec.numLayers * batch * spec.numKvHeads * capacity * spec.headDim
        * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t Decoder::cacheBytes() const
{
    return cacheBytesFor(
        m_model.spec(), m_dtype, m_capacity, m_cache.empty() ? 0 : m_cache[0].k.size(0));
}

at::Tensor Decoder::forward(const at::Tensor& ids)
{
    at::NoGradGuard noGrad;
    const int64_t s = ids.size(1);
    if (m_pos + s > m_capacity)
        throw std::runtime_error("the KV cache holds " + std::to_string(m_capacity) + " positions; "
            + std::to_string(m_pos + s) + " do not fit");
    std::vector<at::Tensor> root = castTo(m_access.acquire(0), m_dtype);
    at::Tensor x = m_model.embed(root, ids.to(m_rope.cos.device()));
    for (int u = 1; u < m_model.numUnits(); ++u) {
        x = m_model.blockCached(
            castTo(m_access.acquire(u), m_dtype), x, m_rope, m_pos, m_cache[u - 1]);
        release(m_access, u);
    }
    at::Tensor logits = m_model.head(root, x);
    release(m_access, 0);
    m_pos += s;
    return logits;
}

at::Tensor Decoder::fullForward(
    const LlamaModel& model, const UnitAccess& access, at::ScalarType dtype, const at::Tensor& ids)
{
    at::NoGradGuard noGrad;
    std::vector<at::Tensor> root = castTo(access.acquire(0), dtype);
    const RopeTables r = model.rope(ids.size(1), dtype);
    const at::Device device = root[0].device();
    const RopeTables rope {r.cos.to(device), r.sin.to(device)};
    at::Tensor x = model.embed(root, ids.to(device));
    for (int u = 1; u < model.numUnits(); ++u) {
        x = model.block(castTo(access.acquire(u), dtype), x, rope);
        release(access, u);
    }
    at::Tensor logits = model.head(root, x);
    release(access, 0);
    return logits;
}

} // namespace shard::engine
