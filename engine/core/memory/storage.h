// Freeing and refilling a tensor's storage in place, FSDP2's way of resharding: the tensor, its
// views and whatever autograd saved keep pointing at the same StorageImpl, so storage refilled
// before backward is what they see.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>

namespace shard::engine::memory {

inline int64_t storageBytes(const at::Tensor& t)
{
    return t.defined() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
}

// Sets the storage of `t` to `bytes` (0 frees it; the old contents are not kept).
inline void resizeStorage(const at::Tensor& t, int64_t bytes)
{
    at::native::resize_bytes_cpu(t.storage().unsafeGetStorageImpl(), static_cast<size_t>(bytes));
}

} // namespace shard::engine::memory
