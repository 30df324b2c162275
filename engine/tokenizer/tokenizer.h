// A Hugging Face tokenizer loaded from a model folder (tokenizer.json + tokenizer_config.json):
// byte-level BPE (GPT-2, Llama 3, Qwen 2/3) and SentencePiece-style BPE (Llama 2, byte
// fallback). Added and special tokens are matched first and never split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shard::tokenizer {

// Cheap to copy (shared immutable state); encode/decode are safe to call from several threads.
class Tokenizer {
public:
    // Loads <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json. Throws
    // std::runtime_error naming the file and what is wrong (e.g. an unsupported model type).
    static Tokenizer fromFolder(const std::string& dir);
    // The same from parsed files (config may be null or an empty object).
    static Tokenizer fromJson(const nlohmann::json& tokenizerJson, const nlohmann::json& config);

    // Text (UTF-8) to ids. addSpecial adds what the post-processor / config says (e.g. BOS for
    // Llama 2). Special-token strings inside the text become their ids. Throws on invalid UTF-8.
    std::vector<int32_t> encode(std::string_view text, bool addSpecial = true) const;
    // Ids to text; skipSpecial drops special tokens (BOS, EOS, chat markers).
    std::string decode(const std::vector<int32_t>& ids, bool skipSpecial = false) const;

    int32_t bosId() const; // -1 when the tokenizer has none
    int32_t eosId() const; // -1 when the tokenizer has none
    // The padding id: pad_token when configured, else EOS, else 0.
    int32_t padId() const;
    const std::string& bosToken() const; // empty when none
    const std::string& eosToken() const;
    // One more than the largest id of the vocabulary and the added tokens.
    int64_t vocabSize() const;

    int32_t tokenToId(std::string_view token) const; // -1 when absent
    std::string idToToken(int32_t id) const;         // empty when absent
    bool isSpecial(int32_t id) const;

    // tokenizer_config.json's "chat_template" (empty when none) and "tokenizer_class"; the
    // folder's config.json "model_type" when fromFolder found one (empty otherwise).
    const std::string& chatTemplate() const;
    const std::string& tokenizerClass() const;
    const std::string& modelType() const;

private:
    Tokenizer() = default; // only the factories make one: a Tokenizer is never empty
    static Tokenizer build(const nlohmann::json& tokenizerJson, const nlohmann::json& config,
        const std::string& modelType);
    struct Impl;
    std::shared_ptr<const Impl> m_impl;
};

} // namespace shard::tokenizer
