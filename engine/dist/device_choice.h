// The device a rank trains on (docs/ARCHITECTURE.md, "Devices"): --device auto|cuda|cpu, one
// rank per GPU with LOCAL_RANK picking it among the GPUs CUDA_VISIBLE_DEVICES leaves visible.
#pragma once

#include <string>

#include <c10/core/Device.h>

namespace shard::dist {

// The device for `requested` ("auto", "cuda" or "cpu") on a rank with local rank `localRank`
// when `visibleGpus` GPUs are visible: auto is cuda:<localRank> when there is a GPU, else the
// CPU. Throws std::runtime_error (one line naming this build, see buildInfo()) for an unknown
// name, cuda without a GPU, or a local rank without a GPU of its own.
c10::Device chooseDevice(const std::string& requested, int localRank, int visibleGpus);

// chooseDevice() with the GPUs LibTorch sees; a CUDA device also becomes this thread's current
// device (cuBLAS handles, NCCL and kernels launched without an explicit device use it).
c10::Device resolveDevice(const std::string& requested, int localRank);

// The GPUs LibTorch sees (0 in a build without CUDA).
int visibleCudaDevices();

} // namespace shard::dist
