// Gloo backend (the arguments are checked by BackendCommunicator before issue()). The
// c10d::Work is wrapped so that wait() also runs the local part of composite operations.
#include "dist/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <stdexcept>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "dist/rank_env.h"
#include "dist/store.h"

namespace shard::dist {

namespace {

using c10d::ProcessGroupGloo;

std::chrono::milliseconds toMs(double seconds)
{
    return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

// Gloo in 1.13 has no bf16: such tensors travel as bytes (only where no arithmetic happens).
bool glooLacksType(at::ScalarType t)
{
    return t == at::kBFloat16;
}

at::Tensor wire(const at::Tensor& t)
{
    at::Tensor v = t.variable_data().view({-1});
    return glooLacksType(t.scalar_type()) ? v.view(at::kByte) : v;
}

class GlooWork final : public Work {
public:
    GlooWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish)
        : m_work(std::move(work))
        , m_finish(std::move(finish))
    {
    }
    void wait() override
    {
        if (m_done)
            return;
        m_work->wait();
        if (m_finish)
            m_finish();
        m_done = true;
        m_finish = nullptr;
        m_work.reset();
    }

private:
    c10::intrusive_ptr<c10d::Work> m_work;
    std::function<void()> m_finish;
    bool m_done = false;
};

// Waits for several c10d works (point-to-point sends and receives) in turn.
class GlooWorks final : public Work {
public:
    explicit GlooWorks(std::vector<c10::intrusive_ptr<c10d::Work>> works)
        : m_works(std::move(works))
    {
    }
    void wait() override
    {
        for (auto& w : m_works)
            w->wait();
        m_works.clear();
    }

private:
    std::vector<c10::intrusive_ptr<c10d::Work>> m_works;
};

// Runs `next` once `first` is done, then waits for it and runs `finish`.
class ChainWork final : public Work {
public:
    ChainWork(WorkPtr first, std::function<WorkPtr()> next, std::function<void()> finish)
        : m_first(std::move(first))
        , m_next(std::move(next))
        , m_finish(std::move(finish))
    {
    }
    void wait() override
    {
        if (m_done)
            return;
        m_first->wait();
        WorkPtr second = m_next();
        second->wait();
        m_finish();
        m_done = true;
        m_next = nullptr;
        m_finish = nullptr;
    }

private:
    WorkPtr m_first;
    std::function<WorkPtr()> m_next;
    std::function<void()> m_finish;
    bool m_done = false;
};

} // namespace

struct GlooCommunicator::Shared {
    c10::intrusive_ptr<c10d::Store> store;
    std::shared_ptr<::gloo::transport::Device> device;
    std::chrono::milliseconds timeout {};
};

GlooCommunicator::GlooCommunicator(int rank, int worldSize, std::shared_ptr<Shared> shared,
    c10::intrusive_ptr<ProcessGroupGloo> group)
    : BackendCommunicator(rank, worldSize, "gloo", c10::DeviceType::CPU)
    , m_shared(std::move(shared))
    , m_group(std::move(group))
{
}

GlooCommunicator::~GlooCommunicator() = default;

std::shared_ptr<GlooCommunicator> GlooCommunicator::create(const RankEnv& env)
{
    auto shared = std::make_shared<Shared>();
    shared->timeout = toMs(env.collectiveTimeoutSec);
    if (env.worldSize == 1)
        return std::shared_ptr<GlooCommunicator>(new GlooCommunicator(0, 1, shared, {}));

    shared->store = connectStore(env);

    // Gloo's pairs bind to this address: loopback for local runs, else the named interface or
    // this host's address.
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        shared->device = ProcessGroupGloo::createDeviceForInterface(ifname);
    else if (env.masterAddr == "127.0.0.1" || env.masterAddr == "localhost"
        || env.masterAddr == "::1")
        shared->device = ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    else
        shared->device = ProcessGroupGloo::createDefaultDevice();

    auto options = ProcessGroupGloo::Options::create(shared->timeout);
    options->devices.push_back(shared->device);
    auto store = c10::make_intrusive<c10d::PrefixStore>("world/", shared->store);
    c10::intrusive_ptr<ProcessGroupGloo> group;
    try {
        group = c10::make_intrusive<ProcessGroupGloo>(store, env.rank, env.worldSize, options);
    } catch (const std::exception& e) {
        std::string what = e.what();
        throw std::runtime_error("rank " + std::to_string(env.rank)
            + ": connecting the gloo process group failed: " + what.substr(0, what.find('\n')));
    }
    auto comm = std::shared_ptr<GlooCommunicator>(
        new GlooCommunicator(env.rank, env.worldSize, shared, group));
    comm->m_prefix = "world/";
    return comm;
}

std::shared_ptr<Communicator> GlooCommunicator::makeGroup(
    const std::vector<int>& ranks, int myIndex)
{
    const std::string prefix = m_prefix + "g" + std::to_string(m_groupCounter++) + "/";
    if (myIndex < 0)
        return nullptr;
    const int size = static_cast<int>(ranks.size());
    if (size == 1 || !m_group) {
        auto comm = std::shared_ptr<GlooCommunicator>(new GlooCommunicator(0, 1, m_shared, {}));
        comm->m_prefix = prefix;
        return comm;
    }
    auto options = ProcessGroupGloo::Options::create(m_shared->timeout);
    options->devices.push_back(m_shared->device);
    auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, m_shared->store);
    auto group = c10::make_intrusive<ProcessGroupGloo>(store, myIndex, size, options);
    auto comm
        = std::shared_ptr<GlooCommunicator>(new GlooCommunicator(myIndex, size, m_shared, group));
    comm->m_prefix = prefix;
    return comm;
}

WorkPtr GlooCommunicator::issue(
    Collective kind, const at::Tensor& output, const at::Tensor& input, int root)
{
    // One rank or nothing to send: the result is the input (in place for all-reduce/broadcast).
    if (worldSize() == 1 || input.numel() == 0) {
        if (output.data_ptr() != input.data_ptr())
            output.variable_data().view({-1}).copy_(input.view({-1}));
        return completedWork();
    }
    countTraffic(kind, output, input, root);
    switch (kind) {
    case Collective::AllGather:
        return issueAllGather(output, input);
    case Collective::ReduceScatter:
        return issueReduceScatter(output, input);
    case Collective::AllReduce:
        return issueAllReduce(output);
    case Collective::Broadcast: {
        std::vector<at::Tensor> tensors {wire(output)};
        c10d::BroadcastOptions opts;
        opts.rootRank = root;
        return std::make_shared<GlooWork>(m_group->broadcast(tensors, opts), nullptr);
    }
    case Collective::Barrier:
        break;
    }
    throw std::logic_error("gloo: issue() takes no barrier");
}

WorkPtr GlooCommunicator::issueAllGather(const at::Tensor& output, const at::Tensor& input)
{
    // Point to point over the group's full mesh: this rank's slot goes to every other rank and
    // theirs land straight in their slots of the output. c10d's Gloo all-gather gathers into a
    // buffer of its own and copies it into the output, a copy of the whole gathered tensor per
    // call (twice per block and step under zero3); W-1 sends and receives move the same
    // (W-1)/W of the bytes as its ring, with no copy. Every member issues the same all-gathers
    // in the same order, so the tags agree; they do not meet the collectives' slots (those
    // carry a prefix in their high bits).
    const int64_t w = worldSize();
    at::Tensor out = wire(output);
    at::Tensor in = wire(input);
    const int64_t slot = out.numel() / w;
    const int tag = m_p2pTag;
    m_p2pTag = (m_p2pTag + 1) % (1 << 30);
    at::Tensor mine = out.narrow(0, rank() * slot, slot);
    if (mine.data_ptr() != in.data_ptr())
        mine.copy_(in);
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int r = 0; r < w; ++r) {
        if (r == rank())
            continue;
        std::vector<at::Tensor> send {mine};
        works.push_back(m_group->send(send, r, tag));
        std::vector<at::Tensor> recv {out.narrow(0, r * slot, slot)};
        works.push_back(m_group->recv(recv, r, tag));
    }
    return std::make_shared<GlooWorks>(std::move(works));
}

WorkPtr GlooCommunicator::issueReduceScatter(const at::Tensor& output, const at::Tensor& input)
{
    const int64_t w = worldSize();
    // All-to-all sends slot j of our input to rank j: rank r receives every rank's slot r, in
    // rank order, and sums them locally. Traffic (W-1)/W of the input, like a ring.
    const int64_t c = output.numel();
    at::Tensor received = at::empty({w * c}, input.options());
    at::Tensor sendBuf = wire(input);
    at::Tensor recvBuf = wire(received);
    std::vector<int64_t> splits; // empty: equal splits
    auto work = m_group->alltoall_base(recvBuf, sendBuf, splits, splits);
    at::Tensor out = output.variable_data().view({-1});
    return std::make_shared<GlooWork>(work, [received, out, w, c]() mutable {
        // Summed in rank order, so every rank's result is bit-identical to a 1-rank reference
        // that adds the W slots in the same order; straight into the output (W >= 2 here), with
        // no accumulator to allocate and copy.
        at::Tensor slots = received.view({w, c});
        if (out.scalar_type() == received.scalar_type()) {
            at::add_out(out, slots[0], slots[1]);
            for (int64_t r = 2; r < w; ++r)
                out.add_(slots[r]);
            return;
        }
        // A narrow input summed into a float32 output (sumsIntoWiderOutput): each slot widens
        // exactly and the sums are float32's. ATen adds a narrow tensor to a float32 one through
        // a widened copy, so this goes in chunks that stay in cache and keep that copy small.
        constexpr int64_t kChunk = int64_t(1) << 16;
        for (int64_t from = 0; from < c; from += kChunk) {
            const int64_t len = std::min(kChunk, c - from);
            at::Tensor o = out.narrow(0, from, len);
            o.copy_(slots[0].narrow(0, from, len));
            for (int64_t r = 1; r < w; ++r)
                o.add_(slots[r].narrow(0, from, len));
        }
    });
}

WorkPtr GlooCommunicator::issueAllReduce(const at::Tensor& tensor)
{
    if (!glooLacksType(tensor.scalar_type())) {
        std::vector<at::Tensor> tensors {tensor.variable_data().view({-1})};
        c10d::AllreduceOptions opts;
        opts.reduceOp = c10d::ReduceOp::SUM;
        return std::make_shared<GlooWork>(m_group->allreduce(tensors, opts), nullptr);
    }
    // bf16: reduce-scatter (all-to-all + local sum) then all-gather of the slots, on a buffer
    // padded to W equal slots: the same 2(W-1)/W traffic as a ring all-reduce, booked as one
    // all-reduce.
    const int64_t w = worldSize();
    const int64_t n = tensor.numel();
    const int64_t c = (n + w - 1) / w;
    at::Tensor padded = at::zeros({w * c}, tensor.options());
    at::Tensor flat = tensor.variable_data().view({-1});
    padded.narrow(0, 0, n).copy_(flat);
    at::Tensor mine = padded.narrow(0, rank() * c, c);
    WorkPtr first = issueReduceScatter(mine, padded);
    return std::make_shared<ChainWork>(
        first, [this, padded, mine]() { return issueAllGather(padded, mine); },
        [padded, flat, n]() mutable { flat.copy_(padded.narrow(0, 0, n)); });
}

void GlooCommunicator::barrier()
{
    count(Collective::Barrier, 0);
    if (worldSize() == 1)
        return;
    m_group->barrier()->wait();
}

} // namespace shard::dist
