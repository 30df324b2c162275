#include "dist/build_info.h"

#include <torch/version.h>

#ifdef SHARD_HAVE_NCCL
#include <nccl.h>
#endif

namespace shard::dist {

std::string buildInfo()
{
    std::string info = std::string("LibTorch ") + TORCH_VERSION;
#ifdef SHARD_TORCH_CUDA_VERSION
    info += std::string(", built with CUDA ") + SHARD_TORCH_CUDA_VERSION;
#else
    info += ", built without CUDA";
#endif
#ifdef SHARD_HAVE_NCCL
    info += ", NCCL backend on (NCCL " + std::to_string(NCCL_MAJOR) + "."
        + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH) + ")";
#else
    info += ", NCCL backend off";
#endif
#ifndef SHARD_HAVE_GLOO
    info += ", Gloo backend off";
#endif
    return info;
}

std::string cudaBuildVersion()
{
#ifdef SHARD_TORCH_CUDA_VERSION
    return SHARD_TORCH_CUDA_VERSION;
#else
    return {};
#endif
}

} // namespace shard::dist
