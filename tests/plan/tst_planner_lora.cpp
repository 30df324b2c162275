// The planner's LoRA / QLoRA accounting against hand computations from the model's shapes:
// adapter parameter counts (rank * (in + out) per targeted projection per block, cross-checked
// with PEFT's published trainable-parameter counts for Llama-3-8B), every new memory category
// under ddp / zero2 / zero3, the activations the adapters add, full > LoRA > QLoRA for an 8B
// model on one GPU, the run-spec bridge and each bad input.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "check.h"
#include "plan/planner.h"
#include "plan/run_spec_bridge.h"

using namespace shard::plan;

namespace {

ModelSpec preset(const std::string& name)
{
    auto p = findPreset(name);
    if (!p) {
        std::fprintf(stderr, "missing preset %s\n", name.c_str());
        std::exit(1);
    }
    return *p;
}

// Llama-3.1-8B: h 4096, 32 query heads and 8 KV heads of 128, intermediate 14336, 32 blocks.
void testAdapterCounts()
{
    const ModelSpec m = preset("llama-3.1-8b");
    CHECK_EQ(m.hiddenSize, int64_t(4096));
    CHECK_EQ(m.kvDim(), int64_t(1024));
    CHECK_EQ(m.intermediateSize, int64_t(14336));
    // q: 8 * (4096 + 4096), k and v: 8 * (4096 + 1024), o: 8 * (4096 + 4096).
    const int64_t qkvo = 32 * (2 * 8 * (4096 + 4096) + 2 * 8 * (4096 + 1024));
    CHECK_EQ(qkvo, int64_t(6815744)); // PEFT's print_trainable_parameters for Llama-3-8B, r=8
    CHECK_EQ(loraAdapterParameterCount(m, 8, "q,k,v,o"), qkvo);
    // gate, up: 8 * (4096 + 14336); down: 8 * (14336 + 4096).
    const int64_t all = qkvo + 32 * 3 * 8 * (4096 + 14336);
    CHECK_EQ(all, int64_t(20971520)); // every linear layer, r=8
    CHECK_EQ(loraAdapterParameterCount(m, 8, "q,k,v,o,gate,up,down"), all);
    CHECK_EQ(loraAdapterParameterCount(m, 16, "down,q"), 32 * 16 * (2 * 4096 + 4096 + 14336));

    // A small preset, from its own fields.
    const ModelSpec t = preset("tiny-15m");
    const int64_t h = t.hiddenSize, q = t.qDim(), kv = t.kvDim(), in = t.intermediateSize;
    CHECK_EQ(loraAdapterParameterCount(t, 4, "q,v"), t.numLayers * 4 * ((h + q) + (h + kv)));
    CHECK_EQ(quantizedParameterCount(t), t.numLayers * (h * q + 2 * h * kv + q * h + 3 * h * in));
    CHECK_EQ(nf4Bytes(64.0, false), 36.0); // 32 packed bytes + one fp32 absmax
    // Double quantisation: 32 packed bytes + one 8-bit code per block, one fp32 scale per 256
    // blocks.
    CHECK_EQ(nf4Bytes(64.0 * 256, true), 256 * 33.0 + 4.0);
}

PlanInput eightB(Method method, Strategy s, int64_t gpus)
{
    PlanInput in;
    in.model = preset("llama-3.1-8b");
    in.method = method;
    in.strategy = s;
    in.gpusPerNode = gpus;
    in.precision = Precision::Bf16Mixed;
    in.microBatch = 2;
    in.seqLen = 2048;
    in.device = DeviceSpec::gpu(80);
    return in;
}

int64_t sumOfComponents(const MemoryBreakdown& m)
{
    int64_t sum = 0;
    for (const auto& [k, v] : m.components())
        sum += v;
    return sum;
}

void testCategoriesOneGpu()
{
    const int64_t P = parameterCount(preset("llama-3.1-8b"));
    const int64_t A = 6815744;
    const PlanResult full = plan(eightB(Method::Full, Strategy::Ddp, 1));
    CHECK_EQ(full.perDevice.frozenBase, int64_t(0));
    CHECK_EQ(full.perDevice.adapters, int64_t(0));
    CHECK_EQ(full.perDevice.adapterOptimizer, int64_t(0));

    const PlanResult lora = plan(eightB(Method::Lora, Strategy::Ddp, 1));
    const MemoryBreakdown& m = lora.perDevice;
    CHECK_EQ(m.frozenBase, 2 * P); // bf16 frozen base, the one copy on one rank
    CHECK_EQ(m.quantizedBase, int64_t(0));
    CHECK_EQ(m.gatheredParams, int64_t(0));
    CHECK_EQ(m.shardedParams, int64_t(0));
    CHECK_EQ(m.grads, int64_t(0));
    CHECK_EQ(m.optimizer, int64_t(0));
    CHECK_EQ(m.adapters, 4 * A + 2 * A);     // fp32 masters + bf16 compute copies
    CHECK_EQ(m.adapterGrads, 4 * A + 2 * A); // fp32 gradient + bf16 leaf gradients, no reduce
    CHECK_EQ(m.adapterOptimizer, 8 * A);     // AdamW m, v fp32
    CHECK_EQ(sumOfComponents(m), m.total());
    CHECK(lora.input.method == Method::Lora);

    // The adapters' extra activations: A's output (T x r, bf16) per target per block; less what
    // only a frozen weight's gradient would have needed: the MLP's normed input (gate and up
    // are not adapted), down_proj's input, and the LM head's input.
    const int64_t T = 2 * 2048;
    const int64_t unsaved = int64_t(32) * T * 2 * (4096 + 14336) + T * 2 * 4096;
    CHECK_EQ(m.activations - full.perDevice.activations, int64_t(32) * 4 * T * 8 * 2 - unsaved);
    PlanInput withDropout = eightB(Method::Lora, Strategy::Ddp, 1);
    withDropout.loraDropout = 0.05;
    const int64_t dropped = int64_t(32) * T * 2 * (4096 + 4096 + 4096 + 4096); // q,k,v,o inputs
    CHECK_EQ(plan(withDropout).perDevice.activations - m.activations, dropped);

    // QLoRA: every projection in NF4; embeddings, norms, LM head bf16; one block's projections
    // are dequantised at a time (freed after its forward, refilled for its backward), with or
    // without checkpointing.
    const int64_t Q = quantizedParameterCount(preset("llama-3.1-8b"));
    const int64_t block = 4096LL * 4096 * 2 + 2 * 4096LL * 1024 + 3 * 4096LL * 14336;
    CHECK_EQ(Q, 32 * block);
    const PlanResult ql = plan(eightB(Method::Qlora, Strategy::Ddp, 1));
    // Double quantisation (the default): an 8-bit code per block of 64, an fp32 scale per 256
    // codes; without it an fp32 absmax per block.
    const int64_t nf4dq = Q / 2 + Q / 64 + 4 * Q / (64 * 256);
    CHECK_EQ(ql.perDevice.quantizedBase, nf4dq);
    PlanInput fp32Scales = eightB(Method::Qlora, Strategy::Ddp, 1);
    fp32Scales.qloraDoubleQuant = false;
    const PlanResult qlPlain = plan(fp32Scales);
    CHECK_EQ(qlPlain.perDevice.quantizedBase, Q / 2 + 4 * Q / 64);
    // (the total by more: the fragmentation overhead is a share of what is allocated)
    CHECK(qlPlain.perDevice.total() - ql.perDevice.total() >= 3 * Q / 64 - 4 * Q / (64 * 256));
    CHECK_EQ(ql.perDevice.frozenBase, 2 * (P - Q));
    // At backward start (the head's backward) no block's copies are alive. The fused head and
    // loss keep one chunk of 256 rows' logits (fp32, bf16 product and gradient) and h's
    // gradient, far below the batch's fp32 logits; the head is frozen, so it makes no W
    // gradient (LoRA's peak, the same head).
    CHECK_EQ(m.logits, int64_t(256) * 128256 * (4 + 2 * 2) + 4096 * 4096 * 2);
    CHECK(m.logits < int64_t(4096) * 128256 * 4);
    CHECK_EQ(lora.peakPhase, std::string("backward start"));
    // QLoRA's peak is the last block's forward end (and its backward's start): every block's
    // activations and that block's dequantised bf16 projections, more than the head's chunk.
    CHECK_EQ(ql.peakPhase, std::string("forward end"));
    CHECK_EQ(ql.perDevice.gatheredParams, 2 * block);
    CHECK_EQ(ql.perDevice.logits, int64_t(0));
    CHECK_EQ(ql.perDevice.activations, m.activations);
    PlanInput ckpt = eightB(Method::Qlora, Strategy::Ddp, 1);
    ckpt.checkpointing = Checkpointing::Full;
    CHECK_EQ(plan(ckpt).perDevice.gatheredParams, 2 * block);
    CHECK_EQ(sumOfComponents(ql.perDevice), ql.perDevice.total());

    nlohmann::json j = toJson(ql);
    CHECK_EQ(j["method"].get<std::string>(), std::string("qlora"));
    CHECK_EQ(j["lora"]["adapter_params"].get<int64_t>(), A);
    CHECK_EQ(j["lora"]["quantized_params"].get<int64_t>(), Q);
    CHECK_EQ(j["per_device"]["quantized_base"].get<int64_t>(), nf4dq);
    CHECK(j["lora"]["double_quant"].get<bool>());
    CHECK(!toJson(qlPlain)["lora"]["double_quant"].get<bool>());
    CHECK_EQ(j["per_device"]["total"].get<int64_t>(), ql.perDevice.total());
}

// Eight GPUs (every dim 0 of Llama-3.1-8B divides by 8: no padding).
void testStrategies()
{
    const int64_t P = parameterCount(preset("llama-3.1-8b"));
    const int64_t A = 6815744;
    const ModelSpec m = preset("llama-3.1-8b");
    const int64_t root = 2 * 128256LL * 4096 + 4096; // embed, lm_head, final norm
    const int64_t block = (P - root) / 32;

    const MemoryBreakdown ddp = plan(eightB(Method::Lora, Strategy::Ddp, 8)).perDevice;
    CHECK_EQ(ddp.frozenBase, 2 * P); // whole on every rank
    CHECK_EQ(ddp.gatheredParams, int64_t(0));
    CHECK_EQ(ddp.adapterOptimizer, 8 * A); // replicated
    // fp32 gradient + bf16 leaves + the all-reduce's input and output (shard = the whole).
    CHECK_EQ(ddp.adapterGrads, 4 * A + 2 * A + 4 * A * 2);

    const MemoryBreakdown z2 = plan(eightB(Method::Lora, Strategy::Zero2, 8)).perDevice;
    CHECK_EQ(z2.frozenBase, 2 * P); // kept gathered whole, and only that copy
    CHECK_EQ(z2.gatheredParams, int64_t(0));
    CHECK_EQ(z2.adapterOptimizer, 8 * A / 8); // sharded
    CHECK_EQ(z2.adapters, 4 * A / 8 + 2 * A);

    const PlanResult z3r = plan(eightB(Method::Lora, Strategy::Zero3, 8));
    const MemoryBreakdown& z3 = z3r.perDevice;
    CHECK_EQ(z3.frozenBase, 2 * P / 8);
    // The peak is the last block's forward: it is gathered besides the root, every activation
    // is alive and the head's chunks (after its reshard) are small.
    CHECK_EQ(z3r.peakPhase, std::string("forward end"));
    CHECK_EQ(z3.gatheredParams, 2 * (root + block));
    // Inside the blocks' backward two are in flight: with the logits small that is the peak.
    PlanInput shortRows = eightB(Method::Lora, Strategy::Zero3, 8);
    shortRows.seqLen = 128;
    const PlanResult mid = plan(shortRows);
    CHECK_EQ(mid.peakPhase, std::string("mid backward"));
    CHECK_EQ(mid.perDevice.gatheredParams, 2 * (root + 2 * block));
    CHECK_EQ(z3.adapterOptimizer, A);
    CHECK(z3.total() < z2.total());
    CHECK(z3.total() < ddp.total());
    // zero1 / zero2 hold the frozen base once, as ddp does (no rows besides the gathered copy),
    // so their sharded adapter state makes them smaller than ddp.
    CHECK_EQ(z2.frozenBase + z2.gatheredParams, ddp.frozenBase);
    CHECK(z2.total() < ddp.total());
    // Only the adapters' gradients are reduced (fp32 reduce-scatter, 7/8 of them sent).
    CHECK_EQ(z3r.reduceBytesPerDevicePerStep, 4 * A * 7 / 8);

    const MemoryBreakdown q3 = plan(eightB(Method::Qlora, Strategy::Zero3, 8)).perDevice;
    const int64_t Q = quantizedParameterCount(m);
    CHECK_EQ(q3.quantizedBase, (Q / 2 + Q / 64 + 4 * Q / (64 * 256)) / 8);
    CHECK_EQ(q3.frozenBase, 2 * (P - Q) / 8);
}

// DPO with a live reference under full fine-tuning: a frozen bf16 copy of the model in the
// frozen base row, 1/S of it under zero3, whole under ddp and zero2; none when precomputed.
void testLiveReferenceCopy()
{
    const int64_t P = parameterCount(preset("llama-3.1-8b"));
    auto dpo = [](Strategy s, const std::string& reference) {
        PlanInput in = eightB(Method::Full, s, 8);
        in.objective = "dpo";
        in.reference = reference;
        return plan(in);
    };
    for (Strategy s : {Strategy::Ddp, Strategy::Zero2, Strategy::Zero3}) {
        const PlanResult live = dpo(s, "live");
        const PlanResult pre = dpo(s, "precomputed");
        const int64_t copy = s == Strategy::Zero3 ? 2 * P / 8 : 2 * P;
        CHECK_EQ(live.perDevice.frozenBase, copy);
        CHECK_EQ(pre.perDevice.frozenBase, int64_t(0));
        CHECK(live.perDevice.total() - pre.perDevice.total() >= copy);
        bool shown = false;
        for (const PlanComponent& c : planComponents())
            if (c.bytes == &MemoryBreakdown::frozenBase)
                shown = heldUnder(c, live.input) && !heldUnder(c, pre.input);
        CHECK(shown);
    }
}

// Llama-3.1-8B on one 24 GB card, batch 2 x 2048, bf16-mixed, activation checkpointing:
// full fine-tuning does not fit, LoRA needs the bf16 base, QLoRA a quarter of it.
void testOrderingOn24GiB()
{
    int64_t totals[3] = {};
    const Method methods[3] = {Method::Full, Method::Lora, Method::Qlora};
    for (int i = 0; i < 3; ++i) {
        PlanInput in = eightB(methods[i], Strategy::Ddp, 1);
        in.device = DeviceSpec::gpu(24);
        in.checkpointing = Checkpointing::Full;
        PlanResult r = plan(in);
        totals[i] = r.perDevice.total();
        if (methods[i] == Method::Full)
            CHECK(!r.fits);
        if (methods[i] == Method::Qlora)
            CHECK(r.fits);
    }
    CHECK(totals[2] < totals[1]);
    CHECK(totals[1] < totals[0]);
}

void testBridge()
{
    shard::protocol::RunSpec spec;
    spec.model = "tiny-15m";
    spec.device = "cpu";
    spec.method = "qlora";
    spec.loraRank = 16;
    spec.loraAlpha = 32;
    spec.loraDropout = 0.1;
    spec.loraTargets = "q,v,down";
    spec.loraRslora = true;
    spec.qloraDoubleQuant = false;
    PlanInput in = planInputFromSpec(spec, DeviceSpec::cpu(int64_t(16) << 30));
    CHECK(!in.qloraDoubleQuant);
    CHECK(in.method == Method::Qlora);
    CHECK_EQ(in.loraRank, int64_t(16));
    CHECK_EQ(in.loraAlpha, 32.0);
    CHECK_EQ(in.loraDropout, 0.1);
    CHECK_EQ(in.loraTargets, std::string("q,v,down"));
    CHECK(in.loraRslora);
    shard::protocol::RunSpec back;
    in.method = Method::Lora;
    in.loraRank = 4;
    applyPlanToSpec(in, "tiny-15m", back);
    CHECK_EQ(back.method, std::string("lora"));
    CHECK_EQ(back.loraRank, int64_t(4));
    CHECK_EQ(back.loraAlpha, 32.0);
    CHECK_EQ(back.loraDropout, 0.1);
    CHECK_EQ(back.loraTargets, std::string("q,v,down"));
    CHECK(back.loraRslora);
    CHECK(!back.qloraDoubleQuant);
    CHECK(back.usesLora());
}

void testErrors()
{
    PlanInput in = eightB(Method::Lora, Strategy::Ddp, 1);
    CHECK(parseMethod("qlora") == Method::Qlora);
    CHECK_THROWS_WITH(parseMethod("dora"), "full, lora, qlora");
    in.loraTargets = "q,x";
    CHECK_THROWS_WITH(plan(in), "unknown LoRA target 'x'");
    in.loraTargets = "q";
    in.loraRank = 0;
    CHECK_THROWS_WITH(plan(in), "LoRA rank must be a positive integer");
    in.loraRank = 8;
    in.mode = AccountingMode::ZeroPaper;
    CHECK_THROWS_WITH(plan(in), "--mode engine");
    in.mode = AccountingMode::Engine;
    in.offload = Offload::Optimizer;
    CHECK_THROWS_WITH(plan(in), "use offload none");
    in.offload = Offload::None;
    in.loraDropout = 1.0;
    CHECK_THROWS_WITH(plan(in), "[0, 1)");
    CHECK_THROWS_WITH(loraAdapterParameterCount(in.model, 8, ""), "unknown LoRA target");
}

} // namespace

int main()
{
    testAdapterCounts();
    testCategoriesOneGpu();
    testStrategies();
    testLiveReferenceCopy();
    testOrderingOn24GiB();
    testBridge();
    testErrors();
    return shard::plan::test::finish("tst_planner_lora");
}
