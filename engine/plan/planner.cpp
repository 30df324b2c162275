// The memory / FLOP / communication predictor (see planner.h for the model of the engine).
#include "plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "plan/run_spec_bridge.h"
#include "plan/stage_balance.h"

namespace shard::plan {

namespace {

// `x` with `digits` decimals ("1.25").
std::string decimals(double x, int digits)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, x);
    return buf;
}

template<typename E> struct NameTable {
    std::vector<std::pair<E, const char*>> rows;
    const char* what;

    std::string name(E e) const
    {
        for (const auto& [v, n] : rows)
            if (v == e)
                return n;
        return "?";
    }
    E parse(const std::string& s) const
    {
        for (const auto& [v, n] : rows)
            if (s == n)
                return v;
        std::string list;
        for (const auto& [v, n] : rows)
            list += (list.empty() ? "" : ", ") + std::string(n);
        throw std::runtime_error(
            "unknown " + std::string(what) + " '" + s + "' (use one of: " + list + ")");
    }
};

const NameTable<Precision> kPrecisions {
    {{Precision::Fp32, "fp32"}, {Precision::Bf16Mixed, "bf16-mixed"}, {Precision::Bf16, "bf16"},
        {Precision::Fp16Mixed, "fp16-mixed"}},
    "precision"};
const NameTable<Checkpointing> kCheckpointing {
    {{Checkpointing::None, "none"}, {Checkpointing::Full, "full"}}, "checkpointing"};
const NameTable<Offload> kOffload {{{Offload::None, "none"}, {Offload::Optimizer, "optimizer"},
                                       {Offload::ParamsAndOptimizer, "params+optimizer"}},
    "offload"};
const NameTable<Method> kMethods {
    {{Method::Full, "full"}, {Method::Lora, "lora"}, {Method::Qlora, "qlora"}}, "method"};
const NameTable<AccountingMode> kModes {
    {{AccountingMode::Engine, "engine"}, {AccountingMode::ZeroPaper, "zero-paper"}}, "mode"};

// Shapes reduced to what padding needs: rows (dim 0), elements per row, owning unit.
struct Shape {
    int64_t rows;
    int64_t perRow;
    int64_t layer;  // -1 = root unit
    bool embedding; // model.embed_tokens.weight
};

struct ModelShapes {
    std::vector<Shape> shapes;
    int64_t params = 0;
    int64_t activeParams = 0;
    bool tied = false;
};

// `keep`: the parameters one pipeline stage holds (empty: all of them).
ModelShapes modelShapes(
    const ModelSpec& spec, const std::function<bool(const ParamInfo&)>& keep = {})
{
    ModelShapes m;
    m.tied = spec.tieWordEmbeddings;
    for (const auto& p : parameterTable(spec)) {
        if (keep && !keep(p))
            continue;
        int64_t rows = p.shape.empty() ? 1 : p.shape[0];
        int64_t n = p.numel();
        m.shapes.push_back(
            {rows, rows ? n / rows : 0, p.layer, p.name == "model.embed_tokens.weight"});
        m.params += n;
    }
    m.activeParams = activeParameterCount(spec);
    return m;
}

// Padded parameter counts when every parameter is split on dim 0 over `s` ranks, each chunk
// padded to ceil(rows / s) rows (docs/ARCHITECTURE.md).
struct UnitSizes {
    double total = 0;    // all parameters, padded
    double root = 0;     // embeddings + final norm + lm_head
    double maxBlock = 0; // the largest transformer block
    // Root parameters whose gradients exist during the blocks' backward: lm_head and the final
    // norm (untied), or the shared embedding (tied); the untied embedding's comes last.
    double head = 0;
};

UnitSizes unitSizes(const ModelShapes& m, int64_t s)
{
    UnitSizes u;
    std::map<int64_t, double> blocks;
    for (const Shape& sh : m.shapes) {
        int64_t rowsPadded = (sh.rows + s - 1) / s * s;
        double n = static_cast<double>(rowsPadded) * static_cast<double>(sh.perRow);
        u.total += n;
        if (sh.layer < 0) {
            u.root += n;
            if (m.tied || !sh.embedding)
                u.head += n;
        } else
            blocks[sh.layer] += n;
    }
    for (const auto& [l, n] : blocks)
        u.maxBlock = std::max(u.maxBlock, n);
    return u;
}

double ringFraction(int64_t n)
{
    return n > 1 ? static_cast<double>(n - 1) / static_cast<double>(n) : 0.0;
}

int64_t shardDegreeOf(const PlanInput& in)
{
    return in.parallelDims().shardDegree();
}

int64_t toBytes(double v)
{
    return static_cast<int64_t>(std::llround(std::max(0.0, v)));
}

struct Dims {
    double q, kv, inter;
};

Dims layerDims(const ModelSpec& s, int64_t layer)
{
    if (s.moe) {
        const MoeSpec& m = *s.moe;
        double qk = static_cast<double>(s.numHeads * (m.qkNopeHeadDim + m.qkRopeHeadDim));
        double v = static_cast<double>(s.numHeads * m.vHeadDim);
        double inter = layer < m.firstDenseLayers
            ? static_cast<double>(s.intermediateSize)
            : static_cast<double>((m.expertsPerToken + m.sharedExperts) * m.moeIntermediateSize);
        return {qk, (qk + v) / 2.0, inter};
    }
    return {static_cast<double>(s.qDim()), static_cast<double>(s.kvDim()),
        static_cast<double>(s.intermediateSize)};
}

// LoRA / QLoRA. The engine (engine/core/model/lora.h, engine/fsdp/sharded_strategy.cpp) appends
// each block's adapters (A: rank x in, B: out x rank) to its unit as ordinary trainable
// parameters: fp32 masters, gradients and AdamW state sharded like any weight under zero1-3,
// replicated under ddp. The frozen base is a separate group (compute dtype, or NF4 packed bytes +
// their block scales, fp32 or double-quantised, for QLoRA's block projections): under zero3 /
// hybrid each rank keeps its rows and gathers a block at a time; ddp / zero1 / zero2 keep it
// gathered whole, and that copy is the only one (no rows besides).
struct LoraTarget {
    const char* flag;   // --lora-targets entry
    const char* module; // Hugging Face parameter name fragment
};
// kLoraTargets' order: the index parseLoraTargets and projectionOf use.
enum LoraProjection { kQ, kK, kV, kO, kGate, kUp, kDown };
const LoraTarget kLoraTargets[] = {{"q", ".self_attn.q_proj.weight"},
    {"k", ".self_attn.k_proj.weight"}, {"v", ".self_attn.v_proj.weight"},
    {"o", ".self_attn.o_proj.weight"}, {"gate", ".mlp.gate_proj.weight"},
    {"up", ".mlp.up_proj.weight"}, {"down", ".mlp.down_proj.weight"}};

bool endsWith(const std::string& s, const char* tail)
{
    const std::string t(tail);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

std::vector<bool> parseLoraTargets(const std::string& list)
{
    std::vector<bool> on(std::size(kLoraTargets), false);
    size_t start = 0;
    bool any = false;
    while (start <= list.size()) {
        size_t comma = list.find(',', start);
        std::string item = list.substr(start, comma == std::string::npos ? comma : comma - start);
        bool found = false;
        for (size_t i = 0; i < std::size(kLoraTargets); ++i)
            if (item == kLoraTargets[i].flag) {
                on[i] = found = any = true;
            }
        if (!found)
            throw std::runtime_error("unknown LoRA target '" + item + "' in '" + list
                + "' (use a comma-separated list of q, k, v, o, gate, up, down)");
        if (comma == std::string::npos)
            break;
        start = comma + 1;
    }
    if (!any)
        throw std::runtime_error("no LoRA targets given (use e.g. q,k,v,o)");
    return on;
}

// Which projection a block parameter is: its kLoraTargets index, or -1.
int projectionOf(const ParamInfo& p)
{
    if (p.layer < 0 || p.shape.size() != 2)
        return -1;
    for (size_t i = 0; i < std::size(kLoraTargets); ++i)
        if (endsWith(p.name, kLoraTargets[i].module))
            return static_cast<int>(i);
    return -1;
}

int64_t padRows(int64_t rows, int64_t s)
{
    return (rows + s - 1) / s * s;
}

struct ActivationBytes {
    double activations = 0;
    double logits = 0;
    double largestBlock = 0; // freed first in backward (the last block's saved tensors)
    // The part of `activations` each micro-batch in flight keeps (its blocks' saved tensors, or
    // their checkpointed inputs): a pipeline stage holds it once per micro-batch in flight, the
    // rest (the root's, the backward's transients, a recomputed block) once.
    double perMicroBatch = 0;
};

// `tp`: the tensor-parallel size when `in.model` is a rank's slice of the model (engineStage).
ActivationBytes engineActivations(const PlanInput& in, int64_t microBatch, int64_t tp = 1)
{
    const ModelSpec& s = in.model;
    const Calibration& k = in.calibration;
    const double c = dtypeBytes(in.precision).compute;
    const double b = static_cast<double>(microBatch), seq = static_cast<double>(in.seqLen);
    const double T = b * seq, h = static_cast<double>(s.hiddenSize);
    const double heads = static_cast<double>(s.numHeads);
    const bool gpu = in.device.kind == DeviceKind::Gpu;
    const bool gqa = s.numKvHeads < s.numHeads && !s.moe;

    const bool fusedCpu = !gpu && k.cpuFusedAttention > 0;
    double scoreBytes
        = gpu ? k.scoreBytesGpu : (c == 4 ? k.scoreBytesCpuFp32Compute : k.scoreBytesCpu16Compute);
    // The fused kernels (GPU, and CPU on LibTorch 2.x) keep a log-sum-exp per head and token
    // instead of the scores. On the CPU the coefficients are fitted to eager attention, whose
    // batched matmuls also keep copies of q and k: the fused kernel drops those too.
    double scores = fusedCpu ? 0.0 : b * heads * seq * seq * scoreBytes;
    if (gpu || fusedCpu)
        scores += 4.0 * k.lseFp32PerHeadTokenGpu * b * heads * seq;

    double sumBlocks = 0, maxBlock = 0, maxInter = 0;
    for (int64_t l = 0; l < s.numLayers; ++l) {
        Dims d = layerDims(s, l);
        double elems = k.actPerHidden * h + k.actPerQ * d.q + k.actPerKv * d.kv
            + (gqa ? k.actPerQGqa * d.q : 0.0) + (s.qkNorm ? k.actPerQkNorm * (d.q + d.kv) : 0.0)
            + k.actPerIntermediate * d.inter - (fusedCpu ? k.fusedCpuAttentionDropsPerQ * d.q : 0.0)
            - (fusedCpu && tp > 1 ? k.fusedCpuAttentionTpDropsPerQ * d.q : 0.0);
        // A narrower compute dtype: the engine runs the fused CPU attention in fp32 (llama_model),
        // which keeps fp32 q, k, v and output (and their fp32 gradients in its backward).
        const double widened = fusedCpu && c != 4 ? k.fusedCpuAttentionWidenedBytesPerQ * d.q : 0.0;
        double block = T * (c * elems + 4.0 * k.actFp32PerToken + widened) + scores;
        sumBlocks += block;
        maxBlock = std::max(maxBlock, block);
        maxInter = std::max(maxInter, d.inter);
    }
    const double transient
        = T * c * (k.bwdTransientPerHidden * h + k.bwdTransientPerIntermediate * maxInter);
    const double root = T * c * k.rootActPerHidden * h;
    ActivationBytes a;
    a.largestBlock = maxBlock;
    if (in.checkpointing == Checkpointing::Full)
        a.perMicroBatch = static_cast<double>(s.numLayers) * T * c * k.ckptSavedPerHidden * h;
    else
        a.perMicroBatch = sumBlocks;
    a.activations = a.perMicroBatch + root + transient
        + (in.checkpointing == Checkpointing::Full ? maxBlock : 0.0);
    if (in.usesLora()) {
        // Each adapted projection saves A's output (T x rank) for B's backward and, with dropout,
        // the dropped input (T x in); checkpointing keeps one block's.
        const std::vector<bool> on = parseLoraTargets(in.loraTargets);
        double perBlock = 0;
        for (const ParamInfo& p : parameterTable(s))
            if (p.layer == 0 && projectionOf(p) >= 0 && on[static_cast<size_t>(projectionOf(p))])
                perBlock += T * c
                    * (static_cast<double>(in.loraRank)
                        + (in.loraDropout > 0 ? static_cast<double>(p.shape[1]) : 0.0));
        // A frozen weight needs no input for its gradient, so autograd does not save what only
        // a base weight's gradient would have used: the input of a projection no adapter reads
        // (o_proj's: the attention output; down_proj's: silu(gate) * up; the normed x when none of
        // q, k, v, or of gate, up, is adapted) and the LM head's input.
        double unsaved = 0, largestUnsaved = 0;
        for (int64_t l = 0; l < s.numLayers; ++l) {
            const Dims d = layerDims(s, l);
            const double perToken = (on[kQ] || on[kK] || on[kV] ? 0.0 : h) + (on[kO] ? 0.0 : d.q)
                + (on[kGate] || on[kUp] ? 0.0 : h) + (on[kDown] ? 0.0 : d.inter);
            unsaved += T * c * perToken;
            largestUnsaved = std::max(largestUnsaved, T * c * perToken);
        }
        const double blocks
            = in.checkpointing == Checkpointing::Full ? 1.0 : static_cast<double>(s.numLayers);
        a.activations += blocks * perBlock
            - (in.checkpointing == Checkpointing::Full ? largestUnsaved : unsaved) - T * c * h;
        if (in.checkpointing != Checkpointing::Full)
            a.perMicroBatch += blocks * perBlock - unsaved;
        a.largestBlock += in.checkpointing == Checkpointing::Full ? 0.0 : perBlock - largestUnsaved;
    }
    // The fused head and loss (engine/core/model/chunked_loss.h): one chunk of rows' logits at
    // a time, and the gradients it makes in the forward, alive from the head to its backward:
    // h's (T x h) and, when the head is trained, W's (V x h; the GPU model counts it in its
    // backward-start gradients already). Where bf16 products go through the fp32 GEMM (CPUs
    // without AVX-512) each chunk's product is a V x h temporary besides.
    const double V = static_cast<double>(s.vocabSize);
    const int64_t rowsIn = microBatch * std::max<int64_t>(in.seqLen - 1, 1);
    const double rows = static_cast<double>(lossChunkRows(rowsIn, s.hiddenSize, s.vocabSize));
    const bool chunked = rows < static_cast<double>(rowsIn);
    a.logits = rows * V * (4.0 * k.logitsFp32Copies + (c != 4 ? c * k.logitsComputeCopies : 0.0))
        + T * h * c + (in.usesLora() || gpu ? 0.0 : V * h * c * (c != 4 && chunked ? 2.0 : 1.0));
    return a;
}

// Korthikanti et al. 2022 (16-bit, no tensor/sequence parallelism): s*b*h*(34 + 5*a*s/h) per
// layer, 2*s*b*h per layer under full recomputation; cross-entropy keeps 4*s*b*V fp32 logits.
ActivationBytes paperActivations(const PlanInput& in, int64_t microBatch)
{
    const ModelSpec& s = in.model;
    const double b = static_cast<double>(microBatch), seq = static_cast<double>(in.seqLen);
    const double h = static_cast<double>(s.hiddenSize), a = static_cast<double>(s.numHeads);
    const double L = static_cast<double>(s.numLayers);
    ActivationBytes r;
    if (in.checkpointing == Checkpointing::Full)
        r.activations = L * 2.0 * seq * b * h;
    else
        r.activations = L * seq * b * h * (34.0 + 5.0 * a * seq / h);
    r.logits = 4.0 * seq * b * static_cast<double>(s.vocabSize);
    return r;
}

struct Internal {
    MemoryBreakdown mem;    // forward end / backward start (with activations and logits)
    MemoryBreakdown midMem; // inside the blocks' backward (logits freed, a block's reduce)
    MemoryBreakdown endMem; // backward end, every unit's reduce in flight (engine mode)
    // ZeRO-3 / hybrid over S > 1: the last block's forward, the block gathered besides the root,
    // every activation but no logits yet (the head's chunks come after its reshard).
    MemoryBreakdown fwdMem;
    // Under recomputation (engine mode, CPU): the first block's backward recomputes its forward
    // when every other unit's gradients exist and its own reduce buffers do not yet.
    MemoryBreakdown firstBlockMem;
    bool hasFirstBlock = false;
    bool hasFwd = false;
    bool hasEnd = false;
    bool hasMid = true;
    double host = 0;
    double gatherBytes = 0;
    double reduceBytes = 0;
};

// What both engine models (GPU and CPU) start from: bytes per element of each role, the
// parameter counts under a shard degree S and the step's shape.
struct StateSizes {
    double c, mb, gb, ob, r; // bytes per element: compute, master, grad, optimizer, reduce
    double P;                // parameters
    double Pp, Pr, Pb, Ph;   // padded: all, root, the largest block, head (UnitSizes)
    double shard;            // this rank's share of Pp
    double owned;            // parameters whose masters and AdamW state this rank keeps
    bool accumulate;         // grad-accum > 1
    int64_t W;               // world size
    double K;                // micro-steps per step
    double rw;               // bytes per element of the shard group's reduce input and sends
};

// Bytes per element a shard group's reduce-scatter sends, and its input holds: the reduce
// dtype's, or on CPU ranks (Gloo) the compute dtype's where that is narrower: Gloo sums bf16
// gradients into the fp32 reduce itself (ShardedStrategy::reduceWireDtype). DDP's all-reduce and
// hybrid's replica all-reduce stay in the reduce dtype.
double reduceWireBytes(const PlanInput& in, const DtypeBytes& d)
{
    if (in.strategy == Strategy::Ddp || in.device.kind != DeviceKind::Cpu)
        return d.reduce;
    return std::min(d.compute, d.reduce);
}

StateSizes stateSizes(const PlanInput& in, const ModelShapes& shapes, int64_t S)
{
    const DtypeBytes d = dtypeBytes(in);
    const UnitSizes u = unitSizes(shapes, S);
    StateSizes z;
    z.c = d.compute;
    z.mb = d.master;
    z.gb = d.grad;
    z.ob = d.optimizer;
    z.r = d.reduce;
    z.P = static_cast<double>(shapes.params);
    z.Pp = u.total;
    z.Pr = u.root;
    z.Pb = u.maxBlock;
    z.Ph = u.head;
    z.shard = u.total / static_cast<double>(S);
    z.owned = in.strategy == Strategy::Ddp ? z.P : z.shard; // ddp replicates, the rest shard
    z.accumulate = in.gradAccum > 1;
    z.W = in.worldSize();
    z.K = static_cast<double>(in.gradAccum);
    z.rw = reduceWireBytes(in, d);
    return z;
}

// Bytes one rank sends per step: the gradient reduction (ring all-reduce for ddp, reduce-scatter
// over the shard group, plus the replica all-reduce of the shard for hybrid) and the parameter
// all-gathers (ZeRO-3 gathers every block twice per micro-step, forward and backward).
void commVolumes(const PlanInput& in, const StateSizes& z, int64_t S, Internal& o)
{
    switch (in.strategy) {
    case Strategy::Ddp:
        o.reduceBytes = 2.0 * ringFraction(z.W) * z.r * z.P;
        break;
    case Strategy::Zero1:
        o.reduceBytes = ringFraction(z.W) * z.rw * z.Pp;
        o.gatherBytes = ringFraction(z.W) * z.c * z.Pp;
        break;
    case Strategy::Zero2:
    case Strategy::Zero3:
    case Strategy::Hybrid: {
        o.reduceBytes = ringFraction(S) * z.rw * z.Pp;
        const double perMicroStep
            = in.strategy == Strategy::Zero2 ? z.Pp : 2.0 * (z.Pp - z.Pr) + z.Pr;
        o.gatherBytes = z.K * ringFraction(S) * z.c * perMicroStep;
        if (in.strategy == Strategy::Hybrid) // the replica all-reduce runs in place
            o.reduceBytes += 2.0 * ringFraction(z.W / S) * z.r * z.shard;
        break;
    }
    }
}

// Offload, as the engine does it: the master shard, its gradient and AdamW state live in host
// memory (added to o.host). Under zero3 / hybrid the gathers copy in from a compute-dtype shard:
// on the device with optimizer offload, in host memory with params+optimizer (none when the
// masters are in the compute dtype). ddp / zero1 / zero2 keep their gathered parameters and
// refresh them from the host masters after the step. Returns the device's sharded bytes.
double offloadToHost(const PlanInput& in, const StateSizes& z, Internal& o)
{
    const bool sharding = in.strategy == Strategy::Zero3 || in.strategy == Strategy::Hybrid;
    o.host = (z.mb + z.gb + z.ob) * z.shard;
    if (in.offload == Offload::Optimizer)
        return sharding ? z.c * z.shard : 0.0;
    if (sharding && z.c != z.mb)
        o.host += z.c * z.shard;
    return 0.0;
}

void fillModelStates(
    MemoryBreakdown& m, double sharded, double gathered, double grads, double opt, double comm)
{
    m.shardedParams = toBytes(sharded);
    m.gatheredParams = toBytes(gathered);
    m.grads = toBytes(grads);
    m.optimizer = toBytes(opt);
    m.commBuffers = toBytes(comm);
}

// GPU (not measured yet; the CPU model below is): two moments, the larger is the peak:
//   backward start: every block's activations and the logits are alive, the head's gradients
//     exist, one block's gradients are being reduced;
//   backward end:   activations are gone, the root's gradients are reduced (large for big
//     vocabularies).
Internal engineModelStatesGpu(const PlanInput& in, const ModelShapes& shapes, int64_t S)
{
    const Calibration& k = in.calibration;
    const StateSizes z = stateSizes(in, shapes, S);
    const auto [c, mb, gb, ob, r, P, Pp, Pr, Pb, Ph, shard, owned, accumulate, W, K, rw] = z;
    const double recvFrac = k.reduceScatterRecvGpuIsShard ? 1.0 / static_cast<double>(S) : 1.0;

    Internal o;
    commVolumes(in, z, S, o);
    // Persistent (both moments) and per-moment transient terms.
    double sharded = mb * owned, opt = ob * owned, shardGrad = 0, fullGrads = 0;
    double gatheredA = 0, gatheredB = 0, gradsA = 0, gradsB = 0, commA = 0, commB = 0;
    switch (in.strategy) {
    case Strategy::Ddp:
        gatheredA = gatheredB = (c != mb || in.offload != Offload::None) ? c * P : 0.0;
        shardGrad = gb * P;
        gradsA = c != gb ? c * Pb : 0.0;
        gradsB = c != gb ? c * Pr : 0.0;
        commA = r * Pb;
        commB = r * Pr;
        break;
    case Strategy::Zero1:
        gatheredA = gatheredB = c * Pp;
        shardGrad = gb * shard;
        fullGrads = r * Pp;
        gradsA = c != r ? c * Pb : 0.0;
        gradsB = c != r ? c * Pr : 0.0;
        commA = r * Pb * recvFrac;
        commB = r * Pr * recvFrac;
        break;
    case Strategy::Zero2:
    case Strategy::Zero3:
    case Strategy::Hybrid: {
        const bool zero2 = in.strategy == Strategy::Zero2;
        gatheredA = zero2 ? c * Pp : std::min(c * Pp, c * (Pr + k.gatheredUnitsInFlight * Pb));
        gatheredB = c * Pr;
        shardGrad = gb * shard;
        fullGrads = accumulate ? r * Pp : 0.0; // no-sync micro-steps keep unsharded grads
        gradsA = c * (Ph + Pb);
        gradsB = c * Pr;
        commA = r * Pb * (1.0 + recvFrac);
        commB = r * Pr * (1.0 + recvFrac);
        break;
    }
    }
    if (in.offload != Offload::None) {
        sharded = offloadToHost(in, z, o);
        opt = 0;
        shardGrad = 0;
    } else if (S == 1 && W == 1) {
        // One rank: the gradients go straight into the fp32 shard gradient, with no reduce
        // buffers (ShardedStrategy::writeOwnGradients).
        commA = commB = 0;
    }
    fillModelStates(o.mem, sharded, gatheredA, shardGrad + fullGrads + gradsA, opt, commA);
    fillModelStates(o.endMem, sharded, gatheredB, shardGrad + fullGrads + gradsB, opt, commB);
    o.hasEnd = true;
    o.hasMid = false;
    return o;
}

// Engine accounting at three moments of a step; the largest is the peak (ACCOUNTING.md). The
// engine frees every gradient after the optimizer step (set to none), so with one micro-step no
// gradient exists before backward.
//   start: forward done, the loss gradient computed: every block's activations and the logits
//     are alive; ZeRO-3 has resharded the blocks and keeps only the root gathered.
//   mid:   the last block's backward: the logits and that block's activations are gone, the
//     head's unsharded gradient waits for the root's reduce, one block's gradient is in its
//     reduce buffers, the prefetched blocks are gathered.
//   end:   activations gone; each unit's reduce-scatter input (its unsharded gradient, r bytes),
//     output (the reduced shard) and receive buffer stay alive until the step waits on all of
//     them after backward (ShardedStrategy::finishReduces). One rank without offload has none:
//     each unit's gradients go straight into its fp32 shard gradient.
Internal engineModelStates(const PlanInput& in, const ModelShapes& shapes, int64_t S)
{
    if (in.device.kind == DeviceKind::Gpu)
        return engineModelStatesGpu(in, shapes, S);
    const Calibration& k = in.calibration;
    const StateSizes z = stateSizes(in, shapes, S);
    const auto [c, mb, gb, ob, r, P, Pp, Pr, Pb, Ph, shard, owned, accumulate, W, K, rw] = z;
    const double recvFrac = k.reduceScatterRecvCpu; // CPU only: GPUs returned above
    // One shard rank with an fp32 compute dtype: the gathered parameters are the masters.
    const bool aliased = S == 1 && c == mb && in.offload == Offload::None;

    Internal o;
    commVolumes(in, z, S, o);
    // Persistent terms (every moment) and per-moment terms.
    double sharded = mb * owned, opt = ob * owned, fullGrads = 0;
    double gatheredA = 0, gatheredM = 0, gatheredB = 0;
    double gradsM = 0, commM = 0, gradsB = 0, commB = 0;
    // ddp: the shard group has one rank; each unit's flat gradient is all-reduced over the
    // replicas in place, started inside backward (ShardedStrategy::reduceUnit: the output is the
    // input, no second buffer).
    const double n = in.strategy == Strategy::Ddp ? P : Pp;
    const double outFrac = in.strategy == Strategy::Ddp ? 0.0 : 1.0 / static_cast<double>(S);
    const double recv = in.strategy == Strategy::Ddp ? (W > 1 ? std::max(Pr, Pb) : 0.0)
                                                     : (S > 1 ? recvFrac : 0.0) * Pp;
    // The reduce input and Gloo's receive buffer in the wire dtype, the output in the reduce's.
    const double blockComm = Pb * (rw + r * outFrac + (S > 1 ? rw * recvFrac : 0.0));
    // One rank without offload writes each unit's gradients straight into its fp32 shard
    // gradient (ShardedStrategy::writeOwnGradients): no reduce input or output.
    const bool solo = S == 1 && W == 1 && in.offload == Offload::None;
    gradsB = solo ? gb * n : n * (rw + r * outFrac);
    commB = rw * recv;
    gradsM = c * Ph;
    commM = solo ? gb * Pb : blockComm;
    switch (in.strategy) {
    case Strategy::Ddp:
        gatheredA = (c != mb || in.offload != Offload::None) ? c * P : 0.0;
        fullGrads = accumulate ? c * P : 0.0;
        break;
    case Strategy::Zero1:
        gatheredA = aliased ? 0.0 : c * Pp;
        fullGrads = accumulate ? c * Pp : 0.0;
        gradsM = c * (Ph + Pb); // zero1 reduces after backward: no block reduce in flight
        commM = 0;
        break;
    case Strategy::Zero2:
    case Strategy::Zero3:
    case Strategy::Hybrid: {
        const bool zero2 = in.strategy == Strategy::Zero2;
        fullGrads = accumulate ? c * Pp : 0.0; // no-sync micro-steps keep unsharded grads
        if (aliased)
            gatheredA = 0;
        else if (zero2)
            gatheredA = c * Pp;
        else
            gatheredA = c * Pr; // blocks resharded after forward, the root stays
        gatheredM = zero2 || aliased ? gatheredA
                                     : std::min(c * Pp, c * (Pr + k.gatheredUnitsInFlight * Pb));
        break;
    }
    }
    if (in.strategy != Strategy::Zero3 && in.strategy != Strategy::Hybrid)
        gatheredM = gatheredA;
    gatheredB = gatheredA;

    if (in.offload != Offload::None) {
        sharded = offloadToHost(in, z, o);
        opt = 0;
    }
    // The accumulated unsharded gradients (grad-accum > 1) exist until their unit's reduce
    // copies them into its reduce input, which gradsB counts.
    fillModelStates(o.mem, sharded, gatheredA, fullGrads, opt, 0.0);
    fillModelStates(o.midMem, sharded, gatheredM, fullGrads + gradsM, opt, commM);
    fillModelStates(o.endMem, sharded, gatheredB, gradsB, opt, commB);
    o.hasEnd = true;
    fillModelStates(o.firstBlockMem, sharded, gatheredB,
        solo ? gradsB : std::max(0.0, gradsB - Pb * (rw + r * outFrac)), opt, commB);
    o.hasFirstBlock = true;
    // The last block's forward: it is gathered besides the root, no gradient exists yet.
    const bool sharded3
        = (in.strategy == Strategy::Zero3 || in.strategy == Strategy::Hybrid) && !aliased && S > 1;
    fillModelStates(o.fwdMem, sharded, std::min(c * Pp, gatheredA + c * Pb), fullGrads, opt, 0.0);
    o.hasFwd = sharded3;
    return o;
}

// psi: the parameters one GPU's copy of the model holds (the whole model; under tensor and
// pipeline parallelism its stage's slice).
Internal paperModelStates(const PlanInput& in, double psi, int64_t S)
{
    const int64_t W = in.worldSize();
    const double K = static_cast<double>(in.gradAccum);
    Internal o;
    o.mem = zeroPaperModelStates(
        in.strategy, psi, in.strategy == Strategy::Ddp ? W : S, in.calibration.zeroPaperK);
    if (in.offload != Offload::None) {
        o.host += static_cast<double>(o.mem.optimizer);
        o.mem.optimizer = 0;
        if (in.offload == Offload::ParamsAndOptimizer) {
            o.host += static_cast<double>(o.mem.shardedParams);
            o.mem.shardedParams = 0;
        }
    }
    // The paper's volumes in 16-bit elements: all-reduce 2psi; ZeRO-3 gathers twice per pass.
    switch (in.strategy) {
    case Strategy::Ddp:
    case Strategy::Zero1:
    case Strategy::Zero2:
        o.reduceBytes = 2.0 * psi * 2.0;
        break;
    case Strategy::Zero3:
        o.reduceBytes = psi * 2.0;
        o.gatherBytes = 2.0 * K * psi * 2.0;
        break;
    case Strategy::Hybrid:
        o.reduceBytes = psi * 2.0 + 2.0 * psi / static_cast<double>(S) * 2.0;
        o.gatherBytes = 2.0 * K * psi * 2.0;
        break;
    }
    return o;
}

// Padded element counts over a shard degree S (each tensor split on dim 0, docs/ARCHITECTURE.md).
struct LoraSizes {
    double frozen = 0, frozenRoot = 0, frozenBlock = 0; // compute-dtype frozen base
    double quantized = 0, quantizedBlock = 0;           // NF4 projections (elements)
    double quantizedBlockExact = 0; // unpadded: the running block's dequantised copies
    double adapters = 0, adaptersExact = 0, adapterBlock = 0; // trainable adapters
};

// `keep`: the parameters this rank's pipeline stage holds (empty: all of them).
LoraSizes loraSizes(
    const PlanInput& in, int64_t S, const std::function<bool(const ParamInfo&)>& keep = {})
{
    const std::vector<bool> on = parseLoraTargets(in.loraTargets);
    const bool q = in.method == Method::Qlora;
    const double r = static_cast<double>(in.loraRank);
    LoraSizes z;
    std::map<int64_t, double> frozenBlocks, quantBlocks, quantBlocksExact, adapterBlocks;
    for (const ParamInfo& p : parameterTable(in.model)) {
        if (keep && !keep(p))
            continue;
        const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
        const double perRow = rows ? static_cast<double>(p.numel() / rows) : 0.0;
        const double padded = static_cast<double>(padRows(rows, S)) * perRow;
        const int proj = projectionOf(p);
        if (q && proj >= 0) {
            z.quantized += padded;
            quantBlocks[p.layer] += padded;
            quantBlocksExact[p.layer] += static_cast<double>(p.numel());
        } else {
            z.frozen += padded;
            if (p.layer < 0)
                z.frozenRoot += padded;
            else
                frozenBlocks[p.layer] += padded;
        }
        if (proj >= 0 && on[static_cast<size_t>(proj)]) {
            const double out = static_cast<double>(p.shape[0]),
                         inDim = static_cast<double>(p.shape[1]);
            const double a = static_cast<double>(padRows(in.loraRank, S)) * inDim
                + static_cast<double>(padRows(p.shape[0], S)) * r;
            z.adapters += a;
            z.adaptersExact += r * (inDim + out);
            adapterBlocks[p.layer] += a;
        }
    }
    for (const auto& [l, n] : frozenBlocks)
        z.frozenBlock = std::max(z.frozenBlock, n);
    for (const auto& [l, n] : quantBlocks)
        z.quantizedBlock = std::max(z.quantizedBlock, n);
    for (const auto& [l, n] : quantBlocksExact)
        z.quantizedBlockExact = std::max(z.quantizedBlockExact, n);
    for (const auto& [l, n] : adapterBlocks)
        z.adapterBlock = std::max(z.adapterBlock, n);
    return z;
}

// How many ranks share a frozen copy (a LoRA base, DPO's live reference): zero3 / hybrid keep
// 1/S of it and gather it unit by unit; ddp / zero1 / zero2 keep it gathered for the whole run,
// and that one copy is all they hold of it.
double frozenShare(const PlanInput& in, int64_t S)
{
    const bool sharded = in.strategy == Strategy::Zero3 || in.strategy == Strategy::Hybrid;
    return sharded ? static_cast<double>(S) : 1.0;
}

// Model states of a LoRA / QLoRA step (one moment: they change little over the step; the
// activations and logits decide the peak as for full fine-tuning).
Internal engineLoraStates(
    const PlanInput& in, int64_t S, const std::function<bool(const ParamInfo&)>& keep = {})
{
    const DtypeBytes d = dtypeBytes(in);
    const double c = d.compute, mb = d.master, gb = d.grad, ob = d.optimizer, r = d.reduce;
    const double rw = reduceWireBytes(in, d);
    const LoraSizes z = loraSizes(in, S, keep);
    const double Sd = static_cast<double>(S);
    const int64_t W = in.worldSize();
    const bool zero3 = in.strategy == Strategy::Zero3 || in.strategy == Strategy::Hybrid;
    const double inFlight = in.calibration.gatheredUnitsInFlight;

    Internal o;
    MemoryBreakdown& m = o.mem;
    const double share = frozenShare(in, S);
    m.frozenBase = toBytes(c * z.frozen / share);
    const bool dq = in.qloraDoubleQuant;
    m.quantizedBase = toBytes(nf4Bytes(z.quantized, dq) / share);
    // zero3 / hybrid gather the root and `blocks` blocks (packed under QLoRA).
    auto gatheredWith = [&](double blocks) {
        if (S == 1 || !zero3)
            return 0.0;
        return std::min(c * z.frozen, c * (z.frozenRoot + blocks * z.frozenBlock))
            + std::min(nf4Bytes(z.quantized, dq), blocks * nf4Bytes(z.quantizedBlock, dq));
    };
    // At backward start (the head's backward, the logits alive) only the root is gathered: the
    // last block's gather is issued when the head's backward is done (the root unit's
    // pre-backward hook runs at its input); inside the blocks' backward `inFlight` are.
    const double gathered = gatheredWith(0.0);
    const double gatheredMid = gatheredWith(inFlight);
    m.gatheredParams = toBytes(gathered);

    const double owned = in.strategy == Strategy::Ddp ? z.adaptersExact : z.adapters / Sd;
    const bool aliased = S == 1 && c == mb;
    m.adapters = toBytes(mb * owned + (aliased ? 0.0 : c * z.adapters));
    // The sharded (or replicated) gradient, the unsharded leaf gradients and, on more than one
    // rank, the reduce input and output.
    m.adapterGrads
        = toBytes(gb * owned + c * z.adaptersExact + (W > 1 ? (rw + r / Sd) * z.adapters : 0.0));
    m.adapterOptimizer = toBytes(ob * owned);
    o.endMem = m;
    o.hasEnd = false;
    o.hasMid = false;
    // Inside the blocks' backward more blocks are in flight than at its start and, under QLoRA,
    // one block's projections are dequantised: each is dequantised to the compute dtype when its
    // block runs, its storage freed after the block's forward and refilled before its backward
    // (what autograd saved points at it), so one block's copies are alive at a time, and none at
    // backward start (the head's backward). A phase of its own when it holds more.
    const double midCopies = in.method == Method::Qlora ? c * z.quantizedBlockExact : 0.0;
    o.midMem = m;
    o.midMem.gatheredParams = toBytes(gatheredMid + midCopies);
    o.hasMid = gatheredMid + midCopies > gathered;
    // The last block's forward: it is gathered (and, under QLoRA, dequantised) besides the root,
    // every block's activations alive. Without a head after it (a pipeline stage before the
    // last) this is also the start of the stage's backward: the block's copies refilled.
    o.fwdMem = m;
    o.fwdMem.gatheredParams = toBytes(gatheredWith(1.0) + midCopies);
    o.hasFwd = (zero3 && S > 1) || midCopies > 0;

    // Traffic: only the adapters' gradients are reduced; zero3 gathers the frozen base (its
    // packed bytes under QLoRA) and the adapters twice per micro-step, zero1 / zero2 gather the
    // updated adapters once per step.
    const double ring = ringFraction(S), K = static_cast<double>(in.gradAccum);
    switch (in.strategy) {
    case Strategy::Ddp:
        o.reduceBytes = 2.0 * ringFraction(W) * r * z.adaptersExact;
        break;
    case Strategy::Zero1:
    case Strategy::Zero2:
        o.reduceBytes = ring * rw * z.adapters;
        o.gatherBytes = ring * c * z.adapters;
        break;
    case Strategy::Zero3:
    case Strategy::Hybrid: {
        o.reduceBytes = ring * rw * z.adapters;
        const double blocks = c * (z.frozen - z.frozenRoot)
            + nf4Bytes(z.quantized, in.qloraDoubleQuant) + c * z.adapters;
        o.gatherBytes = K * ring * (2.0 * blocks + c * z.frozenRoot);
        if (in.strategy == Strategy::Hybrid)
            o.reduceBytes += 2.0 * ringFraction(W / S) * r * z.adapters / Sd;
        break;
    }
    }
    return o;
}

// The capacity of one device (a GPU, or a CPU node's RAM over its ranks), the headroom left by
// res.perDevice, and whether it fits there and, with offload, in the host memory.
void settleFit(const PlanInput& in, PlanResult& res)
{
    const bool gpu = in.device.kind == DeviceKind::Gpu;
    res.capacityBytes = gpu ? in.device.memoryBytes : in.device.memoryBytes / in.gpusPerNode;
    res.headroomBytes = res.capacityBytes - res.perDevice.total();
    res.fits = res.headroomBytes >= 0;
    if (in.device.hostMemoryBytes > 0
        && res.hostBytesPerDevice * in.gpusPerNode > in.device.hostMemoryBytes) {
        res.fits = false;
        res.notes.push_back("offloaded state (" + formatGiB(res.hostBytesPerDevice * in.gpusPerNode)
            + " per node) exceeds the host memory (" + formatGiB(in.device.hostMemoryBytes) + ")");
    }
}

// The peak of a step in the engine's accounting: the largest of its moments (Internal), each
// with its activations, the micro-batch part of `act` held `inFlight` times (a pipeline stage's
// micro-batches in flight; 1 otherwise), and the logits where `logits` (the head's GPU).
struct StepPeak {
    MemoryBreakdown mem;
    std::string phase;
};

StepPeak stepPeak(const PlanInput& in, const Internal& st, const ActivationBytes& act,
    double inFlight, bool logits)
{
    const OverheadParts overheadOf = overheadParts(in);
    const double fixed = overheadOf.fixedBytes, frag = overheadOf.fragmentation;
    auto withOverhead = [&](MemoryBreakdown m) {
        m.overhead = 0;
        m.overhead = toBytes(fixed + frag * static_cast<double>(m.total()));
        return m;
    };
    const double activations = act.activations + (inFlight - 1.0) * act.perMicroBatch;
    StepPeak p;
    auto consider = [&](MemoryBreakdown m, const char* phase) {
        m = withOverhead(m);
        if (p.phase.empty() || m.total() > p.mem.total()) {
            p.mem = m;
            p.phase = phase;
        }
    };
    MemoryBreakdown start = st.mem;
    start.activations = toBytes(activations);
    start.logits = logits ? toBytes(act.logits) : 0;
    consider(start, "backward start");
    if (st.hasFwd) {
        MemoryBreakdown fwd = st.fwdMem;
        fwd.activations = toBytes(activations);
        consider(fwd, "forward end");
    }
    if (st.hasMid) {
        MemoryBreakdown mid = st.midMem;
        mid.activations = toBytes(std::max(0.0, activations - act.largestBlock));
        consider(mid, "mid backward");
    }
    if (st.hasEnd)
        consider(st.endMem, "backward end");
    if (st.hasFirstBlock && in.checkpointing == Checkpointing::Full) {
        MemoryBreakdown first = st.firstBlockMem;
        first.activations = toBytes(act.largestBlock);
        consider(first, "first block's backward");
    }
    return p;
}

// The engine's own accounting of one GPU of pipeline stage `st` of `layers` layers: its
// tensor-parallel slice of them (each block's heads and MLP width over tp, the norms whole,
// the embedding on the first stage, the final norm and head on the last, a tied head a copy
// there; the tables split by vocabulary when tp divides it) planned as a model of its own over
// the stage's data-parallel ranks. A pipeline stage keeps its blocks gathered over its
// micro-batches (ShardedStrategy: zero3 and hybrid hold what zero2 does); its micro-batches in
// flight each keep their blocks' activations: `inFlightFirst` at the first backward, before any
// gradient exists, `inFlightLater` at a later one, beside the accumulated gradients.
struct EngineStage {
    Internal states;
    StepPeak peak;
};

EngineStage engineStage(const PlanInput& in, const protocol::DeviceMesh& mesh, int64_t st,
    int64_t layers, double inFlightFirst, double inFlightLater)
{
    const ModelSpec& s = in.model;
    const int64_t t = mesh.tp, S = mesh.dpShard;
    const bool first = st == 0, last = st == mesh.pp - 1;
    PlanInput slice = in;
    ModelSpec& m = slice.model;
    m.numLayers = layers;
    m.numHeads /= t;
    m.numKvHeads /= t;
    m.intermediateSize /= t;
    if (splitsVocabulary(s, t))
        m.vocabSize /= t;
    m.tieWordEmbeddings = s.tieWordEmbeddings && first && last;
    slice.tp = slice.pp = slice.virtualStages = 1;
    slice.sequenceParallel = false;
    slice.gpusPerNode = mesh.dataParallel();
    slice.nodes = 1;
    const bool keepGathered
        = mesh.pp > 1 && (in.strategy == Strategy::Zero3 || in.strategy == Strategy::Hybrid);
    if (keepGathered) {
        slice.strategy = Strategy::Zero2;
        slice.shardGroup = 0;
    }
    const auto keep = [&](const ParamInfo& p) {
        if (p.layer >= 0)
            return true;
        if (p.name == "model.embed_tokens.weight")
            return first || (s.tieWordEmbeddings && last);
        return last;
    };
    ModelShapes shapes = modelShapes(m, keep);
    shapes.tied = s.tieWordEmbeddings && last;
    const auto statesAt = [&](int64_t accum) {
        PlanInput at = slice;
        at.gradAccum = accum;
        return std::pair {
            at, at.usesLora() ? engineLoraStates(at, S, keep) : engineModelStates(at, shapes, S)};
    };
    const int64_t sequences = in.microBatch * in.sequencesPerSample();
    ActivationBytes act = engineActivations(slice, sequences, t);
    if (in.sequenceParallel && t > 1) {
        // Sequence parallel keeps 1/t of the positions of what the norms save, their inputs
        // (two of a block's saved hidden-sized tensors; the normed outputs are gathered whole
        // for the column-parallel products), and under recomputation of each block's input.
        const double T = static_cast<double>(sequences * in.seqLen);
        const double perBlock
            = in.checkpointing == Checkpointing::Full ? in.calibration.ckptSavedPerHidden : 2.0;
        const double split = static_cast<double>(layers) * T * dtypeBytes(in).compute
            * static_cast<double>(s.hiddenSize) * perBlock * (1.0 - 1.0 / static_cast<double>(t));
        act.perMicroBatch -= split;
        act.activations -= split;
    }
    const bool pipelined = mesh.pp > 1 && in.gradAccum > 1;
    const auto [atK, later] = statesAt(in.gradAccum);
    EngineStage e;
    e.states = later;
    e.peak = stepPeak(atK, later, act, pipelined ? inFlightLater : inFlightFirst, last);
    if (pipelined) {
        const auto [atOne, before] = statesAt(1);
        const StepPeak p = stepPeak(atOne, before, act, inFlightFirst, last);
        if (p.mem.total() > e.peak.mem.total())
            e.peak = p;
    }
    if (keepGathered && in.strategy == Strategy::Hybrid) // zero2's volumes, hybrid's replicas
        e.states.reduceBytes += 2.0 * ringFraction(mesh.dpReplicate) * dtypeBytes(in).reduce
            * unitSizes(shapes, S).total / static_cast<double>(S);
    return e;
}

// Tensor and pipeline parallelism (Megatron-LM, torchtitan) with data parallelism inside each
// stage, in the ZeRO paper's accounting (Narayanan et al. 2021; Korthikanti et al. 2022):
// - a block's weights split over tp GPUs (norms replicated), the embedding and the head split
//   by vocabulary; pipeline stage i holds its contiguous layers (balancedStages), stage
//   0 the embedding, the last the final norm and the head (a tied head is a second copy there);
// - model states of that slice as the paper's ZeRO stages over the dp_shard GPUs;
// - activations with fused (flash) attention, as torchtitan and Megatron-LM run: Korthikanti's
//   s*b*h*34/t per layer and micro-batch with sequence parallelism, s*b*h*(10 + 24/t) without
//   (the norms, residual adds and dropouts whole on every GPU) (the 5*a*s/h term of stored
//   attention scores is not kept; under full recomputation the block input, 2*s*b*h, over t
//   with sequence parallelism); under 1F1B stage
//   i keeps min(pp - i, micro-batches) micro-batches in flight; the last stage keeps 4*s*b*V/t
//   fp32 logits;
// - per GPU per step: tensor parallel 4 all-reduce-equivalents per layer and micro-batch (6
//   with recomputation) of s*b*h 16-bit elements over a ring of tp; pipeline sends of a
//   micro-batch's s*b*h activations forward and their gradients back, as the engine sends
//   them (each TP rank its copy): a middle stage sends both, 2K a step, the end stages K
//   (pp 2: every stage is an end); the paper's
//   data-parallel volumes on the stage's slice;
// - time: compute / tp / pp per GPU, stretched by the 1F1B bubble (pp - 1) / (m + pp - 1), plus
//   the tensor- and pipeline-parallel transfers (on the critical path); data-parallel transfers
//   overlap.
PlanResult plan3d(const PlanInput& in, const ModelShapes& shapes)
{
    const protocol::DeviceMesh mesh = in.mesh();
    const ModelSpec& s = in.model;
    const Calibration& k = in.calibration;
    const bool gpu = in.device.kind == DeviceKind::Gpu;
    PlanResult res;
    res.input = in;
    res.params = shapes.params;
    res.activeParams = shapes.activeParams;
    res.worldSize = in.worldSize();
    res.shardDegree = mesh.dpShard;
    res.replicas = mesh.dpReplicate;
    const int64_t pp = mesh.pp;
    const double t = static_cast<double>(mesh.tp);

    // Parameters per GPU of each stage.
    std::vector<double> stageParams(static_cast<size_t>(pp), 0.0);
    std::vector<int64_t> stageLayerCount(static_cast<size_t>(pp), 0);
    std::vector<int64_t> stageOf(static_cast<size_t>(s.numLayers), 0);
    // The engine's cut (plan::balancedStages): virtual stage c * pp + st is chunk c of stage st.
    const int64_t chunks = pp > 1 ? in.virtualStages : 1;
    const auto cut = balancedStages(s, pp * chunks);
    for (size_t v = 0; v < cut.size(); ++v) {
        const int64_t st = static_cast<int64_t>(v) % pp;
        stageLayerCount[static_cast<size_t>(st)] += cut[v].second - cut[v].first;
        for (int64_t l = cut[v].first; l < cut[v].second; ++l)
            stageOf[static_cast<size_t>(l)] = st;
    }
    // The embedding and head split by vocabulary when tp divides it (as the engine splits
    // them), else whole on every GPU of the group.
    const bool vocabSplit = splitsVocabulary(s, mesh.tp);
    for (const ParamInfo& p : parameterTable(s)) {
        const bool table = p.name == "model.embed_tokens.weight" || p.name == "lm_head.weight";
        const bool replicated = (p.shape.size() < 2 && p.name.find("norm") != std::string::npos)
            || (table && !vocabSplit);
        const double n = static_cast<double>(p.numel()) / (replicated ? 1.0 : t);
        if (p.layer >= 0) {
            stageParams[static_cast<size_t>(stageOf[static_cast<size_t>(p.layer)])] += n;
        } else if (p.name == "model.embed_tokens.weight") {
            stageParams[0] += n;
            if (s.tieWordEmbeddings && pp > 1) // the head's copy on the last stage
                stageParams[static_cast<size_t>(pp - 1)] += n;
        } else {
            stageParams[static_cast<size_t>(pp - 1)] += n;
        }
    }

    // Memory of each stage's GPUs; the plan is the fullest stage's.
    const double K = static_cast<double>(in.gradAccum);
    const double b = static_cast<double>(in.microBatch * in.sequencesPerSample());
    const double seq = static_cast<double>(in.seqLen), h = static_cast<double>(s.hiddenSize);
    const double V = static_cast<double>(s.vocabSize);
    const bool sp = in.sequenceParallel && mesh.tp > 1;
    // The ZeRO paper accounting's activations of one layer and micro-batch (Korthikanti et al.'s
    // 34 sbh split by tp; 2 sbh, the saved input, under recomputation). The engine accounting
    // counts its own saved tensors (engineStage).
    const auto paperPerLayer = [&] {
        const double sbh = seq * b * h;
        return in.checkpointing == Checkpointing::Full ? 2.0 * sbh / (sp ? t : 1.0)
                                                       : sbh * (sp ? 34.0 / t : 10.0 + 24.0 / t);
    };
    const OverheadParts overheadOf = overheadParts(in);
    const double fixed = overheadOf.fixedBytes, frag = overheadOf.fragmentation;
    // Micro-batches' activations in flight at stage st's peak: 1F1B keeps pp - st; interleaved,
    // Megatron-LM's warm-up of 2 (pp - st - 1) + (v - 1) pp + 1 chunk forwards, each a 1 / v of
    // the stage's layers (stage 0: pp + (pp - 1) / v micro-batches).
    const auto inFlight = [&](int64_t st) {
        const double v = static_cast<double>(chunks);
        return chunks > 1 ? std::min(K * v,
                                2.0 * static_cast<double>(pp - st - 1)
                                    + (v - 1.0) * static_cast<double>(pp) + 1.0)
                / v
                          : std::min(static_cast<double>(pp - st), K);
    };
    // The engine's later backwards (beside the accumulated gradients) find one micro-batch
    // fewer in flight than the first where the warm-up took them all.
    const auto inFlightLater
        = [&](int64_t st) { return std::max(1.0, std::min(inFlight(st), K - 1.0)); };
    const bool paper = in.mode == AccountingMode::ZeroPaper;
    Internal peak;
    std::string phase;
    for (int64_t st = 0; st < pp; ++st) {
        const int64_t layers = stageLayerCount[static_cast<size_t>(st)];
        Internal states;
        MemoryBreakdown m;
        std::string stagePhase = "backward start";
        if (paper) {
            states = paperModelStates(in, stageParams[static_cast<size_t>(st)], mesh.dpShard);
            m = states.mem;
            m.activations = toBytes(static_cast<double>(layers) * inFlight(st) * paperPerLayer());
            if (st == pp - 1)
                m.logits = toBytes(4.0 * seq * b * V / (vocabSplit ? t : 1.0));
            m.overhead = toBytes(fixed + frag * static_cast<double>(m.total()));
        } else {
            const EngineStage e
                = engineStage(in, mesh, st, layers, inFlight(st), inFlightLater(st));
            states = e.states;
            m = e.peak.mem;
            stagePhase = e.peak.phase;
        }
        if (st == 0 || m.total() > res.perDevice.total()) {
            res.perDevice = m;
            res.peakStage = st;
            res.stageParams = toBytes(stageParams[static_cast<size_t>(st)]);
            peak = states;
            phase = stagePhase;
        }
    }
    res.peakPhase = pp > 1 ? phase + ", pipeline stage " + std::to_string(res.peakStage) : phase;
    res.hostBytesPerDevice = toBytes(peak.host);
    settleFit(in, res);

    // FLOPs: each data-parallel rank's tokens, its work split over tp x pp GPUs.
    const double attn = 12.0 * static_cast<double>(s.numLayers)
        * static_cast<double>(s.numHeads * s.headDim) * seq;
    res.flopsPerToken = 6.0 * static_cast<double>(shapes.activeParams) + attn;
    const int64_t tokensPerReplica
        = in.microBatch * in.sequencesPerSample() * in.seqLen * in.gradAccum;
    res.tokensPerStep = tokensPerReplica * mesh.dataParallel();
    res.flopsPerStep = res.flopsPerToken * static_cast<double>(res.tokensPerStep);
    double hwPerToken = res.flopsPerToken;
    if (in.checkpointing == Checkpointing::Full)
        hwPerToken += 2.0 * static_cast<double>(shapes.activeParams) + attn / 3.0;
    res.deviceFlopsPerStep
        = hwPerToken * static_cast<double>(tokensPerReplica) / (t * static_cast<double>(pp));

    // Bytes a GPU sends per step.
    const double layers = static_cast<double>(stageLayerCount[static_cast<size_t>(res.peakStage)]);
    const double perMicro = seq * b * h * static_cast<double>(dtypeBytes(in).compute);
    const double tpOps = in.checkpointing == Checkpointing::Full ? 6.0 : 4.0;
    // A vocabulary split adds an all-reduce of the embedding's output (stage 0) and of the
    // head's input gradient (the last stage), and the cross entropy's all-gather of three fp32
    // numbers a predicting row (max, sum of exponentials, target logit) from every rank.
    const bool peakFirst = res.peakStage == 0, peakLast = res.peakStage == pp - 1;
    const double rootOps = vocabSplit ? (peakFirst ? 1.0 : 0.0) + (peakLast ? 1.0 : 0.0) : 0.0;
    const double lossGather
        = vocabSplit && peakLast ? K * (t - 1.0) * 3.0 * 4.0 * b * std::max(seq - 1.0, 0.0) : 0.0;
    res.tpBytesPerDevicePerStep = toBytes(
        K * (layers * tpOps + rootOps) * 2.0 * ringFraction(mesh.tp) * perMicro + lossGather);
    // Per micro-batch each of a stage's v chunks passes an activation on and a gradient back,
    // except where the model starts and ends: a middle stage sends 2v, an end 2v - 1.
    const double v = static_cast<double>(chunks);
    res.ppBytesPerDevicePerStep
        = pp > 1 ? toBytes((pp > 2 ? 2.0 * v : 2.0 * v - 1.0) * K * perMicro) : 0;
    res.gatherBytesPerDevicePerStep = toBytes(peak.gatherBytes);
    res.reduceBytesPerDevicePerStep = toBytes(peak.reduceBytes);
    res.bytesSentPerDevicePerStep = res.gatherBytesPerDevicePerStep
        + res.reduceBytesPerDevicePerStep + res.tpBytesPerDevicePerStep
        + res.ppBytesPerDevicePerStep;

    // Roofline with the pipeline's bubble.
    const double peakFlops
        = in.precision == Precision::Fp32 ? in.device.peakFlops32 : in.device.peakFlops16;
    auto bw = [&](int64_t span) {
        return (span <= in.gpusPerNode ? in.device.intraNodeBytesPerSec
                                       : in.device.interNodeBytesPerSec)
            * k.commEfficiency;
    };
    res.bubbleFraction = static_cast<double>(pp - 1) / (v * K + static_cast<double>(pp - 1));
    const double compute = res.deviceFlopsPerStep / (peakFlops * k.computeEfficiency);
    const double critical
        = (compute + static_cast<double>(res.tpBytesPerDevicePerStep) / bw(mesh.tp)
              + static_cast<double>(res.ppBytesPerDevicePerStep) / bw(res.worldSize))
        / (1.0 - res.bubbleFraction);
    // A data-parallel group strides tp within its stage: it spans tp x dp ranks.
    const double dataParallel
        = static_cast<double>(res.gatherBytesPerDevicePerStep + res.reduceBytesPerDevicePerStep)
        / bw(mesh.tp * mesh.dataParallel());
    res.computeSeconds = compute / (1.0 - res.bubbleFraction);
    res.commSeconds = critical - res.computeSeconds + dataParallel;
    res.stepSeconds = std::max(critical, dataParallel);
    res.tokensPerSecond
        = res.stepSeconds > 0 ? static_cast<double>(res.tokensPerStep) / res.stepSeconds : 0.0;

    res.notes.push_back("layout " + mesh.describe() + " (torchtitan's order: tensor parallel "
        + "inside a node, pipeline stages outermost); this engine trains it "
          "(--tensor-parallel, --pipeline-parallel), or export the plan for torchtitan");
    if (mesh.tp > 1)
        res.notes.push_back("tensor parallel " + std::to_string(mesh.tp)
            + (sp ? " with sequence parallel: each block's weights and activations split over "
                  : " without sequence parallel (the norms' and residual activations whole on "
                    "every GPU; --sequence-parallel splits them too): each block's weights split "
                    "over ")
            + std::to_string(mesh.tp) + " GPUs, "
            + (vocabSplit ? std::string("the embedding and head by vocabulary (no GPU holds a "
                                        "token's whole logits)")
                          : "the embedding and head whole on each (tensor parallel "
                        + std::to_string(mesh.tp) + " does not divide the vocabulary of "
                        + std::to_string(s.vocabSize) + ")"));
    if (mesh.tp > in.gpusPerNode) {
        const double inside = in.device.intraNodeBytesPerSec,
                     across = in.device.interNodeBytesPerSec;
        res.notes.push_back("warning: tensor parallel " + std::to_string(mesh.tp) + " spans "
            + std::to_string(mesh.tp / in.gpusPerNode) + " nodes of "
            + std::to_string(in.gpusPerNode) + " GPUs: its blocking all-reduces ("
            + formatGiB(res.tpBytesPerDevicePerStep) + " a step per GPU) cross the inter-node link"
            + (across > 0 && inside > 0
                    ? " at " + std::to_string(static_cast<int64_t>(across / 1e9 + 0.5))
                        + " GB/s instead of "
                        + std::to_string(static_cast<int64_t>(inside / 1e9 + 0.5))
                        + " GB/s inside a node"
                    : std::string())
            + "; Megatron-LM and torchtitan keep tensor parallel inside a node: use tensor "
              "parallel "
            + std::to_string(in.gpusPerNode) + " or less and more pipeline stages");
    }
    if (pp > 1) {
        std::string layersOf;
        for (int64_t st = 0; st < pp; ++st)
            layersOf += (st ? ", " : "") + std::to_string(stageLayerCount[static_cast<size_t>(st)]);
        const double imbalance = stageImbalance(s, cut);
        res.notes.push_back(std::to_string(pp) + " pipeline stages ("
            + (chunks > 1 ? "interleaved 1F1B, " + std::to_string(chunks) + " chunks a stage"
                          : std::string("1F1B"))
            + ") of " + layersOf + " layers, cut by compute (a block's products against the "
            + "head's on the last stage; the slowest stage " + decimals(imbalance, 2)
            + "x the mean): stage 0 keeps " + decimals(inFlight(0), chunks > 1 ? 2 : 0)
            + " micro-batches' activations; the bubble idles "
            + std::to_string(static_cast<int>(res.bubbleFraction * 100.0 + 0.5)) + "% of a step at "
            + std::to_string(in.gradAccum)
            + " micro-batches (more gradient accumulation shrinks it)");
        if (in.gradAccum < pp)
            res.notes.push_back("fewer micro-batches (" + std::to_string(in.gradAccum)
                + ") than pipeline stages (" + std::to_string(pp)
                + "): stages wait for each other most of the step; use --grad-accum "
                + std::to_string(4 * pp) + " or more");
    }
    res.notes.push_back("step time: the tensor- and pipeline-parallel transfers wait on the "
                        "compute (Megatron-LM's blocking collectives), the data-parallel ones "
                        "overlap it");
    if (paper)
        res.notes.push_back("ZeRO-paper accounting: 16-bit parameters and gradients, K="
            + std::to_string(static_cast<int>(k.zeroPaperK))
            + " optimizer bytes per parameter, Korthikanti activations"
            + (sp ? " with sequence parallelism" : "")
            + " and fused attention (no stored attention scores)");
    else
        res.notes.push_back("engine accounting: each rank's tensor-parallel slice of its stage as "
                            "this engine allocates it, over the stage's data-parallel ranks"
            + std::string(pp > 1 ? "; a stage keeps its blocks gathered over its micro-batches"
                                   " and each micro-batch in flight its activations"
                                 : "")
            + (sp ? "; sequence parallel splits the norms' and the residual stream's activations"
                  : ""));
    return res;
}

PlanResult planWith(const PlanInput& in, const ModelShapes& shapes)
{
    validate(in);
    if (in.threeD())
        return plan3d(in, shapes);
    PlanResult res;
    res.input = in;
    res.params = shapes.params;
    res.activeParams = shapes.activeParams;
    res.worldSize = in.worldSize();
    res.shardDegree = shardDegreeOf(in);
    res.replicas = res.worldSize / res.shardDegree;
    const double trained = static_cast<double>(in.usesLora()
            ? loraAdapterParameterCount(in.model, in.loraRank, in.loraTargets)
            : shapes.params);
    res.checkpointBytes = toBytes(12.0 * trained);
    res.checkpointBytesPerRank = toBytes(12.0 * trained / static_cast<double>(res.shardDegree));
    const bool paper = in.mode == AccountingMode::ZeroPaper;

    Internal st = paper ? paperModelStates(in, static_cast<double>(shapes.params), res.shardDegree)
        : in.usesLora() ? engineLoraStates(in, res.shardDegree)
                        : engineModelStates(in, shapes, res.shardDegree);
    if (in.liveReferenceCopy()) {
        // DPO's live reference under full fine-tuning: a frozen copy of the model in the compute
        // dtype, 1/S of it under zero3 / hybrid (gathered unit by unit for its forward, before
        // the policy's, so nothing of it at the peak), whole under ddp / zero1 / zero2.
        const int64_t reference = toBytes(dtypeBytes(in).compute
            * unitSizes(shapes, res.shardDegree).total / frozenShare(in, res.shardDegree));
        for (MemoryBreakdown* m : {&st.mem, &st.midMem, &st.endMem, &st.fwdMem, &st.firstBlockMem})
            m->frozenBase += reference;
    }
    const int64_t sequences = in.microBatch * in.sequencesPerSample();
    ActivationBytes act
        = paper ? paperActivations(in, sequences) : engineActivations(in, sequences);
    const Calibration& k = in.calibration;
    const StepPeak moments = stepPeak(in, st, act, 1.0, true);
    res.perDevice = moments.mem;
    res.peakPhase = moments.phase;
    res.hostBytesPerDevice = toBytes(st.host);
    settleFit(in, res);

    // FLOPs: torchtitan's 6P + 12*L*heads*head_dim*s per token (model FLOPs, no recompute).
    const ModelSpec& s = in.model;
    const double attn = 12.0 * static_cast<double>(s.numLayers)
        * static_cast<double>(s.numHeads * s.headDim) * static_cast<double>(in.seqLen);
    res.flopsPerToken = 6.0 * static_cast<double>(shapes.activeParams) + attn;
    const int64_t tokensPerDevice
        = in.microBatch * in.sequencesPerSample() * in.seqLen * in.gradAccum;
    res.tokensPerStep = tokensPerDevice * res.worldSize;
    res.flopsPerStep = res.flopsPerToken * static_cast<double>(res.tokensPerStep);
    double hwPerToken = res.flopsPerToken;
    if (in.checkpointing == Checkpointing::Full)
        hwPerToken += (2.0 * static_cast<double>(shapes.activeParams) + attn / 3.0);
    // DPO with a live reference: one more forward (without gradients) of every pair, and under
    // sharded parameters its gathers: a forward's besides the forward's and backward's.
    const bool liveReference = in.objective == "dpo" && in.reference == "live";
    if (liveReference)
        hwPerToken += 2.0 * static_cast<double>(shapes.activeParams) + attn / 3.0;
    res.deviceFlopsPerStep = hwPerToken * static_cast<double>(tokensPerDevice);

    res.gatherBytesPerDevicePerStep = toBytes(st.gatherBytes * (liveReference ? 1.5 : 1.0));
    res.reduceBytesPerDevicePerStep = toBytes(st.reduceBytes);
    res.bytesSentPerDevicePerStep
        = res.gatherBytesPerDevicePerStep + res.reduceBytesPerDevicePerStep;

    // Roofline.
    const double peak
        = in.precision == Precision::Fp32 ? in.device.peakFlops32 : in.device.peakFlops16;
    res.computeSeconds = res.deviceFlopsPerStep / (peak * k.computeEfficiency);
    auto bw = [&](int64_t groupSize) {
        return (groupSize <= in.gpusPerNode ? in.device.intraNodeBytesPerSec
                                            : in.device.interNodeBytesPerSec)
            * k.commEfficiency;
    };
    if (res.worldSize > 1) {
        if (in.strategy == Strategy::Hybrid) {
            double shardTraffic = static_cast<double>(res.gatherBytesPerDevicePerStep)
                + ringFraction(res.shardDegree) * dtypeBytes(in).reduce
                    * unitSizes(shapes, res.shardDegree).total;
            double replicaTraffic
                = std::max(0.0, static_cast<double>(res.bytesSentPerDevicePerStep) - shardTraffic);
            res.commSeconds
                = shardTraffic / bw(res.shardDegree) + replicaTraffic / bw(res.worldSize);
        } else {
            res.commSeconds
                = static_cast<double>(res.bytesSentPerDevicePerStep) / bw(res.worldSize);
        }
    }
    res.stepSeconds = std::max(res.computeSeconds, res.commSeconds);
    res.tokensPerSecond
        = res.stepSeconds > 0 ? static_cast<double>(res.tokensPerStep) / res.stepSeconds : 0.0;

    // Notes a reader needs.
    if (res.worldSize == 1 && in.strategy != Strategy::Ddp)
        res.notes.push_back("sharding gains nothing on 1 GPU: each shard is the whole model");
    if (in.objective != "sft")
        res.notes.push_back(in.objective + ": each micro-batch element is a pair, two sequences "
            + "(chosen, rejected) in one forward"
            + (in.objective == "orpo" ? std::string("; no reference model")
                    : in.liveReferenceCopy()
                    ? std::string("; the reference is a frozen copy of the model in the compute "
                                  "dtype (frozen base), one more forward without gradients")
                    : in.reference == "live"
                    ? std::string("; the reference is the base with its adapters off: no second "
                                  "copy, one more forward without gradients")
                    : std::string("; the reference log-probabilities are computed in one pass "
                                  "before training and kept (16 bytes a pair)")));
    if (in.strategy == Strategy::Hybrid && in.shardGroup == res.worldSize && res.worldSize > 1)
        res.notes.push_back("hybrid with one group of all " + std::to_string(res.worldSize)
            + " GPUs shards like zero3");
    if (in.strategy == Strategy::Hybrid && in.shardGroup == 1 && res.worldSize > 1)
        res.notes.push_back("hybrid with groups of 1 replicates like ddp");
    if (s.isMoe())
        res.notes.push_back(s.name
            + " is a mixture-of-experts model: planning only (the engine "
              "trains dense models; sharding without expert parallelism gathers every "
              "expert of a block)");
    if (!paper && in.gradAccum > 1
        && (in.strategy == Strategy::Zero2 || in.strategy == Strategy::Zero3
            || in.strategy == Strategy::Hybrid))
        res.notes.push_back("gradient accumulation keeps unsharded gradients between "
                            "micro-steps (reduce once per step)");
    if (paper)
        res.notes.push_back("ZeRO-paper accounting: 16-bit parameters and gradients, K="
            + std::to_string(static_cast<int>(k.zeroPaperK))
            + " optimizer bytes per parameter, Korthikanti activations");
    if (in.method == Method::Qlora)
        res.notes.push_back("QLoRA: one block's dequantised projections are alive at a time "
                            "(freed after its forward, dequantised again for its backward)");
    if (s.slidingWindow > 0 && in.seqLen > s.slidingWindow)
        res.notes.push_back("sequence longer than the sliding window ("
            + std::to_string(s.slidingWindow) + "): planned as full attention");
    return res;
}

} // namespace

int64_t lossChunkRows(int64_t tokens, int64_t hidden, int64_t vocab)
{
    if (tokens <= 0 || vocab <= 0)
        return std::max<int64_t>(tokens, 1);
    const int64_t budget = std::max<int64_t>(tokens * std::max<int64_t>(hidden, 1), 1 << 22);
    return std::clamp<int64_t>(std::max<int64_t>(budget / vocab, 256), 1, tokens);
}

std::string toString(Strategy s)
{
    return protocol::strategyName(s);
}
std::string toString(Precision p)
{
    return kPrecisions.name(p);
}
std::string toString(Checkpointing c)
{
    return kCheckpointing.name(c);
}
std::string toString(Offload o)
{
    return kOffload.name(o);
}
std::string toString(AccountingMode m)
{
    return kModes.name(m);
}
std::string toString(Method m)
{
    return kMethods.name(m);
}
Method parseMethod(const std::string& s)
{
    return kMethods.parse(s);
}
std::string toString(DeviceKind k)
{
    return k == DeviceKind::Gpu ? "gpu" : "cpu";
}
Strategy parseStrategy(const std::string& s)
{
    return protocol::parseStrategyName(s);
}
Precision parsePrecision(const std::string& s)
{
    return kPrecisions.parse(s);
}
Checkpointing parseCheckpointing(const std::string& s)
{
    return kCheckpointing.parse(s);
}
Offload parseOffload(const std::string& s)
{
    return kOffload.parse(s);
}
AccountingMode parseAccountingMode(const std::string& s)
{
    return kModes.parse(s);
}

DtypeBytes dtypeBytes(Precision p)
{
    switch (p) {
    case Precision::Fp32:
        return {4, 4, 4, 8, 4};
    case Precision::Bf16:
        return {2, 2, 2, 4, 2};
    case Precision::Bf16Mixed:
    case Precision::Fp16Mixed:
        break;
    }
    return {2, 4, 4, 8, 4};
}

DtypeBytes dtypeBytes(const PlanInput& in)
{
    DtypeBytes d = dtypeBytes(in.precision);
    if (in.bf16Reduce)
        d.reduce = 2;
    return d;
}

DeviceSpec DeviceSpec::gpu(double gib)
{
    DeviceSpec d;
    d.kind = DeviceKind::Gpu;
    d.memoryBytes = static_cast<int64_t>(std::llround(gib * 1024.0 * 1024.0 * 1024.0));
    char buf[48];
    std::snprintf(buf, sizeof buf, "gpu-%ggib", gib);
    d.name = buf;
    return d;
}

DeviceSpec DeviceSpec::cpu(int64_t memoryBytes)
{
    DeviceSpec d;
    d.kind = DeviceKind::Cpu;
    d.name = "cpu";
    d.memoryBytes = memoryBytes;
    d.peakFlops16 = 100e9;           // bf16 on CPU is no faster than fp32 here
    d.peakFlops32 = 100e9;           // ~OpenBLAS sgemm on two cores (measured)
    d.intraNodeBytesPerSec = 5e9;    // loopback TCP (Gloo)
    d.interNodeBytesPerSec = 1.25e9; // 10 GbE
    return d;
}

const std::vector<PlanComponent>& planComponents()
{
    using H = PlanComponent::Held;
    using M = MemoryBreakdown;
    static const std::vector<PlanComponent> table = {
        {"sharded_params", "sharded params", &M::shardedParams, H::Full, true,
            "This rank's own master parameters: all of them under ddp, 1/S of them under "
            "ZeRO-1/2/3 and hybrid (S: the shard degree)."},
        {"gathered_params", "gathered params", &M::gatheredParams, H::Always, true,
            "Parameters in the compute dtype, gathered to compute with: the whole model under "
            "ZeRO-1/2 (and ddp when it computes in another dtype than its masters); under ZeRO-3 "
            "and hybrid only the embeddings, the head and the blocks in flight (with LoRA the "
            "frozen base's, with QLoRA the running block's dequantised projections)."},
        {"grads", "grads", &M::grads, H::Full, true,
            "Gradients alive at the peak: the unsharded gradients that wait for their reduce and, "
            "under ZeRO, this rank's reduced shard. ddp holds the whole model's; ZeRO-1 keeps the "
            "whole model's unsharded gradients until its reduce-scatter as well as its shard, so "
            "it can show more than ddp; ZeRO-2 and ZeRO-3 reduce each block's as the backward "
            "goes."},
        {"optimizer", "optimizer", &M::optimizer, H::Full, true,
            "AdamW's two moments for this rank's parameters: for the whole model under ddp, 1/S "
            "of it under ZeRO."},
        {"activations", "activations", &M::activations, H::Always, false,
            "What the forward keeps for the backward, at the start of backward: every block's "
            "tensors (with checkpointing, each block's input and one block recomputed), the "
            "embeddings' and the last norm's. Freed by backward end, so a peak there shows 0 "
            "(checkpointing can move the peak to backward end)."},
        {"logits", "logits", &M::logits, H::Always, false,
            "The LM head's logits and their gradient over one chunk of rows (the head and the "
            "cross entropy run fused, chunk by chunk), and the hidden states' gradient."},
        {"comm_buffers", "comm buffers", &M::commBuffers, H::Always, false,
            "Reduce-scatter or all-reduce buffers alive at the peak (on CPU Gloo's receive buffer "
            "too)."},
        {"overhead", "overhead", &M::overhead, H::Always, false,
            "A fixed amount per device (on GPU the CUDA context and the caching allocator's "
            "reserve; 0 on CPU, where the engine counts its tensors) plus fragmentation as a "
            "share of the rest."},
        {"frozen_base", "frozen base", &M::frozenBase, H::Frozen, true,
            "LoRA: the frozen base weights in the compute dtype (sharded 1/S under ZeRO-3 and "
            "hybrid). DPO with a live reference under full fine-tuning: the reference, a frozen "
            "copy of the model, held the same way."},
        {"quantized_base", "NF4 base", &M::quantizedBase, H::Qlora, true,
            "QLoRA: the base projections in NF4 with their block scales."},
        {"adapters", "adapters", &M::adapters, H::Lora, true,
            "LoRA's A and B matrices (fp32 masters, and their compute-dtype copies)."},
        {"adapter_grads", "adapter grads", &M::adapterGrads, H::Lora, true,
            "The adapters' gradients (sharded, unsharded and their reduce buffers)."},
        {"adapter_optimizer", "adapter optimizer", &M::adapterOptimizer, H::Lora, true,
            "AdamW's two moments for the adapters."},
    };
    return table;
}

bool heldUnder(const PlanComponent& c, const PlanInput& in)
{
    switch (c.held) {
    case PlanComponent::Held::Always:
        return true;
    case PlanComponent::Held::Full:
        return !in.usesLora();
    case PlanComponent::Held::Lora:
        return in.usesLora();
    case PlanComponent::Held::Frozen:
        return in.usesLora() || in.liveReferenceCopy();
    case PlanComponent::Held::Qlora:
        return in.method == Method::Qlora;
    }
    return true;
}

int64_t MemoryBreakdown::modelStates() const
{
    int64_t sum = 0;
    for (const PlanComponent& c : planComponents())
        if (c.modelState)
            sum += this->*c.bytes;
    return sum;
}

int64_t MemoryBreakdown::total() const
{
    int64_t sum = 0;
    for (const PlanComponent& c : planComponents())
        sum += this->*c.bytes;
    return sum;
}

std::vector<std::pair<std::string, int64_t>> MemoryBreakdown::components() const
{
    std::vector<std::pair<std::string, int64_t>> out;
    for (const PlanComponent& c : planComponents())
        out.emplace_back(c.key, this->*c.bytes);
    return out;
}

void validate(const PlanInput& in)
{
    auto positive = [](int64_t v, const char* what) {
        if (v <= 0)
            throw std::runtime_error(
                std::string(what) + " must be a positive integer (got " + std::to_string(v) + ")");
    };
    const ModelSpec& s = in.model;
    if (s.numLayers <= 0 || s.hiddenSize <= 0 || s.vocabSize <= 0 || s.numHeads <= 0
        || s.numKvHeads <= 0 || s.headDim <= 0 || s.intermediateSize <= 0)
        throw std::runtime_error("model '" + s.name
            + "' has zero or negative sizes; check its "
              "config.json");
    positive(in.microBatch, "micro-batch");
    positive(in.seqLen, "sequence length");
    positive(in.gradAccum, "gradient accumulation");
    positive(in.gpusPerNode, "GPUs per node");
    positive(in.nodes, "node count");
    if (s.maxPositionEmbeddings > 0 && in.seqLen > s.maxPositionEmbeddings)
        throw std::runtime_error("sequence length " + std::to_string(in.seqLen) + " is longer than "
            + s.name + "'s maximum of " + std::to_string(s.maxPositionEmbeddings)
            + " positions (max_position_embeddings); use " + std::to_string(s.maxPositionEmbeddings)
            + " or less");
    if (in.tp < 1 || in.pp < 1)
        throw std::runtime_error("tensor and pipeline parallel degrees are at least 1 (got tp "
            + std::to_string(in.tp) + ", pp " + std::to_string(in.pp) + ")");
    in.parallelDims().validate("GPUs");
    if (in.threeD()) {
        if (s.isMoe())
            throw std::runtime_error(s.name
                + " is a mixture-of-experts model: tensor and pipeline parallelism are planned "
                  "for dense models only (expert parallelism is not modelled)");
        const protocol::DeviceMesh mesh = in.mesh();
        mesh.validate(in.gpusPerNode, "GPUs");
        if (s.numHeads % in.tp != 0)
            throw std::runtime_error("tensor parallel " + std::to_string(in.tp)
                + " does not divide " + s.name + "'s " + std::to_string(s.numHeads)
                + " attention heads; use a divisor of " + std::to_string(s.numHeads) + " ("
                + protocol::divisorList(s.numHeads) + ")");
        if (s.numKvHeads % in.tp != 0 && in.tp % s.numKvHeads != 0)
            throw std::runtime_error("tensor parallel " + std::to_string(in.tp) + " and " + s.name
                + "'s " + std::to_string(s.numKvHeads)
                + " key/value heads neither divide the other; use a divisor or a multiple of "
                + std::to_string(s.numKvHeads));
    }
    // Sequence parallel, as the engine refuses it (plan::tensorParallelRefusal).
    if (in.sequenceParallel)
        if (const std::string why = whyNoSequenceParallel(s, in.tp, in.seqLen); !why.empty())
            throw std::runtime_error(why);
    // Pipeline stages and interleaved 1F1B, as the engine refuses them (one rule:
    // plan::whyNoPipeline), in the planner's words.
    const PipelineWords words {[](int64_t n) { return std::to_string(n) + " pipeline stages"; },
        [](int64_t n) {
            return std::to_string(n) + (n == 1 ? " chunk a stage" : " chunks a stage");
        },
        [](int64_t n) { return "gradient accumulation " + std::to_string(n); }};
    if (const std::string why
        = whyNoPipeline(in.pp, in.virtualStages, in.gradAccum, s.numLayers, words);
        !why.empty())
        throw std::runtime_error(why);
    // The engine accounting plans what this engine trains: its refusals of a layout (one rule
    // with the worker's) refuse the plan, with the run's flag to change.
    if (in.threeD() && in.mode == AccountingMode::Engine) {
        protocol::RunSpec spec;
        applyPlanToSpec(in, s.name, spec);
        for (const std::string& why :
            {tensorParallelRefusal(spec, s), pipelineParallelRefusal(spec, s)})
            if (!why.empty())
                throw std::runtime_error("the engine accounting plans what this engine trains: "
                    + why + " (or plan with --mode zero-paper for Megatron-LM or torchtitan)");
    }
    if (in.bf16Reduce && in.precision != Precision::Bf16Mixed)
        throw std::runtime_error("a bf16 reduce goes with bf16-mixed (" + toString(in.precision)
            + " reduces in its own dtype); use reduce fp32");
    if (in.device.memoryBytes <= 0)
        throw std::runtime_error("device memory must be positive (got "
            + std::to_string(in.device.memoryBytes) + " bytes)");
    if (in.device.peakFlops16 <= 0 || in.device.peakFlops32 <= 0
        || in.device.intraNodeBytesPerSec <= 0 || in.device.interNodeBytesPerSec <= 0)
        throw std::runtime_error("device peak FLOP/s and link bandwidths must be positive");
    if (in.usesLora()) {
        if (s.isMoe())
            throw std::runtime_error(s.name
                + " is a mixture-of-experts model: LoRA / QLoRA are planned for dense models "
                  "only; use --method full");
        if (in.loraRank <= 0)
            throw std::runtime_error(
                "LoRA rank must be a positive integer (got " + std::to_string(in.loraRank) + ")");
        if (in.loraDropout < 0 || in.loraDropout >= 1)
            throw std::runtime_error("LoRA dropout must be in [0, 1)");
        parseLoraTargets(in.loraTargets);
        if (in.mode == AccountingMode::ZeroPaper)
            throw std::runtime_error("zero-paper accounting describes full fine-tuning only; use "
                                     "--mode engine with --method "
                + toString(in.method));
        if (in.offload != Offload::None)
            throw std::runtime_error("offload is not planned with --method " + toString(in.method)
                + " (the adapters' optimizer state is small); use offload none");
        if (in.method == Method::Qlora)
            for (const ParamInfo& p : parameterTable(s))
                if (projectionOf(p) >= 0 && p.shape[1] % kNf4Block != 0)
                    throw std::runtime_error("QLoRA needs every projection's input size to be a "
                                             "multiple of the NF4 block of "
                        + std::to_string(kNf4Block) + "; " + p.name + " has "
                        + std::to_string(p.shape[1]) + "; use --method lora");
    }
    if (in.device.kind == DeviceKind::Cpu && in.offload != Offload::None)
        throw std::runtime_error("offload '" + toString(in.offload)
            + "' means nothing on a CPU device (all state already lives in "
              "host memory); use offload none");
}

OverheadParts overheadParts(const PlanInput& in)
{
    const bool gpu = in.device.kind == DeviceKind::Gpu;
    const Calibration& k = in.calibration;
    OverheadParts o;
    o.fixedBytes = in.device.overheadBytes >= 0 ? static_cast<double>(in.device.overheadBytes)
        : gpu                                   ? k.gpuOverheadBytes
                                                : k.cpuOverheadBytes;
    o.fragmentation = gpu ? k.gpuFragmentation : k.cpuFragmentation;
    return o;
}

PlanResult plan(const PlanInput& in)
{
    validate(in);
    return planWith(in, modelShapes(in.model));
}

std::vector<PlanResult> planAllStrategies(const PlanInput& in)
{
    validate(in);
    const ModelShapes shapes = modelShapes(in.model);
    std::vector<PlanResult> out;
    // The data-parallel GPUs: all of them, or under tensor / pipeline parallelism W / (tp pp).
    const int64_t W = in.worldSize() / (in.tp * in.pp);
    for (Strategy s : allStrategies()) {
        PlanInput x = in;
        x.strategy = s;
        if (s == Strategy::Hybrid) {
            int64_t g = in.shardGroup;
            const int64_t perNode = in.gpusPerNode / in.tp; // a node's data-parallel GPUs
            if (in.strategy != Strategy::Hybrid || g <= 0)
                g = (perNode > 0 && perNode < W && W % perNode == 0) ? perNode : 0;
            if (g <= 0 || W % g != 0)
                continue;
            x.shardGroup = g;
        }
        out.push_back(planWith(x, shapes));
    }
    return out;
}

namespace {

// The smallest n in (lo, limit] with yes(n), or limit + 1 when there is none. yes(lo) is false
// and yes is monotone over the range (false up to some n, true from there): doubling from lo,
// then bisection.
template<typename Pred> int64_t firstYes(int64_t lo, int64_t limit, Pred yes)
{
    int64_t hi = 2 * lo;
    while (hi <= limit && !yes(hi)) {
        lo = hi;
        hi *= 2;
    }
    if (hi > limit) {
        if (!yes(limit))
            return limit + 1;
        hi = limit;
    }
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (yes(mid) ? hi : lo) = mid;
    }
    return hi;
}

} // namespace

int64_t largestMicroBatch(const PlanInput& in, int64_t limit)
{
    validate(in);
    const ModelShapes shapes = modelShapes(in.model);
    auto fits = [&](int64_t b) {
        PlanInput x = in;
        x.microBatch = b;
        return planWith(x, shapes).fits;
    };
    if (limit < 1 || !fits(1))
        return 0;
    // Memory grows with the micro-batch: the largest that fits is one below the first that
    // does not.
    return firstYes(1, limit, [&](int64_t b) { return !fits(b); }) - 1;
}

int64_t fewestGpus(const PlanInput& in, int64_t limitGpus)
{
    validate(in);
    const ModelShapes shapes = modelShapes(in.model);
    auto fitsAt = [&](int64_t gpus) {
        PlanInput x = in;
        if (gpus <= in.gpusPerNode) {
            x.gpusPerNode = gpus;
            x.nodes = 1;
        } else {
            x.nodes = gpus / in.gpusPerNode;
        }
        // A count the layout cannot use (tp x pp not dividing it, a group spanning nodes) is
        // not an answer.
        try {
            return planWith(x, shapes).fits;
        } catch (const std::runtime_error&) {
            return false;
        }
    };
    if (in.strategy == Strategy::Hybrid) {
        // Memory depends on the group only; more replicas change nothing.
        const int64_t g = in.shardGroup;
        if (g > limitGpus)
            return 0;
        if (g <= in.gpusPerNode || g % in.gpusPerNode == 0)
            return fitsAt(g) ? g : 0;
        return 0;
    }
    for (int64_t g = 1; g <= std::min(in.gpusPerNode, limitGpus); ++g)
        if (fitsAt(g))
            return g;
    if (in.strategy == Strategy::Ddp)
        return 0; // replication: more GPUs never lower the memory per GPU
    // Whole nodes: memory per GPU falls with the node count (up to padding), so search it.
    const int64_t maxNodes = limitGpus / in.gpusPerNode;
    if (maxNodes < 2)
        return 0;
    const int64_t nodes
        = firstYes(1, maxNodes, [&](int64_t n) { return fitsAt(n * in.gpusPerNode); });
    return nodes > maxNodes ? 0 : nodes * in.gpusPerNode;
}

int64_t loraAdapterParameterCount(const ModelSpec& spec, int64_t rank, const std::string& targets)
{
    const std::vector<bool> on = parseLoraTargets(targets);
    int64_t n = 0;
    for (const ParamInfo& p : parameterTable(spec)) {
        const int proj = projectionOf(p);
        if (proj >= 0 && on[static_cast<size_t>(proj)])
            n += rank * (p.shape[0] + p.shape[1]);
    }
    return n;
}

int64_t quantizedParameterCount(const ModelSpec& spec)
{
    int64_t n = 0;
    for (const ParamInfo& p : parameterTable(spec))
        if (projectionOf(p) >= 0)
            n += p.numel();
    return n;
}

double nf4Bytes(double n, bool doubleQuant)
{
    const double block = static_cast<double>(kNf4Block);
    return n / 2.0
        + (doubleQuant ? n / block + 4.0 * n / (block * static_cast<double>(kNf4NestedBlock))
                       : 4.0 * n / block);
}

MemoryBreakdown zeroPaperModelStates(Strategy s, double psi, int64_t n, double k)
{
    const double N = static_cast<double>(std::max<int64_t>(1, n));
    double params = 0, grads = 0, opt = 0;
    switch (s) {
    case Strategy::Ddp:
        params = 2 * psi;
        grads = 2 * psi;
        opt = k * psi;
        break;
    case Strategy::Zero1:
        params = 2 * psi;
        grads = 2 * psi;
        opt = k * psi / N;
        break;
    case Strategy::Zero2:
        params = 2 * psi;
        grads = 2 * psi / N;
        opt = k * psi / N;
        break;
    case Strategy::Zero3:
    case Strategy::Hybrid:
        params = 2 * psi / N;
        grads = 2 * psi / N;
        opt = k * psi / N;
        break;
    }
    MemoryBreakdown m;
    m.shardedParams = toBytes(params);
    m.grads = toBytes(grads);
    m.optimizer = toBytes(opt);
    return m;
}

nlohmann::json toJson(const MemoryBreakdown& m)
{
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : m.components())
        j[k] = v;
    j["total"] = m.total();
    return j;
}

nlohmann::json toJson(const PlanResult& r)
{
    const PlanInput& in = r.input;
    nlohmann::json j;
    j["model"] = in.model.name;
    j["params"] = r.params;
    j["active_params"] = r.activeParams;
    j["mode"] = toString(in.mode);
    j["strategy"] = toString(in.strategy);
    if (in.strategy == Strategy::Hybrid)
        j["shard_group"] = in.shardGroup;
    j["precision"] = toString(in.precision);
    j["checkpointing"] = toString(in.checkpointing);
    j["offload"] = toString(in.offload);
    if (in.bf16Reduce)
        j["reduce_dtype"] = "bf16";
    j["method"] = toString(in.method);
    if (in.usesLora()) {
        j["lora"] = {{"rank", in.loraRank}, {"alpha", in.loraAlpha}, {"dropout", in.loraDropout},
            {"targets", in.loraTargets}, {"rslora", in.loraRslora},
            {"adapter_params", loraAdapterParameterCount(in.model, in.loraRank, in.loraTargets)}};
        if (in.method == Method::Qlora) {
            j["lora"]["quantized_params"] = quantizedParameterCount(in.model);
            j["lora"]["double_quant"] = in.qloraDoubleQuant;
        }
    }
    if (r.checkpointBytes > 0) {
        j["checkpoint_bytes"] = r.checkpointBytes;
        j["checkpoint_bytes_per_rank"] = r.checkpointBytesPerRank;
    }
    j["micro_batch"] = in.microBatch;
    if (in.objective != "sft") {
        j["objective"] = in.objective;
        j["sequences_per_sample"] = in.sequencesPerSample();
        if (!in.reference.empty())
            j["reference"] = in.reference;
    }
    j["seq_len"] = in.seqLen;
    j["grad_accum"] = in.gradAccum;
    j["gpus"] = r.worldSize;
    j["nodes"] = in.nodes;
    j["gpus_per_node"] = in.gpusPerNode;
    j["device"] = {{"kind", toString(in.device.kind)}, {"name", in.device.name},
        {"memory_bytes", in.device.memoryBytes}};
    j["shard_degree"] = r.shardDegree;
    if (in.threeD()) {
        const auto mesh = in.mesh();
        j["mesh"] = {{"pp", mesh.pp}, {"dp_replicate", mesh.dpReplicate},
            {"dp_shard", mesh.dpShard}, {"tp", mesh.tp}};
        if (in.virtualStages > 1)
            j["virtual_stages"] = in.virtualStages;
        if (in.tp > 1)
            j["sequence_parallel"] = in.sequenceParallel;
        j["peak_stage"] = r.peakStage;
        j["stage_params_per_gpu"] = r.stageParams;
        j["bubble_fraction"] = r.bubbleFraction;
        j["tp_bytes_per_gpu_per_step"] = r.tpBytesPerDevicePerStep;
        j["pp_bytes_per_gpu_per_step"] = r.ppBytesPerDevicePerStep;
    }
    j["replicas"] = r.replicas;
    j["per_device"] = toJson(r.perDevice);
    j["peak_phase"] = r.peakPhase;
    j["host_per_device"] = r.hostBytesPerDevice;
    j["capacity"] = r.capacityBytes;
    j["headroom"] = r.headroomBytes;
    j["fits"] = r.fits;
    j["flops_per_token"] = r.flopsPerToken;
    j["flops_per_step"] = r.flopsPerStep;
    j["device_flops_per_step"] = r.deviceFlopsPerStep;
    j["tokens_per_step"] = r.tokensPerStep;
    j["bytes_sent_per_device_per_step"] = r.bytesSentPerDevicePerStep;
    j["gather_bytes_per_device_per_step"] = r.gatherBytesPerDevicePerStep;
    j["reduce_bytes_per_device_per_step"] = r.reduceBytesPerDevicePerStep;
    j["step_time"] = {{"compute_s", r.computeSeconds}, {"comm_s", r.commSeconds},
        {"step_s", r.stepSeconds}, {"tokens_per_s", r.tokensPerSecond}};
    j["notes"] = r.notes;
    return j;
}

int64_t physicalMemoryBytes()
{
    const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size : (8LL << 30);
}

std::string formatGiB(int64_t bytes)
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
    return buf;
}

std::string formatBytesShort(double bytes)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        ++u;
    }
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f %s", u == 0 ? 0 : (bytes < 10 ? 2 : 1), bytes, units[u]);
    return buf;
}

std::string formatBytes(int64_t bytes)
{
    const double b = static_cast<double>(bytes);
    const double a = std::fabs(b);
    char buf[48];
    if (a >= 1024.0 * 1024 * 1024 * 1024)
        std::snprintf(buf, sizeof buf, "%.2f TiB", b / (1024.0 * 1024 * 1024 * 1024));
    else if (a >= 1024.0 * 1024 * 1024)
        std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (a >= 1024.0 * 1024)
        std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
    else if (a >= 1024.0)
        std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
    else
        std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
    return buf;
}

} // namespace shard::plan
