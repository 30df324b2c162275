// The planner against hand computations written out here from the model's shapes (not from the
// planner's own output): every memory component, traffic, FLOPs, the ZeRO-paper example,
// derived answers and each bad input.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "check.h"
#include "plan/device_catalog.h"
#include "plan/layout_search.h"
#include "plan/planner.h"
#include "plan/stage_balance.h"

using namespace shard::plan;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelSpec preset(const std::string& name)
{
    auto p = findPreset(name);
    if (!p) {
        std::fprintf(stderr, "missing preset %s\n", name.c_str());
        std::exit(1);
    }
    return *p;
}

// Default calibration overhead: fixed + fraction of everything else.
int64_t gpuOverhead(int64_t rest)
{
    return static_cast<int64_t>(std::llround(1.5 * kGiB + 0.05 * static_cast<double>(rest)));
}

// Llama-2-7B, zero3 on 8 GPUs (80 GiB), bf16-mixed, full checkpointing, micro-batch 2 x 4096.
void testLlama7bZero3()
{
    PlanInput in;
    in.model = preset("llama-2-7b");
    in.strategy = Strategy::Zero3;
    in.gpusPerNode = 8;
    in.precision = Precision::Bf16Mixed;
    in.checkpointing = Checkpointing::Full;
    in.microBatch = 2;
    in.seqLen = 4096;
    PlanResult r = plan(in);

    // Shapes: V=32000, h=4096, I=11008, L=32, MHA. Every dim 0 divides by 8: no padding.
    const int64_t P = 6738415616;
    const int64_t root = 32000LL * 4096 * 2 + 4096;                          // embed, lm_head, norm
    const int64_t block = 4LL * 4096 * 4096 + 3LL * 4096 * 11008 + 2 * 4096; // 202,383,360
    CHECK_EQ(root + 32 * block, P);
    CHECK_EQ(r.params, P);
    CHECK_EQ(r.shardDegree, int64_t(8));

    const MemoryBreakdown& m = r.perDevice;
    CHECK_EQ(m.shardedParams, 4 * P / 8); // fp32 shard
    CHECK_EQ(m.optimizer, 8 * P / 8);     // AdamW m, v fp32
    // Peak at the start of backward: bf16 root + two blocks in flight; the fp32 shard grad, the
    // bf16 grads of lm_head + final norm and of one block; that block's fp32 flat reduce buffer
    // and its 1/8 receive buffer (NCCL reduce-scatter).
    const int64_t head = 32000LL * 4096 + 4096;
    CHECK_EQ(r.peakPhase, std::string("backward start"));
    CHECK_EQ(m.gatheredParams, 2 * (root + 2 * block));
    CHECK_EQ(m.grads, 4 * P / 8 + 2 * (head + block));
    CHECK_EQ(m.commBuffers, int64_t(4 * block * (1 + 1.0 / 8)));

    // Activations (bf16, T = 2*4096 tokens), full checkpointing: the input of each of 32 blocks,
    // one block recomputed (each fused RMSNorm keeps x and out: 4h for two; q, attn out = 2h;
    // k, v = 2h; gate, up, product: 3 x intermediate; 2 fp32 rstd per token; flash attention
    // log-sum-exp per head and token), the root (3h) and the backward transients (2h + 2I).
    const int64_t T = 2 * 4096;
    const int64_t ckptInputs = 32LL * T * 2 * 4096;
    const int64_t oneBlock
        = T * (2 * (4 * 4096 + 2 * 4096 + 2 * 4096 + 3 * 11008) + 4 * 2) + 4LL * 2 * 32 * 4096;
    const int64_t rootAct = T * 2 * 3 * 4096;
    const int64_t transient = T * 2 * (2 * 4096 + 2 * 11008);
    CHECK_EQ(m.activations, ckptInputs + oneBlock + rootAct + transient);
    // Logits: the fused head and loss over chunks of 2*4095*4096/32000 = 1048 rows (a chunk's
    // logits the size of the hidden states): fp32 logits (their gradient in place) + bf16 product
    // and narrowed gradient, and h's gradient (bf16); W's is in the GPU model's grads above.
    CHECK_EQ(m.logits, int64_t(1048) * 32000 * (4 + 2 * 2) + T * 4096 * 2);
    const int64_t rest = m.shardedParams + m.optimizer + m.gatheredParams + m.grads + m.commBuffers
        + m.activations + m.logits;
    CHECK_EQ(m.overhead, gpuOverhead(rest));
    CHECK_EQ(m.total(), rest + m.overhead);
    CHECK(r.fits);
    CHECK_EQ(r.capacityBytes, int64_t(80) << 30);
    CHECK_EQ(r.headroomBytes, (int64_t(80) << 30) - m.total());

    // FLOPs: 6P + 12*L*h*s per token; recompute adds one forward (2P + 4*L*h*s) on the device.
    const double attn = 12.0 * 32 * 4096 * 4096;
    CHECK_NEAR(r.flopsPerToken, 6.0 * 6738415616.0 + attn, 1e-12);
    CHECK_NEAR(r.flopsPerToken, 46872944640.0, 1e-12);
    CHECK_EQ(r.tokensPerStep, int64_t(2 * 4096 * 8));
    CHECK_NEAR(r.flopsPerStep, r.flopsPerToken * 65536.0, 1e-12);
    CHECK_NEAR(r.deviceFlopsPerStep, (8.0 * 6738415616.0 + attn * 4 / 3) * 8192.0, 1e-12);

    // Traffic: reduce-scatter of fp32 grads once, all-gather of bf16 params in forward and
    // backward for blocks, once for the root; each rank sends 7/8 of each buffer.
    CHECK_EQ(r.reduceBytesPerDevicePerStep, int64_t(std::llround(7.0 / 8 * 4 * P)));
    CHECK_EQ(r.gatherBytesPerDevicePerStep,
        int64_t(std::llround(7.0 / 8 * 2 * (2 * (P - root) + root))));
    // ~3P in mixed dtypes: (2 + 4 + ... ) just under 3 x P x (avg 3 bytes).
    CHECK_NEAR(static_cast<double>(r.bytesSentPerDevicePerStep),
        7.0 / 8 * (4.0 * P + 2.0 * (2 * (P - root) + root)), 1e-9);
    // Roofline: compute at 989 TFLOP/s, traffic at 450 GB/s (one node).
    CHECK_NEAR(r.computeSeconds, r.deviceFlopsPerStep / 989e12, 1e-12);
    CHECK_NEAR(r.commSeconds, static_cast<double>(r.bytesSentPerDevicePerStep) / 450e9, 1e-12);
    CHECK_NEAR(r.stepSeconds, std::max(r.computeSeconds, r.commSeconds), 1e-12);
    CHECK(r.notes.empty());

    // The same without checkpointing: all 32 blocks' activations.
    in.checkpointing = Checkpointing::None;
    PlanResult n = plan(in);
    CHECK_EQ(n.perDevice.activations, 32 * oneBlock + rootAct + transient);
    CHECK_NEAR(n.deviceFlopsPerStep, n.flopsPerToken * 8192.0, 1e-12);
}

// tiny-15m on CPU over 3 ranks in fp32: dim-0 padding, Gloo receive buffers, eager attention.
void testTinyCpuPadding()
{
    PlanInput in;
    in.model = preset("tiny-15m");
    in.strategy = Strategy::Zero3;
    in.gpusPerNode = 3;
    in.precision = Precision::Fp32;
    in.microBatch = 4;
    in.seqLen = 256;
    in.device = DeviceSpec::cpu(int64_t(24) << 30);
    in.calibration.cpuFusedAttention = 0; // eager attention (LibTorch 1.13); fused below
    PlanResult r = plan(in);

    // Padded to ceil(rows/3)*3: embed/lm_head 4096 -> 4098 rows, k/v 128 -> 129,
    // gate/up 1024 -> 1026; rows of 384 divide by 3.
    const int64_t block = 2 * 384 * 384 + 2 * 129 * 384 + 2 * 1026 * 384 + 384 * 1024 + 2 * 384;
    CHECK_EQ(block, int64_t(1575936));
    const int64_t root = 2 * 4098 * 384 + 384;
    const int64_t Pp = 8 * block + root;
    CHECK_EQ(Pp, int64_t(15755136));
    CHECK_EQ(r.params, int64_t(15735168));
    const MemoryBreakdown& m = r.perDevice;
    CHECK_EQ(m.shardedParams, 4 * Pp / 3);
    CHECK_EQ(m.optimizer, 8 * Pp / 3);
    // CPU model (measured, bench/plan/RESULTS.md): the peak is at backward start, where the
    // engine holds no gradient yet (freed after every step) and ZeRO-3 only the root gathered.
    CHECK_EQ(r.peakPhase, std::string("backward start"));
    CHECK_EQ(m.gatheredParams, 4 * root);
    CHECK_EQ(m.grads, int64_t(0));
    CHECK_EQ(m.commBuffers, int64_t(0));

    // Eager attention on CPU in fp32 keeps the softmax output: 4 bytes per b*heads*s*s.
    // GQA (2 kv heads for 6 heads) materializes k and v for all heads: + 2 q-dims.
    const int64_t T = 4 * 256;
    const int64_t perToken = 4 * 384 + 2 * 384 + 2 * 128 + 2 * 384 + 3 * 1024;
    CHECK_EQ(perToken, int64_t(6400));
    const int64_t oneBlock = T * (4 * perToken + 4 * 2) + 4LL * 6 * 256 * 256 * 4;
    const int64_t acts = 8 * oneBlock + T * 4 * 3 * 384 + T * 4 * (2 * 384 + 2 * 1024);
    CHECK_EQ(m.activations, acts);
    // The fused head and loss in one chunk of all 4*255 rows (fp32: the gradient in place), h's
    // gradient and, on the CPU model, the head's (V x h).
    CHECK_EQ(m.logits, int64_t(4 * 255) * 4096 * 4 + T * 384 * 4 + 4096 * 384 * 4);

    // The fused CPU attention of LibTorch 2.x: per block a log-sum-exp per head and token
    // instead of the scores; `fused_cpu_attention_drops_per_q` q-widths per token less (0 by
    // default since the norms are fused, here 2).
    {
        PlanInput fusedIn = in;
        fusedIn.calibration.cpuFusedAttention = 1;
        const MemoryBreakdown f = plan(fusedIn).perDevice;
        const int64_t fusedBlock = T * (4 * perToken + 4 * 2) + 4LL * 6 * 256 * 4;
        CHECK_EQ(f.activations, acts - 8 * oneBlock + 8 * fusedBlock);
        CHECK(f.activations < m.activations);
        fusedIn.calibration.fusedCpuAttentionDropsPerQ = 2;
        CHECK_EQ(plan(fusedIn).perDevice.activations, f.activations - 8 * T * 4 * 2 * 384);
    }
    CHECK_EQ(m.overhead, int64_t(0));                   // the engine's peak counts tensors only
    CHECK_EQ(r.capacityBytes, (int64_t(24) << 30) / 3); // the node's RAM shared by 3 ranks
    CHECK(r.fits);

    CHECK_EQ(r.reduceBytesPerDevicePerStep, int64_t(std::llround(2.0 / 3 * 4 * Pp)));
    CHECK_EQ(r.gatherBytesPerDevicePerStep,
        int64_t(std::llround(2.0 / 3 * 4 * (2 * (Pp - root) + root))));
    CHECK_NEAR(r.computeSeconds, r.deviceFlopsPerStep / 100e9, 1e-12);

    // Gradient accumulation keeps unsharded fp32 grads (FSDP2 no-sync) and gathers per
    // micro-step.
    in.gradAccum = 4;
    PlanResult a = plan(in);
    CHECK_EQ(a.perDevice.grads, 4 * Pp);
    CHECK_EQ(a.gatherBytesPerDevicePerStep,
        int64_t(std::llround(4 * 2.0 / 3 * 4 * (2 * (Pp - root) + root))));
    CHECK_EQ(a.reduceBytesPerDevicePerStep, r.reduceBytesPerDevicePerStep);
    CHECK_EQ(a.tokensPerStep, int64_t(4 * 256 * 4 * 3));
    CHECK(!a.notes.empty());

    // Tiny activations: the peak moves to backward end, where every unit's reduce-scatter input
    // (4 Pp), output (4 Pp / 3) and Gloo alltoall receive buffer (4 Pp) wait for the step.
    in.gradAccum = 1;
    in.microBatch = 1;
    in.seqLen = 8;
    PlanResult e = plan(in);
    CHECK_EQ(e.peakPhase, std::string("backward end"));
    CHECK_EQ(e.perDevice.activations, int64_t(0));
    CHECK_EQ(e.perDevice.gatheredParams, 4 * root);
    CHECK_EQ(e.perDevice.grads, int64_t(std::llround(4.0 * Pp * (1 + 1.0 / 3))));
    CHECK_EQ(e.perDevice.commBuffers, 4 * Pp);
}

// Qwen2.5-7B: ddp on 1 GPU in fp32, and zero1 / zero2 on 4 GPUs in bf16-mixed.
void testQwenDdpZero12()
{
    PlanInput in;
    in.model = preset("qwen2.5-7b");
    in.strategy = Strategy::Ddp;
    in.gpusPerNode = 1;
    in.precision = Precision::Fp32;
    in.microBatch = 1;
    in.seqLen = 1024;
    in.device = DeviceSpec::gpu(141);
    PlanResult r = plan(in);
    const int64_t P = 7615616512;
    const int64_t root = 2LL * 152064 * 3584 + 3584;
    const int64_t block = (3584LL * 3584 + 3584) + 2 * (512LL * 3584 + 512) + 3584LL * 3584
        + 3LL * 3584 * 18944 + 2 * 3584;
    CHECK_EQ(root + 28 * block, P);
    const MemoryBreakdown& m = r.perDevice;
    CHECK_EQ(m.shardedParams, 4 * P);
    CHECK_EQ(m.gatheredParams, int64_t(0)); // fp32 compute uses the fp32 weights directly
    CHECK_EQ(m.grads, 4 * P);
    CHECK_EQ(m.optimizer, 8 * P);
    CHECK_EQ(m.commBuffers, int64_t(0)); // one rank: no reduce buffer (writeOwnGradients)
    CHECK_EQ(r.bytesSentPerDevicePerStep, int64_t(0)); // one GPU sends nothing
    CHECK_EQ(r.commSeconds, 0.0);
    CHECK_EQ(r.capacityBytes, int64_t(141) << 30);
    CHECK_EQ(r.fits, r.perDevice.total() <= (int64_t(141) << 30));
    CHECK(r.notes.empty());

    // GQA: 28 heads, 4 kv heads of 128. fp32, flash on GPU: no s^2 term.
    const int64_t T = 1024;
    const int64_t perToken = 4 * 3584 + 2 * 3584 + 2 * 512 + 2 * 3584 + 3 * 18944;
    const int64_t oneBlock = T * (4 * perToken + 8) + 4LL * 1 * 28 * 1024;
    CHECK_EQ(m.activations, 28 * oneBlock + T * 4 * 3 * 3584 + T * 4 * (2 * 3584 + 2 * 18944));
    // Chunks of 256 rows (the least; 2^22 / 152064 is fewer), fp32, and h's gradient.
    CHECK_EQ(m.logits, int64_t(256) * 152064 * 4 + T * 3584 * 4);

    // zero1 and zero2 over 4 GPUs, bf16-mixed. Padding: 152064, 3584, 512, 18944 all divide by 4.
    in.gpusPerNode = 4;
    in.precision = Precision::Bf16Mixed;
    in.strategy = Strategy::Zero1;
    PlanResult z1 = plan(in);
    CHECK_EQ(z1.perDevice.shardedParams, 4 * P / 4);
    CHECK_EQ(z1.perDevice.gatheredParams, 2 * P);                // full bf16 params kept
    CHECK_EQ(z1.perDevice.grads, 4 * P / 4 + 4 * P + 2 * block); // shard + full fp32 + bf16 block
    CHECK_EQ(z1.perDevice.optimizer, 8 * P / 4);
    CHECK_EQ(z1.perDevice.commBuffers, 4 * block / 4);
    CHECK_EQ(z1.reduceBytesPerDevicePerStep, int64_t(std::llround(3.0 / 4 * 4 * P)));
    CHECK_EQ(z1.gatherBytesPerDevicePerStep, int64_t(std::llround(3.0 / 4 * 2 * P)));

    in.strategy = Strategy::Zero2;
    PlanResult z2 = plan(in);
    CHECK_EQ(z2.perDevice.shardedParams, 4 * P / 4);
    CHECK_EQ(z2.perDevice.gatheredParams, 2 * P); // all blocks stay gathered until backward
    const int64_t head = 152064LL * 3584 + 3584;
    CHECK_EQ(z2.perDevice.grads, 4 * P / 4 + 2 * (head + block));
    CHECK_EQ(z2.perDevice.optimizer, 8 * P / 4);
    CHECK_EQ(z2.perDevice.commBuffers, int64_t(4 * block * (1 + 1.0 / 4)));
    // ~2P: reduce-scatter fp32 + one all-gather bf16 per micro-step.
    CHECK_EQ(z2.bytesSentPerDevicePerStep,
        int64_t(std::llround(3.0 / 4 * 4 * P)) + int64_t(std::llround(3.0 / 4 * 2 * P)));

    // ddp bf16-mixed over 4: full fp32 state, a bf16 copy of the weights, all-reduce 2P fp32.
    in.strategy = Strategy::Ddp;
    PlanResult d = plan(in);
    CHECK_EQ(d.perDevice.shardedParams + d.perDevice.optimizer, 12 * P);
    CHECK_EQ(d.perDevice.gatheredParams, 2 * P);
    CHECK_EQ(d.perDevice.grads, 4 * P + 2 * block);
    CHECK_EQ(d.bytesSentPerDevicePerStep, int64_t(std::llround(2 * 3.0 / 4 * 4 * P)));
}

// Llama-3-8B, hybrid over 2 nodes x 8 (groups of 8), optimizer offload to host.
void testHybridOffload()
{
    PlanInput in;
    in.model = preset("llama-3-8b");
    in.strategy = Strategy::Hybrid;
    in.shardGroup = 8;
    in.gpusPerNode = 8;
    in.nodes = 2;
    in.precision = Precision::Bf16Mixed;
    in.offload = Offload::Optimizer;
    in.microBatch = 1;
    in.seqLen = 8192;
    PlanResult r = plan(in);
    const int64_t P = 8030261248;
    const int64_t root = 2LL * 128256 * 4096 + 4096;
    const int64_t block = 2LL * 4096 * 4096 + 2LL * 1024 * 4096 + 3LL * 4096 * 14336 + 2 * 4096;
    CHECK_EQ(root + 32 * block, P);
    CHECK_EQ(r.shardDegree, int64_t(8));
    CHECK_EQ(r.replicas, int64_t(2));
    const MemoryBreakdown& m = r.perDevice;
    CHECK_EQ(m.shardedParams, 2 * P / 8); // a bf16 shard to gather from; fp32 master on host
    CHECK_EQ(m.optimizer, int64_t(0));
    const int64_t head = 128256LL * 4096 + 4096;
    CHECK_EQ(m.grads, 2 * (head + block)); // the fp32 shard grad lives on host
    CHECK_EQ(m.gatheredParams, 2 * (root + 2 * block));
    CHECK_EQ(r.hostBytesPerDevice, (4 + 4 + 8) * P / 8);
    // Shard traffic within the group (7/8) + all-reduce of the fp32 grad shard across the 2
    // replicas (2 x 1/2 x shard).
    CHECK_EQ(r.reduceBytesPerDevicePerStep,
        int64_t(std::llround(7.0 / 8 * 4 * P + 2 * 0.5 * 4 * P / 8.0)));
    CHECK_EQ(r.gatherBytesPerDevicePerStep,
        int64_t(std::llround(7.0 / 8 * 2 * (2 * (P - root) + root))));
    // Group traffic on NVLink, replica traffic on InfiniBand.
    double groupTraffic
        = static_cast<double>(r.gatherBytesPerDevicePerStep) + 7.0 / 8 * 4 * static_cast<double>(P);
    double replicaTraffic = 2 * 0.5 * 4 * static_cast<double>(P) / 8.0;
    CHECK_NEAR(r.commSeconds, groupTraffic / 450e9 + replicaTraffic / 50e9, 1e-6);

    // params+optimizer: nothing persistent on the device, the bf16 shard joins the host.
    in.offload = Offload::ParamsAndOptimizer;
    PlanResult p = plan(in);
    CHECK_EQ(p.perDevice.shardedParams, int64_t(0));
    CHECK_EQ(p.hostBytesPerDevice, (4 + 4 + 8 + 2) * P / 8);
    // A host too small for 8 ranks' offloaded state does not fit.
    in.device.hostMemoryBytes = 100LL << 30;
    PlanResult small = plan(in);
    CHECK(!small.fits);
}

void testPureBf16AndFp16()
{
    PlanInput in;
    in.model = preset("llama-2-7b");
    in.gpusPerNode = 8;
    in.seqLen = 512;
    in.precision = Precision::Bf16;
    PlanResult r = plan(in);
    const int64_t P = 6738415616;
    CHECK_EQ(r.perDevice.shardedParams, 2 * P / 8);
    CHECK_EQ(r.perDevice.optimizer, 4 * P / 8);
    CHECK_EQ(r.reduceBytesPerDevicePerStep, int64_t(std::llround(7.0 / 8 * 2 * P)));
    in.precision = Precision::Fp16Mixed;
    PlanResult f = plan(in);
    in.precision = Precision::Bf16Mixed;
    PlanResult b = plan(in);
    CHECK_EQ(f.perDevice.total(), b.perDevice.total());
    in.precision = Precision::Fp32;
    PlanResult f32 = plan(in);
    CHECK_NEAR(f32.computeSeconds, f32.deviceFlopsPerStep / 67e12, 1e-12);

    // bf16-mixed with a bf16 reduce (the run spec's reduce_dtype): the reduce-scatter sends and
    // buffers half the bytes; the gathers, masters and AdamW state do not change.
    in.precision = Precision::Bf16Mixed;
    in.bf16Reduce = true;
    PlanResult half = plan(in);
    CHECK_EQ(half.reduceBytesPerDevicePerStep, int64_t(std::llround(7.0 / 8 * 2 * P)));
    CHECK_EQ(half.reduceBytesPerDevicePerStep * 2, b.reduceBytesPerDevicePerStep);
    CHECK_EQ(half.gatherBytesPerDevicePerStep, b.gatherBytesPerDevicePerStep);
    CHECK_EQ(half.perDevice.commBuffers * 2, b.perDevice.commBuffers);
    CHECK_EQ(half.perDevice.shardedParams, b.perDevice.shardedParams);
    CHECK_EQ(half.perDevice.optimizer, b.perDevice.optimizer);
    CHECK(toJson(half).value("reduce_dtype", "") == "bf16");
    in.precision = Precision::Fp32;
    CHECK_THROWS_WITH(plan(in), "bf16 reduce goes with bf16-mixed");
}

// CPU ranks (Gloo) send bf16 gradients in bf16 under the fp32 reduce and sum them into fp32 on
// arrival (ShardedStrategy::reduceWireDtype): the sharded strategies' reduce-scatter sends, and
// its input and receive buffers hold, the compute dtype's bytes; ddp's all-reduce stays fp32.
void testCpuBf16ReduceWire()
{
    PlanInput in;
    in.model = preset("tiny-15m");
    in.strategy = Strategy::Zero3;
    in.gpusPerNode = 2;
    in.precision = Precision::Bf16Mixed;
    in.microBatch = 2;
    in.seqLen = 256;
    in.device = DeviceSpec::cpu(int64_t(24) << 30);
    const PlanResult fp32Reduce = plan(in);
    in.bf16Reduce = true;
    const PlanResult bf16Reduce = plan(in);
    CHECK_EQ(fp32Reduce.reduceBytesPerDevicePerStep, bf16Reduce.reduceBytesPerDevicePerStep);
    CHECK_EQ(fp32Reduce.gatherBytesPerDevicePerStep, bf16Reduce.gatherBytesPerDevicePerStep);
    in.bf16Reduce = false;
    in.device = DeviceSpec::gpu(80);
    const PlanResult gpu = plan(in);
    CHECK_EQ(gpu.reduceBytesPerDevicePerStep, 2 * fp32Reduce.reduceBytesPerDevicePerStep);
    in.device = DeviceSpec::cpu(int64_t(24) << 30);
    in.strategy = Strategy::Ddp;
    const PlanResult ddp = plan(in);
    in.device = DeviceSpec::gpu(80);
    CHECK_EQ(ddp.reduceBytesPerDevicePerStep, plan(in).reduceBytesPerDevicePerStep);
}

// ZeRO paper (Rajbhandari et al. 2020), Figure 1: psi = 7.5B, N = 64, K = 12.
void testZeroPaper()
{
    const double psi = 7.5e9;
    auto gb = [](const MemoryBreakdown& m) { return static_cast<double>(m.modelStates()) / 1e9; };
    CHECK_NEAR(gb(zeroPaperModelStates(Strategy::Ddp, psi, 64)), 120.0, 1e-12);
    CHECK_NEAR(gb(zeroPaperModelStates(Strategy::Zero1, psi, 64)), 31.40625, 1e-12);
    CHECK_NEAR(gb(zeroPaperModelStates(Strategy::Zero2, psi, 64)), 16.640625, 1e-12);
    CHECK_NEAR(gb(zeroPaperModelStates(Strategy::Zero3, psi, 64)), 1.875, 1e-12);
    // As the paper prints them, to one decimal.
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f/%.1f/%.1f/%.1f",
        gb(zeroPaperModelStates(Strategy::Ddp, psi, 64)),
        gb(zeroPaperModelStates(Strategy::Zero1, psi, 64)),
        gb(zeroPaperModelStates(Strategy::Zero2, psi, 64)),
        gb(zeroPaperModelStates(Strategy::Zero3, psi, 64)));
    CHECK_EQ(std::string(buf), std::string("120.0/31.4/16.6/1.9"));

    // plan() in zero-paper mode: Llama-2-7B over 64 GPUs (8 nodes x 8).
    PlanInput in;
    in.model = preset("llama-2-7b");
    in.mode = AccountingMode::ZeroPaper;
    in.gpusPerNode = 8;
    in.nodes = 8;
    in.microBatch = 1;
    in.seqLen = 4096;
    in.device.overheadBytes = 0;
    const double P = 6738415616.0;
    const double expect[] = {16 * P, 4 * P + 12 * P / 64, 2 * P + 14 * P / 64, 16 * P / 64};
    const Strategy order[] = {Strategy::Ddp, Strategy::Zero1, Strategy::Zero2, Strategy::Zero3};
    for (int i = 0; i < 4; ++i) {
        in.strategy = order[i];
        PlanResult r = plan(in);
        CHECK_NEAR(static_cast<double>(r.perDevice.modelStates()), expect[i], 1e-9);
        // Korthikanti: s*b*h*(34 + 5*a*s/h) per layer; 4*s*b*V fp32 logits.
        CHECK_NEAR(static_cast<double>(r.perDevice.activations),
            32.0 * 4096 * 1 * 4096 * (34.0 + 5.0 * 32 * 4096 / 4096), 1e-12);
        CHECK_EQ(r.perDevice.logits, int64_t(4) * 4096 * 32000);
        CHECK_EQ(r.perDevice.commBuffers, int64_t(0));
    }
    in.strategy = Strategy::Zero3;
    in.checkpointing = Checkpointing::Full;
    PlanResult ck = plan(in);
    CHECK_EQ(ck.perDevice.activations, int64_t(32) * 2 * 4096 * 4096);
    // Communication: 3 psi 16-bit elements for ZeRO-3, 2 psi for DDP.
    CHECK_NEAR(static_cast<double>(ck.bytesSentPerDevicePerStep), 3 * P * 2, 1e-12);
    in.strategy = Strategy::Ddp;
    CHECK_NEAR(static_cast<double>(plan(in).bytesSentPerDevicePerStep), 2 * P * 2, 1e-12);
}

// Tensor and pipeline parallelism (issue 29), in the paper's accounting: the seeds' layout for
// Llama-2-70B on 64 GPUs (8 nodes x 8), DP 8 x TP 4 x PP 2, every figure computed here from the
// model's shapes (h 8192, 80 layers, 64 heads / 8 KV heads, FFN 28672, vocabulary 32000).
void testTensorAndPipelineParallel()
{
    PlanInput in;
    in.model = preset("llama-2-70b");
    in.mode = AccountingMode::ZeroPaper;
    in.strategy = Strategy::Zero1;
    in.gpusPerNode = 8;
    in.nodes = 8;
    in.tp = 4;
    in.pp = 2;
    in.sequenceParallel = true;
    in.microBatch = 1;
    in.seqLen = 4096;
    in.gradAccum = 16;
    in.device.overheadBytes = 0;
    in.calibration.gpuFragmentation = 0;
    const double h = 8192, ffn = 28672, kv = 1024, V = 32000, t = 4;
    // A block: q, o (h x h), k, v (kv x h), gate, up, down (ffn x h) split over tp; two norms
    // whole.
    const double block = (2 * h * h + 2 * kv * h + 3 * ffn * h) / t + 2 * h;
    const double stage0 = 40 * block + V * h / t;     // + the embedding
    const double stage1 = 40 * block + V * h / t + h; // + the head and the final norm
    const double seq = 4096, b = 1;
    const double act0 = 40 * 2 * seq * b * h * 34 / t; // 2 micro-batches in flight on stage 0
    const double act1 = 40 * 1 * seq * b * h * 34 / t;
    const double logits = 4 * seq * b * V / t;
    auto states = [](double psi) { return 2 * psi + 2 * psi + 12 * psi / 8; }; // ZeRO-1 over 8
    const PlanResult r = plan(in);
    const bool firstIsPeak = states(stage0) + act0 >= states(stage1) + act1 + logits;
    CHECK(firstIsPeak);
    CHECK_EQ(r.peakStage, int64_t(0));
    CHECK_NEAR(static_cast<double>(r.stageParams), stage0, 1e-12);
    CHECK_NEAR(static_cast<double>(r.perDevice.modelStates()), states(stage0), 1e-9);
    CHECK_NEAR(static_cast<double>(r.perDevice.activations), act0, 1e-12);
    CHECK_EQ(r.perDevice.logits, int64_t(0));
    CHECK_EQ(r.shardDegree, int64_t(8));
    CHECK_EQ(r.replicas, int64_t(1));
    CHECK_EQ(r.peakPhase, std::string("backward start, pipeline stage 0"));
    // Tokens: the 8 data-parallel replicas' 16 micro-batches of 4096.
    CHECK_EQ(r.tokensPerStep, int64_t(8) * 16 * 4096);
    CHECK_NEAR(r.deviceFlopsPerStep, r.flopsPerToken * 16 * 4096 / 8, 1e-12);
    // 1F1B: (pp - 1) / (m + pp - 1) of the step idle.
    CHECK_NEAR(r.bubbleFraction, 1.0 / 17.0, 1e-12);
    // Tensor parallel: 4 all-reduce-equivalents per layer and micro-batch, each 2 (t-1)/t of
    // s*b*h 16-bit elements, and on stage 0 the vocabulary-parallel embedding's all-reduce;
    // pipeline: 2 stages, each an end that sends one way a micro-batch's s*b*h (activations
    // forward from the first, gradients back from the last; every TP rank its copy, as the
    // engine sends them).
    CHECK_NEAR(static_cast<double>(r.tpBytesPerDevicePerStep),
        16 * (40 * 4 + 1) * 2 * 0.75 * seq * b * h * 2, 1e-12);
    CHECK_NEAR(static_cast<double>(r.ppBytesPerDevicePerStep), 16 * seq * b * h * 2, 1e-12);
    // Without sequence parallel the norms', residual adds' and dropouts' activations stay whole
    // on every GPU (Korthikanti's s*b*h*(10 + 24/t)); under full recomputation the block input
    // is whole too (2*s*b*h) instead of split (2*s*b*h/t). The traffic is the same (a
    // reduce-scatter and an all-gather move what an all-reduce moves).
    {
        PlanInput noSp = in;
        noSp.sequenceParallel = false;
        const PlanResult n = plan(noSp);
        CHECK_NEAR(static_cast<double>(n.perDevice.activations),
            40 * 2 * seq * b * h * (10 + 24 / t), 1e-12);
        CHECK_EQ(n.tpBytesPerDevicePerStep, r.tpBytesPerDevicePerStep);
        bool said = false;
        for (const auto& note : n.notes)
            said = said || note.find("without sequence parallel") != std::string::npos;
        CHECK(said);
        for (const bool sp : {true, false}) {
            PlanInput ck = in;
            ck.sequenceParallel = sp;
            ck.checkpointing = Checkpointing::Full;
            CHECK_NEAR(static_cast<double>(plan(ck).perDevice.activations),
                40 * 2 * 2 * seq * b * h / (sp ? t : 1), 1e-12);
        }
        CHECK(toJson(r)["sequence_parallel"].get<bool>());
        CHECK(!toJson(n)["sequence_parallel"].get<bool>());
        // Refused as the engine refuses it, naming the fix.
        PlanInput odd = in;
        odd.seqLen = 4094;
        CHECK_THROWS_WITH(plan(odd), "use --seq-len 4092 or 4096");
        odd = in;
        odd.tp = 1;
        odd.pp = 8;
        CHECK_THROWS_WITH(
            plan(odd), "use --tensor-parallel 2 or more, or drop --sequence-parallel");
        odd = in;
        odd.model.vocabSize = 32002;
        CHECK_THROWS_WITH(plan(odd), "does not divide the model's vocabulary of 32002");
    }
    // The seeds' answer fits 80 GB; the same model without tensor or pipeline parallelism does not.
    CHECK(r.fits);
    in.sequenceParallel = false; // from here on layouts with tp 1 too
    PlanInput flat = in;
    flat.tp = 1;
    flat.pp = 1;
    CHECK(!plan(flat).fits);
    // The last stage with the head: its logits are split by vocabulary.
    in.pp = 8;
    in.tp = 1;
    in.nodes = 8;
    const PlanResult deep = plan(in);
    CHECK_EQ(deep.input.mesh().dpShard, int64_t(8));
    CHECK(deep.notes.size() >= 2);

    // Refusals name the fix.
    PlanInput bad = in;
    bad.tp = 4;
    bad.pp = 2;
    // The engine accounting plans the layouts this engine trains, and refuses what it refuses.
    bad.mode = AccountingMode::Engine;
    CHECK(plan(bad).input.mesh().tp == 4);
    // Offload under tensor and pipeline parallel: each rank's masters and AdamW state go to the
    // host, so the device holds less.
    {
        PlanInput off = bad;
        off.offload = Offload::Optimizer;
        const PlanResult offloaded = plan(off);
        const PlanResult kept = plan(bad);
        CHECK(offloaded.hostBytesPerDevice > 0);
        CHECK_EQ(kept.hostBytesPerDevice, int64_t(0));
        CHECK(offloaded.perDevice.total() < kept.perDevice.total());
    }
    // Preference objectives under tensor and pipeline parallel: a pair is two sequences, so the
    // plan is the supervised one with twice the micro-batch (tst_preference measures it).
    {
        PlanInput dpo = bad;
        dpo.objective = "dpo";
        PlanInput twice = bad;
        twice.microBatch *= 2;
        CHECK_EQ(plan(dpo).perDevice.total(), plan(twice).perDevice.total());
        CHECK_EQ(plan(dpo).peakPhase, plan(twice).peakPhase);
    }
    bad.mode = AccountingMode::ZeroPaper;
    bad.tp = 3;
    bad.pp = 1;
    bad.nodes = 3;
    CHECK_THROWS_WITH(plan(bad), "tensor parallel degree 3 does not divide the 8 GPUs of a node");
    CHECK_THROWS_WITH(plan(bad), "or a multiple of 8 to span whole nodes");
    // Tensor parallel over whole nodes is planned, with a warning about the link it crosses.
    PlanInput wide = bad;
    wide.tp = 16;
    wide.nodes = 2;
    const PlanResult across = plan(wide);
    CHECK_EQ(across.input.mesh().tp, int64_t(16));
    bool warned = false;
    for (const auto& n : across.notes)
        warned = warned
            || (n.find("warning: tensor parallel 16 spans 2 nodes of 8 GPUs") != std::string::npos
                && n.find("use tensor parallel 8 or less") != std::string::npos);
    CHECK(warned);
    wide.tp = 8;
    for (const auto& n : plan(wide).notes)
        CHECK(n.find("warning: tensor parallel") == std::string::npos);
    // The link is what makes it slower: the same layout's step takes longer across nodes.
    wide.tp = 16;
    PlanInput inside = wide;
    inside.gpusPerNode = 16;
    inside.nodes = 1;
    CHECK(plan(inside).stepSeconds < across.stepSeconds);
    bad.tp = 1;
    bad.pp = 128;
    bad.nodes = 16;
    CHECK_THROWS_WITH(plan(bad), "128 pipeline stages for 80 layers");
    PlanInput heads = in;
    heads.model = preset("llama-2-7b"); // 32 heads
    heads.tp = 8;
    heads.pp = 1;
    heads.gpusPerNode = 8;
    heads.nodes = 1;
    plan(heads); // 8 divides 32
    // JSON carries the mesh.
    const auto j = toJson(r);
    CHECK_EQ(j["mesh"]["tp"].get<int64_t>(), int64_t(4));
    CHECK_EQ(j["mesh"]["pp"].get<int64_t>(), int64_t(2));
    CHECK_EQ(j["mesh"]["dp_shard"].get<int64_t>(), int64_t(8));
}

void testDerivedAnswers()
{
    PlanInput in;
    in.model = preset("llama-2-7b");
    in.strategy = Strategy::Zero3;
    in.gpusPerNode = 8;
    in.checkpointing = Checkpointing::Full;
    in.seqLen = 4096;
    // Everything but activations and logits is independent of the micro-batch, and those two
    // scale linearly with it; overhead = 1.5 GiB + 5%. Solve total(b) <= 80 GiB by hand.
    in.microBatch = 1;
    PlanResult one = plan(in);
    const MemoryBreakdown& m = one.perDevice;
    const double fixed = static_cast<double>(
        m.shardedParams + m.gatheredParams + m.grads + m.optimizer + m.commBuffers);
    const double perB = static_cast<double>(m.activations + m.logits);
    const double cap = 80.0 * kGiB;
    const int64_t expectB
        = static_cast<int64_t>(std::floor((cap - 1.5 * kGiB - 1.05 * fixed) / (1.05 * perB)));
    int64_t b = largestMicroBatch(in);
    CHECK_EQ(b, expectB);
    CHECK(b > 1);
    in.microBatch = b;
    CHECK(plan(in).fits);
    in.microBatch = b + 1;
    CHECK(!plan(in).fits);
    CHECK_EQ(largestMicroBatch(in, 4), int64_t(4)); // capped by the limit

    // Fewest GPUs: zero3 state is 16P/N + fixed terms; by hand with the micro-batch of 2.
    in.microBatch = 2;
    int64_t g = fewestGpus(in);
    CHECK(g >= 1 && g <= 8);
    PlanInput at = in;
    at.gpusPerNode = g;
    CHECK(plan(at).fits);
    if (g > 1) {
        at.gpusPerNode = g - 1;
        CHECK(!plan(at).fits);
    }
    // 16P alone = 100 GiB > 80: one GPU cannot hold it.
    CHECK(g >= 2);

    // DDP of a 7B model never fits 80 GiB: fewest GPUs 0, largest micro-batch 0.
    in.strategy = Strategy::Ddp;
    CHECK_EQ(fewestGpus(in), int64_t(0));
    CHECK_EQ(largestMicroBatch(in), int64_t(0));

    // Llama-3.1-405B zero3 in bf16-mixed with full checkpointing needs many nodes: 16 bytes x
    // 405.85B = 6.5 TB of state, so more than 6.5e12 / 80 GiB = 76 GPUs, i.e. >= 10 nodes.
    PlanInput big;
    big.model = preset("llama-3.1-405b");
    big.strategy = Strategy::Zero3;
    big.gpusPerNode = 8;
    big.checkpointing = Checkpointing::Full;
    big.seqLen = 4096;
    int64_t bg = fewestGpus(big);
    CHECK(bg % 8 == 0 && bg >= 80);
    PlanInput atBig = big;
    atBig.nodes = bg / 8;
    CHECK(plan(atBig).fits);
    atBig.nodes = bg / 8 - 1;
    CHECK(!plan(atBig).fits);

    // Hybrid: memory depends on the group; the answer is the group size when it fits.
    PlanInput hy = in;
    hy.strategy = Strategy::Hybrid;
    hy.shardGroup = 4;
    CHECK_EQ(fewestGpus(hy), int64_t(4));

    // All strategies side by side: 4 columns on one node, hybrid added across nodes.
    auto cols = planAllStrategies(in);
    CHECK_EQ(cols.size(), size_t(4));
    in.nodes = 2;
    cols = planAllStrategies(in);
    CHECK_EQ(cols.size(), size_t(5));
    CHECK(cols.back().input.strategy == Strategy::Hybrid);
    CHECK_EQ(cols.back().input.shardGroup, int64_t(8));
    // ZeRO stages order their memory: ddp > zero1 > zero2 > zero3.
    CHECK(cols[0].perDevice.total() > cols[1].perDevice.total());
    CHECK(cols[1].perDevice.total() > cols[2].perDevice.total());
    CHECK(cols[2].perDevice.total() > cols[3].perDevice.total());
}

void testNotesAndErrors()
{
    PlanInput in;
    in.model = preset("tiny-1m");
    in.seqLen = 256;
    in.gpusPerNode = 1;
    in.strategy = Strategy::Zero3;
    PlanResult one = plan(in); // allowed
    CHECK(!one.notes.empty()
        && one.notes[0].find("sharding gains nothing on 1 GPU") != std::string::npos);

    auto bad = [&](auto mutate, const char* needle) {
        PlanInput x = in;
        mutate(x);
        CHECK_THROWS_WITH(plan(x), needle);
    };
    bad([](PlanInput& x) { x.microBatch = 0; }, "micro-batch must be a positive integer (got 0)");
    bad([](PlanInput& x) { x.microBatch = -2; }, "micro-batch must be a positive integer");
    bad([](PlanInput& x) { x.seqLen = 0; }, "sequence length must be a positive");
    bad([](PlanInput& x) { x.gradAccum = -1; }, "gradient accumulation must be a positive");
    bad([](PlanInput& x) { x.gpusPerNode = 0; }, "GPUs per node must be a positive");
    bad([](PlanInput& x) { x.nodes = 0; }, "node count must be a positive");
    bad([](PlanInput& x) { x.seqLen = 4096; }, "longer than tiny-1m's maximum of 1024");
    bad([](PlanInput& x) { x.device.memoryBytes = 0; }, "device memory must be positive");
    bad(
        [](PlanInput& x) {
            x.gpusPerNode = 8;
            x.strategy = Strategy::Hybrid;
            x.shardGroup = 3;
        },
        "hybrid shard group 3 does not divide the 8 GPUs; use a divisor of 8 (1, 2, 4, 8)");
    bad(
        [](PlanInput& x) {
            x.gpusPerNode = 8;
            x.strategy = Strategy::Hybrid;
        },
        "hybrid needs a shard group size");
    bad(
        [](PlanInput& x) {
            x.device = DeviceSpec::cpu(8LL << 30);
            x.offload = Offload::Optimizer;
        },
        "means nothing on a CPU device");
    bad([](PlanInput& x) { x.model.numLayers = 0; }, "zero or negative sizes");

    CHECK_THROWS_WITH(parseStrategy("zero4"), "unknown strategy 'zero4' (use one of: ddp");
    CHECK_THROWS_WITH(parsePrecision("bf32"), "unknown precision 'bf32'");
    CHECK_THROWS_WITH(parseOffload("params"), "params+optimizer");
    CHECK_THROWS_WITH(parseCheckpointing("some"), "none, full");
    CHECK_THROWS_WITH(parseAccountingMode("paper"), "zero-paper");
    CHECK(parseStrategy("hybrid") == Strategy::Hybrid);
    for (Strategy s : allStrategies())
        CHECK(parseStrategy(toString(s)) == s);

    // MoE: planned, with a note.
    PlanInput ds;
    ds.model = preset("deepseek-v3");
    ds.gpusPerNode = 8;
    ds.nodes = 32;
    ds.seqLen = 4096;
    PlanResult dr = plan(ds);
    CHECK(dr.activeParams < dr.params);
    CHECK_NEAR(dr.flopsPerToken,
        6.0 * static_cast<double>(dr.activeParams) + 12.0 * 61 * 128 * 192 * 4096, 1e-12);
    bool moeNote = false;
    for (auto& n : dr.notes)
        moeNote = moeNote || n.find("planning only") != std::string::npos;
    CHECK(moeNote);
}

void testCalibrationAndJson()
{
    Calibration c;
    nlohmann::json j = c.toJson();
    CHECK_EQ(j["act_per_hidden"].get<double>(), 4.0);
    CHECK_EQ(j["zero_paper_k"].get<double>(), 12.0);
    j["gpu_overhead_bytes"] = 0;
    j["gpu_fragmentation"] = 0;
    j["logits_compute_copies"] = 0;
    Calibration d = Calibration::fromJson(j);
    CHECK_EQ(d.gpuOverheadBytes, 0.0);
    CHECK_THROWS_WITH(Calibration::fromJson({{"act_per_hiden", 1}}), "unknown key 'act_per_hiden'");
    CHECK_THROWS_WITH(Calibration::fromJson({{"act_per_hidden", "x"}}), "'act_per_hidden' must be");
    CHECK_THROWS_WITH(Calibration::fromJson({{"act_per_hidden", -1}}), "non-negative");
    CHECK_THROWS_WITH(Calibration::load("/nonexistent/cal.json"), "cannot be read");

    // A calibration change is a data change: the same plan with the new coefficients.
    PlanInput in;
    in.model = preset("llama-2-7b");
    in.gpusPerNode = 8;
    in.seqLen = 1024;
    in.calibration = d;
    PlanResult r = plan(in);
    CHECK_EQ(r.perDevice.overhead, int64_t(0));
    CHECK_EQ(r.perDevice.logits, int64_t(256) * 32000 * 4 + 1024 * 4096 * 2); // no bf16 copies

    nlohmann::json out = toJson(r);
    CHECK_EQ(out["params"].get<int64_t>(), int64_t(6738415616));
    CHECK(out["params"].is_number_integer());
    int64_t sum = 0;
    for (auto& [k, v] : out["per_device"].items())
        if (k != "total")
            sum += v.get<int64_t>();
    CHECK_EQ(sum, out["per_device"]["total"].get<int64_t>());
    CHECK_EQ(out["per_device"].size(), size_t(14)); // 13 components + total
    CHECK(out["fits"].is_boolean());
    CHECK_EQ(formatGiB(int64_t(3) << 29), std::string("1.50 GiB"));
}

// The component table is the one list every view loops over: it names each field of
// MemoryBreakdown once, and total(), modelStates() and components() follow it.
void testComponentTable()
{
    const auto& table = planComponents();
    CHECK_EQ(table.size(), sizeof(MemoryBreakdown) / sizeof(int64_t)); // a new field needs a row
    MemoryBreakdown m;
    int64_t expectTotal = 0, expectStates = 0, value = 1;
    for (const PlanComponent& c : table) {
        CHECK_EQ(m.*c.bytes, int64_t(0)); // not named by an earlier row
        m.*c.bytes = value;
        expectTotal += value;
        if (c.modelState)
            expectStates += value;
        value *= 2;
    }
    CHECK_EQ(m.total(), expectTotal);
    CHECK_EQ(m.modelStates(), expectStates);
    CHECK_EQ(m.modelStates(),
        m.shardedParams + m.gatheredParams + m.grads + m.optimizer + m.frozenBase + m.quantizedBase
            + m.adapters + m.adapterGrads + m.adapterOptimizer);
    const auto parts = m.components();
    CHECK_EQ(parts.size(), table.size());
    for (size_t i = 0; i < table.size(); ++i) {
        CHECK_EQ(parts[i].first, std::string(table[i].key));
        CHECK_EQ(parts[i].second, m.*table[i].bytes);
        CHECK(std::string(table[i].label).size() > 0 && std::string(table[i].meaning).size() > 20);
    }
    // Which fine-tuning holds which rows.
    PlanInput full, lora, qlora;
    lora.method = Method::Lora;
    qlora.method = Method::Qlora;
    auto rows = [&](const PlanInput& in) {
        std::string out;
        for (const PlanComponent& c : table)
            if (heldUnder(c, in))
                out += std::string(c.key) + " ";
        return out;
    };
    CHECK_EQ(rows(full),
        std::string("sharded_params gathered_params grads optimizer activations logits "
                    "comm_buffers overhead "));
    CHECK_EQ(rows(lora),
        std::string("gathered_params activations logits comm_buffers overhead frozen_base "
                    "adapters adapter_grads adapter_optimizer "));
    CHECK_EQ(rows(qlora),
        std::string("gathered_params activations logits comm_buffers overhead frozen_base "
                    "quantized_base adapters adapter_grads adapter_optimizer "));
}

} // namespace

// GPUs as nvidia-smi names them map to the catalogue (the Hosts page plans for what a host
// reports); the A100's two sizes by memory, or by name when the memory is unknown.
void testGpuNamesFromNvidiaSmi()
{
    auto key = [](const std::string& name, double mib) {
        auto d = catalogDeviceForGpu(name, mib);
        return d ? d->key : std::string("none");
    };
    CHECK_EQ(key("NVIDIA H200", 143771), std::string("h200"));
    CHECK_EQ(key("NVIDIA H100 80GB HBM3", 81559), std::string("h100-80g"));
    CHECK_EQ(key("NVIDIA A100-SXM4-40GB", 40960), std::string("a100-40g"));
    CHECK_EQ(key("NVIDIA A100-SXM4-80GB", 81920), std::string("a100-80g"));
    CHECK_EQ(key("NVIDIA A100-SXM4-40GB", 0), std::string("a100-40g"));
    CHECK_EQ(key("NVIDIA A100 80GB PCIe", 0), std::string("a100-80g"));
    CHECK_EQ(key("NVIDIA L40S", 46068), std::string("l40s"));
    CHECK_EQ(key("NVIDIA RTX 6000 Ada Generation", 49140), std::string("rtx-6000-ada"));
    CHECK_EQ(key("NVIDIA GeForce RTX 4090", 24564), std::string("rtx-4090"));
    CHECK_EQ(key("NVIDIA GeForce RTX 3090", 24576), std::string("rtx-3090"));
    CHECK_EQ(key("Tesla V100-SXM2-32GB", 32768), std::string("none"));
    CHECK_EQ(key("", 0), std::string("none"));
}

// The seeds' layouts on 80 GB GPUs in nodes of 8 (ZeRO-1, bf16, sequence 4096, global batch
// 1,024, full checkpointing): the search plans every tp x pp, keeps the global batch, and
// recommends the fastest layout that fits; for 70B on 64 GPUs data parallelism alone does not
// fit and the pick is a tensor/pipeline layout; for 7B on 8 it is the seeds' DP 8.
PlanInput seedsLayoutInput(const std::string& model, int64_t nodes)
{
    PlanInput in;
    in.model = preset(model);
    in.strategy = Strategy::Zero1;
    in.gpusPerNode = 8;
    in.nodes = nodes;
    in.microBatch = 1;
    in.seqLen = 4096;
    in.gradAccum = 1024 / (8 * nodes);
    in.checkpointing = Checkpointing::Full;
    return in;
}

void testLayoutSearch()
{
    {
        const LayoutRecommendation r = recommendLayout(seedsLayoutInput("llama-2-70b", 8));
        CHECK_EQ(r.gpus, int64_t(64));
        CHECK_EQ(r.globalBatch, int64_t(1024));
        // tp over 1, 2, 4, 8 (inside a node of 8) and pp over the divisors of the rest.
        CHECK_EQ(r.candidates.size(), size_t(7 + 6 + 5 + 4));
        CHECK(r.best >= 0);
        const LayoutCandidate& best = r.candidates[size_t(r.best)];
        CHECK(best.fits() && best.tp * best.pp > 1);
        double fastest = 0;
        for (const auto& c : r.candidates) {
            if (c.plan)
                CHECK_EQ(c.gradAccum * c.dp, int64_t(1024)); // the global batch kept
            if (c.fits())
                fastest = std::max(fastest, c.plan->tokensPerSecond);
            if (c.tp == 1 && c.pp == 1)
                CHECK(c.plan && !c.fits()); // 289.7 GiB a GPU (BENCHMARKS.md)
            if (c.tp == 4 && c.pp == 2)
                CHECK(c.fits()); // the seeds' answer fits
        }
        CHECK(best.plan->tokensPerSecond >= fastest / 1.01);
        CHECK(r.reason.find(best.name() + " fits") == 0);
        CHECK(r.reason.find("data parallelism alone (DP 64 x TP 1 x PP 1) needs")
            != std::string::npos);
    }
    {
        const LayoutRecommendation r = recommendLayout(seedsLayoutInput("llama-2-7b", 1));
        CHECK(r.best >= 0);
        CHECK_EQ(r.candidates[size_t(r.best)].name(), std::string("DP 8 x TP 1 x PP 1"));
    }
    {
        // The global batch is the given layout's: 4 sequences at TP 2 (DP 4), which DP 8 cannot
        // split into micro-batches of 1: said, not planned.
        PlanInput in = seedsLayoutInput("llama-2-7b", 1);
        in.tp = 2;
        in.gradAccum = 1;
        const LayoutRecommendation r = recommendLayout(in);
        CHECK_EQ(r.globalBatch, int64_t(4));
        int refused = 0;
        for (const auto& c : r.candidates)
            if (c.dp == 8) {
                CHECK(!c.plan && c.refused.find("does not split") != std::string::npos);
                ++refused;
            }
        CHECK_EQ(refused, 1);
        CHECK(r.best >= 0);
    }
    {
        // Nothing fits: the reason names the closest layout and what it needs.
        PlanInput in = seedsLayoutInput("llama-3.1-405b", 1);
        in.checkpointing = Checkpointing::None;
        const LayoutRecommendation r = recommendLayout(in);
        CHECK_EQ(r.best, -1);
        CHECK(r.reason.find("no layout of 8 GPUs fits: the smallest,") == 0);
    }
}

// Megatron-LM's theoretical memory, term by term from its formula (theoretical_memory_usage.py)
// for Llama-2-70B at DP 8 x TP 4 x PP 2. Its parameter count with the unpadded vocabulary is the
// checkpoint's exact count (the planner's, from the shapes) plus the layer-norm biases Megatron
// counts (weight and bias, 2h a norm) and RMSNorm does not have: (2L + 1) h.
void testMegatronFormula()
{
    PlanInput in = seedsLayoutInput("llama-2-70b", 8);
    in.tp = 4;
    in.pp = 2;
    in.gradAccum = 128;
    const MegatronMemory m = megatronTheoreticalMemory(in, true);
    const double h = 8192, L = 80, ffn = 28672, s = 4096;
    const double Vp = 32256; // 32000 padded to a multiple of 128 x 4
    const double layers = L * (2 * h * h + 2 * 1024 * h + 3 * ffn * h + 4 * h) + 2 * h;
    CHECK_NEAR(m.parameters, layers + 2 * Vp * h, 1e-12);
    PlanInput in1 = in;
    in1.tp = 1;
    in1.pp = 1;
    in1.mode = AccountingMode::ZeroPaper;
    // 32000 is a multiple of 128: no padding at tp 1.
    CHECK_NEAR(megatronTheoreticalMemory(in1).parameters,
        double(plan(in1).params) + (2 * L + 1) * h, 1e-12);
    CHECK_NEAR(m.mostLoadedShard, (layers / 2 + Vp * h) / 4, 1e-12);
    CHECK_NEAR(m.bytesPerParameter, 6 + 12.0 / 8, 1e-12);
    CHECK_NEAR(m.weightAndOptimizerBytes, m.mostLoadedShard * 7.5, 1e-12);
    // Activations: s*b*h*(18 + 4*ffn/h) a layer, all 80 on stage 0 (2 micro-batches of 40
    // layers in flight), the embedding's input (8sb) and dropout (sbh) for 2 micro-batches, over
    // tp; 128 micro-batches >= pp: no discount.
    const double act = (s * h * (18 + 4 * ffn / h) * L + 8 * s * 2 + s * h * 2) / 4;
    CHECK_NEAR(m.activationBytes, act, 1e-12);
    // Without the distributed optimizer: 18 bytes a parameter.
    CHECK_NEAR(megatronTheoreticalMemory(in, false).bytesPerParameter, 18.0, 1e-12);
    // pp 1: the output layer's input and the loss join; the untied head on the same shard.
    PlanInput tpOnly = in;
    tpOnly.tp = 8;
    tpOnly.pp = 1;
    const MegatronMemory t = megatronTheoreticalMemory(tpOnly);
    const double Vp8 = 32768; // a multiple of 128 x 8
    CHECK_NEAR(t.mostLoadedShard, (layers + 2 * Vp8 * h) / 8, 1e-12);
    CHECK_NEAR(t.activationBytes,
        (s * h * (18 + 4 * ffn / h) * L + 8 * s + s * h + s * h * 4 * (1 + Vp8 / h)) / 8, 1e-12);
}

// Pipeline stages cut by compute (plan::balancedStages), which the engine's strategy runs and
// the planner describes: a model with a light head is cut evenly (Llama-2-70B: its head costs
// 0.3 of one of its 80 blocks), a heavy head takes layers off
// the last stage (Qwen2.5-1.5B: a head of 151936 x 1536 costs 4.99 of its blocks, so PP2 runs
// 16 + 12 layers, the slowest stage 16.99 blocks instead of 18.99), interleaved chunks likewise;
// the plan's stage parameters, notes, bubble, activations and pipeline bytes follow the cut and
// the schedule.
void testStageBalance()
{
    const ModelSpec q = preset("qwen2.5-1.5b");
    const LayerCosts c = layerCosts(q);
    CHECK_NEAR(c.head / c.block, 233373696.0 / 46797824.0, 1e-3);
    using Cut = std::vector<std::pair<int64_t, int64_t>>;
    CHECK(balancedStages(q, 2) == (Cut {{0, 16}, {16, 28}}));
    CHECK(balancedStages(q, 1) == (Cut {{0, 28}}));
    // Every cut is contiguous, covers the model and gives each stage a layer.
    for (int64_t n : {3, 4, 7, 8, 14, 28}) {
        const Cut cut = balancedStages(q, n);
        CHECK_EQ(static_cast<int64_t>(cut.size()), n);
        int64_t at = 0;
        for (const auto& [first, end] : cut) {
            CHECK_EQ(first, at);
            CHECK(end > first);
            at = end;
        }
        CHECK_EQ(at, int64_t(28));
        // No cut is slower than the even one.
        Cut even;
        for (int64_t st = 0, f = 0; st < n; ++st) {
            const int64_t k = 28 / n + (st < 28 % n ? 1 : 0);
            even.push_back({f, f + k});
            f += k;
        }
        CHECK(stageImbalance(q, cut) <= stageImbalance(q, even) + 1e-12);
    }
    CHECK_NEAR(stageImbalance(q, balancedStages(q, 2)), 2 * 16.987 / (28 + 4.987), 1e-3);
    // A light head: the even cut.
    const ModelSpec l = preset("llama-2-70b");
    CHECK(balancedStages(l, 2) == (Cut {{0, 40}, {40, 80}}));
    CHECK(balancedStages(l, 3) == (Cut {{0, 27}, {27, 54}, {54, 80}}));
    CHECK_THROWS_WITH(balancedStages(l, 81), "need at least as many layers; the model has 80");

    // The planner plans the engine's cut.
    PlanInput in;
    in.model = q;
    in.mode = AccountingMode::ZeroPaper;
    in.strategy = Strategy::Zero1;
    in.gpusPerNode = 2;
    in.pp = 2;
    in.microBatch = 1;
    in.seqLen = 1024;
    in.gradAccum = 8;
    in.device.overheadBytes = 0;
    in.calibration.gpuFragmentation = 0;
    const PlanResult r = plan(in);
    bool cutNote = false;
    for (const auto& n : r.notes)
        cutNote = cutNote
            || n.find("2 pipeline stages (1F1B) of 16, 12 layers, cut by compute")
                != std::string::npos;
    CHECK(cutNote);
    CHECK_NEAR(r.bubbleFraction, 1.0 / 9.0, 1e-12);
    const double perMicro = 1024.0 * q.hiddenSize * 2; // bf16 activations
    CHECK_NEAR(static_cast<double>(r.ppBytesPerDevicePerStep), 8 * perMicro, 1e-9);
    // Interleaved (2 chunks a stage): the bubble shrinks to (pp - 1) / (v K + pp - 1), the
    // first stage keeps pp + (pp - 1) / v micro-batches of its layers, and each stage sends
    // 2v - 1 tensors a micro-batch.
    PlanInput iv = in;
    iv.virtualStages = 2;
    const PlanResult ri = plan(iv);
    CHECK_NEAR(ri.bubbleFraction, 1.0 / 17.0, 1e-12);
    CHECK_NEAR(static_cast<double>(ri.ppBytesPerDevicePerStep), 3 * 8 * perMicro, 1e-9);
    const Cut chunks = balancedStages(q, 4);
    const int64_t stage0
        = (chunks[0].second - chunks[0].first) + (chunks[2].second - chunks[2].first);
    const double perLayer = 1024.0 * q.hiddenSize * 34.0;
    if (ri.peakStage == 0)
        CHECK_NEAR(static_cast<double>(ri.perDevice.activations),
            static_cast<double>(stage0) * (2.0 + 1.0 / 2.0) * perLayer, 1e-9);
    const nlohmann::json j = toJson(ri);
    CHECK_EQ(j["virtual_stages"].get<int64_t>(), int64_t(2));
    // Refusals the engine would make, with the fix.
    iv.gradAccum = 3;
    CHECK_THROWS_WITH(plan(iv),
        "gradient accumulation 3 is not a multiple of 2; use gradient accumulation 2 or 4");
    iv.gradAccum = 8;
    iv.virtualStages = 15;
    CHECK_THROWS_WITH(plan(iv), "use 14 chunks a stage or less");
    iv.virtualStages = 2;
    iv.pp = 1;
    CHECK_THROWS_WITH(plan(iv), "use 2 pipeline stages or more, or 1 chunk a stage");
}

int main()
{
    testLlama7bZero3();
    testTinyCpuPadding();
    testQwenDdpZero12();
    testHybridOffload();
    testPureBf16AndFp16();
    testCpuBf16ReduceWire();
    testZeroPaper();
    testTensorAndPipelineParallel();
    testStageBalance();
    testLayoutSearch();
    testMegatronFormula();
    testDerivedAnswers();
    testNotesAndErrors();
    testCalibrationAndJson();
    testGpuNamesFromNvidiaSmi();
    testComponentTable();
    return shard::plan::test::finish("tst_planner");
}
