// The argument checks every backend shares (BackendCommunicator), on a one-rank Gloo
// communicator: each bad call fails with a message naming the call and what is wrong, and the
// good ones complete locally without counting traffic.
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "dist/communicator.h"
#include "dist/rank_env.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what)
{
    if (!ok) {
        ++failures;
        std::fprintf(stderr, "FAIL: %s\n", what.c_str());
    }
}

void expectThrows(const std::function<void()>& fn, const std::string& needle)
{
    try {
        fn();
        expect(false, "expected an error containing '" + needle + "'");
    } catch (const std::invalid_argument& e) {
        expect(std::string(e.what()).find(needle) != std::string::npos,
            "error '" + std::string(e.what()) + "' should contain '" + needle + "'");
    }
}

} // namespace

int main()
{
    using namespace shard::dist;
    const RankEnv env = RankEnv::fromEnvironment(std::map<std::string, std::string> {});
    auto comm = createCommunicator("gloo", env);
    expect(comm->backend() == "gloo" && comm->worldSize() == 1, "one-rank gloo communicator");

    const at::Tensor f4 = at::arange(4, at::kFloat);
    const at::Tensor l4 = at::arange(4, at::kLong);
    expectThrows([&] { comm->allGather(at::Tensor(), f4); }, "allGather: output is undefined");
    expectThrows([&] { comm->allGather(at::empty({4}, at::kFloat), l4); },
        "output is Float but input is Long");
    expectThrows([&] { comm->allGather(at::empty({3}, at::kFloat), f4); },
        "allGather: output has 3 elements, expected world size x input = 4");
    const at::Tensor strided = at::zeros({4, 2}, at::kFloat).t();
    expectThrows([&] { comm->allGather(at::empty({8}, at::kFloat), strided); },
        "allGather: input must be contiguous");
    expectThrows([&] { comm->reduceScatter(at::empty({4}, at::kLong), f4); },
        "reduceScatter: output and input dtypes differ (output Long, input Float; gloo takes "
        "only a Float output for a BFloat16 or Half input)");
    expectThrows([&] { comm->reduceScatter(at::empty({4}, at::kBFloat16), f4); },
        "reduceScatter: output and input dtypes differ (output BFloat16, input Float");
    expectThrows([&] { comm->reduceScatter(at::empty({2}, at::kFloat), f4); },
        "reduceScatter: input has 4 elements, expected world size x output = 2");
    expectThrows([&] { comm->allReduce(strided); }, "allReduce: tensor must be contiguous");
    expectThrows([&] { comm->broadcast(f4.clone(), 1); }, "broadcast: root 1 is outside 0..0");
    expectThrows([&] { comm->newGroup({}); }, "newGroup: empty rank list");
    expectThrows([&] { comm->newGroup({0, 0}); }, "ascending, unique and in 0..0");
    expectThrows([&] { comm->newGroup({1}); }, "ascending, unique and in 0..0");

    // One rank: the result is the input, nothing is sent or counted.
    at::Tensor gathered = at::zeros({4}, at::kFloat);
    comm->allGather(gathered, f4)->wait();
    expect(gathered.equal(f4), "one-rank all-gather copies the input");
    at::Tensor reduced = at::zeros({4}, at::kFloat);
    comm->reduceScatter(reduced, f4)->wait();
    expect(reduced.equal(f4), "one-rank reduce-scatter copies the input");
    // A bf16 input into a float32 output (Gloo sums into the wider dtype): widened exactly.
    expect(comm->sumsIntoWiderOutput(), "gloo sums a narrow input into a float32 output");
    at::Tensor wide = at::zeros({4}, at::kFloat);
    const at::Tensor b4 = f4.div(3.0).to(at::kBFloat16);
    comm->reduceScatter(wide, b4)->wait();
    expect(wide.equal(b4.to(at::kFloat)), "one-rank bf16 into fp32 reduce-scatter widens");
    at::Tensor inPlace = f4.clone();
    comm->allReduce(inPlace)->wait();
    comm->broadcast(inPlace, 0)->wait();
    expect(inPlace.equal(f4), "one-rank all-reduce and broadcast leave the tensor");
    expect(comm->stats().totalBytes() == 0 && comm->stats().calls[0] == 0,
        "one rank counts no traffic");
    auto group = comm->newGroup({0});
    expect(group && group->worldSize() == 1 && group->rank() == 0 && group->backend() == "gloo",
        "newGroup({0}) is a one-rank gloo group");

    if (failures)
        std::fprintf(stderr, "%d check(s) failed\n", failures);
    else
        std::printf("all communicator argument checks passed\n");
    return failures ? 1 : 0;
}
