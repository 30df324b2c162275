// Preference tuning (DPO, IPO, cDPO, ORPO): the loss and the gradient of the engine's pieces
// (the chunked per-token log-probabilities and their recomputing backward, the objective's
// arithmetic) against an independent float64 implementation written here from the papers'
// formulas (log_softmax over whole logits, the losses spelled out), full and LoRA, with the
// reference as the base with its adapters off; preference data in TRL's forms (text,
// conversational, implicit prompt), the truncation policy and bad pairs; training through
// shard-worker: step 1's DPO loss is exactly ln 2 with zero rewards on every strategy, zero3 at
// 2 and 4 ranks, tensor parallel 2 (with and without sequence parallel, and under zero3 DP2),
// pipeline parallel 2 (1F1B, interleaved, under zero3 DP2 and under TP2; LoRA with its live
// reference through the stages) and ORPO at TP2 and PP2 equal 1 rank over 6 steps, a resumed
// run with a precomputed reference continues exactly (1 rank and PP2), a tiny model learns to
// prefer the chosen answers; refusals with their fixes.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "core/model/chunked_loss.h"
#include "core/model/llama_model.h"
#include "core/model/lora.h"
#include "core/train/preference.h"
#include "core/train/trainer.h"
#include "data/data_loader.h"
#include "data/sample_builder.h"
#include "engine_test_util.h"
#include "tiny_run_inputs.h"
#include "tokenizer/tokenizer.h"

using namespace shard;
using namespace shard::engine;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string g_dir;

plan::ModelSpec tinySpec()
{
    return test::tinyFp32Spec("preference-test");
}

double maxRel(const at::Tensor& a, const at::Tensor& b)
{
    return test::maxRelDiff(a, b);
}

// ---- The independent float64 reference ----------------------------------------------------

// Each row's summed log-probability of its next-token labels: the model's logits (head) through
// log_softmax, gathered, masked.
at::Tensor referenceSequenceLogps(const LlamaModel& m,
    const std::vector<std::vector<at::Tensor>>& units, const at::Tensor& ids,
    const at::Tensor& labels)
{
    const RopeTables rope = m.rope(ids.size(1), at::kDouble);
    at::Tensor x = m.embed(units[0], ids);
    for (size_t u = 1; u < units.size(); ++u)
        x = m.block(units[u], x, rope);
    const at::Tensor logits = m.head(units[0], x); // (B, S, V)
    const int64_t S = ids.size(1);
    const at::Tensor logp = at::log_softmax(logits.narrow(1, 0, S - 1), -1);
    const at::Tensor target = labels.narrow(1, 1, S - 1);
    const at::Tensor valid = target.ne(-100);
    const at::Tensor picked
        = logp.gather(2, at::where(valid, target, at::zeros_like(target)).unsqueeze(2)).squeeze(2);
    return (picked * valid.to(at::kDouble)).sum(1);
}

double logSigmoid(double t)
{
    return t >= 0 ? -std::log1p(std::exp(-t)) : t - std::log1p(std::exp(t));
}

// The objective written out per pair from the papers (and TRL's choices: IPO and ORPO on mean
// token log-probabilities; ORPO's NLL the mean over every chosen token of the batch). Returns the
// batch loss as a differentiable tensor built from the per-pair sums.
at::Tensor referenceLoss(const std::string& kind, double beta, double smoothing,
    const at::Tensor& seq, const std::vector<double>& counts, const std::vector<double>& ref,
    double nllWeight = 0.0)
{
    const int64_t P = seq.size(0) / 2;
    at::Tensor total = at::zeros({}, at::kDouble);
    double chosenTokens = 0;
    for (int64_t i = 0; i < P; ++i)
        chosenTokens += counts[2 * i];
    for (int64_t i = 0; i < P; ++i) {
        const at::Tensor c = seq[2 * i], r = seq[2 * i + 1];
        const double nc = counts[2 * i], nr = counts[2 * i + 1];
        if (kind == "sigmoid" || kind == "ipo") {
            if (kind == "sigmoid") {
                const at::Tensor z = (c - r) - (ref[2 * i] - ref[2 * i + 1]);
                // -(1 - e) log s(b z) - e log s(-b z), with log s(t) = -log(1 + e^-t)
                total = total + (1 - smoothing) * at::log1p(at::exp(-beta * z))
                    + smoothing * at::log1p(at::exp(beta * z));
            } else {
                const at::Tensor z = (c / nc - r / nr) - (ref[2 * i] / nc - ref[2 * i + 1] / nr);
                total = total + (z - 1.0 / (2.0 * beta)) * (z - 1.0 / (2.0 * beta));
            }
            // RPO: the chosen answers' NLL per token over the batch, weighted.
            total = total + nllWeight * (-c) / chosenTokens * static_cast<double>(P);
        } else { // orpo
            const at::Tensor ac = c / nc, ar = r / nr;
            const at::Tensor odds
                = (ac - ar) - (at::log(1.0 - at::exp(ac)) - at::log(1.0 - at::exp(ar)));
            total = total + beta * at::log1p(at::exp(-odds)); // -lambda log s(odds)
            total = total + (-c) / chosenTokens * static_cast<double>(P);
        }
    }
    return total / static_cast<double>(P);
}

// ---- Loss and gradient against the reference -----------------------------------------------

struct Case {
    std::string objective; // dpo, orpo
    std::string loss;      // sigmoid, ipo (dpo)
    double beta;
    double smoothing;
    bool lora;
    double nllWeight = 0.0; // DPO's --dpo-nll-weight
};

void testAgainstReference(const Case& c)
{
    const plan::ModelSpec spec = tinySpec();
    LlamaModel m(spec);
    lora::LoraConfig lc;
    lc.rank = 3;
    lc.alpha = 6;
    lc.targets = lora::parseTargets("q,v,up");
    if (c.lora)
        lora::attach(m, lc);
    at::manual_seed(21);
    // The engine's leaves and the reference's copies of the same float64 values.
    std::vector<std::vector<at::Tensor>> mine(static_cast<size_t>(m.numUnits()));
    std::vector<std::vector<at::Tensor>> theirs(mine.size());
    std::vector<std::vector<at::Tensor>> baseOnly(mine.size()); // the base, for the reference
    for (int u = 0; u < m.numUnits(); ++u)
        for (const Param& p : m.unit(u).params) {
            at::Tensor v;
            if (lora::isAdapterName(p.info.name))
                v = lora::isAdapterA(p.info.name) ? lora::initialValue(p, 3)
                                                  : at::randn(p.info.shape, at::kFloat) * 0.05;
            else
                v = LlamaModel::initialValue(p, 5) * 3.0; // larger weights: sharper predictions
            v = v.to(at::kDouble);
            mine[u].push_back(v.clone().requires_grad_(!p.frozen));
            theirs[u].push_back(v.clone().requires_grad_(!p.frozen));
            if (!lora::isAdapterName(p.info.name))
                baseOnly[u].push_back(v.clone());
        }
    // 3 pairs, 14 tokens: a shared prompt of 4 + k tokens masked, answers differing.
    const int64_t P = 3, S = 14;
    at::Tensor ids = at::randint(0, spec.vocabSize, {2 * P, S}, at::kLong);
    at::Tensor labels = ids.clone();
    for (int64_t i = 0; i < P; ++i) {
        const int64_t prompt = 4 + i;
        ids[2 * i + 1].narrow(0, 0, prompt).copy_(ids[2 * i].narrow(0, 0, prompt));
        for (int64_t r : {2 * i, 2 * i + 1})
            labels[r].narrow(0, 0, prompt).fill_(-100);
        labels[2 * i + 1].narrow(0, S - 1 - i, 1 + i).fill_(-100); // rejected shorter: padding
    }
    std::vector<double> counts;
    for (int64_t r = 0; r < 2 * P; ++r)
        counts.push_back(labels[r].narrow(0, 1, S - 1).ne(-100).sum().item<double>());

    // The engine: its forward pieces, the chunked log-probabilities with their recomputing
    // backward (chunk edges: testChunking), its objective.
    const RopeTables rope = m.rope(S, at::kDouble);
    auto trunk = [&](std::vector<std::vector<at::Tensor>>& units) {
        at::Tensor x = m.embed(units[0], ids);
        for (size_t u = 1; u < units.size(); ++u)
            x = m.block(units[u], x, rope);
        return x;
    };
    at::Tensor engineRef;
    if (c.lora) {
        // DPO's reference with LoRA: the same model, adapters off.
        at::NoGradGuard noGrad;
        lora::Adapters::Context off;
        off.off = true;
        m.adapters()->setContext(off);
        engineRef = m.headTokenLogProbs(mine[0], trunk(mine), labels).sum(1);
        m.adapters()->setContext({});
    }
    const at::Tensor seqMine = m.headTokenLogProbs(mine[0], trunk(mine), labels).sum(1);
    // The reference log-probabilities DPO compares with: the base model alone (LoRA), else the
    // policy's own values moved by a fixed amount so that z is not 0.
    std::vector<double> ref(static_cast<size_t>(2 * P));
    {
        at::NoGradGuard noGrad;
        if (c.lora) {
            LlamaModel base(spec);
            const at::Tensor baseSeq = referenceSequenceLogps(base, baseOnly, ids, labels);
            const double d = maxRel(engineRef, baseSeq);
            std::printf("  reference = base with adapters off: max rel %.3g\n", d);
            T_CHECK_MSG(d <= 1e-12, "the adapters-off forward differs from the base model");
            for (int64_t r = 0; r < 2 * P; ++r)
                ref[r] = engineRef[r].item<double>();
        } else {
            for (int64_t r = 0; r < 2 * P; ++r)
                ref[r] = seqMine[r].item<double>() + (r % 2 ? 0.7 : -0.4) * (1 + r);
        }
    }
    PreferenceConfig pc;
    pc.objective = c.objective;
    pc.dpoLoss = c.loss;
    pc.beta = c.beta;
    pc.labelSmoothing = c.smoothing;
    pc.nllWeight = c.objective == "orpo" ? 1.0 : c.nllWeight;
    const at::Tensor pairs = seqMine.view({P, 2});
    const at::Tensor cnt = at::tensor(counts, at::kDouble).view({P, 2});
    const at::Tensor refT = at::tensor(ref, at::kDouble).view({P, 2});
    PairLogProbs policy {
        pairs.select(1, 0), pairs.select(1, 1), cnt.select(1, 0), cnt.select(1, 1)};
    PairLogProbs reference {
        refT.select(1, 0), refT.select(1, 1), cnt.select(1, 0), cnt.select(1, 1)};
    PreferenceLoss pl = preferenceLoss(pc, policy, c.objective == "dpo" ? &reference : nullptr);
    at::Tensor loss = pl.losses.mean();
    if (pc.nllWeight > 0)
        loss = loss - policy.chosen.sum() * pc.nllWeight / cnt.select(1, 0).sum();
    loss.backward();

    // The reference.
    const at::Tensor seqTheirs = referenceSequenceLogps(m, theirs, ids, labels);
    const at::Tensor refLoss = referenceLoss(c.objective == "orpo" ? "orpo" : c.loss, c.beta,
        c.smoothing, seqTheirs, counts, ref, c.nllWeight);
    refLoss.backward();

    const double lossRel = std::abs(loss.item<double>() - refLoss.item<double>())
        / std::max(1e-300, std::abs(refLoss.item<double>()));
    double worst = 0;
    int compared = 0;
    for (size_t u = 0; u < mine.size(); ++u)
        for (size_t i = 0; i < mine[u].size(); ++i) {
            if (!mine[u][i].requires_grad())
                continue;
            T_CHECK(mine[u][i].grad().defined() && theirs[u][i].grad().defined());
            if (!mine[u][i].grad().defined() || !theirs[u][i].grad().defined())
                continue;
            worst = std::max(worst, maxRel(mine[u][i].grad(), theirs[u][i].grad()));
            ++compared;
        }
    std::printf("%s %s%s%s%s: loss %.9f (reference %.9f, rel %.3g), gradients max rel %.3g over %d "
                "tensors\n",
        c.objective.c_str(), c.objective == "dpo" ? c.loss.c_str() : "",
        c.smoothing > 0 ? " smoothed" : "", c.nllWeight > 0 ? " +nll" : "",
        c.lora ? " lora" : " full", loss.item<double>(), refLoss.item<double>(), lossRel, worst,
        compared);
    T_CHECK_MSG(lossRel <= 1e-10, "the preference loss differs from the float64 reference");
    T_CHECK_MSG(worst <= 1e-6, "the preference gradient differs from the float64 reference");
    T_CHECK(compared > 0);
    // Rewards: beta (pi - ref) per answer (DPO), lambda x the mean token log-probability (ORPO).
    const double c0 = seqMine[0].item<double>(), r0 = seqMine[1].item<double>();
    const double expectChosen = c.objective == "orpo" ? c.beta * c0 / counts[0]
        : c.loss == "ipo"                             ? c.beta * (c0 - ref[0]) / counts[0]
                                                      : c.beta * (c0 - ref[0]);
    const double expectRejected = c.objective == "orpo" ? c.beta * r0 / counts[1]
        : c.loss == "ipo"                               ? c.beta * (r0 - ref[1]) / counts[1]
                                                        : c.beta * (r0 - ref[1]);
    T_CHECK(std::abs(pl.stats[0][kRewardChosen].item<double>() - expectChosen) < 1e-12);
    T_CHECK(std::abs(pl.stats[0][kRewardRejected].item<double>() - expectRejected) < 1e-12);
    T_CHECK(pl.stats[0][kRewardAccuracy].item<double>() == (expectChosen > expectRejected));
}

// The chunked log-probabilities at chunk sizes that split the rows unevenly equal one chunk,
// values and gradients.
void testChunking()
{
    at::manual_seed(3);
    const at::Tensor h0 = at::randn({11, 16}, at::kDouble);
    const at::Tensor w0 = at::randn({40, 16}, at::kDouble);
    at::Tensor t = at::randint(0, 40, {11}, at::kLong);
    t[2] = -100;
    t[7] = -100;
    const at::Tensor g = at::randn({11}, at::kDouble);
    std::vector<at::Tensor> values, gh, gw;
    for (int64_t chunk : {11, 4, 1}) {
        at::Tensor h = h0.clone().requires_grad_(true);
        at::Tensor w = w0.clone().requires_grad_(true);
        at::Tensor lp = linearTokenLogProbs(h, w, t, chunk);
        (lp * g).sum().backward();
        values.push_back(lp.detach());
        gh.push_back(h.grad());
        gw.push_back(w.grad());
    }
    for (size_t k = 1; k < values.size(); ++k) {
        T_CHECK(maxRel(values[k], values[0]) < 1e-13);
        T_CHECK(maxRel(gh[k], gh[0]) < 1e-12);
        T_CHECK(maxRel(gw[k], gw[0]) < 1e-12);
    }
    T_CHECK(values[0][2].item<double>() == 0.0 && values[0][7].item<double>() == 0.0);
    // And the unchunked composition of log_softmax and gather.
    at::Tensor h = h0.clone().requires_grad_(true);
    at::Tensor w = w0.clone().requires_grad_(true);
    const at::Tensor valid = t.ne(-100);
    const at::Tensor lp = at::log_softmax(at::matmul(h, w.t()), 1)
                              .gather(1, at::where(valid, t, at::zeros_like(t)).unsqueeze(1))
                              .squeeze(1)
        * valid.to(at::kDouble);
    (lp * g).sum().backward();
    T_CHECK(maxRel(values[0], lp.detach()) < 1e-13);
    T_CHECK(maxRel(gh[0], h.grad()) < 1e-12);
    T_CHECK(maxRel(gw[0], w.grad()) < 1e-12);
}

// ---- Data --------------------------------------------------------------------------------

std::string writeLines(const std::string& name, const std::vector<json>& lines)
{
    const std::string path = g_dir + "/" + name;
    std::ofstream out(path);
    for (const auto& l : lines)
        out << l.dump() << "\n";
    return path;
}

void testData(const std::string& model)
{
    const auto tok
        = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::fromFolder(model));
    data::SampleBuilder builder(tok.get(), true);
    // Text pairs: BOS + prompt masked, the answer + EOS labelled.
    const json text = {{"prompt", "What is 2 + 2?"}, {"chosen", "4"}, {"rejected", "5"}};
    std::string why;
    T_CHECK(data::detectFormat(text, why) == data::DataFormat::Preference);
    T_CHECK(data::validateRecord(text, data::DataFormat::Preference, 0).empty());
    data::PairExample p = builder.buildPair(text);
    const std::vector<int32_t> prompt = tok->encode("What is 2 + 2?", true);
    T_CHECK(p.promptTokens == prompt.size());
    T_CHECK(std::equal(prompt.begin(), prompt.end(), p.chosen.ids.begin()));
    T_CHECK(std::equal(prompt.begin(), prompt.end(), p.rejected.ids.begin()));
    for (size_t i = 0; i < prompt.size(); ++i)
        T_CHECK(p.chosen.labels[i] == data::kIgnoreLabel); // train_on_prompt does not apply
    T_CHECK(p.chosen.ids.back() == tok->eosId() && p.chosen.labels.back() == tok->eosId());
    // Conversational with an explicit prompt, and the implicit form (shared leading turns) make
    // the same rows.
    const json user = {{"role", "user"}, {"content", "Say hi"}};
    const json sys = {{"role", "system"}, {"content", "Be brief."}};
    const json good = {{"role", "assistant"}, {"content", "hi"}};
    const json bad = {{"role", "assistant"}, {"content", "no"}};
    const json explicitPair = {{"prompt", {sys, user}}, {"chosen", {good}}, {"rejected", {bad}}};
    const json implicitPair = {{"chosen", {sys, user, good}}, {"rejected", {sys, user, bad}}};
    T_CHECK(data::validateRecord(explicitPair, data::DataFormat::Preference, 0).empty());
    T_CHECK(data::validateRecord(implicitPair, data::DataFormat::Preference, 0).empty());
    const data::PairExample e = builder.buildPair(explicitPair);
    const data::PairExample i = builder.buildPair(implicitPair);
    T_CHECK(e.chosen.ids == i.chosen.ids && e.chosen.labels == i.chosen.labels);
    T_CHECK(e.rejected.ids == i.rejected.ids && e.promptTokens == i.promptTokens);
    // Only the answer turn is labelled: its text decodes from the labelled tokens.
    std::vector<int32_t> answer;
    for (size_t k = 0; k < e.chosen.labels.size(); ++k)
        if (e.chosen.labels[k] != data::kIgnoreLabel)
            answer.push_back(e.chosen.labels[k]);
    const std::string decoded = tok->decode(answer);
    T_CHECK_MSG(decoded.rfind("hi", 0) == 0, "the labelled tokens are the answer: " + decoded);
    T_CHECK(e.promptTokens > 0 && e.chosen.labels[e.promptTokens - 1] == data::kIgnoreLabel);
    T_CHECK(e.chosen.labels[e.promptTokens] != data::kIgnoreLabel);

    // Bad pairs, each with its reason.
    const std::vector<std::pair<json, std::string>> bads = {
        {{{"prompt", "q"}, {"chosen", "a"}}, "missing \"rejected\""},
        {{{"prompt", "q"}, {"chosen", "a"}, {"rejected", "a"}}, "the same answer"},
        {{{"prompt", "q"}, {"chosen", ""}, {"rejected", "a"}}, "empty \"chosen\""},
        {{{"chosen", "a"}, {"rejected", "b"}}, "need a string \"prompt\""},
        {{{"prompt", {user}}, {"chosen", "a"}, {"rejected", {bad}}}, "both be text or both"},
        {{{"chosen", {good}}, {"rejected", {bad}}}, "share no leading turns"},
        {{{"prompt", {user}}, {"chosen", {user}}, {"rejected", {bad}}}, "end with an assistant"},
    };
    for (const auto& [record, reason] : bads) {
        const std::string got = data::validateRecord(record, data::DataFormat::Preference, 0);
        T_CHECK_MSG(got.find(reason) != std::string::npos,
            "bad pair " + record.dump() + ": got '" + got + "', want '" + reason + "'");
    }

    // Truncation: the prompt keeps its last tokens, at most max(S/2, S - longest answer); the
    // answers keep their first tokens.
    data::PairExample t;
    for (int k = 0; k < 10; ++k) {
        t.chosen.ids.push_back(k);
        t.chosen.labels.push_back(data::kIgnoreLabel);
    }
    t.rejected = t.chosen;
    for (int k = 0; k < 6; ++k) {
        t.chosen.ids.push_back(100 + k);
        t.chosen.labels.push_back(100 + k);
    }
    for (int k = 0; k < 3; ++k) {
        t.rejected.ids.push_back(200 + k);
        t.rejected.labels.push_back(200 + k);
    }
    t.promptTokens = 10;
    data::PairExample t1 = t;
    T_CHECK(data::truncatePair(t1, 12)); // longest answer 6: the prompt keeps max(6, 6) = 6
    T_CHECK(t1.promptTokens == 6 && t1.chosen.ids.size() == 12 && t1.chosen.ids.front() == 4);
    T_CHECK(t1.rejected.ids.size() == 9 && t1.rejected.ids[6] == 200);
    data::PairExample t2 = t;
    T_CHECK(data::truncatePair(t2, 8)); // the prompt keeps max(4, 2) = 4, answers 4 tokens
    T_CHECK(t2.promptTokens == 4 && t2.chosen.ids.size() == 8 && t2.chosen.ids[4] == 100);
    T_CHECK(t2.chosen.ids.back() == 103 && t2.rejected.ids.size() == 7);
    data::PairExample t3 = t;
    T_CHECK(!data::truncatePair(t3, 16));

    // The loader: two rows per record, chosen then rejected, with the record's number; bad
    // lines counted with --skip-bad-lines, refused (file:line) without; no packing; no mixing.
    const std::string pairs = writeLines("pairs.jsonl",
        {text, explicitPair, {{"prompt", "q"}, {"chosen", "a"}, {"rejected", "a"}}, implicitPair});
    data::DataConfig dc;
    dc.files = {pairs};
    dc.seqLen = 32;
    dc.shuffle = false;
    EXPECT_THROW_WITH(data::DataLoader(dc, tok), "pairs.jsonl:3", "the same answer");
    dc.skipBadLines = true;
    data::DataLoader loader(dc, tok);
    T_CHECK(loader.preference() && loader.trainRecords() == 3 && loader.badLines() == 1);
    const auto rows = loader.nextGlobalBatch(4);
    T_CHECK(rows.size() == 4 && rows[0].record == 0 && rows[1].record == 0 && rows[2].record == 1);
    T_CHECK(rows[0].inputIds.size() == 32 && rows[1].labels.size() == 32);
    EXPECT_THROW_WITH(loader.nextGlobalBatch(3), "two rows at a time");
    const auto again = loader.recordSamples(1);
    T_CHECK(again.size() == 2 && again[0].inputIds == rows[2].inputIds);
    dc.packing = true;
    EXPECT_THROW_WITH(data::DataLoader(dc, tok), "not packed");
    dc.packing = false;
    dc.files = {pairs, writeLines("sft.jsonl", {{{"text", "hello"}}})};
    EXPECT_THROW_WITH(data::DataLoader(dc, tok), "holds preference pairs", "does not");
}

// ---- Training through shard-worker ---------------------------------------------------------

test::CommandOutput worker(const std::string& args)
{
    return test::runCaptured(
        "timeout -s KILL 300 " + std::string(SHARD_WORKER) + " " + args + " 2>&1");
}

struct Metrics {
    int64_t peak = 0;        // the counting allocator's, max over records and ranks
    int64_t plannedPeak = 0; // the planner's for this run (the start event's)
    std::vector<double> loss;
    std::vector<std::map<std::string, double>> scalars;
    std::vector<double> evalAccuracy;
};

Metrics readMetrics(const std::string& run)
{
    Metrics m;
    std::ifstream in(run + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
        const json j = json::parse(line);
        m.loss.push_back(j["loss"].get<double>());
        std::map<std::string, double> s;
        if (j.contains("scalars"))
            for (auto it = j["scalars"].begin(); it != j["scalars"].end(); ++it)
                s[it.key()] = it.value().get<double>();
        if (s.count("eval/rewards/accuracies"))
            m.evalAccuracy.push_back(s["eval/rewards/accuracies"]);
        m.scalars.push_back(std::move(s));
        for (const auto& r : j["memory"])
            m.peak = std::max<int64_t>(m.peak, r.value("peak", int64_t(0)));
    }
    std::ifstream events(run + "/events.jsonl");
    while (std::getline(events, line)) {
        const json j = json::parse(line);
        if (j.value("kind", "") == "start")
            m.plannedPeak = j["data"].value("planned_peak_bytes", int64_t(0));
    }
    return m;
}

std::string g_model, g_pairs;

std::string trainArgs(const std::string& out, const std::string& extra)
{
    return "train --model " + g_model + " --data " + g_pairs + " --out " + out
        + " --seq-len 48 --schedule constant --threads 1 --seed 3 "
        + (extra.find("--lr ") == std::string::npos ? "--lr 2e-3 " : "") + extra;
}

Metrics run(const std::string& name, int ranks, const std::string& extra)
{
    const std::string out = g_dir + "/" + name;
    const std::string cmd = ranks > 1
        ? "launch --nproc-per-node " + std::to_string(ranks) + " -- " + trainArgs(out, extra)
        : trainArgs(out, extra);
    const auto r = worker(cmd);
    T_CHECK_MSG(r.code == 0, name + " failed:\n" + r.output);
    return readMetrics(out);
}

// `m` has the losses of `ref` over its 6 steps within 1e-5 relative, and its held-out reward
// accuracy.
void checkSameRun(const char* what, const Metrics& m, const Metrics& ref)
{
    T_CHECK(m.loss.size() == 6 && ref.loss.size() == 6);
    double worst = 0;
    for (size_t i = 0; i < std::min(m.loss.size(), ref.loss.size()); ++i)
        worst = std::max(worst, std::abs(m.loss[i] - ref.loss[i]) / std::abs(ref.loss[i]));
    std::printf("%s over 6 steps: max rel loss diff %.3g\n", what, worst);
    T_CHECK(worst <= 1e-5);
    T_CHECK(m.evalAccuracy == ref.evalAccuracy);
}

void testStepOne()
{
    // Step 1: the policy is the reference, so the sigmoid loss is ln 2 and every reward is 0,
    // whatever the strategy, the rank count and the reference's kind.
    const std::vector<std::pair<std::string, std::pair<int, std::string>>> runs = {
        {"s1-single", {1, "--strategy zero3 --micro-batch 4"}},
        {"s1-ddp", {2, "--strategy ddp --micro-batch 2"}},
        {"s1-zero1", {2, "--strategy zero1 --micro-batch 2"}},
        {"s1-zero2", {2, "--strategy zero2 --micro-batch 2"}},
        {"s1-hybrid", {4, "--strategy hybrid --shard-group 2 --micro-batch 1"}},
        {"s1-lora-live", {2, "--strategy zero3 --micro-batch 2 --method lora"}},
        // The live reference as a pass without gradients through the pipeline stages.
        {"s1-lora-live-pp2",
            {2, "--pipeline-parallel 2 --micro-batch 2 --grad-accum 2 --method lora"}},
        {"s1-bf16-ckpt", {1, "--micro-batch 4 --precision bf16-mixed --checkpointing full"}},
        // Full fine-tuning's live reference: a frozen copy of the model, sharded like it.
        {"s1-full-live", {2, "--strategy zero3 --micro-batch 2 --reference live"}},
        {"s1-full-live-ddp", {2, "--strategy ddp --micro-batch 2 --reference live"}},
        {"s1-full-live-bf16",
            {1, "--micro-batch 4 --reference live --precision bf16-mixed --checkpointing full"}},
    };
    for (const auto& [name, how] : runs) {
        const Metrics m = run(name, how.first, "--objective dpo --steps 2 " + how.second);
        if (m.loss.empty())
            continue;
        std::printf("%s: step-1 loss %.17g\n", name.c_str(), m.loss[0]);
        T_CHECK_MSG(
            std::abs(m.loss[0] - std::log(2.0)) < 1e-15, name + ": step-1 loss is not ln 2");
        for (const char* k : {"rewards/chosen", "rewards/rejected", "rewards/margins"})
            T_CHECK_MSG(m.scalars[0].count(k) && m.scalars[0].at(k) == 0.0,
                name + ": " + k + " is not 0 at step 1");
    }
}

void testPlan(const Metrics& dpo, const Metrics& orpo, const Metrics& dpoPp2);
void testLiveCopy(const Metrics& precomputed);

void testRanks()
{
    // zero3 at 2 and 4 ranks equals 1 rank (same global batch of 4 pairs) over 6 steps, and so
    // do ddp, tensor and pipeline parallel, offload, and ORPO at 2.
    const std::string common = "--objective dpo --steps 6 --eval-fraction 0.2 --eval-every 3 ";
    const Metrics one = run("r1", 1, common + "--strategy zero3 --micro-batch 4");
    const Metrics two = run("r2", 2, common + "--strategy zero3 --micro-batch 2");
    const Metrics four = run("r4", 4, common + "--strategy zero3 --micro-batch 1");
    const Metrics ddp = run("r2ddp", 2, common + "--strategy ddp --micro-batch 1 --grad-accum 2");
    // Tensor parallel: the sequences' log-probabilities over the vocabulary split by rows
    // (linearTokenLogProbs with a VocabShard), with and without sequence parallel, and under a
    // data-parallel copy each.
    const Metrics tp2 = run("r2tp", 2, common + "--tensor-parallel 2 --micro-batch 4");
    const Metrics sp2
        = run("r2sp", 2, common + "--tensor-parallel 2 --sequence-parallel --micro-batch 4");
    const Metrics tp2dp2
        = run("r4tp", 4, common + "--tensor-parallel 2 --strategy zero3 --micro-batch 2");
    // Pipeline parallel: the policy's sequences through the stages in the 1F1B order (two
    // micro-batches of 2 pairs), the pair loss on the last stage; plain, interleaved (two model
    // chunks a stage), under zero3 DP2 and under TP2.
    const Metrics pp2
        = run("r2pp", 2, common + "--pipeline-parallel 2 --micro-batch 2 --grad-accum 2");
    const Metrics pp2v2 = run("r2ppv", 2,
        common + "--pipeline-parallel 2 --virtual-stages 2 --micro-batch 2 --grad-accum 2");
    const Metrics pp2dp2 = run("r4pp", 4,
        common + "--pipeline-parallel 2 --strategy zero3 --micro-batch 1 --grad-accum 2");
    const Metrics tp2pp2 = run("r4tppp", 4,
        common + "--tensor-parallel 2 --pipeline-parallel 2 --micro-batch 2 --grad-accum 2");
    // Offload: the fp32 masters, gradient shards and AdamW state (and with params+optimizer the
    // compute shards) in host memory, the reference log-probabilities precomputed as for any
    // full fine-tune (SHARD_OFFLOAD_ON_CPU=1: offload's code path with host-to-host copies).
    ::setenv("SHARD_OFFLOAD_ON_CPU", "1", 1);
    const Metrics off1
        = run("r1off", 1, common + "--strategy zero3 --micro-batch 4 --offload optimizer");
    const Metrics off2
        = run("r2off", 2, common + "--strategy zero3 --micro-batch 2 --offload params+optimizer");
    ::unsetenv("SHARD_OFFLOAD_ON_CPU");
    for (const Metrics* m :
        {&two, &four, &ddp, &tp2, &sp2, &tp2dp2, &pp2, &pp2v2, &pp2dp2, &tp2pp2, &off1, &off2})
        checkSameRun("ranks vs 1 rank", *m, one);
    const Metrics o1 = run("o1", 1, "--objective orpo --steps 6 --strategy zero3 --micro-batch 4");
    const Metrics o2 = run("o2", 2, "--objective orpo --steps 6 --strategy zero3 --micro-batch 2");
    const Metrics oTp
        = run("o2tp", 2, "--objective orpo --steps 6 --tensor-parallel 2 --micro-batch 4");
    const Metrics oPp = run("o2pp", 2,
        "--objective orpo --steps 6 --pipeline-parallel 2 --micro-batch 2 --grad-accum 2");
    for (const Metrics* o : {&o2, &oTp, &oPp}) {
        T_CHECK(o1.loss.size() == 6 && o->loss.size() == 6);
        for (size_t i = 0; i < std::min(o1.loss.size(), o->loss.size()); ++i)
            T_CHECK(std::abs(o1.loss[i] - o->loss[i]) <= 1e-5 * std::abs(o1.loss[i]));
    }
    T_CHECK(!o1.scalars.empty() && o1.scalars[0].count("nll_loss") == 1);
    // DPO with the chosen answers' NLL (RPO): at step 1 the DPO part is ln 2, so the loss is
    // ln 2 + weight x the NLL it reports.
    const Metrics rpo
        = run("rpo", 1, "--objective dpo --dpo-nll-weight 0.5 --steps 1 --micro-batch 4");
    if (!rpo.scalars.empty() && rpo.scalars[0].count("nll_loss"))
        T_CHECK(
            std::abs(rpo.loss[0] - (std::log(2.0) + 0.5 * rpo.scalars[0].at("nll_loss"))) < 1e-12);
    else
        T_CHECK_MSG(false, "the DPO+NLL run reports no nll_loss");
    // LoRA's live reference (the base with its adapters off) as a pass through the stages.
    const Metrics l1 = run("l1", 1, common + "--method lora --strategy zero3 --micro-batch 4");
    const Metrics lPp = run(
        "l2pp", 2, common + "--method lora --pipeline-parallel 2 --micro-batch 2 --grad-accum 2");
    T_CHECK(l1.loss.size() == 6 && lPp.loss.size() == 6);
    for (size_t i = 0; i < std::min(l1.loss.size(), lPp.loss.size()); ++i)
        T_CHECK(std::abs(l1.loss[i] - lPp.loss[i]) <= 1e-5 * std::abs(l1.loss[i]));
    T_CHECK(lPp.evalAccuracy == l1.evalAccuracy);
    testPlan(one, o1, pp2);
    testLiveCopy(one);
}

void testLiveCopy(const Metrics& precomputed)
{
    // Full fine-tuning's live reference, a frozen copy of the model sharded like it, computes
    // the reference log-probabilities the precomputed pass computes: the same losses over 6
    // steps (1 rank with the reference precomputed against every strategy with the copy), the
    // same held-out reward accuracy.
    const std::string common
        = "--objective dpo --reference live --steps 6 --eval-fraction 0.2 --eval-every 3 ";
    const std::vector<std::tuple<std::string, int, std::string>> runs = {
        {"c1", 1, "--strategy zero3 --micro-batch 4"},
        {"c2", 2, "--strategy zero3 --micro-batch 2"},
        {"c4", 4, "--strategy zero3 --micro-batch 1"},
        {"c2ddp", 2, "--strategy ddp --micro-batch 1 --grad-accum 2"},
        {"c2z1", 2, "--strategy zero1 --micro-batch 2"},
        {"c2z2", 2, "--strategy zero2 --micro-batch 2"},
        {"c4hy", 4, "--strategy hybrid --shard-group 2 --micro-batch 1"},
        // Offload moves the trained model's state to host memory; the copy stays where it
        // computes.
        {"c2off", 2, "--strategy zero3 --micro-batch 2 --offload params+optimizer"},
    };
    Metrics one;
    for (const auto& [name, ranks, how] : runs) {
        if (how.find("--offload") != std::string::npos)
            ::setenv("SHARD_OFFLOAD_ON_CPU", "1", 1);
        const Metrics m = run(name, ranks, common + how);
        ::unsetenv("SHARD_OFFLOAD_ON_CPU");
        checkSameRun("live copy vs precomputed reference", m, precomputed);
        if (name == "c1")
            one = m;
    }
    // The planner counts the copy (fp32 here, whole on one rank): the peak grows by what the
    // plan adds, and the plan holds the peak within 5%.
    const double added = double(one.peak - precomputed.peak);
    const double planned = double(one.plannedPeak - precomputed.plannedPeak);
    std::printf("live copy: peak %.2f MiB (precomputed %.2f MiB), planned %.2f MiB (%.2f MiB); "
                "the copy adds %.2f MiB measured, %.2f MiB planned\n",
        one.peak / 1048576.0, precomputed.peak / 1048576.0, one.plannedPeak / 1048576.0,
        precomputed.plannedPeak / 1048576.0, added / 1048576.0, planned / 1048576.0);
    T_CHECK(planned > 0 && std::abs(added / planned - 1.0) <= 0.05);
    T_CHECK_MSG(
        std::abs(double(one.peak) / double(std::max<int64_t>(1, one.plannedPeak)) - 1.0) <= 0.05,
        "live copy: the planner's peak is more than 5% off the measured one");
}

void testPlan(const Metrics& dpo, const Metrics& orpo, const Metrics& dpoPp2)
{
    // The planner counts a pair as two sequences: a DPO or ORPO run's measured peak equals a
    // supervised run's with twice the micro-batch, also under pipeline parallel (each stage's
    // micro-batches in flight), and the plan holds it within 5%.
    const std::string chat = g_dir + "/chat.jsonl";
    const auto made
        = worker("make-data --task arithmetic --format chat --count 20 --seed 4 --out " + chat);
    T_CHECK_MSG(made.code == 0, made.output);
    const std::string out = g_dir + "/sft";
    const auto r = worker("train --model " + g_model + " --data " + chat + " --out " + out
        + " --seq-len 48 --schedule constant --threads 1 --seed 3 --lr 2e-3 --steps 6 "
          "--strategy zero3 --micro-batch 8");
    T_CHECK_MSG(r.code == 0, r.output);
    const Metrics sft = readMetrics(out);
    // The same under pipeline parallel: 2 stages, two micro-batches.
    const std::string outPp = g_dir + "/sft-pp2";
    const auto rPp = worker("launch --nproc-per-node 2 -- train --model " + g_model + " --data "
        + chat + " --out " + outPp
        + " --seq-len 48 --schedule constant --threads 1 --seed 3 --lr 2e-3 --steps 6 "
          "--pipeline-parallel 2 --micro-batch 4 --grad-accum 2");
    T_CHECK_MSG(rPp.code == 0, rPp.output);
    const Metrics sftPp = readMetrics(outPp);
    for (const auto& [name, m, s] :
        {std::tuple<const char*, const Metrics*, const Metrics*> {"dpo", &dpo, &sft},
            {"orpo", &orpo, &sft}, {"dpo pp2", &dpoPp2, &sftPp}}) {
        std::printf("%s: peak %.2f MiB, planned %.2f MiB (%.3f); supervised with twice the "
                    "micro-batch %.2f MiB, planned %.2f MiB\n",
            name, m->peak / 1048576.0, m->plannedPeak / 1048576.0,
            double(m->peak) / double(std::max<int64_t>(1, m->plannedPeak)), s->peak / 1048576.0,
            s->plannedPeak / 1048576.0);
        T_CHECK(m->plannedPeak == s->plannedPeak);
        T_CHECK(std::abs(double(m->peak) / double(s->peak) - 1.0) <= 0.01);
        T_CHECK_MSG(
            std::abs(double(m->peak) / double(std::max<int64_t>(1, m->plannedPeak)) - 1.0) <= 0.05,
            std::string(name) + ": the planner's peak is more than 5% off the measured one");
    }
}

void testResume()
{
    // Full DPO with the reference precomputed: a run stopped at step 3 and resumed computes the
    // reference from the weights again and continues as the uninterrupted run; at one rank and
    // at PP2, where the reference pass runs through the stages.
    const std::vector<std::pair<int, std::string>> layouts
        = {{1, "--strategy zero3 --micro-batch 4"},
            {2, "--pipeline-parallel 2 --micro-batch 2 --grad-accum 2"}};
    for (const auto& [ranks, how] : layouts) {
        const std::string base = "--objective dpo " + how + " ";
        const std::string tag = std::to_string(ranks);
        const Metrics whole = run("whole" + tag, ranks, base + "--steps 6");
        run("parts" + tag, ranks, base + "--steps 3 --checkpoint-every 3");
        const Metrics parts
            = run("parts" + tag, ranks, base + "--steps 6 --checkpoint-every 3 --resume auto");
        T_CHECK(whole.loss.size() == 6 && parts.loss.size() == 6);
        for (size_t i = 0; i < std::min(whole.loss.size(), parts.loss.size()); ++i)
            T_CHECK_MSG(whole.loss[i] == parts.loss[i], "the resumed run's loss differs: " + how);
    }
}

void testLearns()
{
    // A tiny model learns the pairs it sees: the reward accuracy on the training pairs rises
    // from 0 to above 0.9, with LoRA and with full fine-tuning.
    for (const std::string& how :
        {std::string("--method lora --lora-rank 16 --lora-targets q,k,v,o,gate,up,down --lr 5e-3"),
            std::string("--lr 2e-3")}) {
        const Metrics m = run(how.find("lora") != std::string::npos ? "learn-lora" : "learn-full",
            1, "--objective dpo --dpo-beta 0.5 --steps 40 --micro-batch 8 " + how);
        if (m.scalars.size() < 40)
            continue;
        T_CHECK(m.scalars[0].at("rewards/accuracies") == 0.0); // no reward differs at step 1
        double late = 0;
        for (size_t i = 30; i < 40; ++i)
            late += m.scalars[i].at("rewards/accuracies") / 10.0;
        std::printf("%s: reward accuracy, steps 31-40: %.3f; margin %.3f\n", how.c_str(), late,
            m.scalars.back().at("rewards/margins"));
        T_CHECK_MSG(late > 0.9, "DPO did not learn to prefer the chosen answers");
        T_CHECK(m.scalars.back().at("rewards/margins") > 0);
    }
}

void testRefusals()
{
    const auto byMethod = worker(trainArgs(g_dir + "/x1", "--method dpo --steps 1"));
    T_CHECK(byMethod.code != 0 && byMethod.output.find("--objective dpo") != std::string::npos);
    const std::string sft = test::writeCountingData(g_dir + "/sft.jsonl", 8, 512, 1);
    const auto noPairs = worker("train --model " + g_model + " --data " + sft + " --out " + g_dir
        + "/x2 --objective dpo --steps 1");
    T_CHECK(noPairs.code != 0 && noPairs.output.find("holds none") != std::string::npos);
    const auto sftOnPairs = worker(trainArgs(g_dir + "/x3", "--steps 1"));
    T_CHECK(sftOnPairs.code != 0
        && sftOnPairs.output.find("--objective dpo or --objective orpo") != std::string::npos);
    const auto packed = worker(trainArgs(g_dir + "/x4", "--objective dpo --packing --steps 1"));
    T_CHECK(packed.code != 0 && packed.output.find("drop --packing") != std::string::npos);
    // Full fine-tuning's live reference is a copy over data-parallel ranks only.
    const auto live = worker("launch --nproc-per-node 2 -- "
        + trainArgs(g_dir + "/x5",
            "--objective dpo --reference live --pipeline-parallel 2 "
            "--micro-batch 2 --grad-accum 2 --steps 1"));
    T_CHECK_MSG(live.code != 0 && live.output.find("--reference precomputed") != std::string::npos,
        live.output);
    const auto smooth = worker(
        trainArgs(g_dir + "/x6", "--objective dpo --dpo-loss ipo --dpo-label-smoothing 0.1"));
    T_CHECK(smooth.code != 0 && smooth.output.find("cDPO") != std::string::npos);
    const auto orpoRef
        = worker(trainArgs(g_dir + "/x7", "--objective orpo --reference live --steps 1"));
    T_CHECK(orpoRef.code != 0 && orpoRef.output.find("no reference model") != std::string::npos);
}

} // namespace

int main()
{
    g_dir = test::tempDir("tst_preference");
    testChunking();
    for (const Case& c :
        {Case {"dpo", "sigmoid", 0.1, 0.0, false}, Case {"dpo", "sigmoid", 0.3, 0.15, false},
            Case {"dpo", "ipo", 0.5, 0.0, false}, Case {"orpo", "", 0.2, 0.0, false},
            Case {"dpo", "sigmoid", 0.1, 0.0, true}, Case {"dpo", "ipo", 0.5, 0.0, true},
            Case {"orpo", "", 0.2, 0.0, true}, Case {"dpo", "sigmoid", 0.2, 0.0, false, 0.7},
            Case {"dpo", "sigmoid", 0.2, 0.0, true, 1.0}})
        testAgainstReference(c);
    g_model = test::writeTinyModel(g_dir + "/model", tinySpec());
    testData(g_model);
    // 20 arithmetic pairs, the right answer chosen over a wrong one (make-data's generator).
    g_pairs = g_dir + "/arith.jsonl";
    const auto made = worker(
        "make-data --task arithmetic --format preference --count 20 --seed 4 --out " + g_pairs);
    T_CHECK_MSG(made.code == 0, made.output);
    testRefusals();
    testStepOne();
    testRanks();
    testResume();
    testLearns();
    return test::finish("tst_preference");
}
