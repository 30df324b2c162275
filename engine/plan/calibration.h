// Every coefficient of the memory / time predictor that a measurement may correct, in one place,
// with defaults and JSON load/save: calibrating the planner is a data change, not a rewrite.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shard::plan {

// Whether the engine this planner was built with runs fused attention on the CPU (built against
// LibTorch 2.x): Calibration::cpuFusedAttention's default.
bool engineUsesFusedCpuAttention();

struct Calibration {
    // --- Activations saved for backward by one Llama block (engine mode), in elements of the
    // compute dtype per token, as multiples of a model dimension. Derivation (eager autograd):
    //   hidden: each RMSNorm (one fused function, fused::rmsNorm) keeps its input and its
    //           output is the q/k/v or gate/up matmul input: 2 per norm, 2 norms per block. (The
    //           composed eager ops kept 4 per norm: the input twice, x̂ and the output;
    //           bench/plan/activation_probe.py.)
    //   q:      q after RoPE (attention input) and the attention output (o_proj input).
    //   kv:     k after RoPE and v.
    //   qGqa:   k and v expanded to all query heads (repeat_kv) when kv heads < heads.
    //   qkNorm: Qwen3's per-head q/k RMSNorm inputs, per (q dim + kv dim).
    //   intermediate: gate, up and silu(gate)*up (the down_proj input); fused::swiglu
    //           recomputes silu(gate) in the backward (the composed ops kept it: 4).
    double actPerHidden = 4.0;
    double actPerQ = 2.0;
    double actPerKv = 2.0;
    double actPerQGqa = 2.0;
    double actPerQkNorm = 1.0;
    double actPerIntermediate = 3.0;
    // fp32 values per token per block: the two RMSNorms' 1/rms.
    double actFp32PerToken = 2.0;
    // Attention scores per (micro-batch x heads x seq x seq), bytes. CPU LibTorch runs eager
    // attention (softmax output kept in fp32 and its compute-dtype copy); GPU runs a fused
    // (flash) kernel that keeps only a per-row log-sum-exp.
    double scoreBytesCpuFp32Compute = 4.0;
    double scoreBytesCpu16Compute = 6.0;
    double scoreBytesGpu = 0.0;
    double lseFp32PerHeadTokenGpu = 1.0;
    // The engine's CPU attention: 1 when it is the fused kernel (at::scaled_dot_product_attention,
    // LibTorch 2.x: a flash loop that keeps a per-row log-sum-exp and no scores), 0 when eager
    // (LibTorch 1.13); by default what this build's engine does. `fused_cpu_attention_drops_per_q`:
    // elements per token x q width per block that the fused kernel keeps less than the eager
    // fit. It was 2 (fitted on LibTorch 2.6 when RMSNorm was composed ops, whose saved tensors
    // differ between 1.13 and 2.6); with the fused RMSNorm, the same code on both, the 2.6
    // measurements (tst_plan_vs_engine_lora, Debian 13 suite) fit 0.
    double cpuFusedAttention = engineUsesFusedCpuAttention() ? 1.0 : 0.0;
    double fusedCpuAttentionDropsPerQ = 0.0;
    // The same on a tensor-parallel slice (its share of the heads), where the fused kernel keeps
    // fewer elements per token x slice q width per block than the whole model's fit: fitted on
    // LibTorch 2.6 (tst_plan_vs_engine_layouts, tiny-15m fp32, TP2 with and without sequence
    // parallel, recomputation, LoRA, QLoRA and x PP2: the plan was 3-5% over each without it,
    // within 1% with it). Eager attention (LibTorch 1.13) keeps what the whole model's fit says
    // on a slice too.
    double fusedCpuAttentionTpDropsPerQ = 1.5;
    // With a compute dtype narrower than fp32 the engine widens the fused CPU attention's inputs
    // to fp32 on every CPU (LibTorch 2.6's bf16 CPU kernel is slow, with or without AVX-512):
    // bytes per token x q width per block that this adds (measured: tiny-15m, bf16-mixed,
    // 4 x 256, LibTorch 2.6).
    double fusedCpuAttentionWidenedBytesPerQ = 19.0;
    // Full activation checkpointing: elements per token x hidden kept per block (its input).
    double ckptSavedPerHidden = 1.0;
    // Activation gradients alive at once inside one block's backward, per token.
    double bwdTransientPerHidden = 2.0;
    double bwdTransientPerIntermediate = 2.0;
    // Root (final norm + lm_head input), per token x hidden.
    double rootActPerHidden = 3.0;
    // Logits per row of one chunk of the fused head and loss x vocab: fp32 copies (the widened
    // logits, turned into their gradient in place) and, when the compute dtype is not fp32, the
    // compute-dtype ones (the product, and the gradient narrowed for its GEMMs).
    double logitsFp32Copies = 1.0;
    double logitsComputeCopies = 2.0;

    // --- Parameters and communication (engine mode).
    // ZeRO-3 gathered units in flight besides the root (current + prefetched block).
    double gatheredUnitsInFlight = 2.0;
    // Reduce-scatter receive buffer as a fraction of the flat input: Gloo (CPU) emulates it with
    // alltoall (a full-size receive buffer); NCCL (GPU) receives 1/W.
    double reduceScatterRecvCpu = 1.0;
    bool reduceScatterRecvGpuIsShard = true;

    // --- Fixed overhead per device: CUDA context, NCCL/cuBLAS workspaces (GPU) or the
    // allocator's slack (CPU), plus fragmentation as a fraction of everything else.
    double gpuOverheadBytes = 1.5 * 1024 * 1024 * 1024;
    double gpuFragmentation = 0.05;
    // CPU: 0, because the engine's reported peak is its counting allocator's (tensors only);
    // the LibTorch runtime's own resident memory is not a per-step cost the planner models.
    double cpuOverheadBytes = 0.0;
    double cpuFragmentation = 0.0;

    // --- Roofline: achieved fraction of peak FLOP/s and of link bandwidth (1 = pure roofline).
    double computeEfficiency = 1.0;
    double commEfficiency = 1.0;

    // --- ZeRO-paper mode: optimizer bytes per parameter (K = 12 for mixed-precision Adam).
    double zeroPaperK = 12.0;

    // Keys are the field names in snake_case ("act_per_hidden"). Unknown keys, non-numbers and
    // negative values throw std::runtime_error naming the key.
    static Calibration fromJson(const nlohmann::json& j);
    nlohmann::json toJson() const;
    // Reads a JSON file; the error names the file and the key.
    static Calibration load(const std::string& path);
    // Every key and its current value, in declaration order.
    std::vector<std::pair<std::string, double>> entries() const;
};

} // namespace shard::plan
