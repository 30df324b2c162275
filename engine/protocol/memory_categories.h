// One memory vocabulary (docs/ARCHITECTURE.md, section 4, item 6): the categories a rank's
// metric records measure, in the order every view stacks them, each with its record key (also
// the run store's column), its label, its field of RankMemory, what its step-end figure is,
// and the planner's categories (plan::MemoryBreakdown::components keys) it is compared with.
// The records' reader and writer, the run store and the Monitor loop over this table.
#pragma once

#include <cstdint>
#include <vector>

#include "protocol/records.h"

namespace shard::protocol {

struct MemoryCategory {
    const char* key;   // metric record "memory" key and run store column, e.g. "sharded_params"
    const char* label; // as views show it, e.g. "sharded params"
    int64_t RankMemory::*bytes;
    // What the record's figure, taken at the step's end, is.
    enum class Measured {
        Held,    // held through a step: the figure at the peak too
        Freed,   // alive only inside a step (gathered parameters, gradients): freed by then
        Largest, // the largest forward's (activations)
        Rest,    // what the allocator holds besides the others at the record
    } measured;
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
