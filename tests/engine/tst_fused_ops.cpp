// The fused ops (engine/core/model/fused_ops.h): the vectorized bf16 <-> fp32 casts equal
// at::Tensor::to bit for bit (rounding ties, NaN, infinities, subnormals) in value and gradient;
// bf16 products through the fp32 GEMM are the exact products rounded to bf16 once (what a bf16 GEMM
// with fp32 accumulation returns, up to summation order), forward and backward; fp32 is untouched.
// The reference is the fp64 product, not ATen's bf16 GEMM: LibTorch 1.13's scalar bf16 loop (CPUs
// without AVX-512) accumulates some layouts in bf16 (relative errors of several units measured on
// the backward's layout).
#include <cmath>
#include <cstring>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "core/model/fused_ops.h"
#include "engine_test_util.h"

using namespace shard;
using namespace shard::engine;

namespace {

bool bitEqual(const at::Tensor& a, const at::Tensor& b)
{
    if (a.scalar_type() != b.scalar_type() || !a.sizes().equals(b.sizes()))
        return false;
    const at::Tensor ca = a.contiguous(), cb = b.contiguous();
    return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()) == 0;
}

// a is the exact value rounded to bf16 once: |a - exact| <= half a bf16 ulp (|exact| 2^-8), plus
// 1e-4 absolute for fp32 accumulation near zero (operands are O(1), K <= 111).
bool roundedOnce(const at::Tensor& a, const at::Tensor& exact)
{
    const at::Tensor d = (a.to(at::kDouble) - exact).abs();
    return d.le(exact.abs() * std::ldexp(1.0, -8) + 1e-4).all().item<bool>();
}

at::Tensor d64(const at::Tensor& t)
{
    return t.detach().to(at::kDouble);
}

} // namespace

int main()
{
    at::manual_seed(0);
    // Casts: values around rounding ties and the special values.
    at::Tensor x = at::randn({4099}) * 3;
    std::vector<float> special {0.0f, -0.0f, 1.0f + std::ldexp(1.0f, -8), // a tie -> even (1.0)
        1.0f + 3 * std::ldexp(1.0f, -8),                                  // a tie -> even (up)
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
        std::numeric_limits<float>::max(), 1e-40f};
    x = at::cat({x, at::tensor(special)});
    const at::Tensor viaAten = x.to(at::kBFloat16);
    const at::Tensor viaFused = fused::cast(x, at::kBFloat16);
    // NaN payloads may differ; NaN-ness may not.
    T_CHECK(bitEqual(viaFused.isnan(), viaAten.isnan()));
    T_CHECK(bitEqual(
        viaFused.masked_fill(viaFused.isnan(), 0), viaAten.masked_fill(viaAten.isnan(), 0)));
    T_CHECK(bitEqual(
        fused::cast(viaAten, at::kFloat).nan_to_num(0), viaAten.to(at::kFloat).nan_to_num(0)));
    T_CHECK(bitEqual(fused::cast(x, at::kFloat), x)); // same dtype: the tensor itself
    {
        // The gradient goes back to the source dtype, as ToCopyBackward's.
        at::Tensor w = at::randn({33, 17}).requires_grad_(true);
        at::Tensor g = at::randn({33, 17}).to(at::kBFloat16);
        fused::cast(w, at::kBFloat16).backward(g);
        T_CHECK(w.grad().scalar_type() == at::kFloat);
        T_CHECK(bitEqual(w.grad(), g.to(at::kFloat)));
    }

    // Products in bf16 against the exact (fp64) products.
    for (bool bias : {false, true}) {
        at::Tensor a = at::randn({3, 37, 48}).to(at::kBFloat16).requires_grad_(true);
        at::Tensor w = at::randn({29, 48}).to(at::kBFloat16).requires_grad_(true);
        at::Tensor b = at::randn({29}).to(at::kBFloat16).requires_grad_(true);
        at::Tensor g = at::randn({3, 37, 29}).to(at::kBFloat16);
        at::Tensor y = fused::linear(a, w, bias ? b : at::Tensor());
        T_CHECK(y.scalar_type() == at::kBFloat16);
        y.backward(g);
        const at::Tensor g2 = d64(g).reshape({-1, 29});
        at::Tensor exact = at::linear(d64(a), d64(w));
        if (bias)
            exact = exact + d64(b);
        T_CHECK(roundedOnce(y, exact));
        T_CHECK(roundedOnce(a.grad(), at::mm(g2, d64(w)).view({3, 37, 48})));
        T_CHECK(roundedOnce(w.grad(), at::mm(g2.t(), d64(a).reshape({-1, 48}))));
        if (bias)
            T_CHECK(roundedOnce(b.grad(), g2.sum(0)));
        // fp32 stays at::linear, bit for bit.
        at::Tensor af = a.detach().to(at::kFloat), wf = w.detach().to(at::kFloat);
        T_CHECK(bitEqual(fused::linear(af, wf), at::linear(af, wf)));
    }
    {
        // A frozen weight (LoRA's base) keeps no input alive for backward, as at::linear's
        // autograd: changing the input in place after the forward is then no error.
        at::Tensor a = at::randn({37, 48}).to(at::kBFloat16).requires_grad_(true);
        at::Tensor w = at::randn({29, 48}).to(at::kBFloat16);
        at::Tensor g = at::randn({37, 29}).to(at::kBFloat16);
        at::Tensor x = a * 1.0;
        at::Tensor y = fused::linear(x, w);
        {
            at::NoGradGuard noGrad;
            x.add_(1.0);
        }
        y.backward(g);
        T_CHECK(roundedOnce(a.grad(), at::mm(d64(g), d64(w))));
    }
    {
        at::Tensor q = at::randn({2, 3, 19, 8}).to(at::kBFloat16).requires_grad_(true);
        at::Tensor k = at::randn({2, 3, 8, 23}).to(at::kBFloat16).requires_grad_(true);
        at::Tensor g = at::randn({2, 3, 19, 23}).to(at::kBFloat16);
        at::Tensor y = fused::matmul(q, k);
        y.backward(g);
        T_CHECK(roundedOnce(y, at::matmul(d64(q), d64(k))));
        T_CHECK(roundedOnce(q.grad(), at::matmul(d64(g), d64(k).transpose(-1, -2))));
        T_CHECK(roundedOnce(k.grad(), at::matmul(d64(q).transpose(-1, -2), d64(g))));
    }
    std::printf("bf16 GEMM through fp32: %s\n", fused::bf16GemmThroughFp32() ? "yes" : "no");
    return shard::test::finish("tst_fused_ops");
}
