// One memory vocabulary (docs/ARCHITECTURE.md, "Memory categories"): the categories a rank's
// metric records measure, in the order every view stacks them, each with its record key (also
// the run store's column), its label, its field of RankMemory, whether it persists through a
// step, and the planner's categories (plan::MemoryBreakdown::components keys) it is compared
// with. The records' reader and writer and the Monitor loop over this table.
#pragma once

#include <cstdint>
#include <vector>

#include "protocol/records.h"

namespace shard::protocol {

struct MemoryCategory {
    const char* key;   // metric record "memory" key and run store column, e.g. "sharded_params"
    const char* label; // as views show it, e.g. "sharded params"
    int64_t RankMemory::*bytes;
    // Held through a step (the record's step-end figure is the figure at the peak too); else
    // alive only inside the step (gathered parameters, gradients: freed before the record).
    bool persistent;
    bool writtenWhenZero;                 // false: left out of a record while 0 (LoRA only)
    std::vector<const char*> plannedKeys; // the planner's components this category holds
};

// sharded params, gathered params, frozen base, grads, optimizer, activations, other.
const std::vector<MemoryCategory>& memoryCategories();

// The planner's bytes per category (memoryCategories' order) from its (key, bytes) components;
// a component no category names is counted in "other".
std::vector<int64_t> plannedByCategory(
    const std::vector<std::pair<std::string, int64_t>>& plannedComponents);

} // namespace shard::protocol
