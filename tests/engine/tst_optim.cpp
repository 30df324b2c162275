// AdamW against the textbook update computed in double, the learning-rate schedules at their
// corner points, and the counting allocator's current/peak bytes.
#include <cmath>
#include <cstdio>
#include <string>

#include <ATen/ATen.h>

#include "core/memory/counting_allocator.h"
#include "core/optim/adamw.h"
#include "core/optim/lr_schedule.h"
#include "engine_test_util.h"

using namespace shard::engine;

namespace {

bool near(double a, double b, double tol)
{
    return std::abs(a - b) <= tol * std::max(1.0, std::abs(b));
}

} // namespace

int main()
{
    auto& alloc = CountingAllocator::install();

    // AdamW: three steps on two targets (one decayed, one not), with a gradient scale, through
    // each kernel on the CPU: the loop CPU ranks run, the ATen ops and (LibTorch 2.4 and later)
    // the fused multi-tensor kernel GPU ranks run.
    for (const AdamWKernel kernel : {AdamWKernel::Auto, AdamWKernel::Ops, AdamWKernel::Fused}) {
        const std::string name = kernel == AdamWKernel::Auto ? "loop"
            : kernel == AdamWKernel::Ops                     ? "ops"
                                                             : "fused";
        AdamWConfig cfg {0.9, 0.95, 1e-8, 0.1, kernel};
        AdamW opt(cfg);
        at::Tensor w = at::tensor({1.0f, -2.0f, 0.5f});
        at::Tensor n = at::tensor({1.0f, 1.0f});
        if (kernel == AdamWKernel::Fused && !fusedAdamWAvailable()) {
            std::printf("AdamW fused kernel: not in this LibTorch (checked on 2.4+)\n");
            EXPECT_THROW_WITH(opt.step({{"w", w, at::ones({3}), true}}, 0.1), "fused", "2.4");
            T_CHECK(opt.stepCount() == 0 && w[0].item<float>() == 1.0f); // nothing updated
            continue;
        }
        const std::vector<std::vector<double>> grads
            = {{0.5, -1.0, 0.0}, {0.1, 0.2, -0.3}, {-0.4, 0.0, 2.0}};
        std::vector<double> pw = {1.0, -2.0, 0.5}, mw(3, 0.0), vw(3, 0.0);
        std::vector<double> pn = {1.0, 1.0}, mn(2, 0.0), vn(2, 0.0);
        const double lr = 0.05, scale = 0.5;
        for (int s = 1; s <= 3; ++s) {
            const auto& g = grads[s - 1];
            at::Tensor gw = at::tensor({float(g[0]), float(g[1]), float(g[2])});
            at::Tensor gn = at::tensor({float(g[0]), float(g[1])});
            const at::Tensor gwBefore = gw.clone();
            opt.step({{"w", w, gw, true}, {"n", n, gn, false}, {"skip", at::ones({2}), {}, true}},
                lr, scale);
            // The fused kernel applies the scale to the gradient in place (it is spent once the
            // step is taken); the others leave it as it was.
            const at::Tensor want = kernel == AdamWKernel::Fused ? gwBefore * scale : gwBefore;
            T_CHECK_MSG(at::allclose(gw, want, 1e-6, 0), name + ": the gradient after the step");
            const double bc1 = 1 - std::pow(0.9, s), bc2 = 1 - std::pow(0.95, s);
            auto update = [&](std::vector<double>& p, std::vector<double>& m,
                              std::vector<double>& v, bool decay) {
                for (size_t i = 0; i < p.size(); ++i) {
                    const double gi = g[i] * scale;
                    if (decay)
                        p[i] *= 1 - lr * 0.1;
                    m[i] = 0.9 * m[i] + 0.1 * gi;
                    v[i] = 0.95 * v[i] + 0.05 * gi * gi;
                    p[i] -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + 1e-8);
                }
            };
            update(pw, mw, vw, true);
            update(pn, mn, vn, false);
        }
        for (int i = 0; i < 3; ++i)
            T_CHECK_MSG(near(w[i].item<double>(), pw[i], 1e-6),
                name + ": AdamW decayed element " + std::to_string(i) + ": "
                    + std::to_string(w[i].item<double>()) + " vs " + std::to_string(pw[i]));
        for (int i = 0; i < 2; ++i)
            T_CHECK_MSG(near(n[i].item<double>(), pn[i], 1e-6), name + ": AdamW undecayed element");
        T_CHECK(opt.stepCount() == 3);
        T_CHECK(opt.state().count("skip") == 0); // no gradient: no state, no update
        T_CHECK(opt.stateBytes() == 2 * 4 * (3 + 2));
        EXPECT_THROW_WITH(opt.step({{"bad", at::ones({2}, at::kDouble), at::ones({2}), true}}, lr),
            "bad", "fp32");
        std::printf("AdamW %s kernel: matches the textbook update\n", name.c_str());
    }

    // Schedules.
    {
        LrSchedule s;
        s.baseLr = 1.0;
        s.warmupSteps = 4;
        s.totalSteps = 10;
        s.minLrRatio = 0.1;
        for (const char* kind : {"constant", "linear", "cosine"}) {
            s.kind = kind;
            T_CHECK(near(s.at(0), 0.25, 1e-12));
            T_CHECK(near(s.at(3), 1.0, 1e-12));
        }
        s.kind = "constant";
        T_CHECK(near(s.at(9), 1.0, 1e-12));
        s.kind = "linear";
        T_CHECK(near(s.at(9), 0.1, 1e-12));
        T_CHECK(near(s.at(4), 1.0, 1e-12));
        T_CHECK(near(s.at(6), 0.1 + 0.9 * (1.0 - 2.0 / 5.0), 1e-12));
        s.kind = "cosine";
        T_CHECK(near(s.at(9), 0.1, 1e-12));
        T_CHECK(near(s.at(6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 2.0 / 5.0)), 1e-12));
        T_CHECK(s.at(5) > s.at(6) && s.at(6) > s.at(7));
        // Continued for 5 more steps, keeping the finished schedule: its end value after it.
        T_CHECK(near(s.at(12), 0.1, 1e-12));
        // ... or restarting warm-up at the checkpoint (step 10) and decaying over 10..19.
        s.startStep = 10;
        s.totalSteps = 20;
        T_CHECK(near(s.at(10), 0.25, 1e-12));
        T_CHECK(near(s.at(13), 1.0, 1e-12));
        T_CHECK(near(s.at(19), 0.1, 1e-12));
        s.startStep = 0;
        s.totalSteps = 10;
        s.kind = "step";
        EXPECT_THROW_WITH(validate(s), "step", "constant, linear or cosine");
        s.kind = "cosine";
        s.baseLr = -1;
        EXPECT_THROW_WITH(validate(s), "positive");
    }

    // Counting allocator.
    {
        T_CHECK(CountingAllocator::installed());
        const int64_t before = alloc.currentBytes();
        alloc.resetPeak();
        {
            at::Tensor big = at::empty({1 << 20}, at::kFloat);
            T_CHECK(alloc.currentBytes() - before >= 4 << 20);
            at::Tensor r = at::mm(at::ones({64, 64}), at::ones({64, 64}));
            T_CHECK(r[0][0].item<float>() == 64.0f);
        }
        T_CHECK(alloc.currentBytes() == before);
        T_CHECK(alloc.peakBytes() - before >= 4 << 20);
        alloc.resetPeak();
        T_CHECK(alloc.peakBytes() == alloc.currentBytes());
    }
    return shard::test::finish("tst_optim");
}
