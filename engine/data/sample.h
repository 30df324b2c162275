// One training row as the engine consumes it.
#pragma once

#include <cstdint>
#include <vector>

namespace shard::data {

// Masked label value (as in Hugging Face / PyTorch cross-entropy ignore_index).
constexpr int32_t kIgnoreLabel = -100;

// inputIds and labels have exactly seqLen entries. labels[t] is inputIds[t] or kIgnoreLabel;
// the loss shifts them (logits at t predict labels[t + 1]). Padding has labels kIgnoreLabel.
struct Sample {
    std::vector<int32_t> inputIds;
    std::vector<int32_t> labels;
    // The record it came from (its global number: training files, then validation files), for
    // what is kept per record (DPO's precomputed reference); -1 when packed from several.
    int64_t record = -1;
};

} // namespace shard::data
