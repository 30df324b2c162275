// The global batch of a run (micro-batch x grad-accum x ranks): what the data and the memory
// allow, and how a resume at another rank count keeps it.
#pragma once

#include <cstdint>
#include <string>

#include "plan/model_spec.h"
#include "protocol/run_spec.h"

namespace shard::engine {

// Throws unless spec.microBatch x worldSize rows fit in the data (trainRecords) and the planner's
// memory estimate for one node of localWorldSize ranks fits the host's RAM (CPU runs); the
// message names the largest micro-batch that does.
void checkMicroBatch(const protocol::RunSpec& spec, const plan::ModelSpec& model, int worldSize,
    int localWorldSize, int64_t trainRecords);

// Offload: throws unless the host memory the planner puts on each rank (masters, gradient shards
// and AdamW state; with params+optimizer the parameter shards too), times localWorldSize ranks,
// fits hostMemoryBytes; the message says how much is needed and what to change. Nothing to check
// without offload.
void checkOffloadHostMemory(const protocol::RunSpec& spec, const plan::ModelSpec& model,
    int worldSize, int localWorldSize, int64_t hostMemoryBytes);

// The planner's largest micro-batch (at most the data's rows per rank) that fits
// capacityBytesPerRank on each rank (a GPU's memory, or a CPU rank's share); 0 when even 1 does
// not, -1 when the planner does not model this run.
int64_t largestMicroBatchFor(const protocol::RunSpec& spec, const plan::ModelSpec& model,
    int worldSize, int localWorldSize, int64_t trainRecords, bool gpu,
    int64_t capacityBytesPerRank);

// The split of a resumed run's step into micro-batches.
struct ResumeBatch {
    int64_t microBatch = 1;
    int64_t gradAccum = 1;
    bool changed = false; // the micro-batch or grad-accum differs from the spec's
    std::string message;  // what was kept or changed (empty when nothing differs)
};

// A checkpoint saved with savedMicroBatch x savedGradAccum x savedWorld rows per step resumed at
// `worldSize` ranks with the spec's micro-batch and grad-accum: the same split when the global
// batch is unchanged; else the spec's grad-accum (or micro-batch) with the other adjusted so the
// global batch stays; else the spec's values when spec.allowBatchChange; else throws naming the
// global batch, the rank counts that keep it, and --allow-batch-change. savedMicroBatch <= 0
// (a checkpoint that did not record it) keeps the spec's values.
ResumeBatch resumeBatch(const protocol::RunSpec& spec, int worldSize, int64_t savedMicroBatch,
    int64_t savedGradAccum, int savedWorld);

} // namespace shard::engine
