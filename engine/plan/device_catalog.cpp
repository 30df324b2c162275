// The device catalogue (see device_catalog.h). Peaks are the vendors' dense (no sparsity)
// tensor-core figures with fp32 accumulation; memory as the driver reports it, in GiB.
#include "plan/device_catalog.h"

#include <cctype>

namespace shard::plan {

namespace {

CatalogDevice gpu(const char* key, const char* label, double gib, double bf16Tflops,
    double fp32Tflops, const char* interconnect, double intraGBps, double interGBps)
{
    CatalogDevice d;
    d.key = key;
    d.label = label;
    d.interconnect = interconnect;
    d.spec = DeviceSpec::gpu(gib);
    d.spec.name = key;
    d.spec.peakFlops16 = bf16Tflops * 1e12;
    d.spec.peakFlops32 = fp32Tflops * 1e12;
    d.spec.intraNodeBytesPerSec = intraGBps * 1e9;
    d.spec.interNodeBytesPerSec = interGBps * 1e9;
    return d;
}

} // namespace

const std::vector<CatalogDevice>& gpuCatalog()
{
    // Inter-node: 400 Gb/s InfiniBand per GPU for data-centre nodes, 100 GbE for workstations.
    static const std::vector<CatalogDevice> all {
        gpu("h100-80g", "NVIDIA H100 SXM 80 GB", 80, 989, 67, "NVLink 4, 450 GB/s per direction",
            450, 50),
        gpu("h200", "NVIDIA H200 SXM 141 GB", 141, 989, 67, "NVLink 4, 450 GB/s per direction", 450,
            50),
        gpu("a100-80g", "NVIDIA A100 SXM 80 GB", 80, 312, 19.5, "NVLink 3, 300 GB/s per direction",
            300, 25),
        gpu("a100-40g", "NVIDIA A100 SXM 40 GB", 40, 312, 19.5, "NVLink 3, 300 GB/s per direction",
            300, 25),
        gpu("l40s", "NVIDIA L40S 48 GB", 48, 362, 91.6, "PCIe 4.0 x16, 32 GB/s", 32, 12.5),
        gpu("rtx-6000-ada", "NVIDIA RTX 6000 Ada 48 GB", 48, 364, 91.1, "PCIe 4.0 x16, 32 GB/s", 32,
            12.5),
        gpu("rtx-4090", "NVIDIA GeForce RTX 4090 24 GB", 24, 165, 82.6, "PCIe 4.0 x16, 32 GB/s", 32,
            12.5),
        gpu("rtx-3090", "NVIDIA GeForce RTX 3090 24 GB", 24, 71, 35.6, "PCIe 4.0 x16, 32 GB/s", 32,
            12.5),
    };
    return all;
}

std::optional<CatalogDevice> findCatalogDevice(const std::string& key)
{
    for (const auto& d : gpuCatalog())
        if (d.key == key)
            return d;
    return std::nullopt;
}

std::optional<CatalogDevice> catalogDeviceForGpu(const std::string& smiName, double memoryMiB)
{
    std::string name; // lower case, letters and digits only: "nvidiaa100sxm440gb"
    for (char c : smiName)
        if (std::isalnum(static_cast<unsigned char>(c)))
            name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto has = [&](const char* token) { return name.find(token) != std::string::npos; };
    const double gib = memoryMiB / 1024.0;
    const char* key = nullptr;
    if (has("h200"))
        key = "h200";
    else if (has("h100"))
        key = "h100-80g";
    else if (has("a100"))
        key = (gib > 0 ? gib < 60 : has("40gb")) ? "a100-40g" : "a100-80g";
    else if (has("l40s"))
        key = "l40s";
    else if (has("rtx6000ada"))
        key = "rtx-6000-ada";
    else if (has("rtx4090"))
        key = "rtx-4090";
    else if (has("rtx3090"))
        key = "rtx-3090";
    return key ? findCatalogDevice(key) : std::nullopt;
}

std::string catalogKeys()
{
    std::string out;
    for (const auto& d : gpuCatalog())
        out += (out.empty() ? "" : ", ") + d.key;
    return out;
}

} // namespace shard::plan
