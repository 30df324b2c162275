// Pipeline stages balanced by compute (docs/ARCHITECTURE.md, "Pipeline parallel"): a stage's
// time is its blocks' plus, on the last, the LM head's, so where the head is heavy (a large
// vocabulary on a small model: Qwen2.5-0.5B's head costs nine of its blocks) the last stage
// takes fewer layers. The engine's strategy and the planner both cut the model here, so the plan
// describes the stages the engine runs.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "plan/model_spec.h"

namespace shard::plan {

// Training compute per token of one block and of the LM head, in multiply-adds per token
// (proportional to the forward and backward FLOPs of their matrix products): a block's active
// weights (its experts' share under MoE), the head's vocabulary x hidden. The embedding is a
// lookup (no products) and costs nothing here.
struct LayerCosts {
    double block = 0;
    double head = 0;
};
LayerCosts layerCosts(const ModelSpec& spec);

// The layers [first, end) of each of `stages` contiguous stages (virtual stages under
// interleaving: stage c * pp + s is chunk c of rank s), each with at least one layer, that
// minimise the largest stage's cost (its blocks, plus the head on the last), and among those the
// sum of their squares. The even split (the first layers % stages stages one layer more) is kept
// whenever it is as good: a model with a light head is cut evenly. Throws std::runtime_error
// when there are fewer layers than stages.
std::vector<std::pair<int64_t, int64_t>> balancedStages(const ModelSpec& spec, int64_t stages);

// The largest stage's cost over the mean stage's (1: perfectly balanced; the pipeline runs at
// the pace of its slowest stage), for the planner's notes.
double stageImbalance(const ModelSpec& spec, const std::vector<std::pair<int64_t, int64_t>>& cut);

} // namespace shard::plan
