// The differences between the LibTorch versions the engine builds against (1.13 on Debian 12,
// 2.6 on Debian 13), in one place. Code elsewhere is written once and uses these names where the
// versions disagree:
// - SHARD_TORCH_AT_LEAST(major, minor): compile-time version test (from <torch/version.h>).
// - SHARD_ALLOCATOR_CONST: the qualifier of c10::Allocator::allocate() (const in 1.x only).
// - SHARD_ALLOCATOR_COPY_DATA: declares the copy_data() override 2.x requires (nothing in 1.x).
// - SHARD_TORCH_HAS_SDPA: at::scaled_dot_product_attention exists (2.x).
// - SHARD_TORCH_HAS_FUSED_ADAMW: at::_fused_adamw_, the multi-tensor AdamW kernel, exists for
//   CUDA and CPU tensors (2.4 and later; CUDA only from 2.0, which the engine does not build on).
// Headers that 1.13 included transitively are included where used, on both versions:
// at::NoGradGuard is <ATen/core/grad_mode.h>.
#pragma once

#include <torch/version.h>

#define SHARD_TORCH_AT_LEAST(major, minor)                                                         \
    (TORCH_VERSION_MAJOR > (major)                                                                 \
        || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if SHARD_TORCH_AT_LEAST(2, 0)
#define SHARD_ALLOCATOR_CONST
#define SHARD_ALLOCATOR_COPY_DATA                                                                  \
    void copy_data(void* dest, const void* src, std::size_t count) const override                  \
    {                                                                                              \
        default_copy_data(dest, src, count);                                                       \
    }
#define SHARD_TORCH_HAS_SDPA 1
#else
#define SHARD_ALLOCATOR_CONST const
#define SHARD_ALLOCATOR_COPY_DATA
#define SHARD_TORCH_HAS_SDPA 0
#endif

#if SHARD_TORCH_AT_LEAST(2, 4)
#define SHARD_TORCH_HAS_FUSED_ADAMW 1
#else
#define SHARD_TORCH_HAS_FUSED_ADAMW 0
#endif
