// 4-bit NormalFloat (NF4) blockwise quantisation in bitsandbytes' format: its 16-value code
// table, blocks of 64 values, one fp32 absmax per block, two codes per byte (the first value of
// a pair in the high nibble). The storage QLoRA's frozen base is meant to use; plain ATen ops, so
// it runs wherever the tensors are.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shard::engine::nf4 {

constexpr int64_t kBlockSize = 64;

// bitsandbytes' NF4 values (create_normal_map(0.9677083, use_extra_value=True), normalised to
// [-1, 1]), ascending; code 7 is exactly 0.
const std::array<float, 16>& codeTable();

struct Packed {
    at::Tensor data;   // uint8 [ceil(numel / 2)], padded to whole blocks
    at::Tensor absmax; // fp32 [blocks]
    std::vector<int64_t> shape;
    int64_t numel = 0;
};

// Each value maps to the nearest code of value / absmax of its block (a value exactly between
// two codes takes the lower one, as bitsandbytes' comparisons do).
Packed quantize(const at::Tensor& values);
// codeTable()[code] * absmax, in `dtype`, with the original shape.
at::Tensor dequantize(const Packed& q, at::ScalarType dtype);

// A [rows, cols] matrix with cols a multiple of kBlockSize in row-split form: packed
// [rows, cols / 2] and absmax [rows, cols / kBlockSize], the same bytes and scales as quantize()
// of the flattened matrix, so dim-0 chunks of both can be sharded and gathered like any weight.
struct Rows {
    at::Tensor packed;
    at::Tensor absmax;
};
Rows quantizeRows(const at::Tensor& matrix);
at::Tensor dequantizeRows(const at::Tensor& packed, const at::Tensor& absmax, at::ScalarType dtype);

// The largest |value - dequantize(quantize(value))| / absmax the table allows: half the widest
// gap between neighbouring codes.
double maxRelativeError();

// The compute-dtype copies of one unit's NF4 weights, made when the unit runs. release() frees
// their storage but keeps the tensors, which autograd (or a checkpointed block) saved for the
// input gradient; get() before the unit's backward dequantises into the same storage again, as
// bitsandbytes dequantises again in backward. So one block's copies are alive at a time, not
// every block's until backward.
class Dequantized {
public:
    // The copy of slot `i` of (packed, absmax) in the row form, made or refilled when it holds
    // no storage.
    const at::Tensor& get(
        size_t i, const at::Tensor& packed, const at::Tensor& absmax, at::ScalarType dtype);
    // Frees the storage of every copy.
    void release();
    // Storage bytes the copies hold now.
    int64_t bytes() const;

private:
    std::vector<at::Tensor> m_copies;
};

} // namespace shard::engine::nf4
