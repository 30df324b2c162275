// What the engine was built against, for shard-worker --version.
#pragma once

#include <string>

namespace shard::dist {

// One line: "LibTorch 2.6.0, built with CUDA 12.4, NCCL backend on (NCCL 2.22.3)" or
// "LibTorch 1.13.0, built without CUDA, NCCL backend off". Versions are those of the headers
// and CMake packages the build used (libnccl is loaded at run time and may differ).
std::string buildInfo();
// The CUDA version this build's LibTorch was built with ("12.4.131"); "" for a CPU build.
std::string cudaBuildVersion();

} // namespace shard::dist
