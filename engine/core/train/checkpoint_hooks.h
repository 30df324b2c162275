// The seam between the training loop and checkpointing: shard_ckpt implements it (save every N
// steps and at the end, exact resume, resharding) and the worker installs it in TrainerOptions.
// The loop only says when; the hooks read and write the strategy's shards and AdamW's state.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace shard::engine {

class AdamW;
class LlamaModel;
class Strategy;

// What the loop needs to continue a run exactly where a checkpoint left it.
struct LoopState {
    int64_t step = 0; // optimizer steps completed
    int64_t tokensSeen = 0;
    double wallTimeSec = 0.0;
    nlohmann::json dataPosition = nlohmann::json::object(); // BatchSource::position()
    std::string checkpointDir;                              // restore(): where it came from
    // The split of a step's rows: micro-batch x grad-accum x data-parallel ranks (0: not
    // recorded).
    int64_t microBatch = 0;
    int64_t gradAccum = 0;
    int worldSize = 0;
};

// A checkpoint written by afterStep().
struct CheckpointSaved {
    bool saved = false;
    std::string dir;
    double seconds = 0.0;
    int64_t bytes = 0; // this rank's shard file
};

class CheckpointHooks {
public:
    virtual ~CheckpointHooks() = default;
    // Called once before placement. True when the run continues from a checkpoint: the loop then
    // places the parameters without reading the model folder's weights, and calls restore().
    virtual bool resuming() = 0;
    // After placement and AdamW's creation: fills this rank's parameter shards, AdamW's state and
    // step count and the RNG from the checkpoint (resharding when the world size or strategy
    // changed). Collective over the ranks. Throws naming what does not match.
    virtual LoopState restore(LlamaModel& model, Strategy& strategy, AdamW& adamw) = 0;
    // Whether afterStep() saves after `step` steps (the loop reads the steps' losses to the host
    // first, so no checkpoint is taken from a run whose loss went non-finite).
    virtual bool due(int64_t step, bool last) const = 0;
    // After each optimizer step (state.step steps done, `last` after the final one, records of
    // the step already written): saves when due. Collective. Throws on a write error (a full
    // disk) with the cause; the previous checkpoints stay intact.
    virtual CheckpointSaved afterStep(
        LlamaModel& model, Strategy& strategy, AdamW& adamw, const LoopState& state, bool last)
        = 0;
    // Saves now, due or not (a preemption signal's checkpoint, also with --checkpoint-every 0).
    // Collective, like afterStep().
    virtual CheckpointSaved save(
        LlamaModel& model, Strategy& strategy, AdamW& adamw, const LoopState& state)
        = 0;
};

} // namespace shard::engine
