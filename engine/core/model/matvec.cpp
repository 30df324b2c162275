// Matrix-vector product for decode steps (see matvec.h).
#include "core/model/matvec.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <immintrin.h>

namespace shard::engine::fused {

namespace {

// Four rows of w against x at a time: four independent streams keep the loads in flight.
constexpr int64_t kRows = 4;

float widenBf16(uint16_t h)
{
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// ---- plain C++ (any CPU) -------------------------------------------------------------------

template<typename W> float loadWeight(const W* p, int64_t i);
template<> float loadWeight<float>(const float* p, int64_t i)
{
    return p[i];
}
template<> float loadWeight<uint16_t>(const uint16_t* p, int64_t i)
{
    return widenBf16(p[i]);
}

template<typename W>
void rowsPlain(const W* w, const float* x, float* y, int64_t n, int64_t begin, int64_t end)
{
    for (int64_t r = begin; r < end; ++r) {
        const W* row = w + r * n;
        float acc[8] = {};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; ++k)
                acc[k] += loadWeight(row, i + k) * x[i + k];
        float sum
            = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; i < n; ++i)
            sum += loadWeight(row, i) * x[i];
        y[r] = sum;
    }
}

// ---- AVX2 + FMA ----------------------------------------------------------------------------

__attribute__((target("avx2,fma"))) inline __m256 load8(const float* p)
{
    return _mm256_loadu_ps(p);
}
__attribute__((target("avx2,fma"))) inline __m256 load8(const uint16_t* p)
{
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
__attribute__((target("avx2,fma"))) inline float sum8(__m256 v)
{
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

template<typename W>
__attribute__((target("avx2,fma"))) void rowsAvx2(
    const W* w, const float* x, float* y, int64_t n, int64_t begin, int64_t end)
{
    const int64_t full = n / 8 * 8;
    int64_t r = begin;
    for (; r + kRows <= end; r += kRows) {
        const W* w0 = w + r * n;
        const W* w1 = w0 + n;
        const W* w2 = w1 + n;
        const W* w3 = w2 + n;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (int64_t i = 0; i < full; i += 8) {
            const __m256 xv = _mm256_loadu_ps(x + i);
            a0 = _mm256_fmadd_ps(load8(w0 + i), xv, a0);
            a1 = _mm256_fmadd_ps(load8(w1 + i), xv, a1);
            a2 = _mm256_fmadd_ps(load8(w2 + i), xv, a2);
            a3 = _mm256_fmadd_ps(load8(w3 + i), xv, a3);
        }
        float s[kRows] = {sum8(a0), sum8(a1), sum8(a2), sum8(a3)};
        for (int64_t i = full; i < n; ++i) {
            s[0] += loadWeight(w0, i) * x[i];
            s[1] += loadWeight(w1, i) * x[i];
            s[2] += loadWeight(w2, i) * x[i];
            s[3] += loadWeight(w3, i) * x[i];
        }
        std::memcpy(y + r, s, sizeof s);
    }
    for (; r < end; ++r) {
        const W* row = w + r * n;
        __m256 a = _mm256_setzero_ps();
        for (int64_t i = 0; i < full; i += 8)
            a = _mm256_fmadd_ps(load8(row + i), _mm256_loadu_ps(x + i), a);
        float s = sum8(a);
        for (int64_t i = full; i < n; ++i)
            s += loadWeight(row, i) * x[i];
        y[r] = s;
    }
}

// ---- AVX-512 -------------------------------------------------------------------------------

__attribute__((target("avx512f,avx512bw"))) inline __m512 load16(const float* p)
{
    return _mm512_loadu_ps(p);
}
__attribute__((target("avx512f,avx512bw"))) inline __m512 load16(const uint16_t* p)
{
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template<typename W>
__attribute__((target("avx512f,avx512bw"))) void rowsAvx512(
    const W* w, const float* x, float* y, int64_t n, int64_t begin, int64_t end)
{
    const int64_t full = n / 16 * 16;
    int64_t r = begin;
    for (; r + kRows <= end; r += kRows) {
        const W* w0 = w + r * n;
        const W* w1 = w0 + n;
        const W* w2 = w1 + n;
        const W* w3 = w2 + n;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16) {
            const __m512 xv = _mm512_loadu_ps(x + i);
            a0 = _mm512_fmadd_ps(load16(w0 + i), xv, a0);
            a1 = _mm512_fmadd_ps(load16(w1 + i), xv, a1);
            a2 = _mm512_fmadd_ps(load16(w2 + i), xv, a2);
            a3 = _mm512_fmadd_ps(load16(w3 + i), xv, a3);
        }
        float s[kRows] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1),
            _mm512_reduce_add_ps(a2), _mm512_reduce_add_ps(a3)};
        for (int64_t i = full; i < n; ++i) {
            s[0] += loadWeight(w0, i) * x[i];
            s[1] += loadWeight(w1, i) * x[i];
            s[2] += loadWeight(w2, i) * x[i];
            s[3] += loadWeight(w3, i) * x[i];
        }
        std::memcpy(y + r, s, sizeof s);
    }
    for (; r < end; ++r) {
        const W* row = w + r * n;
        __m512 a = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16)
            a = _mm512_fmadd_ps(load16(row + i), _mm512_loadu_ps(x + i), a);
        float s = _mm512_reduce_add_ps(a);
        for (int64_t i = full; i < n; ++i)
            s += loadWeight(row, i) * x[i];
        y[r] = s;
    }
}

// ---- AVX-512 BF16: bf16 weights against the bf16 vector, 32 products per instruction ----------

__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m512bh load(const uint16_t* p)
{
    return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

// Rows of bf16 w against bf16 x with vdpbf16ps (pairs of exact bf16 products summed into fp32
// lanes): no widening in the loop, so the load ports, not the shuffle port, set the pace.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void rowsBf16Dot(const uint16_t* w,
    const uint16_t* xh, const float* x, float* y, int64_t n, int64_t begin, int64_t end)
{
    const int64_t full = n / 32 * 32;
    int64_t r = begin;
    for (; r + kRows <= end; r += kRows) {
        const uint16_t* w0 = w + r * n;
        const uint16_t* w1 = w0 + n;
        const uint16_t* w2 = w1 + n;
        const uint16_t* w3 = w2 + n;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 32) {
            const __m512bh xv = load(xh + i);
            a0 = _mm512_dpbf16_ps(a0, load(w0 + i), xv);
            a1 = _mm512_dpbf16_ps(a1, load(w1 + i), xv);
            a2 = _mm512_dpbf16_ps(a2, load(w2 + i), xv);
            a3 = _mm512_dpbf16_ps(a3, load(w3 + i), xv);
        }
        float s[kRows] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1),
            _mm512_reduce_add_ps(a2), _mm512_reduce_add_ps(a3)};
        for (int64_t i = full; i < n; ++i) {
            s[0] += widenBf16(w0[i]) * x[i];
            s[1] += widenBf16(w1[i]) * x[i];
            s[2] += widenBf16(w2[i]) * x[i];
            s[3] += widenBf16(w3[i]) * x[i];
        }
        std::memcpy(y + r, s, sizeof s);
    }
    for (; r < end; ++r) {
        const uint16_t* row = w + r * n;
        __m512 a = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 32)
            a = _mm512_dpbf16_ps(a, load(row + i), load(xh + i));
        float s = _mm512_reduce_add_ps(a);
        for (int64_t i = full; i < n; ++i)
            s += widenBf16(row[i]) * x[i];
        y[r] = s;
    }
}

bool hasBf16Dot()
{
    static const bool value = __builtin_cpu_supports("avx512f")
        && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
    return value;
}

enum class Isa { Plain, Avx2, Avx512 };

Isa isa()
{
    static const Isa value = [] {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
            return Isa::Avx512;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            return Isa::Avx2;
        return Isa::Plain;
    }();
    return value;
}

template<typename W>
void rows(const W* w, const float* x, float* y, int64_t n, int64_t begin, int64_t end)
{
    switch (isa()) {
    case Isa::Avx512:
        return rowsAvx512(w, x, y, n, begin, end);
    case Isa::Avx2:
        return rowsAvx2(w, x, y, n, begin, end);
    case Isa::Plain:
        return rowsPlain(w, x, y, n, begin, end);
    }
}

bool enabled()
{
    static const bool value = [] {
        const char* v = std::getenv("SHARD_MATVEC");
        return !(v && std::string(v) == "aten");
    }();
    return value;
}

} // namespace

bool matvecApplies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias)
{
    if (!enabled() || !x.defined() || !w.defined() || !x.is_cpu() || !w.is_cpu() || w.dim() != 2
        || x.dim() < 1 || x.size(-1) != w.size(1) || x.numel() != w.size(1) || w.size(1) == 0
        || !w.is_contiguous())
        return false;
    const at::ScalarType t = x.scalar_type();
    if ((t != at::kFloat && t != at::kBFloat16) || w.scalar_type() != t)
        return false;
    if (bias.defined() && (!bias.is_cpu() || bias.scalar_type() != t || bias.numel() != w.size(0)))
        return false;
    if (at::GradMode::is_enabled()
        && (x.requires_grad() || w.requires_grad() || (bias.defined() && bias.requires_grad())))
        return false;
    return true;
}

at::Tensor matvec(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias)
{
    const int64_t out = w.size(0), n = w.size(1);
    const bool bf16 = x.scalar_type() == at::kBFloat16;
    // The vector in fp32 (widening bf16 is exact); the sums in fp32.
    const at::Tensor xf = x.reshape({n}).to(at::kFloat).contiguous();
    at::Tensor yf = at::empty({out}, x.options().dtype(at::kFloat));
    const float* xp = xf.data_ptr<float>();
    float* yp = yf.data_ptr<float>();
    // Row ranges a few hundred KiB of weights long, in multiples of the four-row step.
    const int64_t grain
        = std::max<int64_t>(kRows, (int64_t(1) << 16) / std::max<int64_t>(n, 1)) / kRows * kRows;
    if (bf16 && hasBf16Dot()) {
        const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
        const at::Tensor xb = x.reshape({n}).contiguous();
        const auto* xh = reinterpret_cast<const uint16_t*>(xb.data_ptr<at::BFloat16>());
        at::parallel_for(0, out, grain,
            [&](int64_t begin, int64_t end) { rowsBf16Dot(wp, xh, xp, yp, n, begin, end); });
    } else if (bf16) {
        const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
        at::parallel_for(
            0, out, grain, [&](int64_t begin, int64_t end) { rows(wp, xp, yp, n, begin, end); });
    } else {
        const float* wp = w.data_ptr<float>();
        at::parallel_for(
            0, out, grain, [&](int64_t begin, int64_t end) { rows(wp, xp, yp, n, begin, end); });
    }
    if (bias.defined())
        yf.add_(bias.reshape({out}).to(at::kFloat));
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = out;
    return (bf16 ? yf.to(at::kBFloat16) : yf).view(shape);
}

} // namespace shard::engine::fused
