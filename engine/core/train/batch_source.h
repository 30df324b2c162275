// What the training loop needs from the data: global batches of rows already padded or packed
// to the sequence length, held-out rows for evaluation, and a resumable position.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace shard::engine {

// labels[t] is the target at position t as in Hugging Face (the loss shifts: logits at t predict
// labels[t + 1]); -100 masks a position. Both vectors are seqLen long.
struct TrainRow {
    std::vector<int32_t> inputIds;
    std::vector<int32_t> labels;
    int64_t record = -1; // the record's global number (data::Sample::record)
};

class BatchSource {
public:
    virtual ~BatchSource() = default;
    // The next `rows` rows of the global order (every rank sees the same global batch).
    virtual std::vector<TrainRow> nextGlobalBatch(int64_t rows) = 0;
    // Held-out rows (empty when there is no evaluation split).
    virtual std::vector<TrainRow> evalRows() = 0;
    virtual nlohmann::json position() const = 0; // {"epoch":..,"index":..}
    // Continues exactly from a position() (resume). Throws for a position this source cannot
    // reach.
    virtual void setPosition(const nlohmann::json& position);
    virtual int64_t trainRecords() const = 0;
    // Lines left out as bad (--skip-bad-lines) and the first few "file:line: reason".
    // Preference pairs (DPO, ORPO): rows come in (chosen, rejected) pairs of one record.
    virtual bool preference() const { return false; }
    // Every record (training then held-out) and the rows of one by its global number, for a
    // pass over the whole data (DPO's precomputed reference).
    virtual int64_t totalRecords() const { return 0; }
    virtual std::vector<TrainRow> recordRows(int64_t /*record*/) { return {}; }
    virtual int64_t badLines() const { return 0; }
    virtual std::vector<std::string> badLineReports() const { return {}; }
};

inline void BatchSource::setPosition(const nlohmann::json&)
{
    throw std::runtime_error("this data source cannot resume from a checkpoint position");
}

} // namespace shard::engine
