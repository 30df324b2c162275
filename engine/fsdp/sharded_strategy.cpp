// The sharded engine: placement, unshard/reshard around the unit hooks, gradient reduction, and
// the bookkeeping (memory by category, bytes sent). See sharded_strategy.h for the layout.
#include "fsdp/sharded_strategy.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DeviceGuard.h>

#include "core/memory/host_transfer.h"
#include "core/memory/storage.h"
#include "core/model/fused_ops.h"
#include "core/model/nf4.h"
#include "core/model/tensor_parallel.h"
#include "core/train/host_sync.h"
#include "dist/rank_env.h"
#include "plan/stage_balance.h"
#include "protocol/parallel_dims.h"

namespace shard::fsdp {

struct ShardedStrategy::ParamSlot {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<int64_t> chunkShape; // shape with dim 0 = chunkRows
    int64_t d0 = 0;
    int64_t rowNumel = 1;
    int64_t chunkRows = 0;
    int64_t shardNumel = 0;     // chunkRows * rowNumel
    int64_t offset = 0;         // in the unit's shard buffers
    int64_t gatheredOffset = 0; // in the unit's gathered buffer (Ws * shardNumel each)
    bool decay = true;
    engine::nf4::NestedScales nested; // a double-quantised absmax slot: its scales, whole here
    // Tensor parallel: how the parameter is split over the TP group (shape is this rank's part
    // of wholeShape).
    engine::tp::Split split = engine::tp::Split::Whole;
    std::vector<int64_t> wholeShape;
};

struct ShardedStrategy::UnitState {
    bool frozen = false; // LoRA base (any frozen group): no gradient, never reduced
    int group = 0;       // ShardedStrategy::Group
    std::vector<ParamSlot> params;
    int64_t shardNumel = 0;
    int64_t gatheredNumel = 0;
    at::Tensor master;    // fp32 (frozen: compute dtype) [shardNumel], padding zero
    at::Tensor shardGrad; // fp32 [shardNumel] or undefined
    // Offload: master and shardGrad (and AdamW's state, made like master) live in host memory,
    // pinned when the device is a GPU.
    bool offloaded = false;
    // Offload under zero3 / hybrid: the compute-dtype shard the gathers copy in from, refreshed
    // from the masters after each optimizer step (on the device, or in host memory with
    // params+optimizer). Undefined: the gathers copy in from master.
    at::Tensor source;
    at::Tensor gathered; // compute dtype [gatheredNumel]; its storage is freed when resharded
    // gathered is master: one shard rank with master dtype = compute dtype, or a frozen group
    // that stays gathered (ddp, zero1, zero2)
    bool aliased = false;
    bool valid = false; // gathered holds the current parameters
    // One rank, fp32 gradients: the leaves' gradients are the shard gradient (writeOwnGradients)
    bool gradsInLeaves = false;
    std::vector<at::Tensor> leaves; // unsharded parameters: views of gathered, requires grad
    std::vector<dist::WorkPtr> gatherWork;
    std::vector<dist::WorkPtr> reduceWork;
    at::Tensor reduceIn;  // wire dtype (reduceWireDtype), Ws * shard per parameter
    at::Tensor reduceOut; // reduce dtype [shardNumel]

    // Slot i's reduced gradient, this rank's rows as the optimizer updates them (the leaf's
    // gradient on one rank, a view of the shard gradient otherwise), or undefined before any.
    at::Tensor grad(size_t i) const
    {
        if (gradsInLeaves)
            return leaves[i].grad();
        if (shardGrad.defined())
            return shardGrad.narrow(0, params[i].offset, params[i].shardNumel);
        return {};
    }
};

// Sends one channel's tensors in the order they were pushed, on its own thread, so that a stage
// never waits for its neighbour to receive (the schedules' deadlock freedom assumes sends that
// return at once, docs/ARCHITECTURE.md, "Pipeline parallel").
class ShardedStrategy::PipeSender {
public:
    PipeSender(std::shared_ptr<dist::Communicator> channel, c10::Device device)
        : m_channel(std::move(channel))
        , m_device(device)
        , m_thread([this] { loop(); })
    {
    }
    ~PipeSender()
    {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_stop = true;
        }
        m_changed.notify_all();
        m_thread.join();
    }
    void push(const at::Tensor& t)
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        rethrow();
        m_queue.push_back(t);
        m_changed.notify_all();
    }
    void flush()
    {
        std::unique_lock<std::mutex> lock(m_mutex);
        m_changed.wait(lock, [&] { return m_queue.empty() || m_error; });
        rethrow();
    }

private:
    void rethrow()
    {
        if (m_error)
            std::rethrow_exception(m_error);
    }
    void loop()
    {
        std::optional<c10::DeviceGuard> onDevice;
        if (!m_device.is_cpu())
            onDevice.emplace(m_device); // the GPU the collectives run on
        for (;;) {
            at::Tensor t;
            {
                std::unique_lock<std::mutex> lock(m_mutex);
                m_changed.wait(lock, [&] { return m_stop || (!m_queue.empty() && !m_error); });
                if (m_queue.empty() || m_error)
                    return;
                t = m_queue.front();
            }
            std::exception_ptr error;
            try {
                m_channel->broadcast(t, m_channel->rank())->wait();
            } catch (...) {
                error = std::current_exception();
            }
            {
                std::lock_guard<std::mutex> lock(m_mutex);
                m_queue.pop_front();
                m_error = error;
            }
            m_changed.notify_all();
        }
    }

    std::shared_ptr<dist::Communicator> m_channel;
    c10::Device m_device;
    std::mutex m_mutex;
    std::condition_variable m_changed;
    std::deque<at::Tensor> m_queue; // the front is being sent
    std::exception_ptr m_error;
    bool m_stop = false;
    std::thread m_thread; // last: started once the rest is built
};

namespace {

int64_t bytesOf(const at::Tensor& t)
{
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// Host memory for offloaded state: pinned when it travels to and from a GPU, so the copies are
// DMA transfers; plain memory on CPU ranks.
at::Tensor hostZeros(int64_t n, at::ScalarType dtype, const c10::Device& device)
{
    return at::zeros(
        {n}, at::TensorOptions().dtype(dtype).device(at::kCPU).pinned_memory(device.is_cuda()));
}

} // namespace

ShardedStrategy::ShardedStrategy(engine::StrategyOptions options)
    : m_options(std::move(options))
{
    const std::string& n = m_options.name;
    const protocol::Strategy strategy = protocol::parseStrategyName(n);
    m_paramsSharded = protocol::ParallelDims {strategy}.shardsParameters();
    m_reshardAfterForward = m_paramsSharded;
    m_reduceAtEnd = strategy == protocol::Strategy::Zero1;
    // The trainer has refused offload on CPU ranks (outside tests) and with LoRA.
    m_offload = m_options.spec.offload != "none";
    m_offloadParams = m_options.spec.offload == "params+optimizer";
    const dist::RankEnv& env = m_options.rank;
    // NCCL for CUDA tensors, Gloo for CPU ones; SHARD_DIST_BACKEND overrides (a backend that
    // does not take this device's tensors says so at the first collective).
    const char* backendEnv = std::getenv("SHARD_DIST_BACKEND");
    const std::string backend = backendEnv && *backendEnv ? backendEnv
        : m_options.device.is_cuda()                      ? "nccl"
                                                          : "gloo";
    if (auto* trained = dynamic_cast<ShardedStrategy*>(m_options.shareGroupsOf)) {
        // A frozen copy of the trained model: the same placement over the same groups.
        if (trained->m_stages > 1 || trained->m_tp)
            throw std::logic_error("a frozen copy of the model under tensor or pipeline parallel");
        m_world = trained->m_world;
        m_shard = trained->m_shard;
        m_replicate = trained->m_replicate;
        m_offload = m_offloadParams = false; // a frozen copy stays on the device
        return;
    }
    m_world = dist::createCommunicator(backend, env);
    auto solo = [&] { // this rank alone, on its own device
        dist::RankEnv one = env;
        one.rank = 0;
        one.worldSize = 1;
        return dist::createCommunicator(backend, one);
    };
    const protocol::DeviceMesh& mesh = m_options.mesh;
    if (mesh.tp > 1 || mesh.pp > 1) {
        // Tensor / pipeline parallel: the strategy's groups are the mesh's data-parallel ones
        // (the ranks with this rank's TP coordinate on its stage); the TP group splits the
        // blocks' weights; the pipeline groups carry activations between stages.
        m_virtualStages = std::max(1, m_options.spec.virtualStages);
        dist::MeshGroups groups = dist::makeMeshGroups(*m_world, mesh, m_virtualStages > 1);
        m_tp = groups.tp;
        m_pp = groups.pp;
        m_actOut = groups.actOut;
        m_actIn = groups.actIn;
        m_gradOut = groups.gradOut;
        m_gradIn = groups.gradIn;
        m_ppEnds = groups.ppEnds;
        m_stages = static_cast<int>(mesh.pp);
        m_stage = static_cast<int>(mesh.coord(protocol::MeshDim::Pp, m_world->rank()));
        // A stage runs its blocks once per micro-batch in flight, forward and backward
        // interleaved (1F1B): zero3 / hybrid keep a block's gathered parameters from its first
        // forward to the optimizer step rather than gather them for every micro-batch twice
        // (torchtitan's reshard_after_forward=False under pipeline parallel).
        if (m_stages > 1) {
            m_reshardAfterForward = false;
            if (m_actOut)
                m_sendActivations = std::make_unique<PipeSender>(m_actOut, m_options.device);
            if (m_gradOut)
                m_sendGradients = std::make_unique<PipeSender>(m_gradOut, m_options.device);
        }
        m_shard = groups.dpShard ? groups.dpShard : solo();
        m_replicate = groups.dpReplicate;
        if (strategy != protocol::Strategy::Ddp && strategy != protocol::Strategy::Hybrid
            && m_replicate)
            throw std::runtime_error("the mesh " + mesh.describe() + " replicates under " + n);
    } else if (n == "ddp") {
        m_shard = solo();
        m_replicate = m_world->worldSize() > 1 ? m_world : nullptr;
    } else if (n == "hybrid") {
        const int g = m_options.shardGroup;
        if (g < 1)
            throw std::runtime_error("hybrid needs --shard-group G (ranks per shard group)");
        auto groups = dist::makeHybridGroups(*m_world, g);
        m_shard = groups.shard;
        m_replicate = groups.replicate->worldSize() > 1 ? groups.replicate : nullptr;
    } else {
        m_shard = m_world;
    }
}

ShardedStrategy::~ShardedStrategy() = default;

int ShardedStrategy::rank() const
{
    return m_world->rank();
}

int ShardedStrategy::worldSize() const
{
    return m_world->worldSize();
}

int ShardedStrategy::shardGroupSize() const
{
    return m_shard->worldSize();
}

void ShardedStrategy::setup(engine::LlamaModel& model, const engine::ParamSource& source)
{
    const int64_t ws = m_shard->worldSize();
    const int64_t me = m_shard->rank();
    const at::ScalarType compute = m_options.computeDtype;
    const at::TensorOptions on = at::TensorOptions().device(m_options.device);
    m_numUnits = model.numUnits();
    m_chunkLayers.clear();
    m_layerStage.clear();
    m_cut.clear();
    if (m_stages > 1) {
        // Stages balanced by compute (a heavy head takes layers off the last), the cut the
        // planner describes.
        m_cut = plan::balancedStages(model.spec(), int64_t(m_stages) * m_virtualStages);
        const auto& cut = m_cut;
        m_layerStage.assign(static_cast<size_t>(m_numUnits - 1), 0);
        for (size_t v = 0; v < cut.size(); ++v)
            for (int64_t l = cut[v].first; l < cut[v].second; ++l)
                m_layerStage[static_cast<size_t>(l)] = static_cast<int>(v) % m_stages;
        for (int c = 0; c < m_virtualStages; ++c)
            m_chunkLayers.push_back(cut.at(static_cast<size_t>(c * m_stages + m_stage)));
        const engine::RootLayout& root = model.rootLayout();
        m_tiedName = root.lmHead < 0 ? model.unit(0).params.at(root.embed).info.name : "";
    } else {
        m_chunkLayers.push_back({0, m_numUnits - 1});
    }
    m_stageOf.clear();
    m_unitInfo.assign(static_cast<size_t>(m_numUnits), {});
    for (int u = 0; u < m_numUnits; ++u)
        for (size_t i = 0; i < model.unit(u).params.size(); ++i) {
            const int stage = storingStage(model, u, static_cast<int>(i));
            m_stageOf[model.unit(u).params[i].info.name] = stage;
            m_unitInfo[static_cast<size_t>(u)].push_back({model.unit(u).params[i].info, stage});
        }
    m_splitNames.clear();
    m_units.clear();
    m_units.resize(static_cast<size_t>(kGroups * m_numUnits));
    m_order.assign(static_cast<size_t>(m_numUnits), {});
    m_dequant.assign(static_cast<size_t>(m_numUnits), {});
    std::map<std::string, std::pair<int, int>> where;
    for (int st = 0; st < kGroups * m_numUnits; ++st) {
        UnitState& s = m_units[static_cast<size_t>(st)];
        s.group = st / m_numUnits;
        s.frozen = s.group != kTrainable;
        const int u = st % m_numUnits;
        const auto& params = model.unit(u).params;
        m_order[static_cast<size_t>(u)].resize(params.size());
        for (size_t i = 0; i < params.size(); ++i) {
            const engine::Param& prm = params[i];
            const int group = !prm.frozen ? kTrainable
                : prm.quantized           ? (s.group == kAbsmax ? kAbsmax : kPacked)
                                          : kFrozen;
            if (!holds(model, u, static_cast<int>(i))) {
                m_order[static_cast<size_t>(u)][i] = {-1, -1}; // another stage's
                continue;
            }
            if (group != s.group)
                continue;
            const auto& info = prm.info;
            if (s.group != kAbsmax) // the packed slot stands for a quantized parameter
                m_order[static_cast<size_t>(u)][i] = {st, static_cast<int>(s.params.size())};
            ParamSlot p;
            p.name = s.group == kAbsmax ? info.name + "#absmax" : info.name;
            p.wholeShape = info.shape;
            if (m_tp)
                p.split = engine::tp::splitOf(model, u, static_cast<int>(i), m_tp->worldSize(),
                    m_options.spec.sequenceParallel);
            p.shape = engine::tp::partShape(info.shape, p.split, tensorParallelSize());
            if (p.split == engine::tp::Split::Rows || p.split == engine::tp::Split::Columns)
                m_splitNames.insert(p.name);
            // QLoRA: the NF4 bytes and scales of this rank's part, in the row form
            // (plan::tensorParallelRefusal asks for whole blocks in a row-parallel part).
            if (s.group == kPacked)
                p.shape = {p.shape.at(0), p.shape.at(1) / 2};
            else if (s.group == kAbsmax)
                p.shape = {p.shape.at(0), p.shape.at(1) / engine::nf4::kBlockSize};
            p.d0 = p.shape.empty() ? 1 : p.shape[0];
            for (size_t d = 1; d < p.shape.size(); ++d)
                p.rowNumel *= p.shape[d];
            p.chunkRows = (p.d0 + ws - 1) / ws;
            p.shardNumel = p.chunkRows * p.rowNumel;
            p.chunkShape = p.shape.empty() ? std::vector<int64_t> {1} : p.shape;
            p.chunkShape[0] = p.chunkRows;
            p.offset = s.shardNumel;
            p.gatheredOffset = s.gatheredNumel;
            p.decay = !info.isNormOrBias;
            s.shardNumel += p.shardNumel;
            s.gatheredNumel += ws * p.shardNumel;
            where[p.name] = {st, static_cast<int>(s.params.size())};
            s.params.push_back(p);
        }
        // The absmax group holds fp32 scales, or their 8-bit codes under double quantisation.
        const at::ScalarType masterDtype = s.group == kTrainable    ? at::kFloat
            : s.group == kFrozen                                    ? compute
            : s.group == kPacked || m_options.spec.qloraDoubleQuant ? at::kByte
                                                                    : at::kFloat;
        const at::ScalarType gatheredDtype = s.group == kTrainable ? compute : masterDtype;
        s.offloaded = m_offload && s.group == kTrainable;
        s.master = s.offloaded ? hostZeros(s.shardNumel, masterDtype, m_options.device)
                               : at::zeros({s.shardNumel}, on.dtype(masterDtype));
        s.aliased = ws == 1 && gatheredDtype == masterDtype && !s.offloaded;
        // Offloaded masters under zero3 / hybrid: the device keeps a compute-dtype shard to
        // gather from (optimizer), or nothing (params+optimizer: a host one, or the masters
        // themselves when they are in the compute dtype). ddp / zero1 / zero2 keep the gathered
        // parameters and refresh them from the masters after the step.
        if (s.offloaded && m_paramsSharded) {
            if (!m_offloadParams)
                s.source = at::zeros({s.shardNumel}, on.dtype(compute));
            else if (compute != masterDtype)
                s.source = hostZeros(s.shardNumel, compute, m_options.device);
        }
        s.gathered = s.aliased ? s.master : at::zeros({s.gatheredNumel}, on.dtype(gatheredDtype));
        for (const auto& p : s.params) {
            at::Tensor leaf = s.gathered.narrow(0, p.gatheredOffset, p.d0 * p.rowNumel)
                                  .view(p.shape)
                                  .variable_data();
            leaf.requires_grad_(!s.frozen);
            s.leaves.push_back(leaf);
        }
    }

    // Rank 0 reads one full tensor at a time and broadcasts it (fp32, on the device: one full
    // tensor on a GPU at a time); every rank keeps its rows (a frozen weight converted to the
    // compute dtype).
    at::NoGradGuard noGrad;
    for (engine::Param* param : model.params()) {
        at::Tensor full;
        if (m_world->rank() == 0) {
            full = source(*param).to(at::kFloat).contiguous();
            const auto& shape = param->info.shape;
            if (full.sizes().vec() != shape && !(shape.empty() && full.numel() == 1))
                throw std::runtime_error("parameter " + param->info.name + " has the wrong shape");
            // A copy either way: never write into a memory-mapped source.
            full = m_options.device.is_cpu() ? full.clone() : full.to(m_options.device);
        } else {
            full = at::empty(param->info.shape, on.dtype(at::kFloat));
        }
        m_world->broadcast(full, 0)->wait();
        const auto found = where.find(param->info.name);
        if (found == where.end()) // another pipeline stage's
            continue;
        auto [u, i] = found->second;
        UnitState& s = m_units[static_cast<size_t>(u)];
        const ParamSlot& p = s.params[static_cast<size_t>(i)];
        // This rank's part of a split weight (QLoRA's is quantized whole first, below).
        if (m_tp && !param->quantized)
            full = engine::tp::partOf(full, p.split, m_tp->rank(), m_tp->worldSize());
        auto keepRows = [&](UnitState& st, const ParamSlot& slot, const at::Tensor& value) {
            const int64_t begin = std::min(me * slot.chunkRows, slot.d0);
            const int64_t rows = std::min(slot.chunkRows, slot.d0 - begin);
            if (rows > 0)
                st.master.narrow(0, slot.offset, rows * slot.rowNumel)
                    .copy_(
                        value.reshape({-1}).narrow(0, begin * slot.rowNumel, rows * slot.rowNumel));
        };
        if (param->quantized) {
            // Every rank quantizes the same whole tensor the same way (so a tensor-parallel
            // part holds the bytes and scales one rank would) and keeps its rows of its part.
            engine::nf4::Rows q = engine::nf4::quantizeRows(full, m_options.spec.qloraDoubleQuant);
            auto [ua, ia] = where.at(param->info.name + "#absmax");
            UnitState& sa = m_units[static_cast<size_t>(ua)];
            ParamSlot& pa = sa.params[static_cast<size_t>(ia)];
            if (m_tp && p.split != engine::tp::Split::Whole) {
                const int64_t t = m_tp->worldSize(), r = m_tp->rank();
                const bool rows = p.split == engine::tp::Split::Rows;
                if (q.nested.defined()) {
                    q.nested.wholeCols = q.absmax.size(1);
                    q.nested.firstRow = rows ? r * pa.shape.at(0) : 0;
                    q.nested.firstCol = rows ? 0 : r * pa.shape.at(1);
                }
                q.packed = engine::tp::partOf(q.packed, p.split, r, t);
                q.absmax = engine::tp::partOf(q.absmax, p.split, r, t);
            }
            keepRows(s, p, q.packed);
            keepRows(sa, pa, q.absmax);
            pa.nested = q.nested;
        } else {
            keepRows(s, p, full);
        }
    }
    refreshSources();
    for (int u = 0; u < static_cast<int>(m_units.size()); ++u) {
        if (m_paramsSharded)
            releaseGathered(u);
        else
            issueGather(u);
    }
    for (int u = 0; u < static_cast<int>(m_units.size()); ++u)
        if (!m_paramsSharded)
            waitGather(u);
    // ddp / zero1 / zero2 keep the frozen base gathered for the whole run and never update it:
    // its rows would be a second copy of what the gathered buffer holds, so the gathered buffer
    // becomes the only one (as a one-rank shard group's frozen base always is).
    if (!m_paramsSharded)
        for (UnitState& s : m_units)
            if (s.frozen && !s.aliased) {
                s.master = s.gathered;
                s.aliased = true;
            }
    m_commReported = totalCommBytes(); // loading traffic is not a training step's
}

void ShardedStrategy::issueGather(int unit)
{
    UnitState& s = m_units.at(static_cast<size_t>(unit));
    if (s.valid || !s.gatherWork.empty())
        return;
    if (s.aliased) {
        s.valid = true;
        return;
    }
    if (engine::memory::storageBytes(s.gathered) == 0)
        engine::memory::resizeStorage(s.gathered, bytesOf(s.gathered));
    const int64_t ws = m_shard->worldSize();
    const int64_t me = m_shard->rank();
    at::NoGradGuard noGrad;
    at::Tensor flat = s.gathered.variable_data();
    const at::Tensor& from = s.source.defined() ? s.source : s.master;
    for (const auto& p : s.params) {
        at::Tensor out = flat.narrow(0, p.gatheredOffset, ws * p.shardNumel);
        at::Tensor mine = out.narrow(0, me * p.shardNumel, p.shardNumel);
        engine::fused::copyCast(mine, from.narrow(0, p.offset, p.shardNumel));
        s.gatherWork.push_back(m_shard->allGather(out, mine));
    }
}

void ShardedStrategy::refreshSources()
{
    at::NoGradGuard noGrad;
    for (UnitState& s : m_units)
        if (s.source.defined())
            s.source.copy_(s.master); // cast to the compute dtype (and to the GPU)
}

void ShardedStrategy::waitGather(int unit)
{
    UnitState& s = m_units.at(static_cast<size_t>(unit));
    for (auto& w : s.gatherWork)
        w->wait();
    if (!s.gatherWork.empty() || s.aliased)
        s.valid = true;
    s.gatherWork.clear();
}

void ShardedStrategy::ensureGathered(int unit)
{
    issueUnit(unit);
    waitUnit(unit);
}

void ShardedStrategy::releaseGathered(int unit)
{
    UnitState& s = m_units.at(static_cast<size_t>(unit));
    waitGather(unit);
    if (s.aliased)
        return;
    s.valid = false;
    engine::memory::resizeStorage(s.gathered, 0);
}

void ShardedStrategy::issueUnit(int unit)
{
    for (int st : statesOf(unit))
        issueGather(st);
}

void ShardedStrategy::waitUnit(int unit)
{
    for (int st : statesOf(unit))
        waitGather(st);
}

void ShardedStrategy::releaseUnit(int unit)
{
    for (int st : statesOf(unit))
        releaseGathered(st);
}

std::vector<at::Tensor> ShardedStrategy::dequantized(int unit)
{
    std::vector<at::Tensor> out;
    const auto& order = m_order.at(static_cast<size_t>(unit));
    engine::nf4::Dequantized& copies = m_dequant.at(static_cast<size_t>(unit));
    for (size_t i = 0; i < order.size(); ++i) {
        const auto& [st, slot] = order[i];
        if (st < 0 || m_units.at(static_cast<size_t>(st)).group != kPacked) {
            out.emplace_back();
            continue;
        }
        const UnitState& s = m_units.at(static_cast<size_t>(st));
        const UnitState& scales = m_units.at(static_cast<size_t>(st + m_numUnits));
        out.push_back(copies.get(i, s.leaves.at(static_cast<size_t>(slot)),
            scales.leaves.at(static_cast<size_t>(slot)), m_options.computeDtype,
            scales.params.at(static_cast<size_t>(slot)).nested));
    }
    return out;
}

std::vector<at::Tensor> ShardedStrategy::unitWeights(int unit)
{
    ensureGathered(unit);
    // QLoRA: the NF4 weights dequantised just in time; their storage is freed after the unit's
    // forward (postForward) and refilled before its backward (preBackward).
    std::vector<at::Tensor> out = dequantized(unit);
    const auto& order = m_order.at(static_cast<size_t>(unit));
    for (size_t i = 0; i < order.size(); ++i) {
        const auto& [st, slot] = order[i];
        if (!out[i].defined() && st >= 0) // undefined: another pipeline stage's
            out[i] = m_units.at(static_cast<size_t>(st)).leaves.at(static_cast<size_t>(slot));
    }
    return out;
}

std::vector<at::Tensor> ShardedStrategy::wholeUnitWeights(int unit)
{
    std::vector<at::Tensor> out = unitWeights(unit);
    at::NoGradGuard noGrad;
    const auto& order = m_order.at(static_cast<size_t>(unit));
    const auto& infos = m_unitInfo.at(static_cast<size_t>(unit));
    if (m_tp) {
        for (size_t i = 0; i < order.size(); ++i) {
            const auto& [st, slot] = order[i];
            // A copy this stage does not store (the last stage's tied embedding) is replaced by
            // the storing stage's whole weight below: not gathered.
            if (!out[i].defined() || st < 0 || (m_pp && infos[i].stage != m_stage))
                continue;
            const ParamSlot& p
                = m_units.at(static_cast<size_t>(st)).params.at(static_cast<size_t>(slot));
            out[i] = engine::tp::gatherWhole(out[i].detach(), p.wholeShape, p.split, *m_tp);
        }
    }
    if (m_pp) {
        // The stage that stores a weight sends it whole (in the compute dtype) over the
        // pipeline group, whose rank i is stage i; the others receive it, one tensor at a time.
        for (size_t i = 0; i < infos.size(); ++i) {
            const int owner = infos[i].stage;
            at::Tensor t = owner == m_stage
                ? out[i].detach().to(m_options.computeDtype).contiguous()
                : at::empty(infos[i].info.shape,
                    at::TensorOptions().dtype(m_options.computeDtype).device(m_options.device));
            m_pp->broadcast(t, owner)->wait();
            out[i] = t;
        }
    }
    return out;
}

void ShardedStrategy::preForward(int unit)
{
    // Prefetch: the next unit's gather is issued before this one is waited on (two in flight).
    issueUnit(unit);
    if (m_paramsSharded && unit + 1 < m_numUnits)
        issueUnit(unit + 1);
    waitUnit(unit);
}

void ShardedStrategy::postForward(int unit)
{
    m_dequant.at(static_cast<size_t>(unit)).release();
    if (m_reshardAfterForward && unit != 0)
        releaseUnit(unit); // the root stays gathered until after the optimizer step
}

void ShardedStrategy::preBackward(int unit)
{
    const int last = m_numUnits - 1;
    if (m_paramsSharded && unit == 0 && last >= 1)
        issueUnit(last); // the first block to run backward
    if (unit == 0)
        return;
    if (m_paramsSharded) {
        issueUnit(unit);
        if (unit - 1 >= 1)
            issueUnit(unit - 1);
        waitUnit(unit);
    }
    dequantized(unit); // QLoRA: what the saved graph of this unit points at, again
}

void ShardedStrategy::postBackward(int unit)
{
    const bool sync = m_micro == m_numMicro - 1;
    if (unit != 0) {
        m_dequant.at(static_cast<size_t>(unit)).release();
        if (m_reshardAfterForward)
            releaseUnit(unit);
        if (sync && !m_reduceAtEnd)
            reduceUnit(unit);
        return;
    }
    // Unit 0 comes last, after backward() returned.
    if (!sync)
        return; // no-sync micro-step: the unsharded gradients keep accumulating
    if (m_reduceAtEnd)
        for (int u = m_numUnits - 1; u >= 1; --u)
            reduceUnit(u);
    reduceUnit(0);
    finishReduces();
    sumPartialGradsOverTp();
    sumTiedEmbeddingGrad();
}

bool ShardedStrategy::holds(const engine::LlamaModel& model, int unit, int index) const
{
    if (m_stages == 1)
        return true;
    if (unit >= 1)
        return m_layerStage.at(static_cast<size_t>(unit - 1)) == m_stage;
    const engine::RootLayout& root = model.rootLayout();
    const bool last = m_stage == m_stages - 1;
    if (index == root.embed)
        return m_stage == 0 || (last && root.lmHead < 0); // tied: the head's weight too
    return last;                                          // the final norm and the LM head
}

int ShardedStrategy::storingStage(const engine::LlamaModel& model, int unit, int index) const
{
    if (m_stages == 1)
        return 0;
    if (unit >= 1)
        return m_layerStage.at(static_cast<size_t>(unit - 1));
    return index == model.rootLayout().embed ? 0 : m_stages - 1;
}

int ShardedStrategy::stageOf(const std::string& name) const
{
    const auto it = m_stageOf.find(name);
    return it == m_stageOf.end() ? 0 : it->second;
}

void ShardedStrategy::sumTiedEmbeddingGrad()
{
    if (m_tiedName.empty() || !m_ppEnds)
        return;
    for (auto& s : m_units) {
        if (s.frozen)
            continue;
        for (size_t i = 0; i < s.params.size(); ++i) {
            if (s.params[i].name != m_tiedName)
                continue;
            at::NoGradGuard noGrad;
            at::Tensor g = s.grad(i);
            if (!g.defined())
                return;
            // Summed on the device (an offloaded gradient shard lives in host memory).
            at::Tensor flat = g.contiguous().to(m_options.device);
            m_ppEnds->allReduce(flat)->wait();
            if (!flat.is_same(g))
                g.copy_(flat);
            return;
        }
    }
}

std::pair<int64_t, int64_t> ShardedStrategy::pipelineLayers(int chunk) const
{
    return m_chunkLayers.at(static_cast<size_t>(chunk));
}

void ShardedStrategy::pipelineSend(const at::Tensor& t, PipeTensor kind)
{
    PipeSender* s
        = kind == PipeTensor::Activation ? m_sendActivations.get() : m_sendGradients.get();
    if (!s)
        throw std::logic_error("pipeline stage " + std::to_string(m_stage) + " of "
            + std::to_string(m_stages) + " has no neighbour to send "
            + (kind == PipeTensor::Activation ? "an activation" : "a gradient") + " to");
    s->push(t);
}

void ShardedStrategy::pipelineRecv(at::Tensor& t, PipeTensor kind)
{
    dist::Communicator* c = kind == PipeTensor::Activation ? m_actIn.get() : m_gradIn.get();
    if (!c)
        throw std::logic_error("pipeline stage " + std::to_string(m_stage) + " of "
            + std::to_string(m_stages) + " has no neighbour to receive "
            + (kind == PipeTensor::Activation ? "an activation" : "a gradient") + " from");
    c->broadcast(t, 1 - c->rank())->wait(); // the other member sends
}

void ShardedStrategy::pipelineFlush()
{
    for (PipeSender* s : {m_sendActivations.get(), m_sendGradients.get()})
        if (s)
            s->flush();
}

void ShardedStrategy::sumPartialGradsOverTp()
{
    if (!m_tp)
        return;
    // q/k norms act inside each rank's heads: each rank's gradient is its heads' share.
    std::vector<at::Tensor> grads;
    for (auto& s : m_units) {
        if (s.frozen)
            continue;
        for (size_t i = 0; i < s.params.size(); ++i) {
            const ParamSlot& p = s.params[i];
            if (p.split != engine::tp::Split::WholeSummed)
                continue;
            if (at::Tensor g = s.grad(i); g.defined())
                grads.push_back(g);
        }
    }
    if (grads.empty())
        return;
    at::NoGradGuard noGrad;
    std::vector<at::Tensor> flat;
    for (const auto& g : grads)
        flat.push_back(g.reshape({-1}));
    // Summed on the device (an offloaded gradient shard lives in host memory).
    at::Tensor sum = at::cat(flat).to(m_options.device);
    m_tp->allReduce(sum)->wait();
    int64_t at = 0;
    for (auto& g : grads) {
        g.copy_(sum.narrow(0, at, g.numel()).view(g.sizes()));
        at += g.numel();
    }
}

int ShardedStrategy::tensorParallelSize() const
{
    return m_tp ? m_tp->worldSize() : 1;
}

void ShardedStrategy::beginMicroStep(int micro, int numMicro)
{
    m_micro = micro;
    m_numMicro = std::max(1, numMicro);
}

void ShardedStrategy::reduceUnit(int unit)
{
    // Only the trainable group is reduced (a frozen base has no gradient).
    UnitState& s = m_units.at(static_cast<size_t>(unit));
    if (s.params.empty())
        return;
    const int64_t ws = m_shard->worldSize();
    const at::ScalarType reduce = m_options.reduceDtype;
    at::NoGradGuard noGrad;
    if (ws == 1 && !m_replicate && !s.offloaded) {
        writeOwnGradients(s);
        return;
    }
    const at::TensorOptions opts = at::TensorOptions().dtype(reduce).device(m_options.device);
    // DDP (a shard group of one, several replicas): the flat gradient is the shard, and its
    // all-reduce over the replicas starts here, inside backward, while earlier units compute
    // (as PyTorch's DDP buckets do); sharded groups reduce-scatter each parameter.
    const bool replicateOnly = ws == 1 && m_replicate;
    // Every slot is written below: the gradient's rows, then zeros over the padding.
    s.reduceIn
        = at::empty({s.gatheredNumel}, opts.dtype(replicateOnly ? reduce : reduceWireDtype(s)));
    if (replicateOnly)
        s.reduceOut = s.reduceIn;
    else if (reduce == at::kFloat && !s.offloaded && !s.shardGrad.defined())
        // The step's first reduce of a unit: its fp32 sum is the shard gradient, written by the
        // collective in place (finishReduces has no reduce output to copy from then).
        s.reduceOut = s.shardGrad = at::empty({s.shardNumel}, opts);
    else
        s.reduceOut = at::empty({s.shardNumel}, opts);
    for (size_t i = 0; i < s.params.size(); ++i) {
        const ParamSlot& p = s.params[i];
        at::Tensor& leaf = s.leaves[i];
        at::Tensor in = s.reduceIn.narrow(0, p.gatheredOffset, ws * p.shardNumel);
        const int64_t filled = leaf.grad().defined() ? p.d0 * p.rowNumel : 0;
        if (filled > 0)
            engine::fused::copyCast(in.narrow(0, 0, filled), leaf.grad().reshape({-1}));
        if (filled < in.numel())
            in.narrow(0, filled, in.numel() - filled).zero_();
        leaf.mutable_grad() = at::Tensor(); // the unsharded gradient is freed
        if (!replicateOnly)
            s.reduceWork.push_back(
                m_shard->reduceScatter(s.reduceOut.narrow(0, p.offset, p.shardNumel), in));
    }
    if (replicateOnly)
        s.reduceWork.push_back(m_replicate->allReduce(s.reduceOut));
    m_pendingReduce.push_back(unit);
}

at::ScalarType ShardedStrategy::reduceWireDtype(const UnitState& s) const
{
    // bf16 (or fp16) gradients under an fp32 reduce travel in their own dtype where the shard
    // group sums them into fp32 itself (Gloo): the same fp32 sums, bit for bit, at half the
    // bytes (dist::Communicator::sumsIntoWiderOutput). The leaves' dtype decides, the same on
    // every rank, whichever gradients this rank's micro-batch left undefined.
    const at::ScalarType reduce = m_options.reduceDtype;
    if (reduce != at::kFloat || !m_shard->sumsIntoWiderOutput() || s.leaves.empty())
        return reduce;
    const at::ScalarType leaf = s.leaves.front().scalar_type();
    if (leaf != at::kBFloat16 && leaf != at::kHalf)
        return reduce;
    for (const at::Tensor& l : s.leaves)
        if (l.scalar_type() != leaf)
            return reduce;
    return leaf;
}

void ShardedStrategy::writeOwnGradients(UnitState& s)
{
    // One rank: reducing is the identity. fp32 gradients reduced in fp32 are already the shard
    // gradient: the optimizer reads them where autograd left them (optimizerTargets), with no
    // copy. Otherwise they go straight into the fp32 shard gradient (rounded through the reduce
    // dtype, as the collective's buffers would round them). Either way there are no reduce
    // buffers and no collective.
    const bool fp32 = m_options.reduceDtype == at::kFloat
        && std::all_of(s.leaves.begin(), s.leaves.end(), [](const at::Tensor& leaf) {
               return !leaf.grad().defined() || leaf.grad().scalar_type() == at::kFloat;
           });
    if (fp32 && !s.shardGrad.defined()) {
        for (at::Tensor& leaf : s.leaves) {
            if (!leaf.grad().defined())
                leaf.mutable_grad() = at::zeros_like(leaf, at::MemoryFormat::Contiguous);
            else if (!leaf.grad().is_contiguous())
                leaf.mutable_grad() = leaf.grad().contiguous();
        }
        s.gradsInLeaves = true;
        return;
    }
    const bool fresh = !s.shardGrad.defined();
    if (fresh)
        s.shardGrad = at::empty(
            {s.shardNumel}, at::TensorOptions().dtype(at::kFloat).device(m_options.device));
    for (size_t i = 0; i < s.params.size(); ++i) {
        const ParamSlot& p = s.params[i];
        at::Tensor& leaf = s.leaves[i];
        at::Tensor out = s.shardGrad.narrow(0, p.offset, p.shardNumel);
        if (leaf.grad().defined()) {
            at::Tensor g = leaf.grad().reshape({-1});
            // Rounded as the collective would; widening into an fp32 reduce is exact, and the
            // shard gradient is fp32: no rounding and no intermediate copy then.
            if (g.scalar_type() != m_options.reduceDtype && m_options.reduceDtype != at::kFloat)
                g = engine::fused::cast(g, m_options.reduceDtype);
            if (fresh)
                engine::fused::copyCast(out, g);
            else
                out.add_(engine::fused::cast(g, at::kFloat));
        } else if (fresh) {
            out.zero_();
        }
        leaf.mutable_grad() = at::Tensor(); // the unsharded gradient is freed
    }
}

void ShardedStrategy::finishReduces()
{
    at::NoGradGuard noGrad;
    // Offload: every unit's reduced shard starts for the host (a side stream on a GPU) before
    // the first is added into its fp32 gradient there, so the copies overlap those additions.
    engine::HostTransfer toHost(m_options.device);
    std::vector<std::pair<UnitState*, at::Tensor>> landing;
    for (int unit : m_pendingReduce) {
        UnitState& s = m_units.at(static_cast<size_t>(unit));
        for (auto& w : s.reduceWork)
            w->wait();
        s.reduceWork.clear();
        s.reduceIn = at::Tensor();
        if (m_replicate && m_shard->worldSize() > 1) // DDP's all-reduce was started in backward
            m_replicate->allReduce(s.reduceOut)->wait();
        if (s.offloaded)
            landing.emplace_back(&s, toHost.start(s.reduceOut));
        else if (!s.reduceOut.is_same(s.shardGrad))
            addToShardGrad(s, s.reduceOut);
        s.reduceOut = at::Tensor(); // toHost holds it until its copy has landed
    }
    toHost.wait();
    for (auto& [s, reduced] : landing)
        addToShardGrad(*s, reduced);
    m_pendingReduce.clear();
}

void ShardedStrategy::addToShardGrad(UnitState& s, const at::Tensor& reduced)
{
    if (!s.shardGrad.defined()) {
        if (!s.offloaded) {
            // The first gradient of the step is the shard gradient: written once (widened from
            // the reduce dtype), not added into zeros.
            s.shardGrad = at::empty(
                {s.shardNumel}, at::TensorOptions().dtype(at::kFloat).device(m_options.device));
            engine::fused::copyCast(s.shardGrad, reduced);
            return;
        }
        s.shardGrad = hostZeros(s.shardNumel, at::kFloat, m_options.device);
    }
    s.shardGrad.add_(engine::fused::cast(reduced, at::kFloat));
}

std::vector<engine::OptimTarget> ShardedStrategy::optimizerTargets()
{
    std::vector<engine::OptimTarget> out;
    for (auto& s : m_units)
        for (size_t i = 0; i < s.params.size(); ++i) {
            const ParamSlot& p = s.params[i];
            if (s.frozen)
                continue;
            engine::OptimTarget t;
            t.name = p.name;
            t.master = s.master.narrow(0, p.offset, p.shardNumel).view(p.chunkShape);
            if (at::Tensor g = s.grad(i); g.defined()) // one rank: the whole shard
                t.grad = g.view(p.chunkShape);
            t.decay = p.decay;
            out.push_back(std::move(t));
        }
    return out;
}

at::Tensor ShardedStrategy::gradSquaredNorm(const std::vector<engine::OptimTarget>& targets)
{
    // Each element lives on exactly one rank of the shard group (padding holds zero); replicas
    // hold the same shards, so the sum runs over the shard group only. Offloaded gradients are
    // summed where they are (host memory) and the sum joins the device for the all-reduce.
    // Under tensor parallel, a split weight's parts are summed over the TP group and a whole
    // one (the same on every TP rank) is counted by TP rank 0 alone.
    at::Tensor local
        = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(m_options.device));
    at::Tensor onHost;
    for (const auto& t : targets) {
        if (!t.grad.defined())
            continue;
        if (m_tp && m_tp->rank() != 0 && !m_splitNames.count(t.name))
            continue;
        if (m_stage != 0 && t.name == m_tiedName) // the first stage counts a tied embedding
            continue;
        if (t.grad.device() == local.device()) {
            engine::addSquaredSum(local, t.grad);
        } else {
            if (!onHost.defined())
                onHost = at::zeros({1}, t.grad.options().dtype(at::kDouble));
            engine::addSquaredSum(onHost, t.grad);
        }
    }
    if (onHost.defined())
        local.add_(onHost.to(local.device()));
    m_shard->allReduce(local)->wait();
    if (m_tp)
        m_tp->allReduce(local)->wait();
    if (m_pp)
        m_pp->allReduce(local)->wait();
    return local;
}

double ShardedStrategy::allReduceSum(double local)
{
    at::Tensor v
        = at::full({1}, local, at::TensorOptions().dtype(at::kDouble).device(m_options.device));
    m_world->allReduce(v)->wait();
    // Each TP rank of a data-parallel copy holds the same value: the copy counts once (a flag's
    // sum stays > 0 when any rank raised it).
    if (m_tp)
        v.div_(m_tp->worldSize());
    return engine::hostsync::readValue(v);
}

void ShardedStrategy::allReduceSumInPlace(at::Tensor& t)
{
    // The copy's value counts once, from its TP rank 0 on the last pipeline stage (where the
    // loss is).
    if ((m_tp && m_tp->rank() != 0) || m_stage != m_stages - 1)
        t.zero_();
    m_world->allReduce(t)->wait();
}

void ShardedStrategy::afterOptimizerStep()
{
    refreshSources(); // offload: the updated masters' compute-dtype shards
    for (int u = 0; u < static_cast<int>(m_units.size()); ++u) {
        if (m_paramsSharded)
            releaseGathered(u); // gathered next time it is used, from the updated masters
        else if (!m_units[static_cast<size_t>(u)].frozen) { // a frozen base stays gathered
            m_units[static_cast<size_t>(u)].valid = m_units[static_cast<size_t>(u)].aliased;
            issueGather(u); // ZeRO-1/2, DDP: all-gather the updated shards now
        }
    }
    for (int u = 0; u < static_cast<int>(m_units.size()); ++u)
        waitGather(u);
}

void ShardedStrategy::reshard()
{
    if (!m_paramsSharded)
        return; // ddp, zero1/2: the parameters stay gathered
    for (int u = 0; u < static_cast<int>(m_units.size()); ++u)
        releaseGathered(u);
}

void ShardedStrategy::zeroGrad()
{
    for (auto& s : m_units) {
        s.shardGrad = at::Tensor();
        s.gradsInLeaves = false;
        for (auto& leaf : s.leaves)
            leaf.mutable_grad() = at::Tensor();
    }
}

engine::MemoryBreakdown ShardedStrategy::memory() const
{
    engine::MemoryBreakdown m;
    for (const auto& s : m_units) {
        (s.frozen             ? m.frozenParams
                : s.offloaded ? m.offloaded
                              : m.shardedParams)
            += bytesOf(s.master);
        (m_offloadParams ? m.offloaded : m.shardedParams) += bytesOf(s.source);
        if (!s.aliased)
            m.gatheredParams += engine::memory::storageBytes(s.gathered);
        (s.offloaded ? m.offloaded : m.grads) += bytesOf(s.shardGrad);
        for (const auto& leaf : s.leaves)
            m.grads += bytesOf(leaf.grad());
        m.other
            += bytesOf(s.reduceIn) + (s.reduceOut.is_same(s.shardGrad) ? 0 : bytesOf(s.reduceOut));
        for (const auto& p : s.params)
            m.frozenParams += bytesOf(p.nested.scale);
    }
    for (const auto& copies : m_dequant)
        m.gatheredParams += copies.bytes();
    return m;
}

int64_t ShardedStrategy::totalCommBytes() const
{
    return commStats().totalBytes();
}

dist::CommStats ShardedStrategy::commStats() const
{
    dist::CommStats total;
    std::set<const dist::Communicator*> seen;
    for (const auto* c : {m_world.get(), m_shard.get(), m_replicate.get(), m_tp.get(), m_pp.get(),
             m_actOut.get(), m_actIn.get(), m_gradOut.get(), m_gradIn.get(), m_ppEnds.get()}) {
        if (!c || !seen.insert(c).second)
            continue;
        for (int k = 0; k < dist::kCollectiveCount; ++k) {
            total.bytesSent[static_cast<size_t>(k)] += c->stats().bytesSent[static_cast<size_t>(k)];
            total.calls[static_cast<size_t>(k)] += c->stats().calls[static_cast<size_t>(k)];
        }
    }
    return total;
}

int64_t ShardedStrategy::takeCommBytes()
{
    const int64_t now = totalCommBytes();
    const int64_t delta = now - m_commReported;
    m_commReported = now;
    return delta;
}

std::vector<protocol::RankMemory> ShardedStrategy::gatherMemory(const protocol::RankMemory& mine)
{
    const int w = worldSize();
    if (w == 1)
        return {mine};
    at::Tensor row = at::tensor(
        std::vector<int64_t> {mine.rank, mine.shardedParamBytes, mine.gatheredParamBytes,
            mine.gradBytes, mine.optimizerBytes, mine.activationBytes, mine.otherBytes,
            mine.currentBytes, mine.peakBytes, mine.frozenParamBytes, mine.cuda ? 1 : 0,
            mine.cudaAllocatedBytes, mine.cudaAllocatedPeakBytes, mine.cudaReservedBytes,
            mine.cudaReservedPeakBytes, mine.cudaAllocRetries, mine.cudaOoms, mine.offloadedBytes},
        at::kLong)
                         .to(m_options.device);
    constexpr int kFields = 18;
    at::Tensor all
        = at::empty({w * kFields}, at::TensorOptions().dtype(at::kLong).device(m_options.device));
    m_world->allGather(all, row)->wait();
    if (rank() != 0)
        return {mine};
    all = engine::hostsync::toHost(all);
    std::vector<protocol::RankMemory> out;
    auto a = all.accessor<int64_t, 1>();
    for (int r = 0; r < w; ++r) {
        protocol::RankMemory m;
        m.rank = static_cast<int>(a[r * kFields + 0]);
        m.shardedParamBytes = a[r * kFields + 1];
        m.gatheredParamBytes = a[r * kFields + 2];
        m.gradBytes = a[r * kFields + 3];
        m.optimizerBytes = a[r * kFields + 4];
        m.activationBytes = a[r * kFields + 5];
        m.otherBytes = a[r * kFields + 6];
        m.currentBytes = a[r * kFields + 7];
        m.peakBytes = a[r * kFields + 8];
        m.frozenParamBytes = a[r * kFields + 9];
        m.cuda = a[r * kFields + 10] != 0;
        m.cudaAllocatedBytes = a[r * kFields + 11];
        m.cudaAllocatedPeakBytes = a[r * kFields + 12];
        m.cudaReservedBytes = a[r * kFields + 13];
        m.cudaReservedPeakBytes = a[r * kFields + 14];
        m.cudaAllocRetries = a[r * kFields + 15];
        m.cudaOoms = a[r * kFields + 16];
        m.offloadedBytes = a[r * kFields + 17];
        out.push_back(m);
    }
    return out;
}

void ShardedStrategy::barrier()
{
    m_world->barrier();
}

void ShardedStrategy::exportParams(engine::LlamaModel& model,
    const std::function<void(const std::string&, const at::Tensor&)>& sink)
{
    const int64_t ws = m_shard->worldSize();
    at::NoGradGuard noGrad;
    for (engine::Param* param : model.params()) {
        const std::string& name = param->info.name;
        const int owner = stageOf(name);
        at::Tensor full;
        for (auto& s : m_units) {
            if (owner != m_stage)
                break; // another stage stores it (a tied embedding's copy on the last included)
            for (const auto& p : s.params) {
                if (p.name != name)
                    continue;
                auto gatherFull = [&](const UnitState& st, const ParamSlot& slot) {
                    if (st.frozen && st.aliased) // the whole frozen value is here already
                        return st.leaves.at(static_cast<size_t>(&slot - st.params.data()));
                    // One parameter at a time on the device (offloaded masters go there first);
                    // the sink copies it to the host.
                    at::Tensor whole = at::empty({ws * slot.shardNumel},
                        at::TensorOptions()
                            .dtype(st.master.scalar_type())
                            .device(m_options.device));
                    m_shard
                        ->allGather(whole,
                            st.master.narrow(0, slot.offset, slot.shardNumel).to(m_options.device))
                        ->wait();
                    return whole.narrow(0, 0, slot.d0 * slot.rowNumel).view(slot.shape);
                };
                full = gatherFull(s, p);
                if (s.group == kPacked) { // QLoRA: the dequantized base (this rank's part)
                    const UnitState& sa
                        = m_units.at(static_cast<size_t>(&s - m_units.data()) + m_numUnits);
                    const ParamSlot& pa = sa.params.at(static_cast<size_t>(&p - s.params.data()));
                    full = engine::nf4::dequantizeRows(
                        full, gatherFull(sa, pa), at::kFloat, pa.nested);
                }
                if (m_tp) // a split weight's parts, whole again
                    full = engine::tp::gatherWhole(full, p.wholeShape, p.split, *m_tp);
            }
        }
        if (m_pp && owner != 0) {
            // The storing stage's copy travels to the first (rank 0's) over the pipeline group,
            // in fp32, or in the compute dtype for a frozen base kept in it.
            const at::ScalarType dtype
                = param->frozen && !param->quantized ? m_options.computeDtype : at::kFloat;
            if (owner == m_stage)
                full = full.to(dtype).contiguous();
            else
                full = at::empty(
                    param->info.shape, at::TensorOptions().dtype(dtype).device(m_options.device));
            m_pp->broadcast(full, owner)->wait();
        }
        if (rank() == 0)
            sink(name, full);
    }
}

} // namespace shard::fsdp
