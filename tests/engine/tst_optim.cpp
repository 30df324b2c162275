// AdamW against the textbook update computed in double, the learning-rate schedules at their
// corner points, and the counting allocator's current/peak bytes, its block cache, its huge page
// advice and glibc's heap settings for smaller blocks.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

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

// The VmFlags of the mapping of /proc/self/smaps that holds address a ("" when none does).
std::string vmFlagsAt(const void* a)
{
    std::ifstream in("/proc/self/smaps");
    const auto at = reinterpret_cast<uintptr_t>(a);
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
        uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (line.find('-') != std::string::npos && (head >> std::hex >> lo >> dash >> hi)
            && dash == '-' && line.rfind("VmFlags", 0) != 0) {
            inside = lo <= at && at < hi;
            continue;
        }
        if (inside && line.rfind("VmFlags:", 0) == 0)
            return line;
    }
    return {};
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

    // AdamW::reserve (the trainer's, before the first step): zero state of each target's shape,
    // steps after it bit-identical to state created by the first step, and state already there
    // (a resumed run's) kept as it is.
    {
        AdamW lazy(AdamWConfig {0.9, 0.95, 1e-8, 0.1});
        AdamW early(AdamWConfig {0.9, 0.95, 1e-8, 0.1});
        at::Tensor wl = at::tensor({1.0f, -2.0f, 0.5f}), we = wl.clone();
        at::Tensor nl = at::tensor({0.25f, 4.0f}), ne = nl.clone();
        early.reserve({{"w", we, {}, true}, {"n", ne, {}, false}});
        T_CHECK(early.stateBytes() == 2 * 4 * (3 + 2) && lazy.stateBytes() == 0);
        T_CHECK(early.state().at("w").m.sizes() == we.sizes()
            && early.state().at("n").v.sizes() == ne.sizes());
        T_CHECK(early.state().at("w").m.abs().sum().item<float>() == 0.0f);
        for (int s = 0; s < 3; ++s) {
            const at::Tensor gw = at::tensor({0.5f - s, 0.125f * s, -1.0f});
            const at::Tensor gn = at::tensor({2.0f, -0.75f + s});
            lazy.step({{"w", wl, gw.clone(), true}, {"n", nl, gn.clone(), false}}, 0.01, 0.5);
            early.step({{"w", we, gw.clone(), true}, {"n", ne, gn.clone(), false}}, 0.01, 0.5);
        }
        T_CHECK_MSG(at::equal(wl, we) && at::equal(nl, ne), "reserve: the same parameters");
        T_CHECK(at::equal(lazy.state().at("w").v, early.state().at("w").v));
        const at::Tensor mBefore = early.state().at("w").m.clone();
        early.reserve({{"w", we, {}, true}, {"n", ne, {}, false}});
        T_CHECK_MSG(at::equal(early.state().at("w").m, mBefore), "reserve keeps existing state");
        std::printf("AdamW reserve: zero state up front, the same steps as lazily made state\n");
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

    // The block cache keeps freed blocks up to the process's high-water mark of live bytes (at
    // least 1 GiB): here 1.25 GiB of 64 MiB blocks (never touched, so they take no memory), all
    // freed while one more stays live, all kept, and taken back by the next blocks of their
    // size. A fixed 1 GiB cap kept 16 of the 20 and returned the rest to the system, whose pages
    // then faulted in again.
    if (const char* v = std::getenv("SHARD_ALLOC_CACHE_MB"); v && *v) {
        std::printf(
            "block cache: SHARD_ALLOC_CACHE_MB=%s fixes the cap; its default not checked\n", v);
    } else {
        const int64_t block = int64_t(64) << 20;
        const int64_t cachedBefore = alloc.cachedBytes();
        std::vector<at::Tensor> blocks;
        for (int i = 0; i < 20; ++i)
            blocks.push_back(at::empty({block}, at::kByte));
        // Live through the frees below: the cache may hold what was live at most, the blocks
        // cached before this check included.
        at::Tensor live = at::empty({block}, at::kByte);
        T_CHECK(alloc.highWaterBytes() >= 21 * block);
        T_CHECK(
            alloc.cacheCapBytes() == std::max<int64_t>(int64_t(1) << 30, alloc.highWaterBytes()));
        std::vector<const void*> addresses;
        for (const auto& b : blocks)
            addresses.push_back(b.data_ptr());
        blocks.clear();
        T_CHECK(alloc.cachedBytes() - cachedBefore == 20 * block);
        int reused = 0;
        for (int i = 0; i < 20; ++i) {
            blocks.push_back(at::empty({block}, at::kByte));
            for (const void* a : addresses)
                reused += blocks.back().data_ptr() == a;
        }
        T_CHECK(reused == 20);
        T_CHECK(alloc.cachedBytes() == cachedBefore);
        blocks.clear();
        live = at::Tensor();
    }

    // Blocks below the cache's minimum come from glibc's heap, which the allocator's install
    // keeps from handing freed pages back: a loop that allocates, touches and frees 8 blocks of
    // 600 KiB faults them in on its first round only (glibc's defaults trim the 4.8 MB freed at
    // the heap's top every round: about 1,200 page faults a round).
    {
        const char* tunables = std::getenv("GLIBC_TUNABLES");
        if (tunables && std::strstr(tunables, "glibc.malloc.")) {
            std::printf("small blocks: GLIBC_TUNABLES sets malloc tunables; not checked\n");
        } else {
            auto faults = [] {
                rusage u {};
                getrusage(RUSAGE_SELF, &u);
                return static_cast<long>(u.ru_minflt);
            };
            auto round = [] {
                std::vector<at::Tensor> blocks;
                for (int i = 0; i < 8; ++i)
                    blocks.push_back(at::empty({600 << 10}, at::kByte).fill_(i + 1));
            };
            round();
            const long before = faults();
            for (int r = 0; r < 20; ++r)
                round();
            const long added = faults() - before;
            T_CHECK_MSG(added < 600,
                "20 rounds of 8 x 600 KiB blocks took " + std::to_string(added) + " page faults");
            std::printf("small blocks: %ld page faults in 20 rounds after the first\n", added);
        }
    }

    // A fresh block of 4 MiB or more is advised as transparent huge pages (MADV_HUGEPAGE): its
    // mapping's VmFlags carry "hg". Whether the kernel then backs it with huge pages is the
    // system's choice; the advice is what the engine controls.
    {
        std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
        std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
        const char* off = std::getenv("SHARD_ALLOC_THP");
        if (off && std::string(off) == "0") {
            std::printf("huge page advice: SHARD_ALLOC_THP=0 turns it off; not checked\n");
        } else if (mode.empty() || mode.find("[never]") != std::string::npos) {
            std::printf("huge page advice: transparent huge pages are off here (%s); not checked\n",
                mode.empty() ? "no /sys/kernel/mm/transparent_hugepage" : "never");
        } else {
            // An odd size no other test allocates, so the block is fresh, not a cached one.
            at::Tensor fresh = at::empty({(int64_t(37) << 20) + 4096}, at::kByte);
            const std::string flags
                = vmFlagsAt(static_cast<uint8_t*>(fresh.data_ptr()) + (8 << 20));
            T_CHECK(!flags.empty());
            T_CHECK(flags.find(" hg") != std::string::npos);
            if (flags.find(" hg") == std::string::npos)
                std::printf("VmFlags of the fresh block: %s\n", flags.c_str());
        }
    }
    return shard::test::finish("tst_optim");
}
