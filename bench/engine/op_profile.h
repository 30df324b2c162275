// Self time per ATen op (wall clock) through RecordFunction callbacks, split into forward and
// backward (an op inside an autograd node's backward counts as backward). Bench-only.
#pragma once

#include <map>
#include <string>

namespace shard::bench {

class OpProfile {
public:
    // Starts recording on this thread and every thread that runs ops (global callback).
    void start();
    // Stops recording; returns "fwd|aten::mm" / "bwd|aten::mm" -> self seconds.
    std::map<std::string, double> stop();
};

} // namespace shard::bench
