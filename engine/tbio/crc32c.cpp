#include "tbio/crc32c.h"

#include <array>
#include <cstring>

namespace shard::tbio {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u; // 0x1EDC6F41 bit-reversed

struct Tables {
    std::array<std::array<uint32_t, 256>, 8> t {};
    Tables()
    {
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k)
                c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
            t[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; ++i)
            for (int s = 1; s < 8; ++s)
                t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
    }
};

const Tables& tables()
{
    static const Tables tables;
    return tables;
}

} // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc)
{
    const auto& t = tables().t;
    const auto* p = static_cast<const unsigned char*>(data);
    crc = ~crc;
    while (size >= 8) {
        uint32_t lo = 0, hi = 0;
        std::memcpy(&lo, p, 4); // little-endian hosts only (x86-64, aarch64)
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24]
            ^ t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
        p += 8;
        size -= 8;
    }
    while (size-- > 0)
        crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFFu];
    return ~crc;
}

uint32_t maskCrc(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

} // namespace shard::tbio
