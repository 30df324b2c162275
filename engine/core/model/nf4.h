// 4-bit NormalFloat (NF4) blockwise quantisation in bitsandbytes' format: its 16-value code
// table, blocks of 64 values, one fp32 absmax per block, two codes per byte (the first value of
// a pair in the high nibble), and optionally its double quantisation of the absmax. The storage
// QLoRA's frozen base uses; plain ATen ops, so it runs wherever the tensors are.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/model_spec.h"

namespace shard::engine::nf4 {

constexpr int64_t kBlockSize = plan::kNf4Block;

// bitsandbytes' NF4 values (create_normal_map(0.9677083, use_extra_value=True), normalised to
// [-1, 1]), ascending; code 7 is exactly 0.
const std::array<float, 16>& codeTable();

// Double quantisation (bitsandbytes' compress_statistics): a tensor's fp32 absmax, minus their
// mean, quantised in blocks of kNestedBlockSize to 8-bit codes of the signed dynamic map with one
// fp32 scale per block. 8 + 32 / 256 bits per block of 64 values instead of 32: 0.127 bits per
// parameter instead of 0.5.
constexpr int64_t kNestedBlockSize = plan::kNf4NestedBlock;

// bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), ascending:
// for i = 0..6, ±10^(i-6) times the midpoints of linspace(0.1, 1, 2^i + 1), then 0 and 1.
const std::array<float, 256>& dynamicMap();

// The second-level state of a double-quantised absmax; undefined (no scale) when the absmax is
// kept in fp32.
struct NestedScales {
    at::Tensor scale; // fp32 [ceil(absmax count / kNestedBlockSize)]
    float offset = 0; // the mean of the absmax, subtracted before quantising
    // A tensor-parallel rank's part of a [rows, wholeCols] absmax (partOf): the codes it holds
    // start at row firstRow and column firstCol of the whole, whose nested blocks `scale` still
    // counts. wholeCols 0: the codes are the whole tensor's in order.
    int64_t wholeCols = 0;
    int64_t firstRow = 0;
    int64_t firstCol = 0;
    bool defined() const { return scale.defined(); }
};

// The absmax as dynamic-map codes (uint8, its shape) and their nested scales. Each value takes
// the nearest code of (absmax - mean) / its block's max |.| (ties to the lower code).
std::pair<at::Tensor, NestedScales> quantizeNested(const at::Tensor& absmax);
// `absmax` itself when `nested` is undefined, else dynamicMap()[code] * scale + offset, fp32 of
// the codes' shape. The codes are those of the whole tensor in order, as gathered, or the 2-D
// part of them `nested` places (wholeCols > 0).
at::Tensor absmaxOf(const at::Tensor& absmax, const NestedScales& nested);
// The largest |absmaxOf(quantizeNested(a)) - a| / scale of a's block: half the widest gap
// between neighbouring codes of the dynamic map.
double maxNestedError();

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
// With doubleQuant the absmax is the uint8 codes of quantizeNested() (same shape) and `nested`
// holds their scales; the small `nested` is kept whole by every rank.
struct Rows {
    at::Tensor packed;
    at::Tensor absmax;
    NestedScales nested;
};
Rows quantizeRows(const at::Tensor& matrix, bool doubleQuant = false);
at::Tensor dequantizeRows(const at::Tensor& packed, const at::Tensor& absmax, at::ScalarType dtype,
    const NestedScales& nested = {});

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
    const at::Tensor& get(size_t i, const at::Tensor& packed, const at::Tensor& absmax,
        at::ScalarType dtype, const NestedScales& nested = {});
    // Frees the storage of every copy.
    void release();
    // Storage bytes the copies hold now.
    int64_t bytes() const;

private:
    std::vector<at::Tensor> m_copies;
};

} // namespace shard::engine::nf4
