// DDP, ZeRO-1/2/3 and hybrid sharding with FSDP2 semantics (docs/ARCHITECTURE.md), as one strategy
// with a per-name plan. Every parameter is split on dim 0 into chunks of ceil(d0/Ws) rows over the
// shard group (Ws ranks; 1 for DDP), padded at the tail; a unit (root or block) keeps its fp32
// master shards and shard gradients in flat buffers and gathers its parameters in the compute
// dtype into one flat buffer, of which each unsharded parameter is a plain view. Gradients are
// reduce-scattered in the reduce dtype over the shard group (summed: the loop's loss is already
// divided by the global token count), then all-reduced over the replicate group (DDP, hybrid).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/model/nf4.h"
#include "core/train/strategy.h"
#include "dist/communicator.h"

namespace shard::fsdp {

class ShardedStrategy : public engine::Strategy {
public:
    // Connects to the other ranks (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; backend gloo, or
    // SHARD_DIST_BACKEND=nccl). Throws for an unknown strategy or a shard group that does not
    // divide the world.
    explicit ShardedStrategy(engine::StrategyOptions options);
    ~ShardedStrategy() override;

    std::string name() const override { return m_options.name; }
    int rank() const override;
    int worldSize() const override;

    void setup(engine::LlamaModel& model, const engine::ParamSource& source) override;
    std::vector<at::Tensor> unitWeights(int unit) override;
    std::vector<at::Tensor> wholeUnitWeights(int unit) override;
    bool wantsUnitHooks() const override { return true; }
    void preForward(int unit) override;
    void postForward(int unit) override;
    void preBackward(int unit) override;
    void postBackward(int unit) override;
    void beginMicroStep(int micro, int numMicro) override;

    std::vector<engine::OptimTarget> optimizerTargets() override;
    at::Tensor gradSquaredNorm(const std::vector<engine::OptimTarget>& targets) override;
    double allReduceSum(double local) override;
    void allReduceSumInPlace(at::Tensor& t) override;
    void afterOptimizerStep() override;
    void reshard() override;
    void zeroGrad() override;

    engine::MemoryBreakdown memory() const override;
    int64_t takeCommBytes() override;
    std::vector<protocol::RankMemory> gatherMemory(const protocol::RankMemory& mine) override;
    void barrier() override;
    void exportParams(engine::LlamaModel& model,
        const std::function<void(const std::string&, const at::Tensor&)>& sink) override;
    dist::Communicator* tensorParallelGroup() override { return m_tp.get(); }
    int pipelineStages() const override { return m_stages; }
    int pipelineStage() const override { return m_stage; }
    int stageOf(const std::string& name) const override;
    int pipelineChunks() const override { return static_cast<int>(m_chunkLayers.size()); }
    std::vector<std::pair<int64_t, int64_t>> pipelineCut() const override { return m_cut; }
    std::pair<int64_t, int64_t> pipelineLayers(int chunk) const override;
    void pipelineSend(const at::Tensor& t, PipeTensor kind) override;
    void pipelineRecv(at::Tensor& t, PipeTensor kind) override;
    void pipelineFlush() override;

    // For tests: bytes sent per collective kind over all of this rank's communicators.
    dist::CommStats commStats() const;
    int shardGroupSize() const;

private:
    struct ParamSlot;
    struct UnitState;

    // A model unit's parameter groups, each with its own flat buffers: trainable (state u),
    // the frozen LoRA base in the compute dtype (N + u), and QLoRA's NF4 base as packed bytes
    // (2N + u, uint8 [out, in / 2]) and block absmax (3N + u, fp32 [out, in / 64]); frozen
    // groups are gathered in their own dtype and never reduced.
    enum Group { kTrainable = 0, kFrozen = 1, kPacked = 2, kAbsmax = 3, kGroups = 4 };
    std::vector<int> statesOf(int unit) const
    {
        return {unit, m_numUnits + unit, 2 * m_numUnits + unit, 3 * m_numUnits + unit};
    }
    void issueGather(int state);
    void waitGather(int state);
    void ensureGathered(int unit);
    void releaseGathered(int state);
    // Offload: copy the masters into the compute-dtype shards the gathers read.
    void refreshSources();
    void issueUnit(int unit);
    void waitUnit(int unit);
    void releaseUnit(int unit);
    // The unit's NF4 weights in the compute dtype, by position in m_order (others undefined).
    std::vector<at::Tensor> dequantized(int unit);
    void reduceUnit(int unit);
    // The dtype a unit's gradients cross the shard group in: the reduce dtype, or the
    // gradients' own narrower one where the group sums that into fp32 (Gloo).
    at::ScalarType reduceWireDtype(const UnitState& s) const;
    void finishReduces();
    // Adds a reduced gradient shard (on the shard gradient's device) into its fp32 sum.
    void addToShardGrad(UnitState& s, const at::Tensor& reduced);
    void writeOwnGradients(UnitState& s);
    // Tensor parallel: all-reduce over the TP group the gradients each rank holds only a share
    // of (engine::tp::Split::WholeSummed), after the data-parallel reduction.
    void sumPartialGradsOverTp();
    int tensorParallelSize() const;
    // Pipeline parallel: whether this rank's stage holds parameter `index` of model unit `unit`,
    // and the stage that stores it (a tied embedding: held by the first and last, stored by the
    // first).
    bool holds(const engine::LlamaModel& model, int unit, int index) const;
    int storingStage(const engine::LlamaModel& model, int unit, int index) const;
    // A tied embedding's gradient, summed over the first and last stage (after the reductions).
    void sumTiedEmbeddingGrad();
    int64_t totalCommBytes() const;

    engine::StrategyOptions m_options;
    bool m_reshardAfterForward = false; // zero3, hybrid: blocks drop their gathered params
    bool m_paramsSharded = false;       // zero3, hybrid: nothing gathered between steps
    bool m_reduceAtEnd = false;         // zero1: all gradients reduced after backward
    bool m_offload = false;             // masters, their gradients, AdamW state on the host
    bool m_offloadParams = false;       // params+optimizer: no parameter shard on the device
    std::shared_ptr<dist::Communicator> m_world;
    std::shared_ptr<dist::Communicator> m_shard;
    std::shared_ptr<dist::Communicator> m_replicate; // null when there is one replica
    std::shared_ptr<dist::Communicator> m_tp;        // null without tensor parallel
    std::shared_ptr<dist::Communicator> m_pp;        // null without pipeline parallel
    // Point to point (dist::MeshGroups), and a sending thread for each outgoing channel.
    std::shared_ptr<dist::Communicator> m_actOut, m_actIn, m_gradOut, m_gradIn;
    class PipeSender;
    std::unique_ptr<PipeSender> m_sendActivations, m_sendGradients;
    std::shared_ptr<dist::Communicator> m_ppEnds; // first and last stage, on those two
    int m_stage = 0;
    int m_stages = 1;
    // This stage's blocks [first, end), one range per model chunk (interleaved: chunk c is
    // virtual stage c x stages + stage), cut by plan::balancedStages.
    std::vector<std::pair<int64_t, int64_t>> m_chunkLayers;
    std::vector<std::pair<int64_t, int64_t>> m_cut; // pp > 1: every virtual stage's blocks
    std::vector<int> m_layerStage;        // pp > 1: the stage of each block, from the same cut
    int m_virtualStages = 1;              // model chunks per stage
    std::string m_tiedName;               // pp > 1: a tied embedding's name
    std::map<std::string, int> m_stageOf; // every parameter's storing stage
    // Every unit's parameters (names and whole shapes) with their storing stage, held here or
    // not (wholeUnitWeights).
    struct WholeParam {
        plan::ParamInfo info;
        int stage = 0;
    };
    std::vector<std::vector<WholeParam>> m_unitInfo;
    std::set<std::string> m_splitNames; // TP: parameters split over m_tp
    std::vector<UnitState> m_units;     // kGroups * m_numUnits states (see statesOf)
    int m_numUnits = 0;
    // Per model unit, where each of its parameters lives: (state, slot).
    std::vector<std::vector<std::pair<int, int>>> m_order;
    // QLoRA: per model unit, the compute-dtype copies of its NF4 weights (freed after the
    // unit's forward and its backward, refilled before its backward).
    std::vector<engine::nf4::Dequantized> m_dequant;
    std::vector<int> m_pendingReduce;
    int m_micro = 0;
    int m_numMicro = 1;
    int64_t m_commReported = 0;
};

} // namespace shard::fsdp
