// `shard-worker dist-selftest` (hidden): a rank program for the multirank tests. Checks every
// collective of the Communicator against values computed here by hand, the byte counters
// against the formulas and against the kernel's TCP counters, and offers a `loop` mode that
// keeps ranks busy in collectives until they are killed (launcher fault tests).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "core/model/chunked_loss.h"
#include "core/model/llama_model.h"
#include "core/model/tensor_parallel.h"
#include "dist/communicator.h"
#include "dist/rank_env.h"
#include "dist/socket_traffic.h"
#include "plan/model_spec.h"
#include "plan/run_spec_bridge.h"

namespace shard::worker {
namespace {

using dist::Collective;
using dist::Communicator;

int g_failures = 0;
c10::Device g_device = c10::Device(c10::kCPU); // --device: cuda for the NCCL backend

at::Tensor dev(const at::Tensor& t)
{
    return t.to(g_device);
}

at::Tensor host(const at::Tensor& t)
{
    return t.to(c10::Device(c10::kCPU));
}

void check(bool ok, const std::string& what)
{
    if (!ok) {
        ++g_failures;
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

// Small integers, exact in every dtype tested (bf16 holds integers up to 256 exactly).
double valueOf(int rank, int64_t i, int salt)
{
    return static_cast<double>(((rank * 131 + i * 7 + salt * 13) % 31) - 15);
}

at::Tensor filled(int64_t n, at::ScalarType type, const std::function<double(int64_t)>& f)
{
    at::Tensor t = at::empty({n}, at::kDouble);
    double* p = t.data_ptr<double>();
    for (int64_t i = 0; i < n; ++i)
        p[i] = f(i);
    return t.to(type);
}

std::string name(at::ScalarType t)
{
    return c10::toString(t);
}

// Bytes each rank sends, written out here independently of dist::trafficBytes.
std::string g_backend = "gloo";

int64_t expectedBytes(Collective kind, int64_t numel, int64_t elem, int w, int rank, int root)
{
    if (w == 1)
        return 0;
    switch (kind) {
    case Collective::AllGather:     // ring: W-1 slots of numel/W
    case Collective::ReduceScatter: // all-to-all: W-1 slots of numel/W
        return (numel / w) * elem * (w - 1);
    case Collective::AllReduce:
        return 2 * (w - 1) * ((numel + w - 1) / w) * elem;
    case Collective::Broadcast: {
        if (g_backend == "nccl") // ring: everyone but the root's predecessor forwards it
            return rank == (root + w - 1) % w ? 0 : numel * elem;
        // Binomial tree (measured: at 4 ranks the root sends 2 copies, its first child 1):
        // follow the tree from the root and count the copies `rank` sends.
        std::vector<int> sends(static_cast<size_t>(w), 0);
        std::vector<bool> has(static_cast<size_t>(w), false);
        has[static_cast<size_t>(root)] = true;
        for (int step = 1; step < w; step *= 2)
            for (int v = step - 1; v >= 0; --v) {
                const int from = (root + v) % w;
                const int to = (root + v + step) % w;
                if (v + step < w && has[static_cast<size_t>(from)]) {
                    ++sends[static_cast<size_t>(from)];
                    has[static_cast<size_t>(to)] = true;
                }
            }
        return sends[static_cast<size_t>(rank)] * numel * elem;
    }
    default:
        return 0;
    }
}

void testCollectives(Communicator& comm, nlohmann::json& report)
{
    const int w = comm.worldSize();
    const int me = comm.rank();
    const std::vector<at::ScalarType> types
        = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong};
    const std::vector<int64_t> slots = {1, 3, 7, 1000, 4099};
    int salt = 0;
    for (auto type : types) {
        for (int64_t c : slots) {
            ++salt;
            const std::string tag = name(type) + " C=" + std::to_string(c);
            // all-gather: own slot of the output as input (FSDP's in-place use).
            at::Tensor out = at::zeros({w * c}, type);
            out.narrow(0, me * c, c).copy_(filled(c, type, [&](int64_t i) {
                return valueOf(me, i, salt);
            }));
            auto before = comm.stats();
            out = dev(out);
            comm.allGather(out, out.narrow(0, me * c, c))->wait();
            out = host(out);
            at::Tensor want = at::empty({w * c}, type);
            for (int r = 0; r < w; ++r)
                want.narrow(0, r * c, c).copy_(filled(c, type, [&](int64_t i) {
                    return valueOf(r, i, salt);
                }));
            check(at::equal(out, want), "allGather " + tag);
            check(comm.stats().bytes(Collective::AllGather) - before.bytes(Collective::AllGather)
                    == expectedBytes(Collective::AllGather, w * c, out.element_size(), w, me, 0),
                "allGather bytes " + tag);

            // reduce-scatter: input W*C, output C = slot `me` of the sum.
            at::Tensor in
                = filled(w * c, type, [&](int64_t i) { return valueOf(me, i, salt + 1); });
            at::Tensor rs = dev(at::empty({c}, type));
            before = comm.stats();
            comm.reduceScatter(rs, dev(in))->wait();
            rs = host(rs);
            at::Tensor rsWant = filled(c, type, [&](int64_t i) {
                double s = 0;
                for (int r = 0; r < w; ++r)
                    s += valueOf(r, me * c + i, salt + 1);
                return s;
            });
            check(at::equal(rs, rsWant), "reduceScatter " + tag);
            check(comm.stats().bytes(Collective::ReduceScatter)
                        - before.bytes(Collective::ReduceScatter)
                    == expectedBytes(Collective::ReduceScatter, w * c, in.element_size(), w, me, 0),
                "reduceScatter bytes " + tag);

            // all-reduce of an odd length (not a multiple of W).
            const int64_t n = c * w + 1;
            at::Tensor ar = filled(n, type, [&](int64_t i) { return valueOf(me, i, salt + 2); });
            before = comm.stats();
            ar = dev(ar);
            comm.allReduce(ar)->wait();
            ar = host(ar);
            at::Tensor arWant = filled(n, type, [&](int64_t i) {
                double s = 0;
                for (int r = 0; r < w; ++r)
                    s += valueOf(r, i, salt + 2);
                return s;
            });
            check(at::equal(ar, arWant), "allReduce " + tag);
            check(comm.stats().bytes(Collective::AllReduce) - before.bytes(Collective::AllReduce)
                    == expectedBytes(Collective::AllReduce, n, ar.element_size(), w, me, 0),
                "allReduce bytes " + tag);

            // broadcast from the last rank.
            const int root = w - 1;
            at::Tensor bc = filled(n, type, [&](int64_t i) { return valueOf(me, i, salt + 3); });
            before = comm.stats();
            bc = dev(bc);
            comm.broadcast(bc, root)->wait();
            bc = host(bc);
            check(at::equal(
                      bc, filled(n, type, [&](int64_t i) { return valueOf(root, i, salt + 3); })),
                "broadcast " + tag);
            check(comm.stats().bytes(Collective::Broadcast) - before.bytes(Collective::Broadcast)
                    == expectedBytes(Collective::Broadcast, n, bc.element_size(), w, me, root),
                "broadcast bytes " + tag);
        }
    }
    report["dtypes"] = types.size();
    report["slot_sizes"] = slots;

    // A narrow input summed into a float32 output (Gloo: Communicator::sumsIntoWiderOutput), as
    // FSDP's fp32 reduce of bf16 gradients uses it: bit for bit the float32 sum, in rank order,
    // of the widened slots (fractions, so that float32 rounds), at the narrow dtype's bytes.
    if (!comm.sumsIntoWiderOutput())
        return;
    for (auto type : {at::kBFloat16, at::kHalf})
        for (int64_t c : slots) {
            ++salt;
            const std::string tag = name(type) + " into Float C=" + std::to_string(c);
            auto narrow = [&](int r) {
                return filled(w * c, type, [&](int64_t i) { return valueOf(r, i, salt) / 7.0; });
            };
            at::Tensor rs = dev(at::empty({c}, at::kFloat));
            const auto before = comm.stats();
            comm.reduceScatter(rs, dev(narrow(me)))->wait();
            rs = host(rs);
            at::Tensor want = narrow(0).narrow(0, me * c, c).to(at::kFloat);
            for (int r = 1; r < w; ++r)
                want = want + narrow(r).narrow(0, me * c, c).to(at::kFloat);
            check(at::equal(rs, want), "reduceScatter " + tag);
            check(comm.stats().bytes(Collective::ReduceScatter)
                        - before.bytes(Collective::ReduceScatter)
                    == expectedBytes(Collective::ReduceScatter, w * c, 2, w, me, 0),
                "reduceScatter bytes " + tag);
        }
    report["widening_reduce_scatter"] = true;
}

// FSDP's use: a parameter of d0 rows split on dim 0 into W chunks of ceil(d0/W) rows, padded at
// the tail; the gathered buffer's first d0 rows are the full parameter.
void testPaddedShards(Communicator& comm)
{
    const int w = comm.worldSize();
    const int me = comm.rank();
    for (int64_t d0 : {1, 5, 7, 13}) {
        const int64_t cols = 3;
        at::Tensor full = at::arange(d0 * cols, at::kFloat).view({d0, cols});
        const int64_t rows = (d0 + w - 1) / w;
        at::Tensor gathered = at::full({w * rows, cols}, -1.0, at::kFloat);
        at::Tensor shard = at::zeros({rows, cols}, at::kFloat);
        const int64_t start = std::min<int64_t>(me * rows, d0);
        const int64_t have = std::min<int64_t>(rows, d0 - start);
        if (have > 0)
            shard.narrow(0, 0, have).copy_(full.narrow(0, start, have));
        gathered = dev(gathered);
        comm.allGather(gathered, dev(shard))->wait();
        gathered = host(gathered);
        check(at::equal(gathered.narrow(0, 0, d0), full),
            "padded all-gather d0=" + std::to_string(d0));
        check(gathered.narrow(0, d0, w * rows - d0).abs().sum().item<float>() == 0.0f,
            "padding stays zero d0=" + std::to_string(d0));
    }
}

// Prefetch pattern: two gathers in flight, waited in order, plus out-of-order completion.
void testAsync(Communicator& comm)
{
    const int w = comm.worldSize();
    const int me = comm.rank();
    std::vector<at::Tensor> outs;
    std::vector<dist::WorkPtr> works;
    for (int k = 0; k < 4; ++k) {
        at::Tensor out = at::zeros({w * 257}, at::kFloat);
        out.narrow(0, me * 257, 257).fill_(static_cast<float>(me * 10 + k));
        out = dev(out);
        works.push_back(comm.allGather(out, out.narrow(0, me * 257, 257)));
        outs.push_back(out);
        if (works.size() >= 2)
            works[works.size() - 2]->wait(); // at most two in flight
    }
    works.back()->wait();
    works.back()->wait(); // waiting twice is harmless
    for (int k = 0; k < 4; ++k)
        for (int r = 0; r < w; ++r)
            check(outs[static_cast<size_t>(k)][r * 257].item<float>()
                    == static_cast<float>(r * 10 + k),
                "async all-gather " + std::to_string(k));
}

void testGroups(Communicator& comm, nlohmann::json& report)
{
    const int w = comm.worldSize();
    if (w < 4 || w % 2 != 0)
        return;
    auto groups = dist::makeHybridGroups(comm, 2);
    check(groups.shard && groups.shard->worldSize() == 2, "shard group of 2");
    check(groups.replicate && groups.replicate->worldSize() == w / 2, "replicate group");
    if (!groups.shard || !groups.replicate)
        return;
    const int me = comm.rank();
    at::Tensor t = dev(at::full({5}, static_cast<double>(me + 1), at::kDouble));
    groups.shard->allReduce(t)->wait();
    t = host(t);
    const int first = (me / 2) * 2;
    check(t[0].item<double>() == (first + 1) + (first + 2), "shard group all-reduce");
    at::Tensor u = dev(at::full({5}, static_cast<double>(me + 1), at::kDouble));
    groups.replicate->allReduce(u)->wait();
    u = host(u);
    double want = 0;
    for (int r = me % 2; r < w; r += 2)
        want += r + 1;
    check(u[0].item<double>() == want, "replicate group all-reduce");
    check(groups.shard->rank() == me % 2, "rank within the shard group");
    report["hybrid_groups"] = true;
}

// Bytes measured by the kernel against the counter, for one large collective of each kind.
void testWireTraffic(Communicator& comm, nlohmann::json& report)
{
    const int w = comm.worldSize();
    const int me = comm.rank();
    const int64_t n = int64_t(3) << 19; // 6 MiB of fp32, a multiple of 2, 3 and 4 ranks
    struct Case {
        const char* name;
        Collective kind;
        std::function<void()> run;
    };
    at::Tensor buf = at::ones({n}, at::kFloat);
    at::Tensor small = at::ones({n / w}, at::kFloat);
    at::Tensor bbuf = at::ones({n}, at::kBFloat16);
    std::vector<Case> cases = {
        {"all_gather", Collective::AllGather, [&] { comm.allGather(buf, small)->wait(); }},
        {"reduce_scatter", Collective::ReduceScatter,
            [&] { comm.reduceScatter(small, buf)->wait(); }},
        {"all_reduce", Collective::AllReduce, [&] { comm.allReduce(buf)->wait(); }},
        {"all_reduce_bf16", Collective::AllReduce, [&] { comm.allReduce(bbuf)->wait(); }},
        {"broadcast", Collective::Broadcast, [&] { comm.broadcast(buf, 0)->wait(); }},
        {"broadcast_root1", Collective::Broadcast, [&] { comm.broadcast(buf, 1)->wait(); }},
    };
    // bf16 gradients into an fp32 reduce: half reduce_scatter's bytes on the socket.
    if (comm.sumsIntoWiderOutput())
        cases.push_back({"reduce_scatter_bf16_into_fp32", Collective::ReduceScatter,
            [&] { comm.reduceScatter(small, bbuf)->wait(); }});
    // A barrier's own traffic, to subtract.
    comm.barrier();
    int64_t t0 = dist::tcpBytesSent();
    comm.barrier();
    const int64_t barrierBytes = dist::tcpBytesSent() - t0;
    nlohmann::json rows = nlohmann::json::array();
    for (auto& c : cases) {
        comm.barrier();
        auto before = comm.stats();
        int64_t start = dist::tcpBytesSent();
        c.run();
        comm.barrier();
        int64_t measured = dist::tcpBytesSent() - start - barrierBytes;
        int64_t counted = comm.stats().bytes(c.kind) - before.bytes(c.kind);
        // Gloo adds a small header per message: allow 2% plus 16 KiB.
        double diff = std::abs(static_cast<double>(measured - counted));
        const bool ok = diff <= 0.02 * static_cast<double>(counted) + 16384.0;
        check(ok,
            std::string("wire bytes ") + c.name + ": counted " + std::to_string(counted)
                + ", kernel measured " + std::to_string(measured));
        rows.push_back(
            {{"collective", c.name}, {"rank", me}, {"counted", counted}, {"measured", measured}});
    }
    report["wire"] = rows;
}

// One ZeRO-3 step of a two-layer MLP in bf16 with fp32 master shards (the GPU script's check):
// gather bf16 shards, forward/backward with autograd, reduce-scatter fp32 gradients, SGD on the
// shard; the result is compared with a full-batch fp32 step computed from the same bf16 weights.
void testZero3Step(Communicator& comm, nlohmann::json& report)
{
    const int64_t w = comm.worldSize();
    const int me = comm.rank();
    const std::vector<std::vector<int64_t>> shapes = {{67, 48}, {16, 67}}; // 67 rows: padding
    const int64_t rowsPerRank = 8;
    const double lr = 0.5;
    auto fullMaster = [&](size_t k) {
        const auto& sh = shapes[k];
        return filled(sh[0] * sh[1], at::kFloat, [&](int64_t i) {
            return valueOf(0, i, 40 + static_cast<int>(k)) * 0.01;
        }).view(sh);
    };
    auto input = [&](int rank) {
        return filled(rowsPerRank * 48, at::kFloat, [&](int64_t i) {
            return valueOf(rank, i, 50) * 0.1;
        }).view({rowsPerRank, 48});
    };
    std::vector<at::Tensor> shards, leaves, gatheredBufs;
    std::vector<int64_t> chunkRows;
    for (size_t k = 0; k < shapes.size(); ++k) {
        const int64_t d0 = shapes[k][0], cols = shapes[k][1];
        const int64_t rows = (d0 + w - 1) / w;
        chunkRows.push_back(rows);
        at::Tensor shard = at::zeros({rows, cols}, at::kFloat);
        const int64_t begin = std::min<int64_t>(me * rows, d0);
        const int64_t have = std::min<int64_t>(rows, d0 - begin);
        if (have > 0)
            shard.narrow(0, 0, have).copy_(fullMaster(k).narrow(0, begin, have));
        shards.push_back(dev(shard));
        at::Tensor flat = dev(at::zeros({w * rows * cols}, at::kBFloat16));
        comm.allGather(flat, shards.back().to(at::kBFloat16).reshape({-1}))->wait();
        gatheredBufs.push_back(flat);
        leaves.push_back(
            flat.narrow(0, 0, d0 * cols).view({d0, cols}).variable_data().requires_grad_(true));
    }
    const double count = static_cast<double>(w * rowsPerRank * 16);
    at::Tensor x = dev(input(me)).to(at::kBFloat16);
    at::Tensor y = at::relu(at::matmul(x, leaves[0].t()));
    at::Tensor out = at::matmul(y, leaves[1].t());
    at::Tensor loss = out.to(at::kFloat).pow(2).sum() / count;
    loss.backward();
    for (size_t k = 0; k < shapes.size(); ++k) {
        const int64_t d0 = shapes[k][0], cols = shapes[k][1];
        at::Tensor in = dev(at::zeros({w * chunkRows[k] * cols}, at::kFloat));
        in.narrow(0, 0, d0 * cols).copy_(leaves[k].grad().to(at::kFloat).reshape({-1}));
        at::Tensor g = dev(at::empty({chunkRows[k] * cols}, at::kFloat));
        comm.reduceScatter(g, in)->wait();
        shards[k].sub_(g.view({chunkRows[k], cols}), lr);
    }
    // Reference: every rank's rows on this rank, fp32 math on the bf16-rounded weights.
    double worst = 0.0;
    {
        std::vector<at::Tensor> ref;
        for (size_t k = 0; k < shapes.size(); ++k)
            ref.push_back(fullMaster(k).to(at::kBFloat16).to(at::kFloat).requires_grad_(true));
        at::Tensor total = at::zeros({}, at::kFloat);
        for (int r = 0; r < w; ++r) {
            at::Tensor xr = input(r).to(at::kBFloat16).to(at::kFloat);
            at::Tensor o = at::matmul(at::relu(at::matmul(xr, ref[0].t())), ref[1].t());
            total = total + o.pow(2).sum() / count;
        }
        total.backward();
        for (size_t k = 0; k < shapes.size(); ++k) {
            const int64_t d0 = shapes[k][0], cols = shapes[k][1];
            at::Tensor gathered = dev(at::zeros({w * chunkRows[k] * cols}, at::kFloat));
            comm.allGather(gathered, shards[k].reshape({-1}))->wait();
            at::Tensor got = host(gathered).narrow(0, 0, d0 * cols).view({d0, cols});
            at::Tensor want = fullMaster(k) - lr * ref[k].grad();
            at::Tensor step = (want - fullMaster(k)).abs().max();
            worst = std::max(
                worst, ((got - want).abs().max() / step.clamp_min(1e-12)).item<double>());
        }
    }
    // bf16 compute against an fp32 reference: the update must agree to a few bf16 ulps.
    check(worst < 0.05,
        "zero3 bf16 step: update differs from the reference by " + std::to_string(worst)
            + " of its size");
    report["zero3_step_rel_error"] = worst;
}

// Mode tp-block: one tensor-parallel transformer block over all ranks (tensor_parallel.h)
// against the whole block computed on every rank, in fp64 so that only summation order
// differs: the output, the input's gradient, and every weight's gradient (each rank's slice of
// the whole block's; for q/k norms, replicated inside the split heads, the sum over ranks).
// Three shapes: Llama with grouped-query attention, Qwen2-style q/k/v biases with an o bias,
// Qwen3-style q/k norms with head_dim != hidden / heads. Then the root unit split by vocabulary.
void testTpBlock(Communicator& comm, nlohmann::json& report)
{
    const int64_t size = comm.worldSize(), rank = comm.rank();
    const nlohmann::json base
        = {{"hidden_size", 64}, {"intermediate_size", 96}, {"num_hidden_layers", 1},
            {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"vocab_size", 32},
            {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5}, {"torch_dtype", "float32"}};
    std::vector<std::pair<std::string, nlohmann::json>> shapes;
    shapes.push_back({"llama-gqa", base});
    shapes.back().second["model_type"] = "llama";
    shapes.push_back({"llama-bias", base});
    shapes.back().second["model_type"] = "llama";
    shapes.back().second["attention_bias"] = true;
    shapes.push_back({"qwen3", base});
    shapes.back().second["model_type"] = "qwen3";
    shapes.back().second["head_dim"] = 12;
    double worst = 0;
    nlohmann::json cases = nlohmann::json::array();
    for (const auto& [name, config] : shapes) {
        engine::LlamaModel model(plan::parseHfConfig(config, name));
        const std::string why = plan::whyNotSplitBlocks(model.spec(), size);
        if (!why.empty()) {
            cases.push_back({{"shape", name}, {"skipped", why}});
            continue;
        }
        model.materialize(at::kDouble);
        model.initRandom(7);
        // Weights far from init (std 0.3, norms around 1, biases around 0.1): attention is
        // then not uniform and every path carries gradient.
        at::manual_seed(11);
        std::vector<at::Tensor> w;
        for (const auto& p : model.unit(1).params) {
            at::Tensor t = p.value.clone();
            if (p.info.isNormOrBias && p.info.name.find("norm") != std::string::npos)
                t = 1.0 + 0.2 * at::randn(t.sizes(), t.options());
            else if (p.info.isNormOrBias)
                t = 0.1 * at::randn(t.sizes(), t.options());
            else
                t = t * 15.0;
            w.push_back(dev(t));
        }
        // On --device (a GPU for NCCL), where the collectives' tensors must be.
        const at::Tensor x = dev(at::randn({2, 9, 64}, at::kDouble));
        const at::Tensor g = dev(at::randn({2, 9, 64}, at::kDouble));
        engine::RopeTables rope = model.rope(9, at::kDouble);
        rope = {dev(rope.cos), dev(rope.sin)};

        std::vector<at::Tensor> whole;
        for (const auto& t : w)
            whole.push_back(t.clone().requires_grad_(true));
        at::Tensor xWhole = x.clone().requires_grad_(true);
        const at::Tensor yWhole = model.block(whole, xWhole, rope);
        yWhole.backward(g);

        std::vector<at::Tensor> mine = engine::tp::blockSlice(model, w, rank, size);
        for (auto& t : mine)
            t.requires_grad_(true);
        at::Tensor xMine = x.clone().requires_grad_(true);
        const at::Tensor yMine = engine::tp::block(model, mine, xMine, rope, comm);
        yMine.backward(g);

        const auto rel = [](const at::Tensor& got, const at::Tensor& want) {
            return (got - want).abs().max().item<double>()
                / std::max(want.abs().max().item<double>(), 1e-300);
        };
        double caseWorst
            = std::max(rel(yMine - x, yWhole.detach() - x), rel(xMine.grad(), xWhole.grad()));
        std::vector<at::Tensor> wholeGrads;
        for (const auto& t : whole)
            wholeGrads.push_back(t.grad());
        const std::vector<at::Tensor> wantGrads
            = engine::tp::blockSlice(model, wholeGrads, rank, size);
        const engine::BlockLayout& L = model.blockLayout();
        for (size_t i = 0; i < mine.size(); ++i) {
            at::Tensor got = mine[i].grad();
            if (int(i) == L.qNorm || int(i) == L.kNorm) {
                got = got.contiguous().clone();
                comm.allReduce(got)->wait();
            }
            const double r = rel(got, wantGrads[i]);
            check(r < 1e-10,
                "tp-block " + name + ": gradient of " + model.unit(1).params[i].info.name
                    + " differs by " + std::to_string(r));
            caseWorst = std::max(caseWorst, r);
        }
        check(caseWorst < 1e-10,
            "tp-block " + name + ": worst relative difference " + std::to_string(caseWorst));
        worst = std::max(worst, caseWorst);
        cases.push_back({{"shape", name}, {"rel_error", caseWorst}});
    }
    // The vocabulary-parallel embedding, head and cross entropy (untied and tied, vocabulary 32
    // split by rows): the embedding's output bit for bit, the loss, the hidden state's gradient
    // and each rank's rows of the tables' gradients against the whole root, with masked targets;
    // and the chunked cross entropy alone over 5-row chunks (4 chunks of 16 rows).
    for (const bool tied : {false, true}) {
        nlohmann::json config = base;
        config["model_type"] = "llama";
        config["tie_word_embeddings"] = tied;
        const std::string name = tied ? "root-tied" : "root";
        engine::LlamaModel model(plan::parseHfConfig(config, name));
        model.materialize(at::kDouble);
        model.initRandom(5);
        at::manual_seed(13);
        std::vector<at::Tensor> root;
        for (const auto& p : model.unit(0).params)
            root.push_back(
                dev(p.info.isNormOrBias ? 1.0 + 0.2 * at::randn(p.value.sizes(), p.value.options())
                                        : p.value * 40.0));
        const at::Tensor ids = dev(at::randint(0, 32, {2, 9}, at::kLong));
        at::Tensor labels = ids.clone();
        labels.index_put_({0, 3}, -100);
        labels.index_put_({1, 7}, -100);
        const at::Tensor g = dev(at::randn({2, 9, 64}, at::kDouble));
        const auto rel = [](const at::Tensor& got, const at::Tensor& want) {
            return (got - want).abs().max().item<double>()
                / std::max(want.abs().max().item<double>(), 1e-300);
        };
        const auto run = [&](bool split, std::vector<at::Tensor>& w, at::Tensor& embedded) {
            for (auto& t : w)
                t.requires_grad_(true);
            embedded = split ? engine::tp::embed(model, w, ids, comm) : model.embed(w, ids);
            // A nonlinear function of the embedding before the head, as a block would be.
            const at::Tensor x = embedded + at::tanh(embedded) * g;
            const engine::LossSum l = split
                ? engine::tp::headLossSum(model, w, x, labels, 0.25, comm)
                : model.headLossSum(w, x, labels, 0.25);
            (l.sum * 0.25).backward();
            return l.sum.detach();
        };
        std::vector<at::Tensor> whole;
        for (const auto& t : root)
            whole.push_back(t.clone());
        at::Tensor eWhole, eMine;
        const at::Tensor lossWhole = run(false, whole, eWhole);
        std::vector<at::Tensor> mine;
        for (size_t i = 0; i < root.size(); ++i)
            mine.push_back(engine::tp::partOf(
                root[i], engine::tp::splitOf(model, 0, static_cast<int>(i), size), rank, size));
        const at::Tensor lossMine = run(size > 1, mine, eMine);
        double caseWorst = std::max(rel(lossMine, lossWhole), rel(eMine, eWhole));
        check(size == 1 || at::equal(eMine, eWhole),
            "vocab-parallel " + name + ": the embedding is the whole table's bit for bit");
        for (size_t i = 0; i < root.size(); ++i) {
            const engine::tp::Split split
                = engine::tp::splitOf(model, 0, static_cast<int>(i), size);
            check(size == 1 || (split == engine::tp::Split::Rows) == (mine[i].dim() == 2),
                "vocab-parallel " + name + ": the tables split by rows, the norm whole");
            const double r
                = rel(mine[i].grad(), engine::tp::partOf(whole[i].grad(), split, rank, size));
            check(r < 1e-10,
                "vocab-parallel " + name + ": gradient of " + model.unit(0).params[i].info.name
                    + " differs by " + std::to_string(r));
            caseWorst = std::max(caseWorst, r);
        }
        // The chunked cross entropy alone: 16 rows over chunks of 5.
        const at::Tensor h = dev(at::randn({16, 64}, at::kDouble));
        const at::Tensor wv = dev(at::randn({32, 64}, at::kDouble));
        at::Tensor targets = dev(at::randint(0, 32, {16}, at::kLong));
        targets.index_put_({4}, -100);
        const at::Tensor hW = h.clone().requires_grad_(true), wW = wv.clone().requires_grad_(true);
        const at::Tensor sumW = engine::linearCrossEntropySum(hW, wW, targets, 0.5, 5);
        sumW.backward();
        const at::Tensor hM = h.clone().requires_grad_(true);
        const at::Tensor wM
            = engine::tp::partOf(wv, engine::tp::Split::Rows, rank, size).requires_grad_(true);
        engine::VocabShard shard;
        shard.group = &comm;
        shard.first = rank * wM.size(0);
        const at::Tensor sumM = engine::linearCrossEntropySum(
            engine::tp::copyToGroup(hM, comm), wM, targets, 0.5, 5, size > 1 ? &shard : nullptr);
        sumM.backward();
        caseWorst = std::max({caseWorst, rel(sumM, sumW), rel(hM.grad(), hW.grad()),
            rel(wM.grad(), engine::tp::partOf(wW.grad(), engine::tp::Split::Rows, rank, size))});
        // The rows' log-probabilities of their targets (DPO, ORPO) over the split vocabulary,
        // with a gradient that differs per row (a sequence loss's).
        const at::Tensor rowGrad = dev(at::randn({16}, at::kDouble));
        const at::Tensor hW2 = h.clone().requires_grad_(true),
                         wW2 = wv.clone().requires_grad_(true);
        const at::Tensor lpW = engine::linearTokenLogProbs(hW2, wW2, targets, 5);
        (lpW * rowGrad).sum().backward();
        const at::Tensor hM2 = h.clone().requires_grad_(true);
        const at::Tensor wM2
            = engine::tp::partOf(wv, engine::tp::Split::Rows, rank, size).requires_grad_(true);
        const at::Tensor lpM = engine::linearTokenLogProbs(
            engine::tp::copyToGroup(hM2, comm), wM2, targets, 5, size > 1 ? &shard : nullptr);
        (lpM * rowGrad).sum().backward();
        caseWorst = std::max({caseWorst, rel(lpM, lpW), rel(hM2.grad(), hW2.grad()),
            rel(wM2.grad(), engine::tp::partOf(wW2.grad(), engine::tp::Split::Rows, rank, size))});
        check(lpM.select(0, 4).item<double>() == 0.0,
            "vocab-parallel " + name + ": a masked row's log-probability is 0");
        check(caseWorst < 1e-10,
            "vocab-parallel " + name + ": worst relative difference " + std::to_string(caseWorst));
        worst = std::max(worst, caseWorst);
        cases.push_back({{"shape", name}, {"rel_error", caseWorst}});
    }
    // A size that does not divide the model is refused with the numbers and the sizes that do.
    nlohmann::json llama = base;
    llama["model_type"] = "llama";
    const std::string why = plan::whyNotSplitBlocks(plan::parseHfConfig(llama), 3);
    check(why.find("does not divide the model's 8 attention heads") != std::string::npos
            && why.find("1, 2, 4") != std::string::npos,
        "tp-block: the refusal of size 3 says: " + why);
    report["tp_cases"] = cases;
    report["tp_rel_error"] = worst;
}

void loopForever(Communicator& comm)
{
    at::Tensor t = at::ones({4096}, at::kFloat);
    std::printf("{\"type\":\"selftest\",\"state\":\"looping\",\"rank\":%d}\n", comm.rank());
    std::fflush(stdout);
    while (true) {
        comm.allReduce(t)->wait();
        t.fill_(1.0f);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

CommandRegistration registration([](CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "dist-selftest", "(tests) check the collectives across the ranks started by 'launch'");
    cmd->group(""); // hidden
    auto mode = std::make_shared<std::string>("collectives");
    auto backend = std::make_shared<std::string>("gloo");
    cmd->add_option("--mode", *mode, "collectives | wire | zero3-step | tp-block | loop | exit")
        ->check(CLI::IsMember({"collectives", "wire", "zero3-step", "tp-block", "loop", "exit"}));
    cmd->add_option("--backend", *backend, "gloo | nccl");
    auto device = std::make_shared<std::string>("cpu");
    cmd->add_option("--device", *device, "cpu | cuda (tensors for the collectives)");
    auto exitRank = std::make_shared<int>(-1);
    auto exitCodeValue = std::make_shared<int>(3);
    cmd->add_option("--exit-rank", *exitRank, "mode exit: this rank exits with --exit-code");
    cmd->add_option("--exit-code", *exitCodeValue, "mode exit: the code");
    cmd->callback([=] {
        g_device = c10::Device(*device);
        g_backend = *backend;
        auto env = dist::RankEnv::fromEnvironment();
        if (*mode == "exit" && env.rank == *exitRank) {
            std::fprintf(stderr, "rank %d exits with %d as asked\n", env.rank, *exitCodeValue);
            exitCode() = *exitCodeValue;
            return;
        }
        auto comm = dist::createCommunicator(*backend, env);
        nlohmann::json report = {{"type", "selftest"}, {"mode", *mode},
            {"world_size", comm->worldSize()}, {"rank", comm->rank()}};
        if (*mode == "loop" || *mode == "exit")
            loopForever(*comm);
        if (*mode == "collectives") {
            testCollectives(*comm, report);
            testPaddedShards(*comm);
            testAsync(*comm);
            testGroups(*comm, report);
        } else if (*mode == "zero3-step") {
            testZero3Step(*comm, report);
        } else if (*mode == "wire") {
            testWireTraffic(*comm, report);
        } else if (*mode == "tp-block") {
            testTpBlock(*comm, report);
        }
        comm->barrier();
        report["failures"] = g_failures;
        std::printf("%s\n", report.dump().c_str());
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", report.dump().c_str());
        exitCode() = g_failures == 0 ? 0 : 1;
    });
});

} // namespace
} // namespace shard::worker
