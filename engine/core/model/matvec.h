// One row times a weight matrix on the CPU: the product of a decode step (one new token of one
// sequence), where every linear layer is a matrix-vector product and the time is the time to
// read the weights once (docs/ARCHITECTURE.md, "Engine speed on the CPU"). LibTorch sends it to
// its GEMM, which reads fp32 weights below the memory bandwidth and, for bf16 weights, converts
// them or packs them per call; this reads each weight once in its own dtype (4 or 2 bytes) with
// four rows in flight and accumulates in fp32 (as a bf16 GEMM does), over the intra-op threads
// by row ranges. bf16 goes through vdpbf16ps on CPUs with AVX-512 BF16 (pairs of exact products
// into fp32 lanes) and is widened in registers elsewhere; AVX-512 or AVX2 by the running CPU,
// plain C++ otherwise. The result equals at::linear's up to summation order.
#pragma once

#include <ATen/core/Tensor.h>

namespace shard::engine::fused {

// Whether matvec() takes x (..., in) times w (out, in): both on the CPU, one row of x, the same
// dtype (fp32 or bf16), w 2-D and contiguous, a bias of that dtype or none, and no gradient to
// record. SHARD_MATVEC=aten turns it off (for comparisons).
bool matvecApplies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);
// x w^T (+ bias), shaped as x with its last dimension `out`, in x's dtype.
at::Tensor matvec(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = {});

} // namespace shard::engine::fused
