// LoRA on a tiny-1m model: the adapter gradients against a float64 autograd reference that
// differentiates through merged weights W + s B A (a different computation from the engine's
// x-path); step 1's loss equals the base model's; only the adapters are trained (the base stays
// in the compute dtype, without gradients or optimizer state); dropout under activation
// checkpointing recomputes the forward's masks; the PEFT folder and the merged model written at
// the end agree in float64; a run continued from the PEFT folder (--lora-init) starts from the
// exported model's loss; bad LoRA settings are refused with the fix.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include "core/model/hf_folder.h"
#include "core/model/llama_model.h"
#include "core/model/lora.h"
#include "core/model/nf4.h"
#include "core/model/peft_folder.h"
#include "core/train/trainer.h"
#include "engine_test_util.h"
#include "tiny_run_inputs.h"
#include "tokenizer/demo_tokenizer.h"

using namespace shard;
using namespace shard::engine;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string g_dir;

plan::ModelSpec tinySpec()
{
    return test::tinyFp32Spec("lora-test");
}

std::string makeModel(const std::string& name)
{
    return test::writeTinyModel(g_dir + "/" + name, tinySpec());
}

std::string makeData(const std::string& name, int rows, int vocab, unsigned seed)
{
    return test::writeCountingData(g_dir + "/" + name, rows, vocab, seed);
}

protocol::RunSpec loraSpec(
    const std::string& model, const std::string& data, const std::string& out)
{
    protocol::RunSpec s;
    s.model = model;
    s.data = {data};
    s.outDir = out;
    s.steps = 6;
    s.microBatch = 4;
    s.seqLen = 24;
    s.lr = 1e-2;
    s.warmup = 1;
    s.threads = 1;
    s.seed = 9;
    s.method = "lora";
    s.loraRank = 4;
    s.loraAlpha = 8;
    return s;
}

TrainResult train(const protocol::RunSpec& s, bool files = false)
{
    Trainer t(s, TrainerOptions {false, files, files});
    return t.run();
}

double maxRel(const at::Tensor& a, const at::Tensor& b)
{
    return test::maxRelDiff(a, b);
}

// Loss of a float64 forward with the given unit weights (the model's own pieces).
at::Tensor lossOf(const LlamaModel& m, const std::vector<std::vector<at::Tensor>>& units,
    const at::Tensor& ids, const at::Tensor& labels)
{
    const RopeTables rope = m.rope(ids.size(1), at::kDouble);
    at::Tensor x = m.embed(units[0], ids);
    for (size_t u = 1; u < units.size(); ++u)
        x = m.block(units[u], x, rope);
    LossSum ls = nextTokenLossSum(m.head(units[0], x), labels);
    return ls.sum / static_cast<double>(ls.tokens);
}

void testGradients()
{
    // Every target, rank 3, rsLoRA scaling; B random so that A's gradient is not zero.
    lora::LoraConfig cfg;
    cfg.rank = 3;
    cfg.alpha = 5;
    cfg.rslora = true;
    cfg.targets = lora::parseTargets("q,k,v,o,gate,up,down");
    LlamaModel m(tinySpec());
    lora::attach(m, cfg);
    T_CHECK(m.numTrainableParams() > 0 && m.numTrainableParams() < m.numParams() / 4);
    at::manual_seed(11);
    std::vector<std::vector<at::Tensor>> units(static_cast<size_t>(m.numUnits()));
    std::vector<at::Tensor> adapters;
    for (int u = 0; u < m.numUnits(); ++u)
        for (const Param& p : m.unit(u).params) {
            at::Tensor v;
            if (lora::isAdapterName(p.info.name))
                v = lora::isAdapterA(p.info.name) ? lora::initialValue(p, 3)
                                                  : at::randn(p.info.shape, at::kFloat) * 0.05;
            else
                v = LlamaModel::initialValue(p, 5);
            v = v.to(at::kDouble).requires_grad_(!p.frozen);
            units[static_cast<size_t>(u)].push_back(v);
            if (!p.frozen)
                adapters.push_back(v);
        }
    const at::Tensor ids = at::randint(0, 512, {2, 12}, at::kLong);
    at::Tensor loss = lossOf(m, units, ids, ids);
    loss.backward();

    // Reference: no adapters in the forward; the weights it sees are W + s B A, built from
    // copies of the same A and B inside autograd.
    LlamaModel ref(tinySpec());
    const double s = cfg.scale();
    std::vector<std::vector<at::Tensor>> refUnits(static_cast<size_t>(ref.numUnits()));
    std::vector<std::pair<at::Tensor, at::Tensor>> refAdapters; // (engine leaf, reference leaf)
    for (int u = 0; u < ref.numUnits(); ++u) {
        const auto& mine = m.unit(u).params;
        for (size_t i = 0; i < ref.unit(u).params.size(); ++i) {
            const std::string& name = ref.unit(u).params[i].info.name;
            at::Tensor w = units[static_cast<size_t>(u)][i].detach();
            const std::string stem = name.substr(0, name.size() - 7);
            int ia = -1, ib = -1;
            for (size_t j = 0; j < mine.size(); ++j) {
                if (mine[j].info.name == stem + ".lora_A.weight")
                    ia = static_cast<int>(j);
                if (mine[j].info.name == stem + ".lora_B.weight")
                    ib = static_cast<int>(j);
            }
            if (ia >= 0 && ib >= 0) {
                at::Tensor a = units[static_cast<size_t>(u)][ia];
                at::Tensor b = units[static_cast<size_t>(u)][ib];
                at::Tensor ra = a.detach().clone().requires_grad_(true);
                at::Tensor rb = b.detach().clone().requires_grad_(true);
                refAdapters.push_back({a, ra});
                refAdapters.push_back({b, rb});
                w = w + at::matmul(rb, ra) * s;
            }
            refUnits[static_cast<size_t>(u)].push_back(w);
        }
    }
    at::Tensor refLoss = lossOf(ref, refUnits, ids, ids);
    refLoss.backward();
    T_CHECK(refAdapters.size() == adapters.size());
    double worst = 0;
    for (const auto& [mine, theirs] : refAdapters) {
        T_CHECK(mine.grad().defined() && theirs.grad().defined());
        if (mine.grad().defined() && theirs.grad().defined())
            worst = std::max(worst, maxRel(mine.grad(), theirs.grad()));
    }
    std::printf("adapter gradients vs float64 merged-weight reference: max rel %.3g (%zu "
                "tensors), loss diff %.3g\n",
        worst, refAdapters.size(), std::abs(loss.item<double>() - refLoss.item<double>()));
    T_CHECK_MSG(worst <= 1e-6, "LoRA gradients differ from the float64 reference");
    // The base weights got no gradient.
    for (int u = 0; u < m.numUnits(); ++u)
        for (size_t i = 0; i < m.unit(u).params.size(); ++i)
            if (m.unit(u).params[i].frozen)
                T_CHECK(!units[static_cast<size_t>(u)][i].grad().defined());
}

void testTraining(const std::string& model, const std::string& data)
{
    // Step 1: B = 0, so the loss is the base model's, bit for bit.
    auto full = loraSpec(model, data, g_dir + "/full");
    full.method = "full";
    full.steps = 1;
    const TrainResult base = train(full);
    auto one = loraSpec(model, data, g_dir + "/one");
    one.steps = 1;
    const TrainResult first = train(one);
    std::printf("step-1 loss: base %.17g, LoRA %.17g\n", base.losses.at(0), first.losses.at(0));
    T_CHECK_MSG(base.losses.at(0) == first.losses.at(0), "step-1 LoRA loss != base loss");

    // Training: only adapters are optimizer targets; the base stays bf16 under bf16-mixed, with
    // no gradient; the loss goes down.
    auto mixed = loraSpec(model, data, g_dir + "/mixed");
    mixed.precision = "bf16-mixed";
    mixed.loraTargets = "q,v,down";
    Trainer t(mixed, TrainerOptions {false, false, false});
    const TrainResult r = t.run();
    const auto targets = t.strategy().optimizerTargets();
    const int layers = static_cast<int>(t.model().spec().numLayers);
    T_CHECK(static_cast<int>(targets.size()) == layers * 3 * 2);
    for (const auto& tg : targets)
        T_CHECK_MSG(lora::isAdapterName(tg.name), "optimizer target " + tg.name);
    const Param& q = t.model().param("model.layers.0.self_attn.q_proj.weight");
    T_CHECK(q.frozen && q.value.scalar_type() == at::kBFloat16 && !q.value.requires_grad());
    const Param& a = t.model().param("model.layers.0.self_attn.v_proj.lora_A.weight");
    T_CHECK(!a.frozen && a.value.scalar_type() == at::kFloat);
    T_CHECK(t.strategy().memory().frozenParams > 0);
    std::printf("bf16-mixed LoRA (q,v,down): loss %.4f -> %.4f, %lld trained of %lld\n",
        r.losses.front(), r.losses.back(), static_cast<long long>(t.model().numTrainableParams()),
        static_cast<long long>(t.model().numParams()));
    T_CHECK(r.losses.back() < r.losses.front());

    // Dropout: checkpointing recomputes with the forward's masks (same losses), and dropout
    // changes the run (it is applied).
    auto drop = loraSpec(model, data, g_dir + "/drop");
    drop.loraDropout = 0.2;
    const TrainResult d1 = train(drop);
    drop.checkpointing = "full";
    const TrainResult d2 = train(drop);
    auto noDrop = loraSpec(model, data, g_dir + "/nodrop");
    const TrainResult d0 = train(noDrop);
    for (size_t i = 0; i < d1.losses.size(); ++i)
        T_CHECK_MSG(std::abs(d1.losses[i] - d2.losses[i]) <= 1e-6 * std::abs(d1.losses[i]),
            "dropout masks differ between the forward and the checkpointing recompute");
    T_CHECK(d1.losses.back() != d0.losses.back());
}

void testExport(const std::string& model, const std::string& data)
{
    auto s = loraSpec(model, data, g_dir + "/export");
    s.loraTargets = "q,k,v,o,gate,up,down";
    s.loraRslora = true;
    const TrainResult r = train(s, true);
    const std::string adapter = g_dir + "/export/adapter";
    T_CHECK(fs::exists(adapter + "/adapter_config.json"));
    std::ifstream in(adapter + "/adapter_config.json");
    const json cfg = json::parse(in);
    T_CHECK(cfg["peft_type"] == "LORA" && cfg["r"] == 4 && cfg["lora_alpha"] == 8.0
        && cfg["use_rslora"] == true && cfg["bias"] == "none" && cfg["target_modules"].size() == 7);
    T_CHECK(cfg["base_model_name_or_path"] == fs::absolute(model).lexically_normal().string());
    SafetensorsReader peft(adapter + "/adapter_model.safetensors");
    const auto spec = tinySpec();
    const std::string qa = "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight";
    const std::string db = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight";
    T_CHECK(peft.contains(qa) && peft.contains(db));
    if (peft.contains(qa) && peft.contains(db)) {
        T_CHECK((peft.tensor(qa).sizes().vec() == std::vector<int64_t> {4, spec.hiddenSize}));
        T_CHECK((peft.tensor(db).sizes().vec() == std::vector<int64_t> {spec.hiddenSize, 4}));
    }
    T_CHECK(static_cast<int64_t>(peft.names().size()) == spec.numLayers * 7 * 2);

    // Merged logits (the exported model folder, fp32) against base + adapter computed in
    // float64 from the original base and the exported PEFT files.
    const at::Tensor ids = at::randint(0, 512, {2, 16}, at::kLong);
    auto logits = [&](LlamaModel& m, const SafetensorsReader& base, const SafetensorsReader* p) {
        std::vector<std::vector<at::Tensor>> units(static_cast<size_t>(m.numUnits()));
        for (int u = 0; u < m.numUnits(); ++u)
            for (const Param& prm : m.unit(u).params)
                units[static_cast<size_t>(u)].push_back(
                    (lora::isAdapterName(prm.info.name) ? p->tensor(lora::peftKey(prm.info.name))
                                                        : base.tensor(prm.info.name))
                        .to(at::kDouble));
        at::NoGradGuard noGrad;
        const RopeTables rope = m.rope(ids.size(1), at::kDouble);
        at::Tensor x = m.embed(units[0], ids);
        for (size_t u = 1; u < units.size(); ++u)
            x = m.block(units[u], x, rope);
        return m.head(units[0], x);
    };
    LlamaModel merged(spec);
    SafetensorsReader mergedWeights(g_dir + "/export/model");
    const at::Tensor lm = logits(merged, mergedWeights, nullptr);
    LlamaModel withAdapters(spec);
    lora::attach(withAdapters, lora::readPeftConfig(adapter));
    SafetensorsReader baseWeights(model);
    const at::Tensor la = logits(withAdapters, baseWeights, &peft);
    const double err = maxRel(lm, la);
    // The adapters changed the logits (the check below compares something).
    LlamaModel plain(spec);
    const double moved = maxRel(logits(plain, baseWeights, nullptr), la);
    std::printf("merged vs base + PEFT adapter (float64): max rel %.3g; adapters moved the "
                "logits by %.3g\n",
        err, moved);
    T_CHECK_MSG(err <= 1e-5, "merged export differs from base + adapter");
    T_CHECK(moved > 1e-4);

    // --lora-init continues from the exported adapter: its step-1 loss is the merged model's
    // loss on the same batch (fp32 rounding of the merge apart), and two such runs agree.
    auto cont = loraSpec(model, data, g_dir + "/cont");
    cont.loraTargets = s.loraTargets;
    cont.loraRslora = true;
    cont.loraInit = adapter;
    cont.steps = 3;
    const TrainResult c1 = train(cont);
    const TrainResult c2 = train(cont);
    auto viaMerged = loraSpec(g_dir + "/export/model", data, g_dir + "/merged-run");
    viaMerged.method = "full";
    viaMerged.steps = 1;
    const TrainResult m1 = train(viaMerged);
    std::printf("--lora-init step-1 loss %.9g, merged model %.9g, trained run's last %.9g\n",
        c1.losses.at(0), m1.losses.at(0), r.losses.back());
    T_CHECK(c1.losses == c2.losses);
    T_CHECK(std::abs(c1.losses.at(0) - m1.losses.at(0)) <= 1e-5 * m1.losses.at(0));

    // A PEFT folder of other settings is refused with the flag to change.
    auto other = cont;
    other.loraRank = 8;
    EXPECT_THROW_WITH(Trainer(other, TrainerOptions {false, false, false}), "r 4", "--lora-rank 4");
}

// QLoRA: the block projections are stored as NF4. Step 1's loss equals the full model's loss on
// the dequantised base (fp32, bit for bit); training lowers the loss as LoRA does; the base takes
// NF4's bytes.
void testQlora(const std::string& model, const std::string& data)
{
    // The dequantised base as a model folder, with the block scales double-quantised (the
    // default) or kept in fp32.
    auto dequantisedBase = [&](bool doubleQuant) {
        const std::string deq = g_dir + (doubleQuant ? "/dequantised-dq" : "/dequantised");
        SafetensorsReader base(model);
        NamedTensors tensors;
        int quantized = 0;
        for (const auto& name : base.names()) {
            at::Tensor t = base.tensor(name).to(at::kFloat);
            if (name.find("_proj.weight") != std::string::npos) {
                const nf4::Rows q = nf4::quantizeRows(t, doubleQuant);
                t = nf4::dequantizeRows(q.packed, q.absmax, at::kFloat, q.nested);
                ++quantized;
            }
            tensors.push_back({name, t.contiguous()});
        }
        T_CHECK(quantized == 7 * tinySpec().numLayers);
        writeHfConfigAndTokenizer(deq, tinySpec(), model);
        writeSafetensorsFolder(deq, tensors);
        auto full = loraSpec(deq, data, deq + "-full");
        full.method = "full";
        full.steps = 1;
        return train(full).losses.at(0);
    };
    const double reference = dequantisedBase(true);
    const double referencePlain = dequantisedBase(false);
    auto q = loraSpec(model, data, g_dir + "/qlora");
    q.method = "qlora";
    q.loraTargets = "q,k,v,o,gate,up,down";
    q.steps = 12;
    Trainer qt(q, TrainerOptions {false, false, false});
    const TrainResult qr = qt.run();
    std::printf("QLoRA step-1 loss %.17g, dequantised base %.17g\n", qr.losses.at(0), reference);
    T_CHECK_MSG(qr.losses.at(0) == reference, "QLoRA step 1 != the dequantised base's loss");
    auto plain = q;
    plain.qloraDoubleQuant = false;
    plain.steps = 1;
    plain.outDir = g_dir + "/qlora-fp32-scales";
    Trainer pt(plain, TrainerOptions {false, false, false});
    const double plainLoss = pt.run().losses.at(0);
    std::printf("QLoRA with fp32 block scales: step-1 loss %.17g, dequantised base %.17g\n",
        plainLoss, referencePlain);
    T_CHECK_MSG(plainLoss == referencePlain, "QLoRA (fp32 scales) step 1 != its base's loss");
    // Double quantisation keeps one byte per block of 64 instead of four, plus a scale per 256.
    int64_t quantizedParams = 0, quantizedTensors = 0;
    for (const Param* p : qt.model().params())
        if (p->quantized) {
            quantizedParams += p->info.shape.at(0) * p->info.shape.at(1);
            ++quantizedTensors;
        }
    const int64_t saved = pt.strategy().memory().frozenParams - qt.strategy().memory().frozenParams;
    std::printf("double quantisation saves %lld bytes of %lld NF4 parameters\n",
        static_cast<long long>(saved), static_cast<long long>(quantizedParams));
    T_CHECK(saved <= 3 * quantizedParams / 64);
    T_CHECK(
        saved >= 3 * quantizedParams / 64 - 4 * (quantizedParams / (64 * 256) + quantizedTensors));
    const Param& w = qt.model().param("model.layers.0.mlp.up_proj.weight");
    T_CHECK(w.quantized && w.frozen && !w.value.defined());
    T_CHECK(!qt.model().param("model.embed_tokens.weight").quantized);

    auto l = q;
    l.method = "lora";
    l.outDir = g_dir + "/lora-vs-qlora";
    Trainer lt(l, TrainerOptions {false, false, false});
    const TrainResult lr = lt.run();
    const double dq = qr.losses.front() - qr.losses.back();
    const double dl = lr.losses.front() - lr.losses.back();
    const int64_t qBytes = qt.strategy().memory().frozenParams;
    const int64_t lBytes = lt.strategy().memory().frozenParams;
    std::printf("12 steps: LoRA %.4f -> %.4f (-%.4f), QLoRA %.4f -> %.4f (-%.4f); frozen base "
                "%lld bytes (LoRA fp32 %lld)\n",
        lr.losses.front(), lr.losses.back(), dl, qr.losses.front(), qr.losses.back(), dq,
        static_cast<long long>(qBytes), static_cast<long long>(lBytes));
    // Both learn, on the same batches, and end within 1% of each other: NF4 moves each base
    // weight by at most 0.15 of its block's absmax, which shifts step 1's loss by about 0.1%
    // here, while the per-batch losses of one run spread by about 1% on this task.
    T_CHECK(dl > 0 && dq > 0);
    T_CHECK(std::abs(qr.losses.back() - lr.losses.back()) <= 0.01 * lr.losses.back());
    T_CHECK(qBytes < lBytes / 2);
}

void testRefusals(const std::string& model, const std::string& data)
{
    auto s = loraSpec(model, data, g_dir + "/bad");
    s.loraTargets = "q,x";
    EXPECT_THROW_WITH(protocol::validate(s), "'x'", "q, k, v, o, gate, up, down");
    s.loraTargets = "q";
    s.loraRank = 0;
    EXPECT_THROW_WITH(protocol::validate(s), "lora_rank");
    s.loraRank = 4;
    s.loraDropout = 1.0;
    EXPECT_THROW_WITH(protocol::validate(s), "lora_dropout");
    s.loraDropout = 0;
    s.method = "adapters";
    EXPECT_THROW_WITH(protocol::validate(s), "method 'adapters'");
    s.method = "full";
    s.loraInit = g_dir;
    EXPECT_THROW_WITH(protocol::validate(s), "lora_init needs method lora");
    s.method = "lora";
    s.loraInit.clear();
    s.loraRank = 100000;
    EXPECT_THROW_WITH(Trainer(s, TrainerOptions {false, false, false}), "exceeds", "--lora-rank");
}

} // namespace

int main()
{
    g_dir = shard::test::tempDir("tst_lora");
    testGradients();
    const std::string model = makeModel("m");
    const std::string data = makeData("data.jsonl", 48, 512, 1);
    testTraining(model, data);
    testExport(model, data);
    testQlora(model, data);
    testRefusals(model, data);
    return shard::test::finish("tst_lora");
}
