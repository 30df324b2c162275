// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing, and
// TensorFlow's masking of it. Debian 12 packages no CRC32C library (libcrc32c-dev is not in
// bookworm) and Boost.CRC would add Boost to the GPU worker's carried libraries, so it is here:
// slicing-by-8 tables, checked against python3-crc32c (an independent implementation) and the
// CRCs in event files TensorFlow and PyTorch wrote (tests/tbio/tst_tfrecord).
#pragma once

#include <cstddef>
#include <cstdint>

namespace shard::tbio {

// The CRC-32C of `size` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's mask: rotate right by 15 and add 0xa282ead8.
uint32_t maskCrc(uint32_t crc);
inline uint32_t maskedCrc32c(const void* data, size_t size)
{
    return maskCrc(crc32c(data, size));
}

} // namespace shard::tbio
