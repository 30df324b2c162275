// The training data stream: JSONL files indexed by line offset (never loaded whole), a
// validation split, a seeded shuffle per epoch, packing or padding to seqLen, and an exact
// (epoch, index) position for resume. Batches are global: the engine slices rows per rank, so
// the global batch never depends on the rank count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/sample.h"
#include "data/sample_builder.h"

namespace shard::tokenizer {
class Tokenizer;
}
namespace shard::protocol {
struct RunSpec;
}

namespace shard::data {

struct DataConfig {
    std::vector<std::string> files;
    DataFormat format = DataFormat::Auto; // Auto: detected per file from its first record
    int64_t seqLen = 512;
    bool packing = false; // pack several records per row; else one record per row, padded
    uint64_t seed = 0;
    bool shuffle = true;                      // false: records in file order
    double validationFraction = 0.0;          // held out from `files` (seeded, exact count)
    std::vector<std::string> validationFiles; // or a separate validation set
    bool skipBadLines = false;
    bool trainOnPrompt = false;
    std::string chatTemplate; // llama3 | chatml | llama2 | a template file; empty: tokenizer's
    int32_t padId = -1;       // -1: the tokenizer's pad id (0 without a tokenizer)
};

// The data settings of a run spec (files, format, sequence, packing, split, seed, bad lines,
// chat template): what the engine trains on and what the studio's preflight scans.
DataConfig dataConfigFor(const protocol::RunSpec& spec);

// Where the stream stands: `index` records of epoch `epoch`'s order are consumed.
struct Position {
    int64_t epoch = 0;
    int64_t index = 0;
    bool operator==(const Position& o) const { return epoch == o.epoch && index == o.index; }
};

// {"epoch": e, "index": i} for checkpoints and metric records; the reader throws naming the
// field that is missing or negative.
nlohmann::json positionToJson(const Position& position);
Position positionFromJson(const nlohmann::json& json);

class DataLoader {
public:
    // Indexes and validates every file (one streaming pass each). Throws "file:line: reason"
    // on the first bad line unless skipBadLines; throws when no usable record remains, when a
    // format needs a tokenizer that is missing, or when the chat template is unknown.
    DataLoader(DataConfig config, std::shared_ptr<const tokenizer::Tokenizer> tokenizer = {});
    ~DataLoader();
    DataLoader(const DataLoader&) = delete;
    DataLoader& operator=(const DataLoader&) = delete;
    DataLoader(DataLoader&&) noexcept;
    DataLoader& operator=(DataLoader&&) noexcept;

    // The next `rows` rows of the global order, each exactly seqLen long.
    std::vector<Sample> nextGlobalBatch(int64_t rows);

    Position position() const;
    // Restores a position from position(); the stream continues exactly from there.
    void setPosition(const Position& position);

    // The validation rows (packed/padded like training rows, file order); at most maxRows
    // when maxRows >= 0.
    std::vector<Sample> evalSamples(int64_t maxRows = -1);

    int64_t trainRecords() const;
    int64_t evalRecords() const;
    // Every source holds preference pairs (DPO, ORPO): each record is two rows, chosen then
    // rejected, and nextGlobalBatch takes an even number of rows (a pair never splits).
    bool preference() const;
    // Training and validation records together; a record's global number is its Sample::record.
    int64_t totalRecords() const;
    // The rows of one record by its global number, cut and padded as in training (a pair: two
    // rows; another record: one, not packed).
    std::vector<Sample> recordSamples(int64_t global);
    int64_t badLines() const;                               // lines skipped (skipBadLines)
    const std::vector<std::string>& badLineReports() const; // the first few "file:line: reason"
    int64_t truncatedRecords() const;                       // records cut to seqLen so far
    int32_t padId() const;
    int64_t seqLen() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

} // namespace shard::data
