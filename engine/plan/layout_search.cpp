// Layout search and Megatron-LM's memory formula (see layout_search.h).
#include "plan/layout_search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "plan/run_spec_bridge.h"

namespace shard::plan {

namespace {

std::vector<int64_t> divisors(int64_t n)
{
    std::vector<int64_t> d;
    for (int64_t i = 1; i <= n; ++i)
        if (n % i == 0)
            d.push_back(i);
    return d;
}

std::string thousands(double tokensPerSec)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0fK", tokensPerSec / 1000.0);
    return buf;
}

} // namespace

std::string LayoutCandidate::name() const
{
    return "DP " + std::to_string(dp) + " x TP " + std::to_string(tp) + " x PP "
        + std::to_string(pp);
}

LayoutRecommendation recommendLayout(const PlanInput& given)
{
    PlanInput base = given;
    base.tp = 1;
    base.pp = 1;
    base.virtualStages = 1; // the search compares 1F1B layouts
    base.sequenceParallel = false;
    validate(base);
    LayoutRecommendation rec;
    rec.gpus = given.worldSize();
    // The given layout's global batch (a layout that does not divide the GPUs: all of them data
    // parallel).
    const int64_t modelParallel = std::max<int64_t>(1, given.tp * given.pp);
    const int64_t givenDp = rec.gpus % modelParallel == 0 ? rec.gpus / modelParallel : rec.gpus;
    rec.globalBatch = given.microBatch * given.gradAccum * givenDp;
    for (int64_t tp : divisors(given.gpusPerNode)) {
        if (rec.gpus % tp != 0)
            continue;
        for (int64_t pp : divisors(rec.gpus / tp)) {
            LayoutCandidate c;
            c.tp = tp;
            c.pp = pp;
            c.dp = rec.gpus / (tp * pp);
            const int64_t perStep = given.microBatch * c.dp;
            if (rec.globalBatch % perStep != 0) {
                c.refused = "the global batch of " + std::to_string(rec.globalBatch)
                    + " sequences does not split into micro-batches of "
                    + std::to_string(given.microBatch) + " over " + std::to_string(c.dp)
                    + " data-parallel copies";
                rec.candidates.push_back(std::move(c));
                continue;
            }
            c.gradAccum = rec.globalBatch / perStep;
            PlanInput x = given;
            x.tp = tp;
            x.pp = pp;
            x.gradAccum = c.gradAccum;
            // Tensor-parallel layouts with sequence parallel where the model allows it, as
            // Megatron-LM and torchtitan run them.
            x.sequenceParallel = tp > 1 && whyNoSequenceParallel(x.model, tp, x.seqLen).empty();
            // The accounting that models tensor and pipeline parallelism, for every layout, so
            // they compare alike.
            x.mode = AccountingMode::ZeroPaper;
            if (x.strategy == Strategy::Hybrid && c.dp % std::max<int64_t>(1, x.shardGroup) != 0)
                x.shardGroup = c.dp;
            try {
                c.plan = plan(x);
            } catch (const std::exception& e) {
                c.refused = e.what();
            }
            rec.candidates.push_back(std::move(c));
        }
    }
    const LayoutCandidate* dataOnly = nullptr;
    for (const auto& c : rec.candidates)
        if (c.tp == 1 && c.pp == 1)
            dataOnly = &c;
    // The fastest that fits; among those within 1% of it, the fewest GPUs per model copy
    // (tp x pp: fewer blocking collectives, a shorter pipeline), then the smaller tp.
    double fastest = 0;
    for (const auto& c : rec.candidates)
        if (c.fits())
            fastest = std::max(fastest, c.plan->tokensPerSecond);
    for (int i = 0; i < static_cast<int>(rec.candidates.size()); ++i) {
        const LayoutCandidate& c = rec.candidates[size_t(i)];
        if (!c.fits() || c.plan->tokensPerSecond * 1.01 < fastest)
            continue;
        const LayoutCandidate* b = rec.best < 0 ? nullptr : &rec.candidates[size_t(rec.best)];
        if (!b || c.tp * c.pp < b->tp * b->pp || (c.tp * c.pp == b->tp * b->pp && c.tp < b->tp))
            rec.best = i;
    }
    if (rec.best < 0) {
        const LayoutCandidate* closest = nullptr;
        for (const auto& c : rec.candidates)
            if (c.plan
                && (!closest || c.plan->perDevice.total() < closest->plan->perDevice.total()))
                closest = &c;
        rec.reason = "no layout of " + std::to_string(rec.gpus)
            + (rec.gpus == 1 ? " GPU fits" : " GPUs fits");
        if (closest)
            rec.reason += ": the smallest, " + closest->name() + ", needs "
                + formatGiB(closest->plan->perDevice.total()) + " a GPU of "
                + formatGiB(closest->plan->capacityBytes)
                + "; use more GPUs, full checkpointing, or a sharding strategy (zero3)";
        return rec;
    }
    const LayoutCandidate& b = rec.candidates[size_t(rec.best)];
    const LayoutCandidate* second = nullptr; // the fastest other layout that fits
    for (const auto& c : rec.candidates)
        if (&c != &b && c.fits()
            && (!second || c.plan->tokensPerSecond > second->plan->tokensPerSecond))
            second = &c;
    rec.reason = b.name() + " fits (" + formatGiB(b.plan->perDevice.total()) + " of "
        + formatGiB(b.plan->capacityBytes) + " a GPU) and ";
    if (second && second->plan->tokensPerSecond > b.plan->tokensPerSecond)
        rec.reason += "is within 1% of the fastest layout that does ("
            + thousands(b.plan->tokensPerSecond) + " tokens/s against " + second->name() + "'s "
            + thousands(second->plan->tokensPerSecond) + ") with fewer GPUs per model copy";
    else
        rec.reason += "is the fastest layout that does: " + thousands(b.plan->tokensPerSecond)
            + " tokens/s"
            + (second
                    ? "; next " + second->name() + " at " + thousands(second->plan->tokensPerSecond)
                    : std::string());
    if (dataOnly && dataOnly != &b && dataOnly->plan && !dataOnly->fits())
        rec.reason += "; data parallelism alone (" + dataOnly->name() + ") needs "
            + formatGiB(dataOnly->plan->perDevice.total()) + " a GPU";
    if (b.plan->input.sequenceParallel)
        rec.reason += "; tensor parallel with sequence parallel (--sequence-parallel)";
    if (b.pp > 1)
        rec.reason += "; its pipeline idles "
            + std::to_string(static_cast<int>(b.plan->bubbleFraction * 100.0 + 0.5)) + "% at "
            + std::to_string(b.gradAccum) + " micro-batches";
    return rec;
}

MegatronMemory megatronTheoreticalMemory(const PlanInput& in, bool distributedOptimizer)
{
    const ModelSpec& s = in.model;
    const double L = double(s.numLayers), h = double(s.hiddenSize),
                 ffn = double(s.intermediateSize);
    const double heads = double(s.numHeads), groups = double(s.numKvHeads);
    const double tp = double(in.tp), pp = double(in.pp);
    const double dp = double(in.worldSize()) / (tp * pp);
    // --make-vocab-size-divisible-by 128, times tp (Megatron's vocab_size_with_padding).
    const int64_t multiple = 128 * in.tp;
    const double vocab = double((s.vocabSize + multiple - 1) / multiple * multiple);
    const double queryRatio = double(s.numHeads * s.headDim) / h;
    const double gated = 1.5; // SwiGLU: gate, up and down
    const double layers = 2.0 * L * h * h
        * ((1.0 + groups / heads) * queryRatio + (ffn / h) * gated + 2.0 / h + 1.0 / (L * h));
    const double embedding = h * vocab;
    const bool untied = !s.tieWordEmbeddings;
    MegatronMemory m;
    m.parameters = layers + (untied ? 2.0 : 1.0) * embedding;
    m.mostLoadedShard = (layers / pp + embedding) / tp;
    if (untied && in.pp == 1)
        m.mostLoadedShard += embedding / tp;
    m.bytesPerParameter = distributedOptimizer ? 6.0 + 12.0 / dp : 18.0;
    m.weightAndOptimizerBytes = m.mostLoadedShard * m.bytesPerParameter;

    const double sbh = double(in.seqLen) * double(in.microBatch) * h;
    const double sb = double(in.seqLen) * double(in.microBatch);
    double act = sbh * (18.0 + 4.0 * ffn / h) * L;
    act += 8.0 * sb * pp; // the embedding's input, pp micro-batches in flight
    act += sbh * pp;      // the embedding's dropout
    if (in.pp > 1)
        act *= std::min(1.0, double(in.gradAccum) / pp);
    else
        act += sbh * 4.0 * (1.0 + vocab / h); // the output layer's input and the loss
    m.activationBytes = act / tp;
    return m;
}

} // namespace shard::plan
