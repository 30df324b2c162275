// Turns one JSONL record into token ids and labels (unpadded): plain text, Alpaca, chat (via
// the model's chat template) and pre-tokenized records; validates records with a reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/chat_template.h"

namespace shard::tokenizer {
class Tokenizer;
}

namespace shard::data {

// Preference: pairs for DPO/ORPO as Hugging Face TRL reads them, {"prompt", "chosen",
// "rejected"} as text, or conversational (message lists; without "prompt" the turns chosen and
// rejected share are the prompt).
enum class DataFormat { Auto, Text, Alpaca, Chat, Tokenized, Preference };

// "auto", "text", "alpaca", "chat", "tokenized", "preference"; throws naming the accepted values.
DataFormat parseDataFormat(std::string_view name);
std::string dataFormatName(DataFormat format);

// The format a record's keys indicate, or nullopt (then `why` says what was seen).
std::optional<DataFormat> detectFormat(const nlohmann::json& record, std::string& why);

// Empty when `record` is a valid record of `format`, else the reason (one line). vocabSize
// bounds pre-tokenized ids (pass 0 to skip that check).
std::string validateRecord(const nlohmann::json& record, DataFormat format, int64_t vocabSize);

// Unpadded token ids and aligned labels of one record.
struct Example {
    std::vector<int32_t> ids;
    std::vector<int32_t> labels;
};

// A preference pair: the same prompt (its tokens masked) followed by the chosen and by the
// rejected answer (labelled, ending in EOS or the template's end of turn).
struct PairExample {
    Example chosen;
    Example rejected;
    size_t promptTokens = 0; // the leading tokens both share
};

// Cuts a pair that does not fit seqLen tokens, as TRL does: the prompt keeps its last tokens,
// at most max(seqLen / 2, seqLen - the longer answer); each answer keeps its first tokens up to
// the sequence length. Returns whether anything was cut.
bool truncatePair(PairExample& pair, int64_t seqLen);

// One preference pair as the model sees it (the Launch page's preview): the prompt and both
// answers decoded from their tokens, special tokens and chat markers included, after the cut
// to seqLen; or the line's problem.
struct PairPreview {
    int64_t line = 0; // 1-based
    std::string prompt;
    std::string chosen;
    std::string rejected;
    bool truncated = false;
    std::string problem; // set: this line is not a usable pair
};

// The first `count` lines of a JSONL file read as preference pairs. chatTemplate as in
// DataConfig. Throws when the file cannot be read.
std::vector<PairPreview> previewPairs(const std::string& path,
    const tokenizer::Tokenizer& tokenizer, const std::string& chatTemplate, int64_t seqLen,
    int count);

class SampleBuilder {
public:
    // tokenizer may be null for pre-tokenized data only. chatTemplate: a name, or empty to
    // detect from the tokenizer when the first chat record is built.
    SampleBuilder(
        const tokenizer::Tokenizer* tokenizer, bool trainOnPrompt, std::string chatTemplate = {});

    // Resolves the chat template now (throws with the fix when unknown).
    void requireChatTemplate();

    // Builds a validated record. Text: BOS (as the tokenizer adds) + text + EOS, all labelled.
    // Alpaca: the Alpaca prompt (masked unless trainOnPrompt) + output + EOS. Chat: the chat
    // template; only assistant answers and their end-of-turn tokens are labelled unless
    // trainOnPrompt. Tokenized: as given (labels default to input_ids).
    Example build(const nlohmann::json& record, DataFormat format);
    // A validated preference record. Text: BOS (as the tokenizer adds) + prompt, then the answer
    // + EOS. Conversational: the chat template over prompt + answer turns, the prompt rendered
    // with the assistant header; only the answer's turns are labelled (trainOnPrompt does not
    // apply: a preference is about the answers).
    PairExample buildPair(const nlohmann::json& record);

private:
    Example buildSegments(const std::vector<tokenizer::ChatSegment>& segments, bool addPrefix);
    Example buildChatAnswer(const std::vector<tokenizer::ChatMessage>& prompt,
        const std::vector<tokenizer::ChatMessage>& answer, size_t& promptTokens);

    const tokenizer::Tokenizer* m_tokenizer;
    bool m_trainOnPrompt;
    std::string m_chatTemplateName;
    std::optional<tokenizer::ChatTemplateKind> m_chatTemplate;
};

} // namespace shard::data
