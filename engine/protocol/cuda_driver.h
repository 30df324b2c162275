// The NVIDIA driver against a CUDA runtime: the least driver each CUDA major runs on, as the
// worker (a GPU it cannot see) and `shard doctor` (jobs/doctor.h) judge it. No Torch, no Qt.
#pragma once

#include <string>

namespace shard::protocol {

// The least Linux x86_64 driver a CUDA major version runs on (CUDA's release notes: 11:
// 450.80.02, 12: 525.60.13, 13: 580.65.06); "" for a major it does not know.
std::string minimumDriverForCuda(int cudaMajor);
// -1, 0, 1 as a < b, ==, > b, comparing dotted numbers ("535.104.05") field by field.
int compareDottedVersions(const std::string& a, const std::string& b);
// The version in /proc/driver/nvidia/version's first line ("NVRM version: NVIDIA UNIX x86_64
// Kernel Module  550.54.15  Tue Mar ..."); "" when it has none.
std::string driverVersionFromProc(const std::string& line);
// Why a build of CUDA `cudaVersion` ("12.4.131"; "" for a CPU build) sees no GPU, from the
// driver's /proc line ("" when no driver is loaded): "" when there is nothing to add, else a
// clause beginning "; " for the worker's refusal of --device cuda.
std::string noGpuDriverHint(const std::string& procLine, const std::string& cudaVersion);

} // namespace shard::protocol
