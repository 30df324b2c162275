// Checkpoint hooks of the training loop: the strategy's optimizer targets are this rank's fp32
// shards (a dim-0 chunk per shard_layout.h, or the whole tensor), so saving and restoring them
// with AdamW's state keyed by the same names is all a strategy has to expose.
#include "train_checkpointer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros.h>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_store.h"
#include "ckpt/checkpoint_writer.h"
#include "core/model/llama_model.h"
#include "core/model/tensor_parallel.h"
#include "core/optim/adamw.h"
#include "core/train/strategy.h"
#include "dist/communicator.h"
#include "launch/rank_heartbeat.h"
#include "plan/model_spec.h"
#include "protocol/run_dir.h"

namespace shard::ckpt {

namespace fs = std::filesystem;

namespace {

std::string shapeText(at::IntArrayRef s)
{
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i)
        out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

// Where this rank's optimizer targets lie: its data-parallel chunk, its place in the tensor-
// parallel group (shard_layout.h) and that group (null without tensor parallel).
struct RankLayout {
    ShardPlacement dp;
    TpPlacement tp;
    dist::Communicator* group = nullptr;
};

RankLayout layoutOf(engine::Strategy& strategy, const protocol::RunSpec& spec)
{
    RankLayout l;
    l.group = strategy.tensorParallelGroup();
    std::tie(l.dp, l.tp) = placementWithTp(strategy.name(), strategy.rank(), strategy.worldSize(),
        spec.shardGroup, l.group ? l.group->worldSize() : 1, strategy.pipelineStages());
    return l;
}

// How a tensor-parallel run holds each trained parameter, by name (Whole without one).
std::map<std::string, TpSplit> splitsOf(const engine::LlamaModel& model, const RankLayout& l)
{
    std::map<std::string, TpSplit> out;
    for (int u = 0; u < model.numUnits(); ++u) {
        const auto& params = model.unit(u).params;
        for (size_t i = 0; i < params.size(); ++i) {
            const engine::tp::Split s = l.group
                ? engine::tp::splitOf(model, u, static_cast<int>(i), l.group->worldSize())
                : engine::tp::Split::Whole;
            out[params[i].info.name] = s == engine::tp::Split::Rows ? TpSplit::Rows
                : s == engine::tp::Split::Columns                   ? TpSplit::Columns
                                                                    : TpSplit::Whole;
        }
    }
    return out;
}

bool agreeAll(engine::Strategy& strategy, bool ok)
{
    if (strategy.worldSize() == 1)
        return ok;
    return strategy.allReduceSum(ok ? 0.0 : 1.0) == 0.0;
}

} // namespace

TrainCheckpointer::TrainCheckpointer(protocol::RunSpec spec, std::string modelDir)
    : m_spec(std::move(spec))
    , m_modelDir(std::move(modelDir))
{
    if (m_spec.checkpointEvery < 0)
        throw std::runtime_error("--checkpoint-every must be >= 0 (0 = no checkpoints)");
    if (m_spec.keepCheckpoints < 0)
        throw std::runtime_error("--keep-checkpoints must be >= 0 (0 = keep all)");
    nlohmann::json j = protocol::toJson(m_spec);
    // What a resume may change: length and the schedule's span (a continued run's), placement
    // (world size, strategy: resharding), the split of the global batch into micro-batches,
    // precision and memory settings, cadence, paths.
    for (const char* k : {"resume", "steps", "epochs", "nodes", "procs_per_node", "strategy",
             "shard_group", "tensor_parallel", "pipeline_parallel", "virtual_stages",
             "sequence_parallel", "micro_batch", "grad_accum", "device", "precision",
             "reduce_dtype", "checkpointing", "offload", "checkpoint_every", "keep_checkpoints",
             "threads", "log_every", "eval_every", "name", "out", "model", "tokenizer",
             "allow_batch_change", "schedule_start", "schedule_steps"})
        j.erase(k);
    // Runs from before the field existed keep their id.
    if (m_spec.chatTemplate.empty())
        j.erase("chat_template");
    // Full fine-tuning runs keep the id they had before LoRA existed; the adapters a LoRA run
    // started from are in its checkpoints, so --lora-init does not matter on a resume.
    j.erase("lora_init");
    if (!m_spec.usesLora())
        for (const char* k :
            {"method", "lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "lora_rslora"})
            j.erase(k);
    if (m_spec.method != "qlora")
        j.erase("qlora_double_quant");
    // Supervised runs keep the id they had before preference objectives existed; a preference
    // run's id holds only its own objective's settings.
    if (m_spec.objective == "sft")
        j.erase("objective");
    if (m_spec.objective != "dpo")
        for (const char* k :
            {"dpo_loss", "dpo_beta", "dpo_label_smoothing", "reference", "dpo_nll_weight"})
            j.erase(k);
    if (m_spec.objective != "orpo")
        j.erase("orpo_lambda");
    if (m_spec.dpoNllWeight == 0) // runs from before the field keep their id
        j.erase("dpo_nll_weight");
    const std::string base = fs::path(m_spec.outDir).lexically_normal().filename().string();
    m_runId = (base.empty() ? std::string("run") : base) + "-" + configHash(j).substr(8, 8);
}

nlohmann::json TrainCheckpointer::dataSpec() const
{
    return {{"files", m_spec.data}, {"format", m_spec.dataFormat}, {"seq_len", m_spec.seqLen},
        {"seed", m_spec.seed}, {"shuffle", m_spec.shuffle}, {"packing", m_spec.packing},
        {"eval_data", m_spec.evalData}, {"eval_fraction", m_spec.evalFraction}};
}

const std::string& TrainCheckpointer::resumeDir()
{
    if (!m_resolved) {
        m_resumeDir = resolveResume(m_spec.resume, m_spec.outDir);
        m_resolved = true;
    }
    return m_resumeDir;
}

bool TrainCheckpointer::resuming()
{
    return !resumeDir().empty();
}

engine::LoopState TrainCheckpointer::restore(
    engine::LlamaModel& model, engine::Strategy& strategy, engine::AdamW& adamw)
{
    const CheckpointReader reader(resumeDir());
    const Manifest& m = reader.manifest();
    ResumeExpectation expect;
    expect.modelConfig = plan::toHfConfig(model.spec());
    expect.data = dataSpec();
    expect.runId = m_runId;
    for (engine::Param* p : model.params())
        if (!p->frozen) // a LoRA checkpoint holds the adapters only
            expect.tensors.push_back({p->info.name, p->info.shape, !p->info.isNormOrBias});
    reader.checkCompatible(expect);

    // Each rank reads the whole-tensor rows its targets cover, whatever layout saved them: a
    // tensor-parallel Rows part's rows, a Columns part's columns of its data-parallel rows.
    const RankLayout layout = layoutOf(strategy, m_spec);
    const std::map<std::string, TpSplit> splits = splitsOf(model, layout);
    at::NoGradGuard noGrad;
    for (const auto& t : strategy.optimizerTargets()) {
        const auto& shape = model.param(t.name).info.shape;
        const TpSplit split = splits.at(t.name);
        const RowRange rows = heldRows(shape[0], layout.dp, split, layout.tp);
        std::vector<int64_t> want = shape;
        want[0] = rows.padded;
        if (split == TpSplit::Columns)
            want[1] /= layout.tp.size;
        if (t.master.sizes().vec() != want)
            throw std::runtime_error("strategy " + strategy.name() + " holds '" + t.name + "' as "
                + shapeText(t.master.sizes()) + " on rank " + std::to_string(strategy.rank())
                + ", not the chunk " + shapeText(want) + " checkpoints expect");
        // Read on the host, kept where the masters are (a GPU run's state lives on its GPU).
        const auto read = [&](const char* kind) {
            at::Tensor whole = reader.readRows(kind, t.name, rows);
            if (split == TpSplit::Columns)
                whole = whole.view({rows.padded, shape[1]})
                            .narrow(1, layout.tp.rank * want[1], want[1])
                            .contiguous();
            return whole.view(t.master.sizes()).to(t.master.device());
        };
        at::Tensor master = t.master;
        if (split == TpSplit::Columns)
            master.copy_(read(kParam));
        else
            reader.readRowsInto(kParam, t.name, rows, master);
        engine::AdamW::State st;
        st.m = read(kExpAvg);
        st.v = read(kExpAvgSq);
        adamw.state()[t.name] = st;
    }
    const nlohmann::json& ts = m.trainState;
    adamw.setStepCount(ts.value("optimizer_step", static_cast<int64_t>(0)));
    // Compute copies (ZeRO-1/2, DDP gathered parameters) from the restored masters.
    strategy.afterOptimizerStep();
    const int rank = strategy.rank();
    if (rank < m.worldSize) {
        const at::Tensor rng = reader.rngState(rank);
        if (rng.defined()) {
            at::Generator gen = at::detail::getDefaultCPUGenerator();
            std::lock_guard<std::mutex> lock(gen.mutex());
            gen.set_state(rng);
        }
    }
    engine::LoopState state;
    state.step = ts.value("step", static_cast<int64_t>(0));
    state.tokensSeen = ts.value("tokens_seen", static_cast<int64_t>(0));
    state.wallTimeSec = ts.value("wall_time_sec", 0.0);
    state.dataPosition = ts.value("data_position", nlohmann::json::object());
    state.checkpointDir = reader.dir();
    state.microBatch = ts.value("micro_batch", static_cast<int64_t>(0));
    state.gradAccum = ts.value("grad_accum", static_cast<int64_t>(0));
    state.worldSize = m.worldSize // data-parallel copies
        / (std::max(1, m.tensorParallel) * std::max(1, m.pipelineParallel));
    // Every rank has its state before any of them goes on.
    if (!agreeAll(strategy, true))
        throw std::runtime_error("another rank failed to restore the checkpoint");
    return state;
}

bool TrainCheckpointer::due(int64_t step, bool last) const
{
    const int64_t every = m_spec.checkpointEvery;
    return every > 0 && (step % every == 0 || last);
}

engine::CheckpointSaved TrainCheckpointer::afterStep(engine::LlamaModel& model,
    engine::Strategy& strategy, engine::AdamW& adamw, const engine::LoopState& state, bool last)
{
    if (!due(state.step, last))
        return {};
    return save(model, strategy, adamw, state);
}

engine::CheckpointSaved TrainCheckpointer::save(engine::LlamaModel& model,
    engine::Strategy& strategy, engine::AdamW& adamw, const engine::LoopState& state)
{
    engine::CheckpointSaved out;
    launch::RankHeartbeat::report(state.step, launch::RankPhase::Checkpoint);
    SaveRequest req;
    req.checkpointsDir = protocol::RunDir(m_spec.outDir).checkpointsDir();
    req.step = state.step;
    req.runId = m_runId;
    req.strategy = strategy.name();
    req.rank = strategy.rank();
    req.worldSize = strategy.worldSize();
    req.shardGroup = m_spec.shardGroup;
    const RankLayout layout = layoutOf(strategy, m_spec);
    req.tensorParallel = layout.tp.size;
    req.pipelineParallel = strategy.pipelineStages();
    const std::map<std::string, TpSplit> splits = splitsOf(model, layout);
    if (req.pipelineParallel > 1)
        for (engine::Param* p : model.params())
            if (!p->frozen)
                req.layout.push_back({p->info.name, p->info.shape, !p->info.isNormOrBias,
                    splits.at(p->info.name), strategy.stageOf(p->info.name)});
    req.modelConfig = plan::toHfConfig(model.spec());
    req.modelSource = fs::absolute(m_modelDir).lexically_normal().string();
    req.tokenizerSource = m_spec.tokenizer.empty()
        ? req.modelSource
        : fs::absolute(m_spec.tokenizer).lexically_normal().string();
    req.data = dataSpec();
    req.trainState = {{"step", state.step}, {"tokens_seen", state.tokensSeen},
        {"wall_time_sec", state.wallTimeSec}, {"data_position", state.dataPosition},
        {"optimizer_step", adamw.stepCount()}, {"lr_schedule", m_spec.schedule},
        {"total_steps", m_spec.steps}, {"micro_batch", state.microBatch},
        {"grad_accum", state.gradAccum}};
    if (m_spec.usesLora())
        // What export needs to write the PEFT folder; the base is req.modelSource.
        req.trainState["lora"] = {{"r", m_spec.loraRank}, {"alpha", m_spec.loraAlpha},
            {"dropout", m_spec.loraDropout}, {"targets", m_spec.loraTargets},
            {"rslora", m_spec.loraRslora}, {"method", m_spec.method},
            {"double_quant", m_spec.method == "qlora" && m_spec.qloraDoubleQuant}};
    req.rankState = {{"rank", strategy.rank()}};
    {
        at::Generator gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        req.rng = gen.get_state();
    }
    req.keep = static_cast<int>(m_spec.keepCheckpoints);
    req.agree = [&strategy](bool ok) { return agreeAll(strategy, ok); };

    std::vector<LocalTensor> tensors;
    for (const auto& t : strategy.optimizerTargets()) {
        if (strategy.stageOf(t.name) != strategy.pipelineStage())
            continue; // a tied embedding's copy on the last stage: the first stores it
        LocalTensor lt;
        lt.name = t.name;
        lt.shape = model.param(t.name).info.shape;
        lt.decay = t.decay;
        lt.split = splits.at(t.name);
        lt.param = t.master.detach();
        auto it = adamw.state().find(t.name);
        if (it != adamw.state().end() && it->second.m.defined()) {
            lt.expAvg = it->second.m.view(t.master.sizes());
            lt.expAvgSq = it->second.v.view(t.master.sizes());
        }
        if (lt.split == TpSplit::Columns) { // whole rows: every TP rank's columns of them
            at::NoGradGuard noGrad;
            for (at::Tensor* b : {&lt.param, &lt.expAvg, &lt.expAvgSq})
                if (b->defined())
                    *b = engine::tp::gatherWhole(*b, {b->size(0), b->size(1) * layout.tp.size},
                        engine::tp::Split::Columns, *layout.group);
        }
        tensors.push_back(std::move(lt));
    }
    const SaveResult r = saveCheckpoint(req, tensors);
    out.saved = true;
    out.dir = r.dir;
    out.seconds = r.seconds;
    out.bytes = r.bytesWritten;
    return out;
}

std::shared_ptr<engine::CheckpointHooks> makeTrainCheckpointer(
    const protocol::RunSpec& spec, const std::string& modelDir)
{
    return std::make_shared<TrainCheckpointer>(spec, modelDir);
}

} // namespace shard::ckpt
