// Reads of a tensor's value into host memory by the training loop and the strategies. On a GPU
// each one waits for the device to finish everything queued before it (a device-to-host
// synchronisation), so the loop keeps losses, norms and clipping factors on the device and reads
// them once per logged step (docs/ARCHITECTURE.md, "A step without host reads"). Every such read
// goes through readValue(), which counts it; tests and the GPU script compare the count with the
// steps logged.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shard::engine::hostsync {

// `t` copied to host memory (a no-op on the CPU), in one transfer; counted once.
at::Tensor toHost(const at::Tensor& t);
// The values of `t` (any dtype, any device) as doubles, in one transfer; counted once.
std::vector<double> readValues(const at::Tensor& t);
// A one-element tensor's value; counted once.
double readValue(const at::Tensor& t);
// Reads so far in this process.
int64_t count();

} // namespace shard::engine::hostsync
