// Record -> (ids, labels). Segmented records (Alpaca, chat) are encoded as one text when the
// encoding of each prompt prefix is a prefix of the whole (true for byte-level tokenizers at
// these boundaries), so training sees the same tokens as inference; otherwise per segment.
#include "data/sample_builder.h"

#include <algorithm>
#include <fstream>
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
    if (name == "preference")
        return DataFormat::Preference;
    throw std::runtime_error("unknown data format '" + std::string(name)
        + "' (use auto, text, alpaca, chat, tokenized or preference)");
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
    case DataFormat::Preference:
        return "preference";
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
    if (record.contains("chosen") || record.contains("rejected"))
        return DataFormat::Preference;
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
        + "); expected \"text\", \"instruction\"/\"output\", \"messages\", \"input_ids\" or "
          "\"prompt\"/\"chosen\"/\"rejected\"";
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

// Empty when `msgs` is a list of {"role", "content"} messages with known roles.
std::string messagesError(const nlohmann::json& msgs, const std::string& key, bool allowEmpty)
{
    if (!msgs.is_array() || (!allowEmpty && msgs.empty()))
        return "\"" + key + "\" is not a non-empty array of messages";
    for (size_t i = 0; i < msgs.size(); ++i) {
        const auto& m = msgs[i];
        const std::string at = key + "[" + std::to_string(i) + "]";
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()
            || !m.contains("content") || !m["content"].is_string())
            return at + " needs string \"role\" and \"content\"";
        const auto& role = m["role"].get_ref<const std::string&>();
        if (role != "system" && role != "user" && role != "assistant")
            return at + " has unknown role '" + role + "' (expected system, user, assistant)";
    }
    return {};
}

std::vector<tokenizer::ChatMessage> messages(const nlohmann::json& msgs, size_t from = 0)
{
    std::vector<tokenizer::ChatMessage> out;
    for (size_t i = from; i < msgs.size(); ++i)
        out.push_back({msgs[i]["role"].get<std::string>(), msgs[i]["content"].get<std::string>()});
    return out;
}

// Conversational pairs without "prompt": the turns chosen and rejected share.
size_t sharedTurns(const nlohmann::json& chosen, const nlohmann::json& rejected)
{
    size_t n = 0;
    while (n < chosen.size() && n < rejected.size() && chosen[n] == rejected[n])
        ++n;
    return n;
}

std::string preferenceError(const nlohmann::json& r)
{
    for (const char* key : {"chosen", "rejected"})
        if (!r.contains(key))
            return std::string("missing \"") + key
                + "\" (a preference pair needs \"chosen\" and "
                  "\"rejected\")";
    const auto& c = r["chosen"];
    const auto& rj = r["rejected"];
    if (c.is_string() != rj.is_string() || c.is_array() != rj.is_array())
        return "\"chosen\" and \"rejected\" must both be text or both be message lists";
    if (c.is_string()) {
        if (!r.contains("prompt") || !r["prompt"].is_string())
            return "text pairs need a string \"prompt\" (or give chosen/rejected as message "
                   "lists)";
        if (c.get_ref<const std::string&>().empty() || rj.get_ref<const std::string&>().empty())
            return std::string("empty \"")
                + (c.get_ref<const std::string&>().empty() ? "chosen" : "rejected") + "\" answer";
        if (c == rj)
            return "\"chosen\" and \"rejected\" are the same answer (nothing to prefer)";
        return {};
    }
    if (!c.is_array())
        return "\"chosen\" and \"rejected\" must be strings or message lists";
    for (const char* key : {"chosen", "rejected"})
        if (auto e = messagesError(r[key], key, false); !e.empty())
            return e;
    size_t promptTurns = 0;
    if (r.contains("prompt")) {
        if (auto e = messagesError(r["prompt"], "prompt", false); !e.empty())
            return e + " (conversational pairs give the prompt as messages)";
    } else {
        promptTurns = sharedTurns(c, rj);
        if (promptTurns == 0)
            return "no \"prompt\", and \"chosen\" and \"rejected\" share no leading turns to "
                   "take it from";
    }
    if (c == rj)
        return "\"chosen\" and \"rejected\" are the same answer (nothing to prefer)";
    for (const char* key : {"chosen", "rejected"}) {
        const auto& msgs = r[key];
        if (msgs.size() <= promptTurns)
            return std::string("\"") + key + "\" has no answer after the prompt's turns";
        if (msgs.back()["role"] != "assistant")
            return std::string("\"") + key + "\" must end with an assistant answer";
        if (msgs.back()["content"].get_ref<const std::string&>().empty())
            return std::string("empty \"") + key + "\" answer";
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
        if (!r["messages"].is_array() || r["messages"].empty())
            return "\"messages\" is not a non-empty array";
        return messagesError(r["messages"], "messages", false);
    }
    case DataFormat::Preference:
        return preferenceError(r);
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
    case DataFormat::Preference:
        throw std::runtime_error("a preference pair makes two rows (SampleBuilder::buildPair)");
    default:
        throw std::runtime_error("record format not resolved");
    }
}

Example SampleBuilder::buildChatAnswer(const std::vector<tokenizer::ChatMessage>& prompt,
    const std::vector<tokenizer::ChatMessage>& answer, size_t& promptTokens)
{
    const tokenizer::Tokenizer& tok = *m_tokenizer;
    std::string promptText;
    for (const auto& seg : tokenizer::renderChat(*m_chatTemplate, prompt, tok, true))
        promptText += seg.text;
    std::vector<tokenizer::ChatMessage> all = prompt;
    all.insert(all.end(), answer.begin(), answer.end());
    std::vector<tokenizer::ChatSegment> segments = tokenizer::renderChat(*m_chatTemplate, all, tok);
    // Only what follows the prompt (with its assistant header) is the answer: every piece that
    // starts inside the prompt's text is masked, earlier assistant turns included.
    size_t offset = 0;
    std::string whole;
    for (auto& seg : segments) {
        if (offset < promptText.size())
            seg.trainable = false;
        offset += seg.text.size();
        whole += seg.text;
    }
    if (whole.compare(0, promptText.size(), promptText) != 0)
        throw std::runtime_error("the chat template renders the prompt turns differently when "
                                 "an answer follows; give the pair as text (prompt, chosen, "
                                 "rejected strings)");
    const bool saved = m_trainOnPrompt;
    m_trainOnPrompt = false;
    Example ex = buildSegments(segments, false);
    m_trainOnPrompt = saved;
    promptTokens = 0;
    while (promptTokens < ex.labels.size() && ex.labels[promptTokens] == kIgnoreLabel)
        ++promptTokens;
    return ex;
}

PairExample SampleBuilder::buildPair(const nlohmann::json& r)
{
    if (!m_tokenizer)
        throw std::runtime_error("preference data needs a tokenizer (a model folder with "
                                 "tokenizer.json)");
    const tokenizer::Tokenizer& tok = *m_tokenizer;
    PairExample pair;
    if (r["chosen"].is_string()) {
        // As TRL: prompt and answers encoded apart, EOS after each answer.
        const std::vector<int32_t> prompt
            = tok.encode(r["prompt"].get_ref<const std::string&>(), true);
        auto answer = [&](const std::string& text) {
            Example ex;
            ex.ids = prompt;
            ex.labels.assign(prompt.size(), kIgnoreLabel);
            std::vector<int32_t> a = tok.encode(text, false);
            if (tok.eosId() >= 0)
                a.push_back(tok.eosId());
            ex.ids.insert(ex.ids.end(), a.begin(), a.end());
            ex.labels.insert(ex.labels.end(), a.begin(), a.end());
            return ex;
        };
        pair.chosen = answer(r["chosen"].get<std::string>());
        pair.rejected = answer(r["rejected"].get<std::string>());
        pair.promptTokens = prompt.size();
        return pair;
    }
    requireChatTemplate();
    const auto& c = r["chosen"];
    const auto& rj = r["rejected"];
    std::vector<tokenizer::ChatMessage> prompt;
    size_t from = 0;
    if (r.contains("prompt")) {
        prompt = messages(r["prompt"]);
    } else {
        from = sharedTurns(c, rj);
        prompt = messages(c, 0);
        prompt.resize(from);
    }
    size_t pc = 0, pr = 0;
    pair.chosen = buildChatAnswer(prompt, messages(c, from), pc);
    pair.rejected = buildChatAnswer(prompt, messages(rj, from), pr);
    pair.promptTokens = std::min(pc, pr);
    return pair;
}

bool truncatePair(PairExample& pair, int64_t seqLen)
{
    const size_t S = static_cast<size_t>(seqLen);
    const size_t P = pair.promptTokens;
    const size_t longest = std::max(pair.chosen.ids.size(), pair.rejected.ids.size()) - P;
    if (P + longest <= S)
        return false;
    const size_t keepPrompt = std::min(P, std::max(S / 2, S > longest ? S - longest : 0));
    const size_t drop = P - keepPrompt;
    for (Example* ex : {&pair.chosen, &pair.rejected}) {
        ex->ids.erase(ex->ids.begin(), ex->ids.begin() + drop);
        ex->labels.erase(ex->labels.begin(), ex->labels.begin() + drop);
        if (ex->ids.size() > S) {
            ex->ids.resize(S);
            ex->labels.resize(S);
        }
    }
    pair.promptTokens = keepPrompt;
    return true;
}

std::vector<PairPreview> previewPairs(const std::string& path,
    const tokenizer::Tokenizer& tokenizer, const std::string& chatTemplate, int64_t seqLen,
    int count)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error(path + ": cannot read");
    SampleBuilder builder(&tokenizer, false, chatTemplate);
    std::vector<PairPreview> out;
    std::string text;
    int64_t line = 0;
    while (static_cast<int>(out.size()) < count && std::getline(in, text)) {
        ++line;
        if (text.find_first_not_of(" \t\r") == std::string::npos)
            continue;
        PairPreview p;
        p.line = line;
        try {
            const nlohmann::json record = nlohmann::json::parse(text);
            p.problem = validateRecord(record, DataFormat::Preference, tokenizer.vocabSize());
            if (p.problem.empty()) {
                PairExample pair = builder.buildPair(record);
                p.truncated = truncatePair(pair, seqLen);
                const auto from = static_cast<std::ptrdiff_t>(pair.promptTokens);
                p.prompt = tokenizer.decode(
                    std::vector<int32_t>(pair.chosen.ids.begin(), pair.chosen.ids.begin() + from));
                p.chosen = tokenizer.decode(
                    std::vector<int32_t>(pair.chosen.ids.begin() + from, pair.chosen.ids.end()));
                p.rejected = tokenizer.decode(std::vector<int32_t>(
                    pair.rejected.ids.begin() + from, pair.rejected.ids.end()));
            }
        } catch (const std::exception& e) {
            p.problem = e.what();
        }
        out.push_back(std::move(p));
    }
    return out;
}

} // namespace shard::data
