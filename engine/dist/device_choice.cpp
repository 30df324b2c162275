// Device selection (see device_choice.h).
#include "dist/device_choice.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include "dist/build_info.h"
#include "protocol/cuda_driver.h"

namespace shard::dist {

namespace {

// The loaded NVIDIA driver's first /proc line; "" without a driver.
std::string nvidiaDriverLine()
{
    std::ifstream in("/proc/driver/nvidia/version");
    std::string line;
    std::getline(in, line);
    return line;
}

} // namespace

c10::Device chooseDevice(const std::string& requested, int localRank, int visibleGpus)
{
    if (requested != "auto" && requested != "cuda" && requested != "cpu")
        throw std::runtime_error("--device '" + requested
            + "' is not one of: auto, cuda, cpu (auto: a GPU if "
              "this node has one, else the CPU)");
    if (requested == "cpu" || (requested == "auto" && visibleGpus <= 0))
        return c10::Device(c10::DeviceType::CPU);
    if (visibleGpus <= 0) {
        const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
        throw std::runtime_error(
            "--device cuda: no CUDA GPU is visible to this rank (shard-worker: " + buildInfo()
            + (visible ? std::string(", CUDA_VISIBLE_DEVICES='") + visible + "'" : std::string())
            + ")" + protocol::noGpuDriverHint(nvidiaDriverLine(), cudaBuildVersion())
            + "; use --device cpu, or a CUDA build of shard-worker on a GPU node");
    }
    if (localRank < 0 || localRank >= visibleGpus)
        throw std::runtime_error("local rank " + std::to_string(localRank) + " has no GPU of its "
            + "own: this node shows " + std::to_string(visibleGpus) + " GPU"
            + (visibleGpus == 1 ? "" : "s") + " and the engine runs one rank per GPU; start at "
            + "most " + std::to_string(visibleGpus) + " ranks per node (--nproc-per-node "
            + std::to_string(visibleGpus) + ") or check CUDA_VISIBLE_DEVICES"
            + (requested == "auto" ? " (--device cpu trains on the CPU instead)" : ""));
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(localRank));
}

int visibleCudaDevices()
{
    return static_cast<int>(torch::cuda::device_count());
}

c10::Device resolveDevice(const std::string& requested, int localRank)
{
    // A CPU run never touches the CUDA runtime (no context, no driver start-up).
    const int gpus = requested == "cpu" ? 0 : visibleCudaDevices();
    const c10::Device device = chooseDevice(requested, localRank, gpus);
    if (device.is_cuda())
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(device);
    return device;
}

} // namespace shard::dist
