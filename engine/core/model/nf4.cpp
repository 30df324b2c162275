// NF4 quantisation with ATen ops: bucketize against the midpoints of the code table, pack pairs
// of codes into bytes; dequantisation is a table lookup times the block's absmax. Double
// quantisation does the same to the absmax with the 256-value dynamic map.
#include "core/model/nf4.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/memory/storage.h"

namespace shard::engine::nf4 {

const std::array<float, 16>& codeTable()
{
    static const std::array<float, 16> table {-1.0f, -0.6961928009986877f, -0.5250730514526367f,
        -0.39491748809814453f, -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f,
        0.0f, 0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
        0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
    return table;
}

namespace {

// table[codes] (fp32), on the codes' device.
template<size_t N> at::Tensor lookup(const std::array<float, N>& table, const at::Tensor& codes)
{
    const at::Tensor t
        = at::tensor(std::vector<float>(table.begin(), table.end()), at::kFloat).to(codes.device());
    return at::index_select(t, 0, codes.reshape({-1}).to(at::kLong));
}

// The 4-bit codes of packed bytes, in order (the high nibble first).
at::Tensor unpackCodes(const at::Tensor& packed)
{
    at::Tensor hi = at::floor_divide(packed, 16);
    at::Tensor lo = at::remainder(packed, 16);
    return at::stack({hi, lo}, -1).reshape({-1});
}

// Codes of `normed` (values in [-1, 1]): the nearest entry of the ascending `table`, a value
// exactly between two entries taking the lower one.
template<size_t N>
at::Tensor nearestCodes(const at::Tensor& normed, const std::array<float, N>& table)
{
    std::vector<double> mids;
    for (size_t i = 0; i + 1 < N; ++i)
        mids.push_back((static_cast<double>(table[i]) + static_cast<double>(table[i + 1])) / 2.0);
    // right = false: a value equal to a midpoint gets the lower code.
    return at::bucketize(normed.to(at::kDouble), at::tensor(mids, at::kDouble).to(normed.device()),
        /*out_int32=*/false, false)
        .to(at::kByte);
}

template<size_t N> double halfWidestGap(const std::array<float, N>& table)
{
    double gap = 0;
    for (size_t i = 0; i + 1 < N; ++i)
        gap = std::max(gap, static_cast<double>(table[i + 1]) - static_cast<double>(table[i]));
    return gap / 2.0;
}

} // namespace

const std::array<float, 256>& dynamicMap()
{
    // The same ATen ops, in the same dtype, as bitsandbytes' construction in PyTorch: float32
    // linspace, midpoints, times the power of ten.
    static const std::array<float, 256> table = [] {
        std::vector<float> v;
        for (int i = 0; i < 7; ++i) {
            const int64_t n = (int64_t(1) << i) + 1;
            at::Tensor b = at::linspace(0.1, 1.0, n, at::kFloat);
            at::Tensor means = (b.narrow(0, 0, n - 1) + b.narrow(0, 1, n - 1)) / 2.0;
            at::Tensor scaled = (means * std::pow(10.0, i - 6)).contiguous();
            const float* d = scaled.data_ptr<float>();
            for (int64_t k = 0; k < n - 1; ++k) {
                v.push_back(d[k]);
                v.push_back(-d[k]);
            }
        }
        v.push_back(0.0f);
        v.push_back(1.0f);
        std::sort(v.begin(), v.end());
        std::array<float, 256> out {};
        if (v.size() != out.size())
            throw std::logic_error(
                "nf4: the dynamic map has " + std::to_string(v.size()) + " values");
        std::copy(v.begin(), v.end(), out.begin());
        return out;
    }();
    return table;
}

std::pair<at::Tensor, NestedScales> quantizeNested(const at::Tensor& absmax)
{
    at::Tensor a = absmax.to(at::kFloat).reshape({-1});
    const int64_t n = a.numel();
    NestedScales nested;
    nested.offset = n > 0 ? a.mean().item<float>() : 0.0f;
    const int64_t blocks = std::max<int64_t>(1, (n + kNestedBlockSize - 1) / kNestedBlockSize);
    at::Tensor flat = at::zeros({blocks * kNestedBlockSize}, a.options());
    flat.narrow(0, 0, n).copy_(a - nested.offset);
    at::Tensor b = flat.view({blocks, kNestedBlockSize});
    nested.scale = std::get<0>(b.abs().max(1));
    at::Tensor normed
        = b / at::where(nested.scale > 0, nested.scale, at::ones_like(nested.scale)).unsqueeze(1);
    at::Tensor codes = nearestCodes(normed, dynamicMap()).reshape({-1}).narrow(0, 0, n);
    return {codes.view(absmax.sizes()).contiguous(), nested};
}

at::Tensor absmaxOf(const at::Tensor& absmax, const NestedScales& nested)
{
    if (!nested.defined())
        return absmax;
    if (absmax.scalar_type() != at::kByte)
        throw std::runtime_error("nf4: a double-quantised absmax must be uint8 codes");
    const int64_t n = absmax.numel();
    at::Tensor v = lookup(dynamicMap(), absmax);
    const at::Tensor blockScales = nested.scale.to(absmax.device());
    at::Tensor scale;
    if (nested.wholeCols > 0) {
        // A part of the whole [rows, wholeCols] codes: each code's block from its whole index.
        if (absmax.dim() != 2)
            throw std::runtime_error("nf4: a part of a double-quantised absmax must be 2-D");
        const auto idx = at::TensorOptions().dtype(at::kLong).device(absmax.device());
        const at::Tensor rows = (at::arange(absmax.size(0), idx) + nested.firstRow)
                                    .mul_(nested.wholeCols)
                                    .unsqueeze(1);
        const at::Tensor cols = (at::arange(absmax.size(1), idx) + nested.firstCol).unsqueeze(0);
        scale = blockScales.index_select(
            0, at::floor_divide(rows + cols, kNestedBlockSize).reshape({-1}));
    } else {
        scale = blockScales.repeat_interleave(kNestedBlockSize).narrow(0, 0, n);
    }
    return (v * scale + nested.offset).view(absmax.sizes());
}

double maxNestedError()
{
    return halfWidestGap(dynamicMap());
}

Packed quantize(const at::Tensor& values)
{
    Packed q;
    q.shape = values.sizes().vec();
    q.numel = values.numel();
    const int64_t blocks = std::max<int64_t>(1, (q.numel + kBlockSize - 1) / kBlockSize);
    at::Tensor flat = at::zeros({blocks * kBlockSize}, at::kFloat);
    flat.narrow(0, 0, q.numel).copy_(values.reshape({-1}).to(at::kFloat));
    at::Tensor b = flat.view({blocks, kBlockSize});
    q.absmax = std::get<0>(b.abs().max(1));
    // An all-zero block keeps absmax 0; its values normalise to 0 (code 7).
    at::Tensor normed = b / at::where(q.absmax > 0, q.absmax, at::ones_like(q.absmax)).unsqueeze(1);
    at::Tensor codes = nearestCodes(normed, codeTable()).view({-1, 2});
    q.data = (codes.select(1, 0) * 16 + codes.select(1, 1)).to(at::kByte).contiguous();
    return q;
}

at::Tensor dequantize(const Packed& q, at::ScalarType dtype)
{
    if (!q.data.defined() || q.data.scalar_type() != at::kByte)
        throw std::runtime_error("nf4: packed data must be uint8");
    at::Tensor v = lookup(codeTable(), unpackCodes(q.data)).view({q.absmax.size(0), kBlockSize})
        * q.absmax.unsqueeze(1);
    return v.reshape({-1}).narrow(0, 0, q.numel).view(q.shape).to(dtype);
}

Rows quantizeRows(const at::Tensor& matrix, bool doubleQuant)
{
    if (matrix.dim() != 2 || matrix.size(1) % kBlockSize != 0)
        throw std::runtime_error("nf4: row form needs a matrix whose rows are whole blocks of "
            + std::to_string(kBlockSize) + " values");
    const int64_t rows = matrix.size(0), cols = matrix.size(1);
    const Packed q = quantize(matrix);
    Rows r {q.data.view({rows, cols / 2}), q.absmax.view({rows, cols / kBlockSize}), {}};
    if (doubleQuant) // the NF4 codes above were chosen with the exact absmax, as bitsandbytes does
        std::tie(r.absmax, r.nested) = quantizeNested(r.absmax);
    return r;
}

at::Tensor dequantizeRows(const at::Tensor& packed, const at::Tensor& absmax, at::ScalarType dtype,
    const NestedScales& nested)
{
    const int64_t rows = packed.size(0), cols = packed.size(1) * 2;
    at::Tensor v
        = lookup(codeTable(), unpackCodes(packed)).view({rows, cols / kBlockSize, kBlockSize})
        * absmaxOf(absmax, nested).to(at::kFloat).unsqueeze(-1);
    return v.view({rows, cols}).to(dtype);
}

double maxRelativeError()
{
    return halfWidestGap(codeTable());
}

const at::Tensor& Dequantized::get(size_t i, const at::Tensor& packed, const at::Tensor& absmax,
    at::ScalarType dtype, const NestedScales& nested)
{
    if (m_copies.size() <= i)
        m_copies.resize(i + 1);
    at::Tensor& copy = m_copies[i];
    at::NoGradGuard noGrad; // a frozen weight: no graph through the dequantisation
    if (!copy.defined() || copy.scalar_type() != dtype) {
        copy = dequantizeRows(packed, absmax, dtype, nested);
    } else if (memory::storageBytes(copy) == 0) {
        memory::resizeStorage(copy, copy.numel() * static_cast<int64_t>(copy.element_size()));
        // A new version counter: the refill restores what autograd saved, not an in-place
        // change of it (the sharded engine's gathered buffers are refilled the same way).
        copy.variable_data().copy_(dequantizeRows(packed, absmax, dtype, nested));
    }
    return copy;
}

void Dequantized::release()
{
    for (const at::Tensor& c : m_copies)
        if (c.defined())
            memory::resizeStorage(c, 0);
}

int64_t Dequantized::bytes() const
{
    int64_t n = 0;
    for (const at::Tensor& c : m_copies)
        n += memory::storageBytes(c);
    return n;
}

} // namespace shard::engine::nf4
