// The model's forward for generation: incremental with a KV cache (prefill the prompt, then one
// position per step) or, for reference, the full forward recomputed over the whole sequence.
// Tensors live on the weights' device and in the compute dtype; nothing here is CPU-specific.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/model/llama_model.h"

namespace shard::engine {

// How the decoder reaches a unit's weights (in unit order, in the compute dtype): a loaded model
// hands out its parameters; a sharding strategy gathers them (acquire) and frees them (release).
struct UnitAccess {
    std::function<std::vector<at::Tensor>(int unit)> acquire;
    std::function<void(int unit)> release; // may be empty
};

// The parameters of a materialized model as they are.
UnitAccess modelWeights(const LlamaModel& model);

class Decoder {
public:
    // A cache of `capacity` positions for `batch` sequences, on `device` in `dtype`.
    Decoder(const LlamaModel& model, UnitAccess access, at::ScalarType dtype, at::Device device,
        int64_t capacity, int64_t batch = 1);

    // Logits (batch, s, vocab) of ids (batch, s) at positions [position(), position() + s);
    // their keys and values are appended to the cache. Throws past the capacity.
    at::Tensor forward(const at::Tensor& ids);
    int64_t position() const { return m_pos; }
    int64_t capacity() const { return m_capacity; }
    void reset() { m_pos = 0; }
    // Bytes the cache holds.
    int64_t cacheBytes() const;
    // Bytes a cache of these sizes needs (for the memory check before loading).
    static int64_t cacheBytesFor(
        const plan::ModelSpec& spec, at::ScalarType dtype, int64_t capacity, int64_t batch);

    // The full forward over ids (batch, s) without a cache: logits (batch, s, vocab).
    static at::Tensor fullForward(const LlamaModel& model, const UnitAccess& access,
        at::ScalarType dtype, const at::Tensor& ids);
    // The same with this decoder's model, weights and dtype (the cache is not touched).
    at::Tensor fullForward(const at::Tensor& ids) const
    {
        return fullForward(m_model, m_access, m_dtype, ids);
    }
    at::Device device() const { return m_rope.cos.device(); }

private:
    const LlamaModel& m_model;
    UnitAccess m_access;
    at::ScalarType m_dtype;
    int64_t m_capacity;
    int64_t m_pos = 0;
    RopeTables m_rope;
    std::vector<KvCache> m_cache; // one per block
};

} // namespace shard::engine
