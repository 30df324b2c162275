// The training loop's data through shard_data's DataLoader (text, Alpaca, chat and pre-tokenized
// JSONL; packing; validation split; seeded shuffle), with token ids bounded by the model's
// vocabulary.
#pragma once

#include <memory>

#include "core/train/batch_source.h"
#include "data/data_loader.h"
#include "protocol/run_spec.h"

namespace shard::engine {

class DataLoaderSource : public BatchSource {
public:
    // Validates every data file now (file:line errors). The tokenizer comes from spec.tokenizer,
    // else the model folder; it is required for text formats and optional for pre-tokenized data.
    DataLoaderSource(const protocol::RunSpec& spec, const std::string& modelDir, int64_t vocabSize);
    std::vector<TrainRow> nextGlobalBatch(int64_t rows) override;
    std::vector<TrainRow> evalRows() override { return m_eval; }
    nlohmann::json position() const override;
    void setPosition(const nlohmann::json& position) override;
    int64_t trainRecords() const override { return m_loader->trainRecords(); }
    bool preference() const override { return m_loader->preference(); }
    int64_t totalRecords() const override { return m_loader->totalRecords(); }
    std::vector<TrainRow> recordRows(int64_t record) override
    {
        return convert(m_loader->recordSamples(record), "data");
    }
    int64_t badLines() const override { return m_loader->badLines(); }
    std::vector<std::string> badLineReports() const override { return m_loader->badLineReports(); }

private:
    std::vector<TrainRow> convert(std::vector<data::Sample> samples, const char* what) const;

    std::unique_ptr<data::DataLoader> m_loader;
    std::vector<TrainRow> m_eval;
    std::string m_files;
    int64_t m_vocab = 0;
};

} // namespace shard::engine
