// The NVIDIA driver against a CUDA runtime (see cuda_driver.h).
#include "protocol/cuda_driver.h"

#include <algorithm>
#include <regex>
#include <sstream>
#include <vector>

namespace shard::protocol {

namespace {

std::vector<long> fields(const std::string& v)
{
    std::vector<long> out;
    std::stringstream ss(v);
    for (std::string f; std::getline(ss, f, '.');) {
        try {
            out.push_back(std::stol(f));
        } catch (...) {
            out.push_back(0);
        }
    }
    return out;
}

} // namespace

std::string minimumDriverForCuda(int cudaMajor)
{
    switch (cudaMajor) {
    case 11:
        return "450.80.02";
    case 12:
        return "525.60.13";
    case 13:
        return "580.65.06";
    default:
        return {};
    }
}

int compareDottedVersions(const std::string& a, const std::string& b)
{
    const std::vector<long> x = fields(a), y = fields(b);
    for (size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
        const long p = i < x.size() ? x[i] : 0, q = i < y.size() ? y[i] : 0;
        if (p != q)
            return p < q ? -1 : 1;
    }
    return 0;
}

std::string driverVersionFromProc(const std::string& line)
{
    static const std::regex module(R"(Module\s+(\d+\.\d+(?:\.\d+)?))");
    std::smatch m;
    return std::regex_search(line, m, module) ? m[1].str() : std::string();
}

std::string noGpuDriverHint(const std::string& procLine, const std::string& cudaVersion)
{
    if (cudaVersion.empty())
        return {};
    if (procLine.empty())
        return "; no NVIDIA driver is loaded on this node";
    const std::string driver = driverVersionFromProc(procLine);
    int major = 0;
    try {
        major = std::stoi(cudaVersion);
    } catch (...) {
    }
    const std::string needed = minimumDriverForCuda(major);
    if (!driver.empty() && !needed.empty() && compareDottedVersions(driver, needed) < 0)
        return "; the NVIDIA driver here is " + driver + ", older than " + needed
            + ", the least CUDA " + std::to_string(major)
            + " runs on: install a newer driver and reboot";
    return "; the NVIDIA driver" + (driver.empty() ? std::string() : " " + driver)
        + " is loaded but shows this process no GPU (a container without the device, or a "
          "driver/library mismatch: see nvidia-smi)";
}

} // namespace shard::protocol
