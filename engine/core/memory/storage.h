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

// Sets the storage of `t` to `bytes` (0 frees it; the old contents are not kept). On the CPU
// ATen's own resize; elsewhere (CUDA) a fresh block from the storage's allocator (the caching
// allocator), the same for every device.
inline void resizeStorage(const at::Tensor& t, int64_t bytes)
{
    c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    if (impl->device_type() == c10::DeviceType::CPU) {
        at::native::resize_bytes_cpu(impl, static_cast<size_t>(bytes));
        return;
    }
    at::DataPtr fresh = bytes > 0 ? impl->allocator()->allocate(static_cast<size_t>(bytes))
                                  : at::DataPtr(nullptr, impl->device());
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(static_cast<size_t>(bytes));
}

} // namespace shard::engine::memory
