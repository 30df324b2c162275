// ggml block formats (see ggml_quants.h). The arithmetic is float32 in ggml's order, with no
// fused multiply-add (this file is built with -ffp-contract=off), so that every rounding step,
// and with it every chosen scale and level, is the one llama.cpp's reference makes.
#include "ckpt/ggml_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace shard::ckpt::ggml {

namespace {

constexpr int64_t kQK = 32;    // q8_0, q5_0 block
constexpr int64_t kQK_K = 256; // k-quant super-block
constexpr float kGroupMaxEps = 1e-15f;

uint32_t bitsOf(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

float floatOf(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// IEEE binary16 from float32, rounding to nearest even (what F16C's conversion does).
uint16_t toHalf(float f)
{
    const uint32_t x = bitsOf(f);
    const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) // inf or NaN
        return uint16_t(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a >= 0x477ff000u) // 65520 and above round to infinity
        return uint16_t(sign | 0x7c00u);
    if (a < 0x38800000u) // below 2^-14: a subnormal half, in units of 2^-24
        return uint16_t(sign | uint16_t(std::lrintf(std::fabs(f) * 16777216.0f)));
    a += 0xfffu + ((a >> 13) & 1u); // round the 13 dropped bits to nearest even
    return uint16_t(sign | ((a - 0x38000000u) >> 13));
}

float fromHalf(uint16_t h)
{
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) // zero or subnormal
        return std::copysign(float(man) / 16777216.0f, sign ? -1.0f : 1.0f);
    if (exp == 31)
        return floatOf(sign | 0x7f800000u | (man << 13));
    return floatOf(sign | ((exp + 112u) << 23) | (man << 13));
}

// Rounds to the nearest integer, ties to even, as ggml's nearest_int (|v| < 2^22).
int nearestInt(float v)
{
    const float t = v + 12582912.0f;
    int i;
    std::memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

void putHalf(char* p, float v)
{
    const uint16_t h = toHalf(v);
    std::memcpy(p, &h, 2);
}

float getHalf(const char* p)
{
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fromHalf(h);
}

// ---- q8_0: d = max|x| / 127, q = round(x / d) (half away from zero).
void quantizeQ8_0(const float* x, char* o)
{
    float amax = 0.0f;
    for (int64_t j = 0; j < kQK; ++j)
        amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    putHalf(o, d);
    for (int64_t j = 0; j < kQK; ++j)
        o[2 + j] = static_cast<char>(static_cast<int8_t>(std::roundf(x[j] * id)));
}

// ---- q5_0: d = (the value of largest magnitude) / -16, q = x / d + 16 in 0..31; the low
// nibbles pair value j with j + 16, the fifth bits go to a 32-bit mask.
void quantizeQ5_0(const float* x, char* o)
{
    float amax = 0.0f, max = 0.0f;
    for (int64_t j = 0; j < kQK; ++j)
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    putHalf(o, d);
    uint32_t qh = 0;
    auto* qs = reinterpret_cast<uint8_t*>(o + 6);
    for (int64_t j = 0; j < kQK / 2; ++j) {
        const uint8_t a = std::min<uint8_t>(31, uint8_t(int8_t(x[j] * id + 16.5f)));
        const uint8_t b = std::min<uint8_t>(31, uint8_t(int8_t(x[j + kQK / 2] * id + 16.5f)));
        qs[j] = uint8_t((a & 0x0f) | ((b & 0x0f) << 4));
        qh |= uint32_t((a & 0x10u) >> 4) << j;
        qh |= uint32_t((b & 0x10u) >> 4) << (j + kQK / 2);
    }
    std::memcpy(o + 2, &qh, 4);
}

// The scale and (negated) minimum of n values at levels 0..nmax that minimise the weighted
// squared error: a first guess from the range, then nstep + 1 trial scales around it, each
// with the least-squares scale and minimum for its levels (ggml's make_qkx2_quants).
float scaleAndMin(int n, int nmax, const float* x, const float* w, uint8_t* levels, float* negMin,
    uint8_t* trial, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0];
    float sumW = w[0];
    float sumX = sumW * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        sumW += w[i];
        sumX += w[i] * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        std::fill(levels, levels + n, uint8_t(0));
        *negMin = -min;
        return 0.0f;
    }
    float iscale = float(nmax) / (max - min);
    float scale = 1 / iscale;
    float bestError = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearestInt(iscale * (x[i] - min));
        levels[i] = uint8_t(std::max(0, std::min(nmax, l)));
        const float diff = scale * levels[i] + min - x[i];
        bestError += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
        float sumL = 0, sumL2 = 0, sumXL = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::max(0, std::min(nmax, nearestInt(iscale * (x[i] - min))));
            trial[i] = uint8_t(l);
            sumL += w[i] * float(l);
            sumL2 += w[i] * float(l) * float(l);
            sumXL += w[i] * float(l) * x[i];
        }
        const float det = sumW * sumL2 - sumL * sumL;
        if (det > 0) {
            float thisScale = (sumW * sumXL - sumX * sumL) / det;
            float thisMin = (sumL2 * sumX - sumL * sumXL) / det;
            if (thisMin > 0) {
                thisMin = 0;
                thisScale = sumXL / sumL2;
            }
            float error = 0;
            for (int i = 0; i < n; ++i) {
                const float diff = thisScale * trial[i] + thisMin - x[i];
                error += w[i] * (diff * diff);
            }
            if (error < bestError) {
                std::copy(trial, trial + n, levels);
                bestError = error;
                scale = thisScale;
                min = thisMin;
            }
        }
    }
    *negMin = -min;
    return scale;
}

// The symmetric scale of n values at levels -nmax..nmax-1 (stored + nmax) that minimises the
// error weighted by x^2, over 19 trial scales (ggml's make_qx_quants, rmse_type 1).
float symmetricScale(int n, int nmax, const float* x, int8_t* levels)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    if (amax < kGroupMaxEps) {
        std::fill(levels, levels + n, int8_t(0));
        return 0.0f;
    }
    auto level = [nmax](float v) { return std::max(-nmax, std::min(nmax - 1, nearestInt(v))); };
    float iscale = float(-nmax) / max;
    float sumLX = 0, sumL2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = level(iscale * x[i]);
        levels[i] = int8_t(l + nmax);
        const float w = x[i] * x[i];
        sumLX += w * x[i] * float(l);
        sumL2 += w * float(l) * float(l);
    }
    float scale = sumL2 != 0 ? sumLX / sumL2 : 0.0f;
    float best = scale * sumLX;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -(float(nmax) + 0.1f * float(is)) / max;
        sumLX = sumL2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = level(iscale * x[i]);
            const float w = x[i] * x[i];
            sumLX += w * x[i] * float(l);
            sumL2 += w * float(l) * float(l);
        }
        if (sumL2 > 0 && sumLX * sumLX > best * sumL2) {
            for (int i = 0; i < n; ++i)
                levels[i] = int8_t(nmax + level(iscale * x[i]));
            scale = sumLX / sumL2;
            best = scale * sumLX;
        }
    }
    return scale;
}

// The 6-bit scale and min of sub-block j of a q4_K super-block's 12 packed bytes.
void scaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = uint8_t((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// ---- q4_K: 8 sub-blocks of 32, each with its own scale and minimum (weighted by the
// sub-block's rms plus |x|), quantised to 6 bits against the super-block's largest.
void quantizeQ4_K(const float* x, char* o)
{
    uint8_t levels[kQK_K], trial[32];
    float weights[32], mins[8], scales[8];
    float maxScale = 0, maxMin = 0;
    for (int j = 0; j < 8; ++j) {
        const float* xs = x + 32 * j;
        float sumX2 = 0;
        for (int l = 0; l < 32; ++l)
            sumX2 += xs[l] * xs[l];
        const float av = std::sqrt(sumX2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av + std::fabs(xs[l]);
        scales[j]
            = scaleAndMin(32, 15, xs, weights, levels + 32 * j, &mins[j], trial, -1.0f, 0.1f, 20);
        maxScale = std::max(maxScale, scales[j]);
        maxMin = std::max(maxMin, mins[j]);
    }
    auto* packed = reinterpret_cast<uint8_t*>(o + 4);
    std::memset(packed, 0, 12);
    const float invScale = maxScale > 0 ? 63.0f / maxScale : 0.0f;
    const float invMin = maxMin > 0 ? 63.0f / maxMin : 0.0f;
    for (int j = 0; j < 8; ++j) {
        const uint8_t ls = std::min<uint8_t>(63, uint8_t(nearestInt(invScale * scales[j])));
        const uint8_t lm = std::min<uint8_t>(63, uint8_t(nearestInt(invMin * mins[j])));
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = uint8_t((ls & 0x0f) | ((lm & 0x0f) << 4));
            packed[j - 4] |= uint8_t((ls >> 4) << 6);
            packed[j] |= uint8_t((lm >> 4) << 6);
        }
    }
    putHalf(o, maxScale / 63.0f);
    putHalf(o + 2, maxMin / 63.0f);
    const float dAll = getHalf(o), mAll = getHalf(o + 2);
    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        scaleMinK4(j, packed, &sc, &m);
        const float d = dAll * float(sc);
        if (d == 0.0f)
            continue;
        const float dm = mAll * float(m);
        for (int i = 0; i < 32; ++i)
            levels[32 * j + i]
                = uint8_t(std::max(0, std::min(15, nearestInt((x[32 * j + i] + dm) / d))));
    }
    auto* q = reinterpret_cast<uint8_t*>(o + 16);
    for (int j = 0; j < kQK_K; j += 64, q += 32)
        for (int l = 0; l < 32; ++l)
            q[l] = uint8_t(levels[j + l] | (levels[j + l + 32] << 4));
}

// ---- q6_K: 16 sub-blocks of 16 with symmetric 6-bit levels; their scales as int8 against
// the super-block's largest.
void quantizeQ6_K(const float* x, char* o)
{
    int8_t levels[kQK_K];
    float scales[16];
    float maxScale = 0, maxAbsScale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        scales[ib] = symmetricScale(16, 32, x + 16 * ib, levels + 16 * ib);
        if (std::fabs(scales[ib]) > maxAbsScale) {
            maxAbsScale = std::fabs(scales[ib]);
            maxScale = scales[ib];
        }
    }
    std::memset(o, 0, 210);
    if (maxAbsScale < kGroupMaxEps)
        return; // all zero (d = 0)
    auto* ql = reinterpret_cast<uint8_t*>(o);
    auto* qh = reinterpret_cast<uint8_t*>(o + 128);
    auto* sc = reinterpret_cast<int8_t*>(o + 192);
    const float iscale = -128.0f / maxScale;
    putHalf(o + 208, 1 / iscale);
    for (int ib = 0; ib < 16; ++ib)
        sc[ib] = int8_t(std::min(127, nearestInt(iscale * scales[ib])));
    const float dAll = getHalf(o + 208);
    for (int j = 0; j < 16; ++j) {
        const float d = dAll * float(sc[j]);
        if (d == 0.0f)
            continue;
        for (int i = 0; i < 16; ++i)
            levels[16 * j + i]
                = int8_t(std::max(-32, std::min(31, nearestInt(x[16 * j + i] / d))) + 32);
    }
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; ++l) {
            const uint8_t a = uint8_t(levels[j + l]), b = uint8_t(levels[j + l + 32]);
            const uint8_t c = uint8_t(levels[j + l + 64]), e = uint8_t(levels[j + l + 96]);
            ql[l] = uint8_t((a & 0x0f) | ((c & 0x0f) << 4));
            ql[l + 32] = uint8_t((b & 0x0f) | ((e & 0x0f) << 4));
            qh[l] = uint8_t((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
        }
}

void dequantizeBlock(Type t, const char* o, float* y)
{
    switch (t) {
    case Q8_0: {
        const float d = getHalf(o);
        for (int j = 0; j < kQK; ++j)
            y[j] = float(int8_t(o[2 + j])) * d;
        return;
    }
    case Q5_0: {
        const float d = getHalf(o);
        uint32_t qh;
        std::memcpy(&qh, o + 2, 4);
        const auto* qs = reinterpret_cast<const uint8_t*>(o + 6);
        for (int j = 0; j < kQK / 2; ++j) {
            const int a = ((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - 16;
            const int b = ((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
            y[j] = float(a) * d;
            y[j + 16] = float(b) * d;
        }
        return;
    }
    case Q4_K: {
        const float d = getHalf(o), min = getHalf(o + 2);
        const auto* packed = reinterpret_cast<const uint8_t*>(o + 4);
        const auto* q = reinterpret_cast<const uint8_t*>(o + 16);
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, m;
            scaleMinK4(j, packed, &sc, &m);
            const float d1 = d * float(sc), m1 = min * float(m);
            scaleMinK4(j + 1, packed, &sc, &m);
            const float d2 = d * float(sc), m2 = min * float(m);
            for (int l = 0; l < 32; ++l) {
                y[32 * j + l] = d1 * float(q[l] & 0x0f) - m1;
                y[32 * j + 32 + l] = d2 * float(q[l] >> 4) - m2;
            }
        }
        return;
    }
    case Q6_K: {
        const auto* ql = reinterpret_cast<const uint8_t*>(o);
        const auto* qh = reinterpret_cast<const uint8_t*>(o + 128);
        const auto* sc = reinterpret_cast<const int8_t*>(o + 192);
        const float d = getHalf(o + 208);
        for (int n = 0; n < kQK_K; n += 128, ql += 64, qh += 32, sc += 8)
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[n + l] = d * float(sc[is]) * float(q1);
                y[n + l + 32] = d * float(sc[is + 2]) * float(q2);
                y[n + l + 64] = d * float(sc[is + 4]) * float(q3);
                y[n + l + 96] = d * float(sc[is + 6]) * float(q4);
            }
        return;
    }
    case F32:
        std::memcpy(y, o, 4);
        return;
    case F16:
        y[0] = getHalf(o);
        return;
    case BF16: {
        uint16_t h;
        std::memcpy(&h, o, 2);
        y[0] = floatOf(uint32_t(h) << 16);
        return;
    }
    }
}

} // namespace

namespace {

// Each type's name (as llama.cpp prints it), values per block and bytes per block.
struct TypeInfo {
    Type type;
    const char* name;
    int64_t values;
    int64_t bytes;
};
constexpr TypeInfo kTypes[]
    = {{F32, "f32", 1, 4}, {F16, "f16", 1, 2}, {BF16, "bf16", 1, 2}, {Q5_0, "q5_0", kQK, 22},
        {Q8_0, "q8_0", kQK, 34}, {Q4_K, "q4_K", kQK_K, 144}, {Q6_K, "q6_K", kQK_K, 210}};

const TypeInfo* infoOf(Type t)
{
    for (const auto& info : kTypes)
        if (info.type == t)
            return &info;
    return nullptr;
}

} // namespace

std::string typeName(Type t)
{
    const TypeInfo* info = infoOf(t);
    return info ? info->name : "type " + std::to_string(uint32_t(t));
}

int64_t blockValues(Type t)
{
    const TypeInfo* info = infoOf(t);
    return info ? info->values : 1;
}

int64_t blockBytes(Type t)
{
    const TypeInfo* info = infoOf(t);
    return info ? info->bytes : 0;
}

uint64_t bytesOf(Type t, int64_t numel)
{
    return uint64_t(numel / blockValues(t)) * uint64_t(blockBytes(t));
}

void quantize(Type t, const float* x, int64_t n, std::vector<char>& out)
{
    const int64_t block = blockValues(t);
    if (block == 1 || n % block != 0)
        throw std::invalid_argument("ggml quantize: " + typeName(t) + " needs a multiple of "
            + std::to_string(block) + " values, got " + std::to_string(n));
    out.resize(bytesOf(t, n));
    char* o = out.data();
    const int64_t bytes = blockBytes(t);
    for (int64_t b = 0; b < n / block; ++b, o += bytes, x += block) {
        switch (t) {
        case Q8_0:
            quantizeQ8_0(x, o);
            break;
        case Q5_0:
            quantizeQ5_0(x, o);
            break;
        case Q4_K:
            quantizeQ4_K(x, o);
            break;
        case Q6_K:
            quantizeQ6_K(x, o);
            break;
        default:
            break;
        }
    }
}

std::vector<float> dequantize(Type t, const char* data, int64_t n)
{
    const int64_t block = blockValues(t), bytes = blockBytes(t);
    if (bytes == 0 || n % block != 0)
        throw std::invalid_argument(
            "ggml dequantize: " + typeName(t) + " of " + std::to_string(n) + " values");
    std::vector<float> y(static_cast<size_t>(n));
    for (int64_t b = 0; b < n / block; ++b)
        dequantizeBlock(t, data + b * bytes, y.data() + b * block);
    return y;
}

} // namespace shard::ckpt::ggml
