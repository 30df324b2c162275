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
};

} // namespace shard::data
