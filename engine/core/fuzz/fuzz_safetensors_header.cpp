// libFuzzer target for the safetensors header parser: any byte string must either parse into a
// header whose every tensor lies inside the file, or throw std::runtime_error. Nothing else.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "core/safetensors/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    try {
        const auto header
            = shard::engine::parseSafetensorsHeader(data, size, size, "fuzz.safetensors");
        for (const auto& t : header.tensors) {
            if (t.end > header.dataBytes || t.begin > t.end || header.dataOffset + t.end > size)
                std::abort(); // the validator let an out-of-file tensor through
        }
    } catch (const std::runtime_error&) {
    }
    return 0;
}
