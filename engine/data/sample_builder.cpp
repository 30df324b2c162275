// Record -> (ids, labels). Segmented records (Alpaca, chat) are encoded as one text when the
// encoding of each prompt prefix is a prefix of the whole (true for byte-level tokenizers at
// these boundaries), so training sees the same tokens as inference; otherwise per segment.
#include "data/sample_builder.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "data/sample.h"
#include "tokenizer/tokenizer.h"

namespace shard::data {

DataFormat parseDataFormat(std::string_view name)
{
    if (name == "auto")
        return DataFormat::Auto;
    if (name == "text")
        return DataFormat::Text;
    if (name == "alpaca")
        return DataFormat::Alpaca;
    if (name == "chat")
        return DataFormat::Chat;
    if (name == "tokenized")
        return DataFormat::Tokenized;
    throw std::runtime_error("unknown data format '" + std::string(name)
        + "' (use auto, text, alpaca, chat or tokenized)");
}

std::string dataFormatName(DataFormat format)
{
    switch (format) {
    case DataFormat::Auto:
        return "auto";
    case DataFormat::Text:
        return "text";
    case DataFormat::Alpaca:
        return "alpaca";
    case DataFormat::Chat:
        return "chat";
    case DataFormat::Tokenized:
        return "tokenized";
    }
    return "?";
}

std::optional<DataFormat> detectFormat(const nlohmann::json& record, std::string& why)
{
    if (!record.is_object()) {
        why = "line is not a JSON object";
        return std::nullopt;
    }
    if (record.contains("input_ids"))
        return DataFormat::Tokenized;
    if (record.contains("messages"))
        return DataFormat::Chat;
    if (record.contains("instruction"))
        return DataFormat::Alpaca;
    if (record.contains("text"))
        return DataFormat::Text;
    std::string keys;
    for (auto it = record.begin(); it != record.end(); ++it)
        keys += (keys.empty() ? "" : ", ") + it.key();
    why = "unknown record shape (keys: " + (keys.empty() ? std::string("none") : keys)
        + "); expected \"text\", \"instruction\"/\"output\", \"messages\" or \"input_ids\"";
    return std::nullopt;
}

namespace {

std::string checkIds(const nlohmann::json& arr, const char* key, int64_t vocabSize, bool labels)
{
    if (!arr.is_array())
        return std::string("\"") + key + "\" is not an array";
    for (size_t i = 0; i < arr.size(); ++i) {
        const auto& v = arr[i];
        if (!v.is_number_integer())
            return std::string("\"") + key + "\"[" + std::to_string(i) + "] is not an integer";
        const int64_t x = v.get<int64_t>();
        if (labels && x == kIgnoreLabel)
            continue;
        if (x < 0 || (vocabSize > 0 && x >= vocabSize))
            return std::string("\"") + key + "\"[" + std::to_string(i) + "] = " + std::to_string(x)
                + " is outside the vocabulary [0, " + std::to_string(vocabSize) + ")"
                + (labels ? " and is not -100" : "");
    }
    return {};
}

std::string requireString(const nlohmann::json& r, const char* key, bool optional = false)
{
    if (!r.contains(key))
        return optional ? std::string() : std::string("missing \"") + key + "\"";
    if (!r[key].is_string())
        return std::string("\"") + key + "\" is not a string";
    return {};
}

} // namespace

std::string validateRecord(const nlohmann::json& r, DataFormat format, int64_t vocabSize)
{
    if (!r.is_object())
        return "line is not a JSON object";
    switch (format) {
    case DataFormat::Auto:
        return "format not resolved";
    case DataFormat::Text:
        return requireString(r, "text");
    case DataFormat::Alpaca: {
        for (const char* key : {"instruction", "output"})
            if (auto e = requireString(r, key); !e.empty())
                return e;
        return requireString(r, "input", true);
    }
    case DataFormat::Chat: {
        if (!r.contains("messages"))
            return "missing \"messages\"";
        const auto& msgs = r["messages"];
        if (!msgs.is_array() || msgs.empty())
            return "\"messages\" is not a non-empty array";
        for (size_t i = 0; i < msgs.size(); ++i) {
            const auto& m = msgs[i];
            const std::string at = "messages[" + std::to_string(i) + "]";
            if (!m.is_object() || !m.contains("role") || !m["role"].is_string()
                || !m.contains("content") || !m["content"].is_string())
                return at + " needs string \"role\" and \"content\"";
            const auto& role = m["role"].get_ref<const std::string&>();
            if (role != "system" && role != "user" && role != "assistant")
                return at + " has unknown role '" + role + "' (expected system, user, assistant)";
        }
        return {};
    }
    case DataFormat::Tokenized: {
        if (!r.contains("input_ids"))
            return "missing \"input_ids\"";
        if (auto e = checkIds(r["input_ids"], "input_ids", vocabSize, false); !e.empty())
            return e;
        if (r["input_ids"].empty())
            return "\"input_ids\" is empty";
        if (r.contains("labels") && !r["labels"].is_null()) {
            if (auto e = checkIds(r["labels"], "labels", vocabSize, true); !e.empty())
                return e;
            if (r["labels"].size() != r["input_ids"].size())
                return "\"labels\" has " + std::to_string(r["labels"].size())
                    + " entries but \"input_ids\" has " + std::to_string(r["input_ids"].size());
        }
        return {};
    }
    }
    return {};
}

SampleBuilder::SampleBuilder(
    const tokenizer::Tokenizer* tokenizer, bool trainOnPrompt, std::string chatTemplate)
    : m_tokenizer(tokenizer)
    , m_trainOnPrompt(trainOnPrompt)
    , m_chatTemplateName(std::move(chatTemplate))
{
}

void SampleBuilder::requireChatTemplate()
{
    if (m_chatTemplate)
        return;
    if (!m_tokenizer)
        throw std::runtime_error(
            "chat data needs a tokenizer (a model folder with tokenizer.json)");
    m_chatTemplate = tokenizer::detectChatTemplate(*m_tokenizer, m_chatTemplateName);
}

Example SampleBuilder::buildSegments(
    const std::vector<tokenizer::ChatSegment>& segments, bool addPrefix)
{
    const tokenizer::Tokenizer& tok = *m_tokenizer;
    Example ex;
    if (addPrefix) {
        // What encode(…, addSpecial=true) puts in front (e.g. BOS for Llama 2): prompt side.
        ex.ids = tok.encode("", true);
        for (int32_t id : ex.ids)
            ex.labels.push_back(m_trainOnPrompt ? id : kIgnoreLabel);
    }
    std::string whole;
    for (const auto& s : segments)
        whole += s.text;
    const std::vector<int32_t> all = tok.encode(whole, false);
    // Token boundaries of each segment when the whole encoding respects them.
    std::vector<size_t> ends;
    std::string prefix;
    bool aligned = true;
    for (size_t k = 0; k + 1 < segments.size() && aligned; ++k) {
        prefix += segments[k].text;
        const std::vector<int32_t> head = tok.encode(prefix, false);
        aligned = head.size() <= all.size() && std::equal(head.begin(), head.end(), all.begin());
        ends.push_back(head.size());
    }
    if (aligned) {
        ends.push_back(all.size());
        size_t start = 0;
        for (size_t k = 0; k < segments.size(); ++k) {
            const bool train = segments[k].trainable || m_trainOnPrompt;
            for (size_t i = start; i < ends[k]; ++i) {
                ex.ids.push_back(all[i]);
                ex.labels.push_back(train ? all[i] : kIgnoreLabel);
            }
            start = std::max(start, ends[k]);
        }
        return ex;
    }
    for (const auto& s : segments) {
        const std::vector<int32_t> ids = tok.encode(s.text, false);
        const bool train = s.trainable || m_trainOnPrompt;
        for (int32_t id : ids) {
            ex.ids.push_back(id);
            ex.labels.push_back(train ? id : kIgnoreLabel);
        }
    }
    return ex;
}

Example SampleBuilder::build(const nlohmann::json& r, DataFormat format)
{
    if (format == DataFormat::Tokenized) {
        Example ex;
        ex.ids = r["input_ids"].get<std::vector<int32_t>>();
        if (r.contains("labels") && !r["labels"].is_null())
            ex.labels = r["labels"].get<std::vector<int32_t>>();
        else
            ex.labels = ex.ids;
        return ex;
    }
    if (!m_tokenizer)
        throw std::runtime_error(dataFormatName(format)
            + " data needs a tokenizer (a model folder with tokenizer.json)");
    const tokenizer::Tokenizer& tok = *m_tokenizer;
    switch (format) {
    case DataFormat::Text: {
        Example ex;
        ex.ids = tok.encode(r["text"].get_ref<const std::string&>(), true);
        if (tok.eosId() >= 0 && (ex.ids.empty() || ex.ids.back() != tok.eosId()))
            ex.ids.push_back(tok.eosId());
        ex.labels = ex.ids;
        return ex;
    }
    case DataFormat::Alpaca: {
        const std::string& instruction = r["instruction"].get_ref<const std::string&>();
        const std::string input
            = r.contains("input") && r["input"].is_string() ? r["input"].get<std::string>() : "";
        std::string prompt;
        if (input.empty())
            prompt = "Below is an instruction that describes a task. Write a response that "
                     "appropriately completes the request.\n\n### Instruction:\n"
                + instruction + "\n\n### Response:\n";
        else
            prompt = "Below is an instruction that describes a task, paired with an input that "
                     "provides further context. Write a response that appropriately completes "
                     "the request.\n\n### Instruction:\n"
                + instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
        return buildSegments(
            {{prompt, false}, {r["output"].get<std::string>() + tok.eosToken(), true}}, true);
    }
    case DataFormat::Chat: {
        requireChatTemplate();
        std::vector<tokenizer::ChatMessage> messages;
        for (const auto& m : r["messages"])
            messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
        // The templates write BOS themselves where the model expects it.
        return buildSegments(tokenizer::renderChat(*m_chatTemplate, messages, tok, false), false);
    }
    default:
        throw std::runtime_error("record format not resolved");
    }
}

} // namespace shard::data
