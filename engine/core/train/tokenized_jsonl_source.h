// Pre-tokenized JSONL rows {"input_ids":[...],"labels":[...]} (labels optional): truncated or
// padded to seqLen, shuffled per epoch by seed. Used until shard_data's DataLoader is linked.
#pragma once

#include <random>

#include "core/train/batch_source.h"

namespace shard::engine {

struct TokenizedJsonlConfig {
    std::string path;
    std::string evalPath;      // optional held-out file
    double evalFraction = 0.0; // or hold out this fraction of `path` (seeded)
    int64_t seqLen = 128;
    int64_t vocabSize = 0; // ids must be < vocabSize
    int32_t padId = 0;
    uint64_t seed = 0;
    bool shuffle = true;
};

class TokenizedJsonlSource : public BatchSource {
public:
    // Reads and validates every line; throws "file:line: reason" for the first bad line and
    // "file: no samples" for an empty file.
    explicit TokenizedJsonlSource(TokenizedJsonlConfig config);
    std::vector<TrainRow> nextGlobalBatch(int64_t rows) override;
    std::vector<TrainRow> evalRows() override { return m_eval; }
    nlohmann::json position() const override { return {{"epoch", m_epoch}, {"index", m_index}}; }
    void setPosition(const nlohmann::json& position) override;
    int64_t trainRecords() const override { return static_cast<int64_t>(m_train.size()); }

private:
    std::vector<TrainRow> load(const std::string& path) const;
    void newEpoch();

    TokenizedJsonlConfig m_config;
    std::vector<TrainRow> m_train;
    std::vector<TrainRow> m_eval;
    std::vector<int64_t> m_order;
    int64_t m_epoch = 0;
    int64_t m_index = 0;
};

} // namespace shard::engine
