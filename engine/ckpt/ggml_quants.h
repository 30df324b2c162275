// ggml's block quantisation formats, as llama.cpp's loader reads them, for the GGUF export
// (docs/ARCHITECTURE.md, "GGUF export"). Each quantiser is the format's importance-free
// reference (what `llama-quantize` runs without an imatrix), so an exported file holds the bytes
// llama.cpp would have written from the same float32 weights; tst_ggml_quants compares them with
// llama.cpp's own library byte for byte.
//
//   q8_0  blocks of 32: fp16 scale, 32 int8                                      34 bytes
//   q5_0  blocks of 32: fp16 scale, 32 high bits, 32 low nibbles                 22 bytes
//   q4_K  super-blocks of 256: fp16 scale and min, 8 x 6-bit scales and mins,
//         256 nibbles (value = d * scale * q - dmin * min)                       144 bytes
//   q6_K  super-blocks of 256: 256 low nibbles, 256 x 2 high bits, 16 int8
//         scales, fp16 scale (value = d * scale * (q - 32))                      210 bytes
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shard::ckpt::ggml {

// ggml_type ids (the tensor infos' type field).
enum Type : uint32_t {
    F32 = 0,
    F16 = 1,
    Q5_0 = 6,
    Q8_0 = 8,
    Q4_K = 12,
    Q6_K = 14,
    BF16 = 30,
};

// "q4_K" etc. as llama.cpp prints them.
std::string typeName(Type t);
// Values per block (1 for float types) and bytes per block.
int64_t blockValues(Type t);
int64_t blockBytes(Type t);
// Bytes of `numel` values (numel a multiple of blockValues(t)).
uint64_t bytesOf(Type t, int64_t numel);

// Quantises n values (a multiple of the type's block) into `out` (resized to bytesOf).
void quantize(Type t, const float* x, int64_t n, std::vector<char>& out);
// The values a quantised buffer of n values stands for.
std::vector<float> dequantize(Type t, const char* data, int64_t n);

} // namespace shard::ckpt::ggml
