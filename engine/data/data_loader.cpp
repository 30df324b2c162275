// DataLoader: per-file line indexes validated in one pass, a seeded per-epoch permutation of
// the training records, and a one-record look-ahead so packing never splits a record and the
// (epoch, index) position stays exact.
#include "data/data_loader.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/line_index.h"
#include "data/split_mix64.h"
#include "protocol/run_spec.h"
#include "tokenizer/tokenizer.h"

namespace shard::data {

namespace {

std::vector<int64_t> permutation(int64_t n, uint64_t seed)
{
    std::vector<int64_t> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        p[i] = i;
    SplitMix64 rng {seed};
    for (int64_t i = n - 1; i > 0; --i)
        std::swap(p[i], p[rng.next() % static_cast<uint64_t>(i + 1)]);
    return p;
}

struct Source {
    std::unique_ptr<LineIndex> index;
    DataFormat format = DataFormat::Auto;
};

} // namespace

struct DataLoader::Impl {
    DataConfig cfg;
    std::shared_ptr<const tokenizer::Tokenizer> tok;
    std::unique_ptr<SampleBuilder> builder;
    std::vector<Source> sources; // cfg.files then cfg.validationFiles
    size_t trainSourceCount = 0;
    std::vector<int64_t> sourceStart; // first global record number of each source
    std::vector<int64_t> trainIds;    // global record numbers of the training split
    std::vector<int64_t> evalIds;
    int32_t padId = 0;

    Position pos;
    int64_t orderEpoch = -1;
    std::vector<int64_t> order; // empty: file order
    std::optional<Example> pending;
    bool preference = false; // every source holds preference pairs: two rows per record

    int64_t badLines = 0;
    std::vector<std::string> reports;
    int64_t truncated = 0;

    void indexFile(const std::string& path)
    {
        Source src;
        src.format = cfg.format;
        const int64_t vocab = tok ? tok->vocabSize() : 0;
        auto bad = [&](int64_t line, const std::string& why) {
            const std::string msg = path + ":" + std::to_string(line) + ": " + why;
            if (!cfg.skipBadLines)
                throw std::runtime_error(msg + " (pass --skip-bad-lines to skip such lines)");
            ++badLines;
            if (reports.size() < 20)
                reports.push_back(msg);
            return false;
        };
        src.index = std::make_unique<LineIndex>(path, [&](const std::string& text, int64_t line) {
            nlohmann::json record;
            try {
                record = nlohmann::json::parse(text);
            } catch (const nlohmann::json::exception& e) {
                std::string what = e.what();
                if (what.size() > 160)
                    what = what.substr(0, 160) + "...";
                return bad(line, "malformed JSON: " + what);
            }
            if (src.format == DataFormat::Auto) {
                std::string why;
                const auto f = detectFormat(record, why);
                if (!f)
                    return bad(line, why);
                src.format = *f;
            }
            const std::string why = validateRecord(record, src.format, vocab);
            if (!why.empty())
                return bad(line, why + " (" + dataFormatName(src.format) + " format)");
            return true;
        });
        if (src.index->size() == 0)
            throw std::runtime_error(path + ": no usable records"
                + (badLines > 0 ? " (every line was bad)" : " (the file is empty)"));
        if (src.format != DataFormat::Tokenized && !tok)
            throw std::runtime_error(path + ": " + dataFormatName(src.format)
                + " data needs a tokenizer (a model folder with tokenizer.json)");
        sources.push_back(std::move(src));
    }

    template<typename F> auto withRecord(int64_t global, F&& build)
    {
        const auto it = std::upper_bound(sourceStart.begin(), sourceStart.end(), global);
        const size_t s = static_cast<size_t>(it - sourceStart.begin()) - 1;
        Source& src = sources[s];
        const int64_t local = global - sourceStart[s];
        const std::string line = src.index->read(local);
        try {
            return build(nlohmann::json::parse(line), src.format);
        } catch (const std::exception& e) {
            throw std::runtime_error(src.index->path() + ":"
                + std::to_string(src.index->line(local).number) + ": " + e.what());
        }
    }
    Example buildRecord(int64_t global)
    {
        return withRecord(global,
            [&](const nlohmann::json& r, DataFormat format) { return builder->build(r, format); });
    }
    // A pair's two rows (chosen, then rejected), cut to seqLen as truncatePair says and padded.
    void pairRows(int64_t global, std::vector<Sample>& out, bool countCut)
    {
        PairExample pair = withRecord(
            global, [&](const nlohmann::json& r, DataFormat) { return builder->buildPair(r); });
        if (truncatePair(pair, cfg.seqLen) && countCut)
            ++truncated;
        for (Example* ex : {&pair.chosen, &pair.rejected}) {
            Sample row;
            row.inputIds = std::move(ex->ids);
            row.labels = std::move(ex->labels);
            row.inputIds.resize(static_cast<size_t>(cfg.seqLen), padId);
            row.labels.resize(static_cast<size_t>(cfg.seqLen), kIgnoreLabel);
            row.record = global;
            out.push_back(std::move(row));
        }
    }

    int64_t trainCount() const { return static_cast<int64_t>(trainIds.size()); }

    void ensureOrder()
    {
        if (pos.index >= trainCount()) {
            ++pos.epoch;
            pos.index = 0;
        }
        if (orderEpoch == pos.epoch)
            return;
        orderEpoch = pos.epoch;
        if (cfg.shuffle)
            order = permutation(trainCount(),
                cfg.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(pos.epoch) + 1);
        else
            order.clear();
    }

    // The record at the current position, built once (look-ahead for packing).
    Example& peek()
    {
        ensureOrder();
        if (!pending) {
            const int64_t k = order.empty() ? pos.index : order[pos.index];
            pending = buildRecord(trainIds[k]);
        }
        return *pending;
    }
    void advance()
    {
        pending.reset();
        ++pos.index;
    }

    Sample makeRow(const std::function<Example*()>& next, const std::function<void()>& consume)
    {
        const auto seqLen = static_cast<size_t>(cfg.seqLen);
        Sample row;
        row.inputIds.reserve(seqLen);
        row.labels.reserve(seqLen);
        int64_t emptyRun = 0;
        while (row.inputIds.size() < seqLen) {
            Example* ex = next();
            if (!ex)
                break;
            if (ex->ids.empty()) {
                consume();
                if (++emptyRun > trainCount() + 1)
                    throw std::runtime_error("data: every record encodes to zero tokens");
                continue;
            }
            if (!row.inputIds.empty() && row.inputIds.size() + ex->ids.size() > seqLen)
                break; // does not fit: starts the next row
            const bool boundary = !row.inputIds.empty();
            const size_t take = std::min(ex->ids.size(), seqLen - row.inputIds.size());
            if (take < ex->ids.size())
                ++truncated;
            const size_t first = row.inputIds.size();
            row.inputIds.insert(row.inputIds.end(), ex->ids.begin(), ex->ids.begin() + take);
            row.labels.insert(row.labels.end(), ex->labels.begin(), ex->labels.begin() + take);
            // The first token of a packed record is not predicted from the previous record.
            if (boundary)
                row.labels[first] = kIgnoreLabel;
            consume();
            if (!cfg.packing)
                break;
        }
        row.inputIds.resize(seqLen, padId);
        row.labels.resize(seqLen, kIgnoreLabel);
        return row;
    }
};

nlohmann::json positionToJson(const Position& position)
{
    return {{"epoch", position.epoch}, {"index", position.index}};
}

Position positionFromJson(const nlohmann::json& json)
{
    Position p;
    for (const char* key : {"epoch", "index"}) {
        if (!json.is_object() || !json.contains(key) || !json[key].is_number_integer()
            || json[key].get<int64_t>() < 0)
            throw std::runtime_error(std::string("data position: \"") + key
                + "\" is missing or not a non-negative integer");
    }
    p.epoch = json["epoch"].get<int64_t>();
    p.index = json["index"].get<int64_t>();
    return p;
}

DataConfig dataConfigFor(const protocol::RunSpec& spec)
{
    DataConfig dc;
    dc.files = spec.data;
    dc.format = parseDataFormat(spec.dataFormat);
    dc.seqLen = spec.seqLen;
    dc.packing = spec.packing;
    dc.seed = spec.seed;
    dc.shuffle = spec.shuffle;
    dc.validationFraction = spec.evalFraction;
    if (!spec.evalData.empty())
        dc.validationFiles = {spec.evalData};
    dc.skipBadLines = spec.skipBadLines;
    dc.trainOnPrompt = spec.trainOnPrompt;
    dc.chatTemplate = spec.chatTemplate;
    return dc;
}

DataLoader::DataLoader(DataConfig config, std::shared_ptr<const tokenizer::Tokenizer> tokenizer)
    : m_impl(std::make_unique<Impl>())
{
    Impl& d = *m_impl;
    d.cfg = std::move(config);
    d.tok = std::move(tokenizer);
    if (d.cfg.files.empty())
        throw std::runtime_error("data: no training files given");
    if (d.cfg.seqLen < 2)
        throw std::runtime_error(
            "data: sequence length must be at least 2 (got " + std::to_string(d.cfg.seqLen) + ")");
    if (!(d.cfg.validationFraction >= 0.0 && d.cfg.validationFraction < 1.0))
        throw std::runtime_error("data: validation fraction must be in [0, 1)");
    if (d.cfg.validationFraction > 0.0 && !d.cfg.validationFiles.empty())
        throw std::runtime_error(
            "data: give either a validation fraction or validation files, not both");
    d.padId = d.cfg.padId >= 0 ? d.cfg.padId : (d.tok ? d.tok->padId() : 0);
    d.builder
        = std::make_unique<SampleBuilder>(d.tok.get(), d.cfg.trainOnPrompt, d.cfg.chatTemplate);

    int64_t total = 0;
    for (const auto& f : d.cfg.files) {
        d.indexFile(f);
        d.sourceStart.push_back(total);
        total += d.sources.back().index->size();
    }
    d.trainSourceCount = d.sources.size();
    const int64_t trainTotal = total;
    for (const auto& f : d.cfg.validationFiles) {
        d.indexFile(f);
        d.sourceStart.push_back(total);
        total += d.sources.back().index->size();
    }
    std::string pairFile, otherFile;
    for (size_t i = 0; i < d.sources.size(); ++i) {
        const Source& s = d.sources[i];
        const std::string& path = s.index->path();
        (s.format == DataFormat::Preference ? pairFile : otherFile) = path;
        if (s.format == DataFormat::Chat)
            d.builder->requireChatTemplate();
    }
    if (!pairFile.empty() && !otherFile.empty())
        throw std::runtime_error("data: " + pairFile + " holds preference pairs and " + otherFile
            + " does not; a run trains on one kind (use preference data for --objective dpo or "
              "orpo, and other formats for sft)");
    d.preference = !pairFile.empty();
    if (d.preference && d.cfg.packing)
        throw std::runtime_error(
            "data: preference pairs are not packed (each pair is two rows); drop --packing");

    if (d.cfg.validationFraction > 0.0) {
        const auto nEval = std::max<int64_t>(
            1, std::llround(static_cast<double>(trainTotal) * d.cfg.validationFraction));
        if (nEval >= trainTotal)
            throw std::runtime_error("data: validation fraction leaves no training records ("
                + std::to_string(trainTotal) + " records)");
        std::vector<int64_t> p = permutation(trainTotal, d.cfg.seed ^ 0x5EEDF00Dull);
        d.evalIds.assign(p.begin(), p.begin() + nEval);
        d.trainIds.assign(p.begin() + nEval, p.end());
        std::sort(d.evalIds.begin(), d.evalIds.end());
        std::sort(d.trainIds.begin(), d.trainIds.end());
    } else {
        d.trainIds.resize(static_cast<size_t>(trainTotal));
        for (int64_t i = 0; i < trainTotal; ++i)
            d.trainIds[i] = i;
        for (int64_t i = trainTotal; i < total; ++i)
            d.evalIds.push_back(i);
    }
}

DataLoader::~DataLoader() = default;
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

std::vector<Sample> DataLoader::nextGlobalBatch(int64_t rows)
{
    Impl& d = *m_impl;
    std::vector<Sample> out;
    out.reserve(static_cast<size_t>(std::max<int64_t>(rows, 0)));
    if (d.preference) {
        if (rows % 2 != 0)
            throw std::runtime_error("data: preference pairs come two rows at a time (asked for "
                + std::to_string(rows) + " rows)");
        for (int64_t p = 0; p < rows / 2; ++p) {
            d.ensureOrder();
            const int64_t k = d.order.empty() ? d.pos.index : d.order[d.pos.index];
            d.pairRows(d.trainIds[k], out, true);
            d.advance();
        }
        return out;
    }
    for (int64_t r = 0; r < rows; ++r)
        out.push_back(d.makeRow([&d]() -> Example* { return &d.peek(); }, [&d] { d.advance(); }));
    return out;
}

Position DataLoader::position() const
{
    Position p = m_impl->pos;
    if (p.index >= m_impl->trainCount()) {
        ++p.epoch;
        p.index = 0;
    }
    return p;
}

void DataLoader::setPosition(const Position& position)
{
    Impl& d = *m_impl;
    if (position.epoch < 0 || position.index < 0 || position.index > d.trainCount())
        throw std::runtime_error("data: position (epoch " + std::to_string(position.epoch)
            + ", index " + std::to_string(position.index) + ") is outside this dataset of "
            + std::to_string(d.trainCount()) + " training records (a different dataset?)");
    d.pos = position;
    d.pending.reset();
}

std::vector<Sample> DataLoader::evalSamples(int64_t maxRows)
{
    Impl& d = *m_impl;
    std::vector<Sample> out;
    size_t next = 0;
    std::optional<Example> cur;
    auto peek = [&]() -> Example* {
        if (!cur) {
            if (next >= d.evalIds.size())
                return nullptr;
            cur = d.buildRecord(d.evalIds[next]);
        }
        return &*cur;
    };
    auto consume = [&] {
        cur.reset();
        ++next;
    };
    const int64_t saved = d.truncated;
    if (d.preference) {
        for (size_t i = 0; i < d.evalIds.size() && (maxRows < 0 || int64_t(out.size()) < maxRows);
             ++i)
            d.pairRows(d.evalIds[i], out, false);
        return out;
    }
    while (next < d.evalIds.size() && (maxRows < 0 || static_cast<int64_t>(out.size()) < maxRows))
        out.push_back(d.makeRow(peek, consume));
    d.truncated = saved; // the truncation count reports training records
    return out;
}

bool DataLoader::preference() const
{
    return m_impl->preference;
}

int64_t DataLoader::totalRecords() const
{
    return static_cast<int64_t>(m_impl->trainIds.size() + m_impl->evalIds.size());
}

std::vector<Sample> DataLoader::recordSamples(int64_t global)
{
    Impl& d = *m_impl;
    if (global < 0 || global >= totalRecords())
        throw std::runtime_error("data: record " + std::to_string(global) + " is outside [0, "
            + std::to_string(totalRecords()) + ")");
    std::vector<Sample> out;
    if (d.preference) {
        d.pairRows(global, out, false);
        return out;
    }
    Example ex = d.buildRecord(global);
    Sample row;
    const size_t n = std::min(ex.ids.size(), static_cast<size_t>(d.cfg.seqLen));
    row.inputIds.assign(ex.ids.begin(), ex.ids.begin() + n);
    row.labels.assign(ex.labels.begin(), ex.labels.begin() + n);
    row.inputIds.resize(static_cast<size_t>(d.cfg.seqLen), d.padId);
    row.labels.resize(static_cast<size_t>(d.cfg.seqLen), kIgnoreLabel);
    row.record = global;
    out.push_back(std::move(row));
    return out;
}

int64_t DataLoader::trainRecords() const
{
    return m_impl->trainCount();
}
int64_t DataLoader::evalRecords() const
{
    return static_cast<int64_t>(m_impl->evalIds.size());
}
int64_t DataLoader::badLines() const
{
    return m_impl->badLines;
}
const std::vector<std::string>& DataLoader::badLineReports() const
{
    return m_impl->reports;
}
int64_t DataLoader::truncatedRecords() const
{
    return m_impl->truncated;
}
int32_t DataLoader::padId() const
{
    return m_impl->padId;
}
int64_t DataLoader::seqLen() const
{
    return m_impl->cfg.seqLen;
}

} // namespace shard::data
