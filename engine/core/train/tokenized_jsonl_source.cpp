// Pre-tokenized rows with file:line errors and a seeded per-epoch order.
#include "tokenized_jsonl_source.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <stdexcept>

namespace shard::engine {

namespace {

std::vector<int32_t> idArray(const nlohmann::json& j, const char* key, const std::string& where,
    int64_t vocab, bool allowMask)
{
    if (!j.is_array())
        throw std::runtime_error(where + ": '" + key + "' must be an array of integers");
    std::vector<int32_t> out;
    out.reserve(j.size());
    for (const auto& v : j) {
        if (!v.is_number_integer())
            throw std::runtime_error(where + ": '" + key + "' holds a non-integer " + v.dump());
        const int64_t id = v.get<int64_t>();
        if (allowMask && id == -100) {
            out.push_back(-100);
            continue;
        }
        if (id < 0 || id >= vocab)
            throw std::runtime_error(where + ": '" + key + "' holds id " + std::to_string(id)
                + " outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
        out.push_back(static_cast<int32_t>(id));
    }
    return out;
}

} // namespace

TokenizedJsonlSource::TokenizedJsonlSource(TokenizedJsonlConfig config)
    : m_config(std::move(config))
{
    m_train = load(m_config.path);
    if (!m_config.evalPath.empty()) {
        m_eval = load(m_config.evalPath);
    } else if (m_config.evalFraction > 0.0) {
        if (m_config.evalFraction >= 1.0)
            throw std::runtime_error("eval fraction must be below 1");
        std::vector<int64_t> idx(m_train.size());
        std::iota(idx.begin(), idx.end(), 0);
        std::mt19937_64 rng(m_config.seed ^ 0x5eedE7A1ull);
        std::shuffle(idx.begin(), idx.end(), rng);
        const auto n = static_cast<size_t>(m_config.evalFraction * m_train.size());
        if (n == 0 || n >= m_train.size())
            throw std::runtime_error(m_config.path + ": eval fraction "
                + std::to_string(m_config.evalFraction) + " of " + std::to_string(m_train.size())
                + " samples leaves an empty split");
        std::vector<bool> held(m_train.size(), false);
        for (size_t i = 0; i < n; ++i)
            held[idx[i]] = true;
        std::vector<TrainRow> train;
        for (size_t i = 0; i < m_train.size(); ++i)
            (held[i] ? m_eval : train).push_back(std::move(m_train[i]));
        m_train = std::move(train);
    }
    newEpoch();
}

std::vector<TrainRow> TokenizedJsonlSource::load(const std::string& path) const
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error(path + ": cannot open the data file (does it exist?)");
    std::vector<TrainRow> rows;
    std::string line;
    int64_t number = 0;
    while (std::getline(in, line)) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        const std::string where = path + ":" + std::to_string(number);
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            throw std::runtime_error(where + ": not valid JSON (" + e.what() + ")");
        }
        if (!j.is_object() || !j.contains("input_ids"))
            throw std::runtime_error(where
                + ": expected an object with \"input_ids\" "
                  "(pre-tokenized data)");
        TrainRow row;
        row.inputIds = idArray(j["input_ids"], "input_ids", where, m_config.vocabSize, false);
        if (row.inputIds.empty())
            throw std::runtime_error(where + ": 'input_ids' is empty");
        if (j.contains("labels")) {
            row.labels = idArray(j["labels"], "labels", where, m_config.vocabSize, true);
            if (row.labels.size() != row.inputIds.size())
                throw std::runtime_error(where + ": 'labels' has "
                    + std::to_string(row.labels.size()) + " entries but 'input_ids' has "
                    + std::to_string(row.inputIds.size()));
        } else {
            row.labels = row.inputIds;
        }
        const auto L = static_cast<size_t>(m_config.seqLen);
        row.inputIds.resize(L, m_config.padId);
        row.labels.resize(L, -100);
        rows.push_back(std::move(row));
    }
    if (rows.empty())
        throw std::runtime_error(path + ": no samples (the file is empty)");
    return rows;
}

void TokenizedJsonlSource::newEpoch()
{
    m_order.resize(m_train.size());
    std::iota(m_order.begin(), m_order.end(), 0);
    if (m_config.shuffle) {
        std::mt19937_64 rng(m_config.seed * 1000003ull + static_cast<uint64_t>(m_epoch));
        std::shuffle(m_order.begin(), m_order.end(), rng);
    }
    m_index = 0;
}

void TokenizedJsonlSource::setPosition(const nlohmann::json& position)
{
    int64_t epoch = -1, index = -1;
    if (position.is_object() && position.contains("epoch") && position.contains("index")
        && position["epoch"].is_number_integer() && position["index"].is_number_integer()) {
        epoch = position["epoch"].get<int64_t>();
        index = position["index"].get<int64_t>();
    }
    if (epoch < 0 || index < 0 || index > static_cast<int64_t>(m_train.size()))
        throw std::runtime_error("data position " + position.dump() + " is not valid for "
            + m_config.path + " (" + std::to_string(m_train.size()) + " records)");
    m_epoch = epoch;
    newEpoch(); // the order of epoch `epoch` (seeded by it)
    m_index = index;
}

std::vector<TrainRow> TokenizedJsonlSource::nextGlobalBatch(int64_t rows)
{
    std::vector<TrainRow> out;
    out.reserve(rows);
    while (static_cast<int64_t>(out.size()) < rows) {
        if (m_index >= static_cast<int64_t>(m_order.size())) {
            ++m_epoch;
            newEpoch();
        }
        out.push_back(m_train[m_order[m_index++]]);
    }
    return out;
}

} // namespace shard::engine
