// NF4 (bitsandbytes' format): the code table equals bitsandbytes' values exactly and is what its
// construction (normal quantiles, create_normal_map) gives; codes are the nearest table entry;
// the round-trip error stays within half the widest code gap times the block's absmax; two codes
// per byte, the first in the high nibble; partial and all-zero blocks.
#include <cmath>
#include <cstring>

#include <ATen/ATen.h>

#include "core/model/nf4.h"
#include "engine_test_util.h"

using namespace shard::engine;

int main()
{
    // bitsandbytes' NF4 values (csrc kernels' nf4 lookup table, create_normal_map()).
    const float bnb[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
        -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
        0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
        0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
    const auto& table = nf4::codeTable();
    T_CHECK(std::memcmp(table.data(), bnb, sizeof bnb) == 0);

    // The construction: quantiles of N(0, 1) at 8 points of linspace(offset, 0.5, 9) (positive)
    // and 7 of linspace(offset, 0.5, 8) (negative), a zero, sorted and divided by the largest.
    const double offset = 0.9677083;
    auto ppf = [](const at::Tensor& p) {
        return at::erfinv(p.to(at::kDouble) * 2 - 1) * std::sqrt(2.0);
    };
    at::Tensor pos = ppf(at::linspace(offset, 0.5, 9, at::kFloat).narrow(0, 0, 8));
    at::Tensor neg = -ppf(at::linspace(offset, 0.5, 8, at::kFloat).narrow(0, 0, 7));
    at::Tensor v
        = std::get<0>(at::cat({pos, at::zeros({1}, at::kDouble), neg}).to(at::kFloat).sort());
    v = v / v.max();
    double worst = 0;
    for (int i = 0; i < 16; ++i)
        worst = std::max(worst, std::abs(v[i].item<double>() - table[i]));
    std::printf("NF4 table vs normal-quantile construction: max |diff| %.3g\n", worst);
    T_CHECK(worst <= 1e-6);

    // Round trip of normal weights over a partial last block (130000 values = 2031.25 blocks).
    at::manual_seed(3);
    at::Tensor w = at::randn({1000, 130}, at::kFloat) * 0.02;
    const nf4::Packed q = nf4::quantize(w);
    T_CHECK(q.data.scalar_type() == at::kByte && q.data.numel() == 2032 * 32);
    T_CHECK(q.absmax.numel() == 2032);
    const at::Tensor back = nf4::dequantize(q, at::kFloat);
    T_CHECK(back.sizes() == w.sizes());
    at::Tensor padded = at::zeros({2032 * 64}, at::kFloat);
    padded.narrow(0, 0, w.numel()).copy_(w.reshape({-1}));
    at::Tensor blockMax = std::get<0>(padded.view({-1, 64}).abs().max(1));
    T_CHECK(at::equal(blockMax, q.absmax));
    at::Tensor scale = blockMax.repeat_interleave(64).narrow(0, 0, w.numel());
    at::Tensor err = (back.reshape({-1}) - w.reshape({-1})).abs() / scale;
    const double maxErr = err.max().item<double>();
    std::printf("round trip: max |error| / absmax %.4f (bound %.4f), mean %.4f\n", maxErr,
        nf4::maxRelativeError(), err.mean().item<double>());
    T_CHECK(maxErr <= nf4::maxRelativeError() * (1 + 1e-6));
    // Each value took the nearest code (brute force).
    at::Tensor normed = w.reshape({-1}) / scale;
    at::Tensor codes = at::tensor(std::vector<float>(table.begin(), table.end()), at::kFloat);
    at::Tensor nearest = (normed.unsqueeze(1) - codes.unsqueeze(0)).abs().argmin(1);
    at::Tensor expect = at::index_select(codes, 0, nearest) * scale;
    T_CHECK(at::allclose(expect, back.reshape({-1}), 0, 0));

    // Layout: codes 15 and 0 for (1, -1) in one byte, the first in the high nibble; an all-zero
    // block dequantises to zeros with absmax 0.
    at::Tensor pair = at::zeros({128}, at::kFloat);
    pair[0] = 1.0;
    pair[1] = -1.0;
    const nf4::Packed p = nf4::quantize(pair);
    T_CHECK(p.data[0].item<int>() == 0xF0);
    T_CHECK(p.data[1].item<int>() == 0x77); // two zeros: code 7 each
    T_CHECK(p.absmax[1].item<float>() == 0.0f);
    T_CHECK(at::equal(nf4::dequantize(p, at::kFloat), pair));
    T_CHECK(nf4::dequantize(p, at::kBFloat16).scalar_type() == at::kBFloat16);
    return shard::test::finish("tst_nf4");
}
