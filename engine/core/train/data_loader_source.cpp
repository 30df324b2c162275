// Adapter from shard_data's global batches to the loop's rows.
#include "data_loader_source.h"

#include <filesystem>
#include <stdexcept>

#include "tokenizer/tokenizer.h"

namespace shard::engine {

DataLoaderSource::DataLoaderSource(
    const protocol::RunSpec& spec, const std::string& modelDir, int64_t vocabSize)
    : m_vocab(vocabSize)
{
    const data::DataConfig dc = data::dataConfigFor(spec);
    for (const auto& f : spec.data)
        m_files += (m_files.empty() ? "" : ", ") + f;

    std::shared_ptr<const tokenizer::Tokenizer> tok;
    const std::string tokDir = spec.tokenizer.empty() ? modelDir : spec.tokenizer;
    if (std::filesystem::exists(std::filesystem::path(tokDir) / "tokenizer.json")) {
        tok = std::make_shared<const tokenizer::Tokenizer>(
            tokenizer::Tokenizer::fromFolder(tokDir));
        if (tok->vocabSize() > vocabSize)
            throw std::runtime_error(tokDir + "/tokenizer.json: the tokenizer has "
                + std::to_string(tok->vocabSize()) + " tokens but the model's vocab_size is "
                + std::to_string(vocabSize) + "; use the tokenizer that came with the model");
    } else if (!spec.tokenizer.empty()) {
        throw std::runtime_error("tokenizer folder '" + spec.tokenizer + "' has no tokenizer.json");
    }
    m_loader = std::make_unique<data::DataLoader>(dc, tok);
    if (m_loader->padId() < 0 || m_loader->padId() >= vocabSize)
        throw std::runtime_error("padding id " + std::to_string(m_loader->padId())
            + " is outside the model's vocabulary");
    if (m_loader->evalRecords() > 0)
        m_eval = convert(m_loader->evalSamples(), "held-out data");
}

std::vector<TrainRow> DataLoaderSource::convert(
    std::vector<data::Sample> samples, const char* what) const
{
    std::vector<TrainRow> out;
    out.reserve(samples.size());
    for (auto& s : samples) {
        for (int32_t id : s.inputIds)
            if (id < 0 || id >= m_vocab)
                throw std::runtime_error(std::string(what) + " (" + m_files + "): token id "
                    + std::to_string(id) + " is outside the model's vocabulary [0, "
                    + std::to_string(m_vocab) + "); was the data tokenized for another model?");
        out.push_back({std::move(s.inputIds), std::move(s.labels), s.record});
    }
    return out;
}

std::vector<TrainRow> DataLoaderSource::nextGlobalBatch(int64_t rows)
{
    return convert(m_loader->nextGlobalBatch(rows), "training data");
}

nlohmann::json DataLoaderSource::position() const
{
    return data::positionToJson(m_loader->position());
}

void DataLoaderSource::setPosition(const nlohmann::json& position)
{
    m_loader->setPosition(data::positionFromJson(position));
}

} // namespace shard::engine
