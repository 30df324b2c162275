// NF4 (bitsandbytes' format): the code table equals bitsandbytes' values exactly and is what its
// construction (normal quantiles, create_normal_map) gives; codes are the nearest table entry;
// the round-trip error stays within half the widest code gap times the block's absmax; two codes
// per byte, the first in the high nibble; partial and all-zero blocks. Double quantisation: the
// dynamic map is bitsandbytes' create_dynamic_map() (its construction, and PyTorch's values of
// it where python3-torch is installed), the absmax codes are the nearest entries, and both the
// absmax and the weights come back within the bounds the two tables imply; a tensor-parallel
// part of the codes, placed in the whole tensor's nested blocks, dequantises to the part of the
// whole weight exactly.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include <ATen/ATen.h>

#include "core/model/nf4.h"
#include "engine_test_util.h"

using namespace shard::engine;

namespace {

// The construction: for i = 0..6 the 2^i midpoints of linspace(0.1, 1, 2^i + 1) times 10^(i-6),
// each with both signs, then 0 and 1: 256 values, ascending.
void checkDynamicMap()
{
    const auto& map = nf4::dynamicMap();
    for (size_t k = 0; k + 1 < map.size(); ++k)
        T_CHECK(map[k] < map[k + 1]);
    T_CHECK(map[127] == 0.0f && map[255] == 1.0f && map[0] < -0.99f);
    for (size_t k = 0; k < 127; ++k) // the negatives mirror the positives below 1
        T_CHECK(map[k] == -map[254 - k]);
    size_t at = 128;
    for (int i = 0; i < 7; ++i) {
        const int n = 1 << i;
        for (int k = 0; k < n; ++k, ++at) {
            const double step = 0.9 / n;
            const double mid = (0.1 + step * k + 0.1 + step * (k + 1)) / 2.0;
            const double want = mid * std::pow(10.0, i - 6);
            T_CHECK(std::abs(map[at] - want) <= 4e-7 * want);
        }
    }
    T_CHECK(at == 255);

    // PyTorch's float32 values of the same construction (bitsandbytes builds the map this way in
    // PyTorch), compared bit for bit.
    const std::string script
        = "import torch\n"
          "d = []\n"
          "for i in range(7):\n"
          "    b = torch.linspace(0.1, 1, 2 ** i + 1)\n"
          "    m = (b[:-1] + b[1:]) / 2.0\n"
          "    d += (10 ** (-6 + i) * m).tolist() + (-10 ** (-6 + i) * m).tolist()\n"
          "d += [0, 1.0]\n"
          "print(' '.join(repr(v) for v in torch.tensor(d).sort()[0].tolist()))\n";
    const std::string path = shard::test::tempDir("tst_nf4") + "/dynamic_map.py";
    if (FILE* out = std::fopen(path.c_str(), "w")) {
        std::fputs(script.c_str(), out);
        std::fclose(out);
    }
    FILE* f = access("/usr/bin/python3", X_OK) == 0
        ? popen(("/usr/bin/python3 " + path + " 2>/dev/null").c_str(), "r")
        : nullptr;
    std::string out;
    char buf[4096];
    while (f && std::fgets(buf, sizeof buf, f))
        out += buf;
    if (f && pclose(f) == 0 && !out.empty()) {
        std::vector<float> torchMap;
        for (size_t pos = 0; pos < out.size();) {
            size_t used = 0;
            try {
                torchMap.push_back(static_cast<float>(std::stod(out.substr(pos), &used)));
            } catch (const std::exception&) {
                break;
            }
            pos += used;
        }
        T_CHECK(torchMap.size() == 256);
        int differ = 0;
        for (size_t k = 0; k < std::min<size_t>(256, torchMap.size()); ++k)
            differ += torchMap[k] != map[k];
        std::printf("dynamic map vs PyTorch's construction: %d of 256 values differ\n", differ);
        T_CHECK(differ == 0);
    } else {
        std::printf("SKIP the dynamic map vs PyTorch: /usr/bin/python3 with torch is not here "
                    "(apt install python3-torch)\n");
    }
}

void checkDoubleQuant()
{
    at::manual_seed(5);
    // Rows of 512 values: 8 absmax per row, 2048 in all = 8 nested blocks of 256.
    at::Tensor w = at::randn({256, 512}, at::kFloat) * 0.02;
    w.narrow(0, 7, 1).mul_(40); // an outlier row: a wide range of absmax
    const nf4::Rows plain = nf4::quantizeRows(w);
    const nf4::Rows dq = nf4::quantizeRows(w, true);
    T_CHECK(!plain.nested.defined() && dq.nested.defined());
    T_CHECK(at::equal(plain.packed, dq.packed)); // the 4-bit codes use the exact absmax
    T_CHECK(dq.absmax.scalar_type() == at::kByte && dq.absmax.sizes() == plain.absmax.sizes());
    T_CHECK(dq.nested.scale.numel() == 8);
    const float mean = plain.absmax.mean().item<float>();
    T_CHECK(dq.nested.offset == mean);

    // The absmax: nearest code of (absmax - mean) / block scale, within half the widest gap.
    at::Tensor a = plain.absmax.reshape({-1});
    at::Tensor scale = dq.nested.scale.repeat_interleave(nf4::kNestedBlockSize);
    T_CHECK(at::allclose(scale.view({8, 256}),
        std::get<0>((a - mean).view({8, 256}).abs().max(1)).unsqueeze(1).expand({8, 256}), 0, 0));
    at::Tensor back = nf4::absmaxOf(dq.absmax, dq.nested).reshape({-1});
    const double absErr = ((back - a).abs() / scale).max().item<double>();
    std::printf("double quant: max |absmax error| / block scale %.5f (bound %.5f)\n", absErr,
        nf4::maxNestedError());
    T_CHECK(absErr <= nf4::maxNestedError() + 1e-6);
    const auto& map = nf4::dynamicMap();
    at::Tensor mapT = at::tensor(std::vector<float>(map.begin(), map.end()), at::kFloat);
    at::Tensor nearest = (((a - mean) / scale).unsqueeze(1) - mapT.unsqueeze(0)).abs().argmin(1);
    T_CHECK(at::equal(nearest.to(at::kByte), dq.absmax.reshape({-1})));

    // The weights: each within the NF4 bound of its true absmax plus the absmax's error.
    at::Tensor wq = nf4::dequantizeRows(dq.packed, dq.absmax, at::kFloat, dq.nested);
    at::Tensor wp = nf4::dequantizeRows(plain.packed, plain.absmax, at::kFloat);
    at::Tensor trueA = plain.absmax.repeat_interleave(nf4::kBlockSize, 1);
    at::Tensor errA = (back.view(plain.absmax.sizes()) - plain.absmax)
                          .abs()
                          .repeat_interleave(nf4::kBlockSize, 1);
    at::Tensor excess = (wq - w).abs() - (trueA * nf4::maxRelativeError() + errA);
    T_CHECK(excess.max().item<double>() <= 1e-7);
    const double rmsPlain = (wp - w).pow(2).mean().sqrt().item<double>();
    const double rmsDq = (wq - w).pow(2).mean().sqrt().item<double>();
    std::printf("weights rms error: fp32 absmax %.3g, double-quantised %.3g (%.2f%% more)\n",
        rmsPlain, rmsDq, 100 * (rmsDq / rmsPlain - 1));
    T_CHECK(rmsDq <= rmsPlain * 1.05); // the 8-bit absmax costs little accuracy

    // Dequantized::get refills through the nested scales too.
    nf4::Dequantized copies;
    at::Tensor c = copies.get(0, dq.packed, dq.absmax, at::kFloat, dq.nested);
    T_CHECK(at::equal(c, wq));
    copies.release();
    T_CHECK(copies.bytes() == 0);
    T_CHECK(at::equal(copies.get(0, dq.packed, dq.absmax, at::kFloat, dq.nested), wq));
}

// A tensor-parallel part (rows or columns of the row form, as tp::partOf cuts it) of a
// double-quantised weight: its absmax codes with the whole tensor's nested scales, placed by
// wholeCols / firstRow / firstCol, give exactly the part of the whole weight's dequantisation.
void checkDoubleQuantParts()
{
    at::manual_seed(7);
    // [96, 384]: 6 absmax per row, 576 in all, 3 nested blocks (the last one partial).
    at::Tensor w = at::randn({96, 384}, at::kFloat) * 0.02;
    w.narrow(0, 40, 1).mul_(30);
    const nf4::Rows q = nf4::quantizeRows(w, true);
    const at::Tensor whole = nf4::dequantizeRows(q.packed, q.absmax, at::kFloat, q.nested);
    for (int64_t t : {2, 3}) {
        for (int64_t r = 0; r < t; ++r) {
            // Rows: rows [r 96/t, (r+1) 96/t) of the packed bytes and absmax codes.
            nf4::NestedScales rows = q.nested;
            rows.wholeCols = q.absmax.size(1);
            rows.firstRow = r * 96 / t;
            const at::Tensor byRows = nf4::dequantizeRows(q.packed.chunk(t, 0)[r].contiguous(),
                q.absmax.chunk(t, 0)[r].contiguous(), at::kFloat, rows);
            T_CHECK(at::equal(byRows, whole.chunk(t, 0)[r]));
            // Columns: each row's inputs [r 384/t, (r+1) 384/t), whole blocks of 64 at t 2 and 3.
            nf4::NestedScales cols = q.nested;
            cols.wholeCols = q.absmax.size(1);
            cols.firstCol = r * q.absmax.size(1) / t;
            const at::Tensor byCols = nf4::dequantizeRows(q.packed.chunk(t, 1)[r].contiguous(),
                q.absmax.chunk(t, 1)[r].contiguous(), at::kFloat, cols);
            T_CHECK(at::equal(byCols, whole.chunk(t, 1)[r]));
        }
    }
    // Read in whole-tensor order instead, a column part takes other blocks' scales.
    const at::Tensor naive = nf4::dequantizeRows(q.packed.chunk(2, 1)[1].contiguous(),
        q.absmax.chunk(2, 1)[1].contiguous(), at::kFloat, q.nested);
    T_CHECK(!at::equal(naive, whole.chunk(2, 1)[1]));
}

} // namespace

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

    checkDynamicMap();
    checkDoubleQuant();
    checkDoubleQuantParts();
    return shard::test::finish("tst_nf4");
}
