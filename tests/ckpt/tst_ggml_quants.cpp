// The engine's ggml block quantisers (engine/ckpt/ggml_quants.h) against llama.cpp's own,
// loaded from node-llama-cpp's prebuilt libggml-base.so: for q8_0, q5_0, q4_K and q6_K, the
// bytes the engine writes equal the bytes llama.cpp's reference quantiser writes for the same
// float32 values, and the engine reads llama.cpp's bytes back to the values llama.cpp does.
// The values cover what trips a quantiser: Gaussian weights at the scales of real layers, a
// zero block, a constant block, one outlier, all-positive and all-negative blocks, values
// whose fp16 scales are subnormal, and large values. Without the library (fixtures not fetched)
// the comparison is skipped with a message; the round-trip error bounds still run.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "ckpt_test_util.h"
#include "llama_cpp_ggml.h"

using namespace ckpt_test;
namespace ggml = shard::ckpt::ggml;

namespace {

// 64 super-blocks (16384 values) of the cases above.
std::vector<float> testValues()
{
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x;
    const auto block = [&](auto fill) {
        for (int i = 0; i < 256; ++i)
            x.push_back(fill(i));
    };
    for (float scale : {0.02f, 0.006f, 0.1f, 1.0f})
        for (int rep = 0; rep < 8; ++rep)
            block([&](int) { return scale * normal(rng); });
    block([](int) { return 0.0f; });
    block([](int) { return 0.37f; });
    block([](int) { return -1.25f; });
    block([&](int i) { return i == 77 ? 3.0f : 0.01f * normal(rng); });
    block([&](int) { return std::fabs(0.05f * normal(rng)); });
    block([&](int) { return -std::fabs(0.05f * normal(rng)); });
    block([&](int) { return 2e-6f * normal(rng); });  // fp16 scales are subnormal
    block([&](int) { return 1e-9f * normal(rng); });  // below fp16: scales round to zero
    block([&](int) { return 300.0f * normal(rng); }); // large
    block([&](int i) { return i < 128 ? 0.0f : 0.02f * normal(rng); }); // half empty
    block([&](int i) { return i % 32 == 0 ? 0.5f : 0.0f; });            // sparse
    while (x.size() < 64 * 256)
        block([&](int) { return 0.03f * normal(rng) + 0.01f; });
    return x;
}

// Largest |a - b| over the values, relative to the block's largest |x| (the error a format
// promises is relative to its block's range).
double worstRelativeError(const std::vector<float>& x, const std::vector<float>& y, int64_t block)
{
    double worst = 0;
    for (size_t b = 0; b < x.size(); b += size_t(block)) {
        double amax = 0, err = 0;
        for (size_t i = b; i < b + size_t(block); ++i) {
            amax = std::max(amax, double(std::fabs(x[i])));
            err = std::max(err, double(std::fabs(x[i] - y[i])));
        }
        if (amax > 1e-3) // tiny blocks are dominated by fp16's resolution of the scale
            worst = std::max(worst, err / amax);
    }
    return worst;
}

} // namespace

int main()
{
    const std::vector<float> x = testValues();
    const int64_t n = int64_t(x.size());
    const LlamaCppGgml llama(std::string(SHARD_SOURCE_DIR) + "/third_party/npm");
    if (!llama.ok())
        std::printf("SKIP the byte comparison with llama.cpp: %s was not found or lacks the "
                    "quantisers (scripts/fetch-fixtures.sh fetches node-llama-cpp)\n",
            llama.path.c_str());

    // Round-trip bounds of each format, relative to the block's largest |x|: half a level plus
    // the scales' own rounding. q8_0 1/254; q5_0 1/16 (its levels run -16..15 of max/16, so the
    // largest value of the sign opposite to the block's extreme loses a whole level); q4_K half
    // of 1/15 of a sub-block's range (at most twice the largest |x|) plus the 6-bit scale;
    // q6_K 1/64 of a 16-value sub-block's extreme plus the 8-bit scale.
    const std::vector<std::pair<ggml::Type, double>> bounds
        = {{ggml::Q8_0, 0.005}, {ggml::Q5_0, 0.065}, {ggml::Q4_K, 0.14}, {ggml::Q6_K, 0.03}};
    for (const auto& [type, bound] : bounds) {
        std::vector<char> ours;
        ggml::quantize(type, x.data(), n, ours);
        CHECK(ours.size() == ggml::bytesOf(type, n));
        const std::vector<float> back = ggml::dequantize(type, ours.data(), n);
        const double err = worstRelativeError(x, back, ggml::blockValues(type));
        std::printf("%s: %zu bytes (%.3f bits a value), worst error %.4f of the block's max\n",
            ggml::typeName(type).c_str(), ours.size(), 8.0 * double(ours.size()) / double(n), err);
        CHECK(err < bound);
        if (!llama.ok())
            continue;
        const std::vector<char> theirs = llama.quantize(type, x.data(), n);
        size_t firstDiff = ours.size();
        for (size_t i = 0; i < ours.size(); ++i)
            if (ours[i] != theirs[i]) {
                firstDiff = i;
                break;
            }
        if (firstDiff != ours.size())
            std::fprintf(stderr, "%s: first byte that differs from llama.cpp's: %zu (block %lld)\n",
                ggml::typeName(type).c_str(), firstDiff,
                static_cast<long long>(int64_t(firstDiff) / ggml::blockBytes(type)));
        CHECK(firstDiff == ours.size());
        const std::vector<float> theirsBack = llama.dequantize(type, theirs.data(), n);
        const std::vector<float> oursOfTheirs = ggml::dequantize(type, theirs.data(), n);
        CHECK(std::memcmp(theirsBack.data(), oursOfTheirs.data(), size_t(n) * 4) == 0);
    }

    // Whole blocks only.
    std::vector<char> out;
    CHECK_THROWS_WITH(
        [&] { ggml::quantize(ggml::Q4_K, x.data(), 300, out); }, "q4_K", "multiple of 256", "300");
    return finish("ggml quants");
}
