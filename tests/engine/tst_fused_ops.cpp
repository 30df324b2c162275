// The fused ops (engine/core/model/fused_ops.h): the vectorized bf16 <-> fp32 casts (copyCast into
// a given buffer too) equal at::Tensor::to bit for bit (rounding ties, NaN, infinities, subnormals)
// in value and gradient; bf16 products through the fp32 GEMM are the exact products rounded to bf16
// once (what a bf16 GEMM with fp32 accumulation returns, up to summation order), forward and
// backward; fp32 is untouched. The reference is the fp64 product, not ATen's bf16 GEMM:
// LibTorch 1.13's scalar bf16 loop (CPUs without AVX-512) accumulates some layouts in bf16
// (relative errors of several units measured on the backward's layout). The fused layers (RMSNorm,
// rotary embeddings, SwiGLU) against the composed ATen ops they replace. The decode matrix-vector
// product against the exact product.
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "core/model/fused_ops.h"
#include "core/model/matvec.h"
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

// |a - b| within `rel` of |b| plus `abs` everywhere.
bool near(const at::Tensor& a, const at::Tensor& b, double rel, double abs)
{
    const at::Tensor da = d64(a), db = d64(b);
    return (da - db).abs().le(db.abs() * rel + abs).all().item<bool>();
}

// The composed ATen ops the fused layers replace (the model's code before them).
at::Tensor composedRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps)
{
    at::Tensor h = x.to(at::promoteTypes(x.scalar_type(), at::kFloat));
    h = h * at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return w * h.to(x.scalar_type());
}

at::Tensor composedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin)
{
    // As the model applied it: on (batch, heads, seq, dim), the tables broadcast over heads.
    const at::Tensor xt = x.transpose(1, 2);
    const int64_t half = xt.size(-1) / 2;
    const at::Tensor rotated = at::cat({-xt.narrow(-1, half, half), xt.narrow(-1, 0, half)}, -1);
    return (xt * cos + rotated * sin).transpose(1, 2);
}

struct Grads {
    at::Tensor y, gx, gw;
};

// y and the gradients of (x, w) for the upstream gradient g, through f.
template<typename F> Grads run(F f, const at::Tensor& x, const at::Tensor& w, const at::Tensor& g)
{
    at::Tensor xi = x.detach().clone().requires_grad_(true);
    at::Tensor wi = w.detach().clone().requires_grad_(w.requires_grad());
    at::Tensor y = f(xi, wi);
    y.backward(g);
    return {y.detach(), xi.grad(), wi.grad()};
}

bool bitEqualGrads(const Grads& a, const Grads& b)
{
    return bitEqual(a.y.contiguous(), b.y.contiguous()) && bitEqual(a.gx, b.gx)
        && (a.gw.defined() == b.gw.defined()) && (!a.gw.defined() || bitEqual(a.gw, b.gw));
}

void fusedLayers()
{
    const double eps = 1e-5;
    // RMSNorm: the composed ops' values up to the mean's summation order (fp32, fp64) or one
    // rounding of a 16-bit result either way (bf16); independent of the thread count.
    for (at::ScalarType t : {at::kFloat, at::kDouble, at::kBFloat16}) {
        const bool narrow16 = t == at::kBFloat16;
        for (bool trainedWeight : {true, false}) {
            at::Tensor x = (at::randn({3, 70, 96}) * 2).to(t);
            at::Tensor w = (at::rand({96}) + 0.5).to(t).requires_grad_(trainedWeight);
            at::Tensor g = at::randn({3, 70, 96}).to(t);
            auto fusedF = [&](const at::Tensor& a, const at::Tensor& b) {
                return fused::rmsNorm(a, b, eps);
            };
            auto composedF = [&](const at::Tensor& a, const at::Tensor& b) {
                return composedRmsNorm(a, b, eps);
            };
            const Grads f = run(fusedF, x, w, g), c = run(composedF, x, w, g);
            const double rel = narrow16 ? std::ldexp(1.0, -7) : (t == at::kFloat ? 1e-5 : 1e-12);
            const double abs = narrow16 ? 1e-2 : (t == at::kFloat ? 1e-5 : 1e-12);
            T_CHECK_MSG(near(f.y, c.y, rel, abs), std::string("rmsnorm value ") + c10::toString(t));
            T_CHECK_MSG(near(f.gx, c.gx, rel, abs), std::string("rmsnorm dx ") + c10::toString(t));
            T_CHECK(f.gw.defined() == trainedWeight);
            if (trainedWeight)
                // The weight's gradient sums 210 rows: bf16's composed ops round each product.
                T_CHECK_MSG(near(f.gw, c.gw, narrow16 ? 1.0 / 32 : rel, narrow16 ? 0.5 : abs * 10),
                    std::string("rmsnorm dw ") + c10::toString(t));
            const int threads = at::get_num_threads();
            at::set_num_threads(1);
            const Grads one = run(fusedF, x, w, g);
            at::set_num_threads(3);
            const Grads three = run(fusedF, x, w, g);
            at::set_num_threads(threads);
            T_CHECK_MSG(bitEqualGrads(one, three) && bitEqualGrads(one, f),
                std::string("rmsnorm depends on the thread count ") + c10::toString(t));
            {
                at::NoGradGuard noGrad;
                T_CHECK(bitEqual(fused::rmsNorm(x, w, eps), f.y));
            }
        }
    }
    // Rotary embeddings and SwiGLU: the composed ops' results bit for bit.
    for (at::ScalarType t : {at::kFloat, at::kBFloat16}) {
        at::Tensor x = at::randn({2, 9, 3, 16}).to(t);
        at::Tensor cos = at::randn({9, 16}).to(t), sin = at::randn({9, 16}).to(t);
        at::Tensor g = at::randn({2, 9, 3, 16}).to(t);
        auto fusedF
            = [&](const at::Tensor& a, const at::Tensor&) { return fused::rope(a, cos, sin); };
        auto composedF
            = [&](const at::Tensor& a, const at::Tensor&) { return composedRope(a, cos, sin); };
        T_CHECK_MSG(bitEqualGrads(run(fusedF, x, cos, g), run(composedF, x, cos, g)),
            std::string("rope ") + c10::toString(t));

        at::Tensor gate = (at::randn({4, 33, 40}) * 3).to(t), up = at::randn({4, 33, 40}).to(t);
        at::Tensor gy = at::randn({4, 33, 40}).to(t);
        auto fusedS = [](const at::Tensor& a, const at::Tensor& b) { return fused::swiglu(a, b); };
        auto composedS = [](const at::Tensor& a, const at::Tensor& b) { return at::silu(a) * b; };
        at::Tensor upTrained = up.clone().requires_grad_(true);
        T_CHECK_MSG(
            bitEqualGrads(run(fusedS, gate, upTrained, gy), run(composedS, gate, upTrained, gy)),
            std::string("swiglu ") + c10::toString(t));
    }
}

} // namespace

// The decode matrix-vector product (matvec.h): one row of x times w, fp32 and bf16, with and
// without a bias, row counts that are and are not multiples of its four-row step, lengths that
// are and are not multiples of its vector width. fp32 within fp32 accumulation of the exact
// (fp64) product, bf16 the exact product rounded once; the same bits on 1 and 2 threads (rows
// are split between threads, never a row's sum); and fused::linear takes it only where it
// applies (one row, no gradient to record).
void decodeMatvec()
{
    const int threads = at::get_num_threads();
    for (const auto& [out, n] : std::vector<std::pair<int64_t, int64_t>> {
             {29, 48}, {1, 5}, {7, 1000}, {130, 768}, {257, 33}, {64, 16}}) {
        for (const at::ScalarType t : {at::kFloat, at::kBFloat16})
            for (bool withBias : {false, true}) {
                const at::Tensor x = at::randn({1, 1, n}).to(t);
                const at::Tensor w = at::randn({out, n}).to(t);
                const at::Tensor b = withBias ? at::randn({out}).to(t) : at::Tensor();
                T_CHECK(fused::matvecApplies(x, w, b));
                at::set_num_threads(1);
                const at::Tensor y1 = fused::matvec(x, w, b);
                at::set_num_threads(2);
                const at::Tensor y2 = fused::matvec(x, w, b);
                at::set_num_threads(threads);
                T_CHECK(y1.scalar_type() == t && y1.sizes().equals({1, 1, out}));
                T_CHECK(bitEqual(y1, y2));
                at::Tensor exact = at::linear(d64(x), d64(w));
                if (withBias)
                    exact = exact + d64(b);
                if (t == at::kBFloat16) {
                    T_CHECK(roundedOnce(y1, exact));
                } else {
                    // fp32 accumulation: n products of O(1) terms, each rounded at 2^-24.
                    const at::Tensor scale = at::linear(d64(x).abs(), d64(w).abs())
                        + (withBias ? d64(b).abs() : at::zeros({out}, at::kDouble));
                    T_CHECK((d64(y1) - exact)
                                .abs()
                                .le(scale * (n + 1) * 6e-8 + 1e-30)
                                .all()
                                .item<bool>());
                }
                // fused::linear is this product for the one-row case.
                T_CHECK(bitEqual(fused::linear(x, w, b), y1));
            }
    }
    const at::Tensor w = at::randn({8, 16});
    T_CHECK(!fused::matvecApplies(at::randn({2, 16}), w, {}));                // two rows
    T_CHECK(!fused::matvecApplies(at::randn({16}).to(at::kBFloat16), w, {})); // mixed dtypes
    T_CHECK(!fused::matvecApplies(at::randn({16}).to(at::kDouble), w.to(at::kDouble), {}));
    T_CHECK(!fused::matvecApplies(at::randn({16}).requires_grad_(true), w, {})); // autograd
    T_CHECK(!fused::matvecApplies(at::randn({8}), w.t(), {})); // a transposed (strided) weight
    {
        at::NoGradGuard noGrad; // no gradient recorded: the product applies again
        T_CHECK(fused::matvecApplies(at::randn({16}).requires_grad_(true), w, {}));
    }
}

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
        // copyCast into a slice of a larger buffer (as the sharded strategy's gathers and shard
        // gradients use it) equals copy_ there, and leaves the rest of the buffer alone.
        at::Tensor flat = at::full({x.numel() + 10}, 7.0, at::kBFloat16);
        fused::copyCast(flat.narrow(0, 5, x.numel()), x);
        const at::Tensor got = flat.narrow(0, 5, x.numel());
        T_CHECK(bitEqual(got.isnan(), viaAten.isnan()));
        T_CHECK(bitEqual(got.masked_fill(got.isnan(), 0), viaAten.masked_fill(viaAten.isnan(), 0)));
        T_CHECK(bitEqual(flat.narrow(0, 0, 5), at::full({5}, 7.0, at::kBFloat16)));
        T_CHECK(bitEqual(flat.narrow(0, x.numel() + 5, 5), at::full({5}, 7.0, at::kBFloat16)));
        at::Tensor wide = at::zeros({x.numel()}, at::kFloat);
        fused::copyCast(wide, viaAten);
        T_CHECK(bitEqual(wide.nan_to_num(0), viaAten.to(at::kFloat).nan_to_num(0)));
        // A strided destination takes copy_.
        at::Tensor strided = at::zeros({2 * 64}, at::kBFloat16).view({64, 2}).select(1, 0);
        fused::copyCast(strided, x.narrow(0, 0, 64));
        T_CHECK(bitEqual(strided, x.narrow(0, 0, 64).to(at::kBFloat16)));
    }
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
    fusedLayers();
    decodeMatvec();
    std::printf("bf16 GEMM through fp32: %s\n", fused::bf16GemmThroughFp32() ? "yes" : "no");
    return shard::test::finish("tst_fused_ops");
}
