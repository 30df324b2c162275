// Devices a user plans for: common data-centre and workstation GPUs with their memory, dense
// bf16 / fp32 peaks and interconnect, and the CPU of this kind of node. The throughput estimate
// and the fit change with the card. No Qt, no Torch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/planner.h"

namespace shard::plan {

struct CatalogDevice {
    std::string key;          // "h100-80g", "rtx-4090", ... (CLI: --gpu KEY)
    std::string label;        // "NVIDIA H100 SXM 80 GB"
    std::string interconnect; // "NVLink 4 (450 GB/s per direction)"
    DeviceSpec spec;
};

// Every GPU in the catalogue, data-centre cards first.
const std::vector<CatalogDevice>& gpuCatalog();
std::optional<CatalogDevice> findCatalogDevice(const std::string& key);
// The catalogue entry of a GPU as `nvidia-smi` names it ("NVIDIA H200", "NVIDIA A100-SXM4-40GB",
// "NVIDIA GeForce RTX 4090"), its memory in MiB (0: unknown) telling the sizes of one model
// apart; none when the card is not in the catalogue (plan it as a custom size).
std::optional<CatalogDevice> catalogDeviceForGpu(const std::string& smiName, double memoryMiB = 0);
// "h100-80g, h200, ..." for messages.
std::string catalogKeys();

// Above this share of device memory a plan is flagged even when it fits: Fujii et al. (arXiv
// 2411.06465) saw no out-of-memory in 454 runs whose estimate stayed under 80%.
constexpr double kSafeMemoryFraction = 0.8;

} // namespace shard::plan
