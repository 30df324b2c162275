// The memory / FLOP / communication predictor behind `shard plan` and the studio's Plan page:
// bytes per device by component for each sharding strategy, the fit verdict, and derived
// answers (largest micro-batch, fewest GPUs, FLOPs, bytes sent, roofline step time).
//
// Engine mode (default) describes what Shard Studio's engine allocates (docs/ARCHITECTURE.md);
// ZeRO-paper mode reproduces Rajbhandari et al. 2020's model-state accounting with Korthikanti et
// al. 2022's activations. Every coefficient a measurement may change lives in Calibration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "plan/calibration.h"
#include "plan/model_spec.h"
#include "protocol/device_mesh.h"
#include "protocol/parallel_dims.h"

namespace shard::plan {

using protocol::Strategy; // ddp, zero1, zero2, zero3, hybrid (protocol/parallel_dims.h)
// fp32: everything fp32. bf16-mixed / fp16-mixed: 16-bit compute, fp32 master weights, fp32
// gradients and reduce, fp32 AdamW state. bf16: pure bf16 (weights, gradients, reduce and
// AdamW state all bf16).
enum class Precision { Fp32, Bf16Mixed, Bf16, Fp16Mixed };
enum class Checkpointing { None, Full };
enum class Offload { None, Optimizer, ParamsAndOptimizer };
enum class AccountingMode { Engine, ZeroPaper };
enum class DeviceKind { Gpu, Cpu };
// Full fine-tuning, LoRA (frozen base in the compute dtype + trained adapters) or QLoRA (the
// block projections stored as NF4, engine/core/model/nf4.h).
enum class Method { Full, Lora, Qlora };

// Names as the CLI and JSON spell them: "ddp", "zero1", "zero2", "zero3", "hybrid"; "fp32",
// "bf16-mixed", "bf16", "fp16-mixed"; "none", "full"; "none", "optimizer", "params+optimizer";
// "engine", "zero-paper"; "gpu", "cpu". The parse functions throw std::runtime_error listing
// the accepted names.
std::string toString(Strategy s);
std::string toString(Precision p);
std::string toString(Checkpointing c);
std::string toString(Offload o);
std::string toString(AccountingMode m);
std::string toString(DeviceKind k);
Strategy parseStrategy(const std::string& s);
Precision parsePrecision(const std::string& s);
Checkpointing parseCheckpointing(const std::string& s);
Offload parseOffload(const std::string& s);
AccountingMode parseAccountingMode(const std::string& s);
std::string toString(Method m); // "full", "lora", "qlora"
Method parseMethod(const std::string& s);
using protocol::allStrategies; // ddp, zero1, zero2, zero3, hybrid

// Bytes per element of each kind of state for a precision.
struct DtypeBytes {
    int compute = 4;   // gathered parameters, activations
    int master = 4;    // sharded (master) parameters
    int grad = 4;      // sharded gradient
    int optimizer = 8; // AdamW m + v
    int reduce = 4;    // gradient reduce-scatter / all-reduce
};
DtypeBytes dtypeBytes(Precision p);

struct DeviceSpec {
    DeviceKind kind = DeviceKind::Gpu;
    std::string name = "gpu-80gib";
    // GPU: memory of one GPU. CPU: memory of one node, shared by its ranks (gpusPerNode).
    int64_t memoryBytes = 80LL << 30;
    // Fixed per-device overhead; negative = Calibration's default for the kind.
    int64_t overheadBytes = -1;
    // Host memory per node for offloaded state; 0 = unknown (not checked).
    int64_t hostMemoryBytes = 0;
    double peakFlops16 = 989e12;         // dense bf16/fp16 FLOP/s (H100 SXM)
    double peakFlops32 = 67e12;          // dense fp32 FLOP/s
    double intraNodeBytesPerSec = 450e9; // per device, per direction (NVLink 4)
    double interNodeBytesPerSec = 50e9;  // per device (400 Gb/s InfiniBand)

    // A GPU with `gib` GiB; other fields as above.
    static DeviceSpec gpu(double gib);
    // The CPU of a node with `memoryBytes` of RAM (ranks share it), modest FLOP/s and loopback.
    static DeviceSpec cpu(int64_t memoryBytes);
};

struct PlanInput {
    ModelSpec model;
    Strategy strategy = Strategy::Zero3;
    int64_t shardGroup = 0; // hybrid only: ranks that shard one replica (must divide the GPUs)
    Precision precision = Precision::Bf16Mixed;
    Checkpointing checkpointing = Checkpointing::None;
    Offload offload = Offload::None;
    // bf16-mixed only: the gradients are reduce-scattered / all-reduced in bf16 (the run spec's
    // reduce_dtype), not fp32.
    bool bf16Reduce = false;
    int64_t microBatch = 1; // sequences per rank per micro-step
    int64_t seqLen = 2048;
    int64_t gradAccum = 1; // micro-steps per optimizer step
    int64_t gpusPerNode = 8;
    int64_t nodes = 1;
    // Tensor and pipeline parallel degrees (Megatron-LM / torchtitan layouts, which the engine
    // trains; the engine accounting plans each GPU's slice as the engine allocates it, the
    // zero-paper one as Megatron-LM and torchtitan do). The data-parallel ranks are the
    // GPUs / (tp x pp), sharded or replicated as the strategy says.
    int64_t tp = 1;
    int64_t pp = 1;
    // Model chunks per pipeline stage: more than 1 plans interleaved 1F1B (Megatron-LM's virtual
    // pipeline stages; the micro-batches a multiple of pp).
    int64_t virtualStages = 1;
    // Sequence parallel over the tensor-parallel GPUs (the run spec's sequence_parallel,
    // Megatron-LM's --sequence-parallel): the norms' and the residual stream's activations split
    // along the sequence too. Needs tp > 1, the vocabulary split and seqLen a multiple of tp.
    bool sequenceParallel = false;
    DeviceSpec device;
    AccountingMode mode = AccountingMode::Engine;
    Calibration calibration;
    // LoRA / QLoRA (engine/core/model/lora.h); ignored under Method::Full.
    Method method = Method::Full;
    int64_t loraRank = 8;
    double loraAlpha = 16.0;
    double loraDropout = 0.0;
    std::string loraTargets = "q,k,v,o"; // any of q,k,v,o,gate,up,down
    bool loraRslora = false;
    bool qloraDoubleQuant = true; // QLoRA: 8-bit block scales (see nf4Bytes)
    // The training objective (run spec `objective`): sft, or dpo / orpo on preference pairs,
    // whose micro-batch counts pairs: two sequences (chosen, rejected) in one forward. DPO's
    // reference: "live" (a forward without gradients before the policy's, which holds nothing at
    // the peak: with LoRA the base with its adapters off; with full fine-tuning a frozen copy of
    // the model, counted in frozenBase) or "precomputed" (16 bytes a record).
    std::string objective = "sft";
    std::string reference;

    bool usesLora() const { return method != Method::Full; }
    // DPO's live reference under full fine-tuning: a frozen copy of the model beside it.
    bool liveReferenceCopy() const
    {
        return objective == "dpo" && reference == "live" && !usesLora();
    }
    // Sequences of one micro-batch element: 2 for preference pairs.
    int64_t sequencesPerSample() const { return objective == "sft" ? 1 : 2; }
    int64_t worldSize() const { return gpusPerNode * nodes; }
    protocol::ParallelDims parallelDims() const
    {
        return {strategy, shardGroup, nodes, gpusPerNode, tp, pp};
    }
    bool threeD() const { return tp > 1 || pp > 1; }
    // Where each GPU sits (throws std::runtime_error when the degrees do not divide the GPUs).
    protocol::DeviceMesh mesh() const { return protocol::DeviceMesh::of(parallelDims()); }
};

// The input's bytes per element: its precision's, with a bf16 reduce where it asks for one.
DtypeBytes dtypeBytes(const PlanInput& in);

// Bytes on one device by component.
struct MemoryBreakdown {
    int64_t shardedParams = 0;  // this rank's persistent parameter shard (master weights)
    int64_t gatheredParams = 0; // unsharded compute-dtype parameters alive at the peak
    int64_t grads = 0;          // sharded gradient + unsharded gradients alive at the peak
    int64_t optimizer = 0;      // AdamW m and v
    int64_t activations = 0;    // saved for backward (+ one block's transients)
    int64_t logits = 0;         // logits and their gradient
    int64_t commBuffers = 0;    // flat reduce / receive buffers
    int64_t overhead = 0;       // fixed overhead + fragmentation
    // LoRA / QLoRA (zero under full fine-tuning). The gathered frozen base and, under QLoRA, the
    // running block's dequantised projections are in gatheredParams.
    int64_t frozenBase = 0;       // this rank's frozen base in the compute dtype (not quantised)
    int64_t quantizedBase = 0;    // this rank's NF4 bytes (nf4Bytes)
    int64_t adapters = 0;         // adapter masters (+ their compute-dtype copies)
    int64_t adapterGrads = 0;     // adapter gradients (sharded + unsharded + reduce buffers)
    int64_t adapterOptimizer = 0; // AdamW m and v of the adapters

    // The model states: the components planComponents() marks so.
    int64_t modelStates() const;
    int64_t total() const;
    // (key, bytes) in planComponents()' order.
    std::vector<std::pair<std::string, int64_t>> components() const;
};

// One row of the planner's memory accounting. Every view of a plan (its JSON, `shard plan`'s
// table, the Plan page's table, chart and tooltips) loops over planComponents(), so a new
// component is one row here and a field above (docs/ARCHITECTURE.md, section 4, item 6).
struct PlanComponent {
    const char* key;   // JSON key, e.g. "sharded_params"
    const char* label; // as views show it, e.g. "sharded params" (measured ones as the Monitor)
    int64_t MemoryBreakdown::*bytes;
    // Under which fine-tuning (Lora: and QLoRA; Frozen: LoRA, QLoRA or a live DPO reference
    // copy).
    enum class Held { Always, Full, Lora, Qlora, Frozen } held;
    bool modelState;     // counted in MemoryBreakdown::modelStates()
    const char* meaning; // what it holds, in a sentence or two (the Plan page's tooltip)
};

// In the order every view lists them: the full fine-tuning states, activations, logits, buffers
// and overhead, then LoRA's.
const std::vector<PlanComponent>& planComponents();
// Whether a plan of `in` can hold the component (LoRA's rows under LoRA, NF4 under QLoRA, the
// full model's gradients, optimizer and own shard under full fine-tuning).
bool heldUnder(const PlanComponent& c, const PlanInput& in);

struct PlanResult {
    PlanInput input;
    int64_t params = 0;       // exact parameter count
    int64_t activeParams = 0; // per token (MoE); = params when dense
    int64_t worldSize = 0;
    int64_t shardDegree = 1; // ranks one copy of the state is split over (ddp 1, hybrid G, else W)
    int64_t replicas = 1;    // copies of the state: worldSize / shardDegree (3D: dp_replicate)
    // Tensor / pipeline parallel plans (PlanInput::tp, pp): the pipeline stage whose GPUs hold
    // the most (perDevice is theirs), the parameters one of its GPUs holds, the 1F1B pipeline's
    // idle fraction, and the bytes a GPU sends per step for tensor and pipeline parallelism.
    int64_t peakStage = 0;
    int64_t stageParams = 0;
    double bubbleFraction = 0;
    int64_t tpBytesPerDevicePerStep = 0;
    int64_t ppBytesPerDevicePerStep = 0;

    // At the peak of a step. Engine mode compares moments of a step and reports the largest:
    // on CPU "backward start", "mid backward" and "backward end"; on GPU "backward start" and
    // "backward end" (engine/plan/ACCOUNTING.md).
    MemoryBreakdown perDevice;
    std::string peakPhase;
    int64_t hostBytesPerDevice = 0; // offloaded state in host memory, per rank
    // A checkpoint on disk (engine/ckpt): every trained tensor in fp32 with AdamW's m and v
    // (12 bytes per trained parameter: all of them, or LoRA's adapters), and what one rank of a
    // replica writes (its shard). 0 for tensor / pipeline plans.
    int64_t checkpointBytes = 0;
    int64_t checkpointBytesPerRank = 0;
    int64_t capacityBytes = 0; // what one device (rank) may use
    int64_t headroomBytes = 0; // capacity - total (negative when it does not fit)
    bool fits = false;         // device memory and, when known, host memory

    double flopsPerToken = 0;      // model FLOPs: 6 * activeParams + 12 * L * heads * headDim * s
    double flopsPerStep = 0;       // all devices: flopsPerToken * tokensPerStep
    double deviceFlopsPerStep = 0; // one device incl. recomputation under checkpointing
    int64_t tokensPerStep = 0;     // global: microBatch * seqLen * gradAccum * worldSize
    int64_t bytesSentPerDevicePerStep = 0;
    int64_t gatherBytesPerDevicePerStep = 0; // parameter all-gathers (compute dtype)
    int64_t reduceBytesPerDevicePerStep = 0; // gradient reduce-scatter / all-reduce

    // Roofline: compute at peak FLOP/s, communication at link bandwidth.
    double computeSeconds = 0;
    double commSeconds = 0;
    double stepSeconds = 0; // max(compute, comm): communication fully overlapped
    double tokensPerSecond = 0;

    std::vector<std::string> notes; // e.g. "sharding gains nothing on 1 GPU"
};

// Throws std::runtime_error with a message that names the bad value and the fix.
void validate(const PlanInput& in);
PlanResult plan(const PlanInput& in);
// The overhead's two parts as plan() counts them: a fixed amount per device (the device's own,
// else the calibration's for its kind) plus a share of the rest of the peak (fragmentation).
struct OverheadParts {
    double fixedBytes = 0;
    double fragmentation = 0; // share of the other categories' total
};
OverheadParts overheadParts(const PlanInput& in);
// The input under every strategy (ddp, zero1, zero2, zero3, and hybrid when a group applies:
// the input's shard group, else gpusPerNode when it splits the GPUs into several nodes).
std::vector<PlanResult> planAllStrategies(const PlanInput& in);
// Largest micro-batch <= limit that fits, 0 when even 1 does not.
int64_t largestMicroBatch(const PlanInput& in, int64_t limit = 65536);
// Fewest GPUs (1..gpusPerNode, then whole nodes; hybrid: multiples of the group) that fit,
// 0 when none up to `limitGpus`.
int64_t fewestGpus(const PlanInput& in, int64_t limitGpus = 65536);

// Rows (tokens) per chunk of the engine's LM head + cross entropy over `tokens` rows: the chunk's
// logits about the size of the hidden states (tokens x hidden) or 2^22 elements if more, and at
// least 256 rows (each chunk adds its rank-`rows` product to W's whole gradient: fewer rows
// would make that sum memory-bound); between 1 and `tokens`.
int64_t lossChunkRows(int64_t tokens, int64_t hidden, int64_t vocab);

// LoRA's trained parameters: rank * (in + out) per targeted projection per block
// (A is rank x in, B is out x rank). `targets` as --lora-targets; throws naming a bad entry.
int64_t loraAdapterParameterCount(const ModelSpec& spec, int64_t rank, const std::string& targets);
// QLoRA's quantised parameters: every block projection (q, k, v, o, gate, up, down) weight.
int64_t quantizedParameterCount(const ModelSpec& spec);
// Bytes of n NF4-quantised parameters: n / 2 packed + 4 per block of 64 (fp32 absmax), or with
// double quantisation 1 per block of 64 (8-bit absmax code) + 4 per 256 such blocks (their
// fp32 scale).
double nf4Bytes(double n, bool doubleQuant);

// The ZeRO paper's model states per device for psi parameters over n ranks with K optimizer
// bytes per parameter: DDP (2+2+K)psi, ZeRO-1 4psi + K psi/n, ZeRO-2 2psi + (2+K)psi/n,
// ZeRO-3 (2+2+K)psi/n (hybrid = ZeRO-3 over its group). Fills shardedParams, grads, optimizer.
MemoryBreakdown zeroPaperModelStates(Strategy s, double psi, int64_t n, double k = 12.0);

nlohmann::json toJson(const MemoryBreakdown& m); // components + "total"
nlohmann::json toJson(const PlanResult& r);

// This host's physical RAM (8 GiB when the system does not say).
int64_t physicalMemoryBytes();

// "12.35 GiB"-style formatting with two decimals (binary units).
std::string formatGiB(int64_t bytes);
std::string formatBytes(int64_t bytes);
// "512 B", "3.25 MiB", "36.3 MiB", "1.50 GiB": binary units, two decimals below 10 and one above
// (the studio's rule: jobs::formatBytes is this in Qt's type; the doctor writes it too).
std::string formatBytesShort(double bytes);

} // namespace shard::plan
