// Matrix products of the model's forward with a CPU-specific path for bf16 (docs/ARCHITECTURE.md,
// "Engine speed on the CPU"). On a CPU without AVX-512 LibTorch 1.13 has no oneDNN bf16 GEMM and
// multiplies bf16 matrices with a scalar loop (~4 GFLOP/s on 2 cores, 25-40x slower than its fp32
// GEMM); there these functions widen the bf16 operands to fp32 (exactly), multiply with the fp32
// GEMM (fp32 accumulation, as a bf16 GEMM accumulates) and round the product to bf16 once, in the
// forward and in the backward. The result equals a bf16 GEMM's up to summation order. Elsewhere
// (fp32, fp64, or a CPU with oneDNN bf16) they are at::linear and at::matmul.
#pragma once

#include <ATen/core/Tensor.h>

namespace shard::engine::fused {

// True when bf16 products go through the fp32 GEMM on this machine: no AVX-512 (the condition
// under which LibTorch 1.13 uses oneDNN for bf16). SHARD_BF16_GEMM=native or =fp32 overrides.
bool bf16GemmThroughFp32();

// t in `dtype`, differentiable (the gradient is converted back to t's dtype). bf16 <-> fp32 goes
// through one vectorizable pass (widening is exact, narrowing rounds to nearest even as
// c10::BFloat16 does); LibTorch 1.13's conversion copy is several times slower here.
at::Tensor cast(const at::Tensor& t, at::ScalarType dtype);
// dst = src converted to dst's dtype, without autograd: the same one pass for bf16 <-> fp32 on
// the CPU when both are contiguous, dst.copy_(src) otherwise. The sharded strategy's casts of its
// fp32 masters into gathered compute-dtype buffers and of gradients into fp32 shard gradients.
void copyCast(const at::Tensor& dst, const at::Tensor& src);

// x (..., in) times w (out, in) transposed, plus bias (out) when defined.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = {});
// a (..., n, k) times b (..., k, m), the same batch shape.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b);

// The model's elementwise layers as single autograd functions (fused_layers.cpp): one pass over
// the data forward and one backward on the CPU, ATen ops elsewhere, and on every device only the
// tensors named here saved for backward.
//
// Hugging Face's RMSNorm over the last dimension: weight * (x / sqrt(mean(x^2) + eps)) with the
// normalized value rounded to x's dtype before the product, computed in fp32 for 16-bit x (fp64
// for fp64). Saves x, weight and one fp32 1/rms per row (the composed ops also keep x's fp32
// copy and the normalized value). The mean's summation order is fixed per row and the weight
// gradient's per 32-row block, so neither depends on the thread count.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
// Rotary embeddings in rotate-half form on x (batch, seq, heads, head_dim) with cos and sin
// (seq, head_dim): x * cos + rotate_half(x) * sin, every product and the sum rounded as the
// composed ops round them (equal bit for bit). Saves the tables only.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// [-x2, x1] over the last dimension's halves (the composed RoPE's rotation).
at::Tensor rotateHalf(const at::Tensor& x);
// silu(gate) * up with ATen's arithmetic. Saves gate and up; silu(gate) is recomputed in the
// backward rather than kept.
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

} // namespace shard::engine::fused
