// The training loop's checkpoint hooks (engine::CheckpointHooks): saves this rank's optimizer
// targets (fp32 parameter shards), AdamW's m and v, the RNG, the step, the data position and the
// schedule position every N steps and at the end; restores them on --resume, resharding when the
// world size or strategy differs from the saving run.
#pragma once

#include <memory>
#include <string>

#include "core/train/checkpoint_hooks.h"
#include "protocol/run_spec.h"

namespace shard::ckpt {

class TrainCheckpointer : public engine::CheckpointHooks {
public:
    // spec.checkpointEvery (0 = no checkpoints), spec.keepCheckpoints, spec.resume ("", "auto",
    // PATH) and spec.outDir (the run directory). `modelDir` is the model folder the run started
    // from (recorded for export's tokenizer files).
    TrainCheckpointer(protocol::RunSpec spec, std::string modelDir);

    bool resuming() override;
    bool due(int64_t step, bool last) const override;
    engine::LoopState restore(
        engine::LlamaModel& model, engine::Strategy& strategy, engine::AdamW& adamw) override;
    engine::CheckpointSaved afterStep(engine::LlamaModel& model, engine::Strategy& strategy,
        engine::AdamW& adamw, const engine::LoopState& state, bool last) override;
    engine::CheckpointSaved save(engine::LlamaModel& model, engine::Strategy& strategy,
        engine::AdamW& adamw, const engine::LoopState& state) override;

    // The run id: the run directory's name and a hash of the spec fields that define the run
    // (data, seed, optimizer and schedule; not what a resume may change: steps, world size,
    // strategy, micro-batch split, precision, cadence, paths).
    const std::string& runId() const { return m_runId; }
    // The data fields a resume must keep (files, format, sequence length, seed, shuffle...).
    nlohmann::json dataSpec() const;
    // The checkpoint the run resumes from ("" = a fresh start); resolved on first use.
    const std::string& resumeDir();

private:
    protocol::RunSpec m_spec;
    std::string m_modelDir;
    std::string m_runId;
    bool m_resolved = false;
    std::string m_resumeDir;
};

// What the worker installs in TrainerOptions: with --checkpoint-every 0 and no --resume it saves
// only when told to (a preemption signal's checkpoint).
std::shared_ptr<engine::CheckpointHooks> makeTrainCheckpointer(
    const protocol::RunSpec& spec, const std::string& modelDir);

} // namespace shard::ckpt
