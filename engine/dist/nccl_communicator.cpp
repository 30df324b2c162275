// NCCL backend. Every NCCL and CUDA call goes through a check macro that names file and line.
// libnccl is loaded at run time (dlopen), so shard-worker starts on machines without NCCL.
#include "dist/nccl_communicator.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <torch/csrc/distributed/c10d/Store.hpp>
#ifdef SHARD_TORCH_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "dist/rank_env.h"
#include "dist/store.h"

#define SHARD_CUDA_CHECK(call)                                                                     \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            throw std::runtime_error(std::string("CUDA error at " __FILE__ ":")                    \
                + std::to_string(__LINE__) + " (" #call "): " + cudaGetErrorString(err_));         \
    } while (0)

#define SHARD_NCCL_CHECK(call)                                                                     \
    do {                                                                                           \
        ncclResult_t res_ = (call);                                                                \
        if (res_ != ncclSuccess)                                                                   \
            throw std::runtime_error(std::string("NCCL error at " __FILE__ ":")                    \
                + std::to_string(__LINE__) + " (" #call "): " + nccl().getErrorString(res_));      \
    } while (0)

namespace shard::dist {

namespace {

// Every NCCL entry point the backend uses, resolved from libnccl.so.2 on first use. The types
// come from nccl.h, so a signature change there fails the build rather than the run.
struct NcclApi {
    decltype(&::ncclGetErrorString) getErrorString = nullptr;
    decltype(&::ncclGetUniqueId) getUniqueId = nullptr;
    decltype(&::ncclCommInitRank) commInitRank = nullptr;
    decltype(&::ncclCommDestroy) commDestroy = nullptr;
    decltype(&::ncclCommSplit) commSplit = nullptr; // NCCL >= 2.18; checked where used
    decltype(&::ncclAllGather) allGather = nullptr;
    decltype(&::ncclReduceScatter) reduceScatter = nullptr;
    decltype(&::ncclAllReduce) allReduce = nullptr;
    decltype(&::ncclBroadcast) broadcast = nullptr;
};

template<typename Fn> void resolve(void* lib, const char* name, Fn& fn, bool required)
{
    fn = reinterpret_cast<Fn>(::dlsym(lib, name));
    if (!fn && required)
        throw std::runtime_error(std::string("NCCL backend: the loaded libnccl lacks ") + name
            + "; install NCCL >= 2.12 or use the gloo backend");
}

NcclApi loadNccl()
{
    void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const std::string first = ::dlerror();
        lib = ::dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            throw std::runtime_error("NCCL backend: could not load libnccl.so.2 (" + first
                + "); install NCCL or use the gloo backend");
    }
    NcclApi api;
    resolve(lib, "ncclGetErrorString", api.getErrorString, true);
    resolve(lib, "ncclGetUniqueId", api.getUniqueId, true);
    resolve(lib, "ncclCommInitRank", api.commInitRank, true);
    resolve(lib, "ncclCommDestroy", api.commDestroy, true);
    resolve(lib, "ncclCommSplit", api.commSplit, false);
    resolve(lib, "ncclAllGather", api.allGather, true);
    resolve(lib, "ncclReduceScatter", api.reduceScatter, true);
    resolve(lib, "ncclAllReduce", api.allReduce, true);
    resolve(lib, "ncclBroadcast", api.broadcast, true);
    return api; // the library stays loaded for the life of the process
}

// Loads once; a failed load is retried (and reported) on the next call.
const NcclApi& nccl()
{
    static std::mutex mutex;
    static std::unique_ptr<NcclApi> api;
    std::lock_guard<std::mutex> lock(mutex);
    if (!api)
        api = std::make_unique<NcclApi>(loadNccl());
    return *api;
}

} // namespace

// FSDP2's streams: all-gathers and broadcasts on one, reduce-scatters and all-reduces on
// another, both apart from the compute stream. NCCL runs the operations of one communicator in
// the order they were issued (every rank issues them in the same order), so the two streams
// overlap the compute, not each other, as in PyTorch, where FSDP2's all-gather and
// reduce-scatter streams share one process group.
struct NcclCommunicator::State {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;       // all-gather, broadcast, barrier
    cudaStream_t reduceStream = nullptr; // reduce-scatter, all-reduce
    int device = 0;
    void createStreams()
    {
        SHARD_CUDA_CHECK(cudaSetDevice(device));
        SHARD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        SHARD_CUDA_CHECK(cudaStreamCreateWithFlags(&reduceStream, cudaStreamNonBlocking));
    }
    ~State()
    {
        if (comm)
            nccl().commDestroy(comm);
        for (cudaStream_t s : {stream, reduceStream})
            if (s)
                cudaStreamDestroy(s);
    }
};

namespace {

// The stream LibTorch computes on: the current stream of a CUDA LibTorch, else the legacy
// default stream (LibTorch's default when nobody sets another).
cudaStream_t computeStream()
{
#ifdef SHARD_TORCH_HAS_CUDA
    return c10::cuda::getCurrentCUDAStream().stream();
#else
    return nullptr;
#endif
}

ncclDataType_t ncclType(const at::Tensor& t, const char* op)
{
    switch (t.scalar_type()) {
    case at::kFloat:
        return ncclFloat32;
    case at::kDouble:
        return ncclFloat64;
    case at::kHalf:
        return ncclFloat16;
    case at::kBFloat16:
        return ncclBfloat16;
    case at::kInt:
        return ncclInt32;
    case at::kLong:
        return ncclInt64;
    case at::kByte:
        return ncclUint8;
    default:
        throw std::invalid_argument(std::string(op) + ": dtype " + c10::toString(t.scalar_type())
            + " is not supported by the NCCL backend");
    }
}

// The Communicator method of each collective (indexed by Collective), for messages.
const char* const kCallNames[kCollectiveCount]
    = {"allGather", "reduceScatter", "allReduce", "broadcast", "barrier"};

// Issued on the communication stream; wait() orders the compute stream after it.
class NcclWork final : public Work {
public:
    NcclWork(cudaEvent_t done, std::shared_ptr<NcclCommunicator::State> state)
        : m_done(done)
        , m_state(std::move(state))
    {
    }
    ~NcclWork() override { cudaEventDestroy(m_done); }
    void wait() override { SHARD_CUDA_CHECK(cudaStreamWaitEvent(computeStream(), m_done, 0)); }

private:
    cudaEvent_t m_done;
    std::shared_ptr<NcclCommunicator::State> m_state; // keeps the stream alive
};

// Issues on `stream` (one of the state's) after the compute stream's work so far: the
// collective reads what that work wrote.
template<typename Issue>
WorkPtr launch(
    const std::shared_ptr<NcclCommunicator::State>& state, cudaStream_t stream, Issue issue)
{
    SHARD_CUDA_CHECK(cudaSetDevice(state->device));
    cudaEvent_t ready = nullptr;
    SHARD_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    SHARD_CUDA_CHECK(cudaEventRecord(ready, computeStream()));
    SHARD_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
    cudaEventDestroy(ready);
    issue(stream);
    cudaEvent_t done = nullptr;
    SHARD_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    SHARD_CUDA_CHECK(cudaEventRecord(done, stream));
    return std::make_shared<NcclWork>(done, state);
}

} // namespace

NcclCommunicator::NcclCommunicator(int rank, int worldSize, std::shared_ptr<State> state)
    : BackendCommunicator(rank, worldSize, "nccl", c10::DeviceType::CUDA)
    , m_state(std::move(state))
{
}

NcclCommunicator::~NcclCommunicator() = default;

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(const RankEnv& env)
{
    nccl(); // a missing libnccl is reported before any CUDA error
    int devices = 0;
    SHARD_CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (env.localRank >= devices)
        throw std::runtime_error("nccl: LOCAL_RANK " + std::to_string(env.localRank)
            + " has no GPU (this node has " + std::to_string(devices)
            + "); use --nproc-per-node <= the GPU count");
    auto state = std::make_shared<State>();
    state->device = env.localRank;
    state->createStreams();

    ncclUniqueId id;
    if (env.worldSize > 1) {
        auto store = connectStore(env);
        const std::string key = "nccl/unique_id";
        if (env.rank == 0) {
            SHARD_NCCL_CHECK(nccl().getUniqueId(&id));
            std::vector<uint8_t> bytes(sizeof id);
            std::memcpy(bytes.data(), &id, sizeof id);
            store->set(key, bytes);
        }
        std::vector<uint8_t> bytes = store->get(key);
        if (bytes.size() != sizeof id)
            throw std::runtime_error("nccl: the unique id in the store has the wrong size");
        std::memcpy(&id, bytes.data(), sizeof id);
    } else {
        SHARD_NCCL_CHECK(nccl().getUniqueId(&id));
    }
    SHARD_NCCL_CHECK(nccl().commInitRank(&state->comm, env.worldSize, id, env.rank));
    return std::shared_ptr<NcclCommunicator>(new NcclCommunicator(env.rank, env.worldSize, state));
}

std::shared_ptr<Communicator> NcclCommunicator::makeGroup(
    const std::vector<int>& ranks, int myIndex)
{
    if (!nccl().commSplit)
        throw std::runtime_error("newGroup: the loaded libnccl lacks ncclCommSplit; install "
                                 "NCCL >= 2.18 or use the gloo backend");
    ncclComm_t sub = nullptr;
    SHARD_NCCL_CHECK(nccl().commSplit(m_state->comm, myIndex < 0 ? NCCL_SPLIT_NOCOLOR : 0,
        myIndex < 0 ? 0 : myIndex, &sub, nullptr));
    if (myIndex < 0)
        return nullptr;
    auto state = std::make_shared<State>();
    state->device = m_state->device;
    state->comm = sub;
    state->createStreams();
    return std::shared_ptr<NcclCommunicator>(
        new NcclCommunicator(myIndex, static_cast<int>(ranks.size()), state));
}

WorkPtr NcclCommunicator::issue(
    Collective kind, const at::Tensor& output, const at::Tensor& input, int root)
{
    countTraffic(kind, output, input, root);
    const auto type = ncclType(input, kCallNames[static_cast<int>(kind)]);
    ncclComm_t comm = m_state->comm;
    const bool reduces = kind == Collective::ReduceScatter || kind == Collective::AllReduce;
    return launch(m_state, reduces ? m_state->reduceStream : m_state->stream, [&](cudaStream_t s) {
        void* in = input.data_ptr();
        void* out = output.data_ptr();
        switch (kind) {
        case Collective::AllGather:
            SHARD_NCCL_CHECK(
                nccl().allGather(in, out, static_cast<size_t>(input.numel()), type, comm, s));
            break;
        case Collective::ReduceScatter:
            SHARD_NCCL_CHECK(nccl().reduceScatter(
                in, out, static_cast<size_t>(output.numel()), type, ncclSum, comm, s));
            break;
        case Collective::AllReduce:
            SHARD_NCCL_CHECK(nccl().allReduce(
                in, out, static_cast<size_t>(input.numel()), type, ncclSum, comm, s));
            break;
        case Collective::Broadcast:
            SHARD_NCCL_CHECK(
                nccl().broadcast(in, out, static_cast<size_t>(input.numel()), type, root, comm, s));
            break;
        case Collective::Barrier:
            throw std::logic_error("nccl: issue() takes no barrier");
        }
    });
}

void NcclCommunicator::barrier()
{
    count(Collective::Barrier, 0);
    SHARD_CUDA_CHECK(cudaSetDevice(m_state->device));
    void* one = nullptr;
    SHARD_CUDA_CHECK(cudaMalloc(&one, sizeof(float)));
    SHARD_CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(float), m_state->stream));
    SHARD_NCCL_CHECK(
        nccl().allReduce(one, one, 1, ncclFloat32, ncclSum, m_state->comm, m_state->stream));
    SHARD_CUDA_CHECK(cudaStreamSynchronize(m_state->stream));
    SHARD_CUDA_CHECK(cudaFree(one));
}

} // namespace shard::dist
