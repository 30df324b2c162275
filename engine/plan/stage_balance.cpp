// Pipeline stages balanced by compute (see stage_balance.h).
#include "plan/stage_balance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace shard::plan {

LayerCosts layerCosts(const ModelSpec& spec)
{
    const double root = static_cast<double>(spec.vocabSize) * static_cast<double>(spec.hiddenSize)
        * (spec.tieWordEmbeddings ? 1.0 : 2.0);
    LayerCosts c;
    c.head = static_cast<double>(spec.vocabSize) * static_cast<double>(spec.hiddenSize);
    c.block = std::max(0.0, static_cast<double>(activeParameterCount(spec)) - root)
        / static_cast<double>(std::max<int64_t>(spec.numLayers, 1));
    return c;
}

namespace {

// The cost of stage i of `cut`.
double costOf(const LayerCosts& c, const std::vector<std::pair<int64_t, int64_t>>& cut, size_t i)
{
    return c.block * static_cast<double>(cut[i].second - cut[i].first)
        + (i + 1 == cut.size() ? c.head : 0.0);
}

struct Score {
    double max = 0;
    double squares = 0;
};

bool better(const Score& a, const Score& b)
{
    const double tol = 1e-12 * std::max(std::abs(a.max), std::abs(b.max));
    if (a.max < b.max - tol)
        return true;
    if (a.max > b.max + tol)
        return false;
    return a.squares < b.squares * (1.0 - 1e-12);
}

Score scoreOf(const LayerCosts& c, const std::vector<std::pair<int64_t, int64_t>>& cut)
{
    Score s;
    for (size_t i = 0; i < cut.size(); ++i) {
        const double x = costOf(c, cut, i);
        s.max = std::max(s.max, x);
        s.squares += x * x;
    }
    return s;
}

} // namespace

std::vector<std::pair<int64_t, int64_t>> balancedStages(const ModelSpec& spec, int64_t stages)
{
    const int64_t L = spec.numLayers;
    if (stages < 1)
        throw std::runtime_error(
            "pipeline stages must be 1 or more (got " + std::to_string(stages) + ")");
    if (L < stages)
        throw std::runtime_error(std::to_string(stages) + " pipeline stages need at least as many "
            + "layers; the model has " + std::to_string(L));
    std::vector<std::pair<int64_t, int64_t>> even;
    for (int64_t s = 0, first = 0; s < stages; ++s) {
        const int64_t n = L / stages + (s < L % stages ? 1 : 0);
        even.push_back({first, first + n});
        first += n;
    }
    const LayerCosts c = layerCosts(spec);
    // best[s][l]: the best score of the first l layers in s stages (none of them the last);
    // from[s][l]: where stage s - 1 starts in it.
    const size_t S = static_cast<size_t>(stages), N = static_cast<size_t>(L);
    const Score none {std::numeric_limits<double>::infinity(), 0};
    std::vector<std::vector<Score>> best(S + 1, std::vector<Score>(N + 1, none));
    std::vector<std::vector<int64_t>> from(S + 1, std::vector<int64_t>(N + 1, -1));
    best[0][0] = Score {};
    for (size_t s = 1; s <= S; ++s)
        for (size_t l = s; l + (S - s) <= N; ++l)
            for (size_t k = s - 1; k < l; ++k) {
                if (!std::isfinite(best[s - 1][k].max))
                    continue;
                const double x = c.block * static_cast<double>(l - k) + (s == S ? c.head : 0.0);
                const Score cand {std::max(best[s - 1][k].max, x), best[s - 1][k].squares + x * x};
                if (from[s][l] < 0 || better(cand, best[s][l])) {
                    best[s][l] = cand;
                    from[s][l] = static_cast<int64_t>(k);
                }
            }
    std::vector<std::pair<int64_t, int64_t>> cut(S);
    for (size_t s = S, l = N; s >= 1; --s) {
        const auto k = static_cast<size_t>(from[s][l]);
        cut[s - 1] = {static_cast<int64_t>(k), static_cast<int64_t>(l)};
        l = k;
    }
    return better(scoreOf(c, cut), scoreOf(c, even)) ? cut : even;
}

double stageImbalance(const ModelSpec& spec, const std::vector<std::pair<int64_t, int64_t>>& cut)
{
    const LayerCosts c = layerCosts(spec);
    double total = 0, worst = 0;
    for (size_t i = 0; i < cut.size(); ++i) {
        const double x = costOf(c, cut, i);
        total += x;
        worst = std::max(worst, x);
    }
    return total > 0 ? worst * static_cast<double>(cut.size()) / total : 1.0;
}

} // namespace shard::plan
