// The stages of a Hugging Face tokenizer around its model: normalizer, pre-tokenizer,
// post-processor and decoder, built from tokenizer.json. Each stage supports the types that
// GPT-2, Llama 2/3 and Qwen 2/3 files use; any other type fails naming it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace shard::tokenizer {

class Normalizer {
public:
    virtual ~Normalizer() = default;
    virtual std::string normalize(std::string text) const = 0;
    // Builds a normalizer; null JSON gives nullptr (identity).
    static std::unique_ptr<Normalizer> fromJson(const nlohmann::json& json);
};

// A pre-token: its text and whether it is raw bytes still to be spelled in the byte-level
// alphabet (set by the ByteLevel pre-tokenizer; the BPE model maps the bytes itself).
struct PreToken {
    std::string text;
    bool byteLevel = false;
};

class PreTokenizer {
public:
    virtual ~PreTokenizer() = default;
    // Splits `pieces` in place. `firstChunk` is true for the text before any added token
    // (Metaspace's prepend_scheme "first").
    virtual void split(std::vector<PreToken>& pieces, bool firstChunk) const = 0;
    static std::unique_ptr<PreTokenizer> fromJson(const nlohmann::json& json);
};

// A token on its way back to text; `added` tokens (special or added vocabulary) pass the
// byte-level stages unchanged.
struct DecodePiece {
    std::string text;
    bool added = false;
};

class Decoder {
public:
    virtual ~Decoder() = default;
    virtual void decode(std::vector<DecodePiece>& pieces) const = 0;
    static std::unique_ptr<Decoder> fromJson(const nlohmann::json& json);
};

// What the post-processor adds around one sequence when special tokens are requested.
struct PostTemplate {
    std::vector<int32_t> prefix;
    std::vector<int32_t> suffix;
    bool present = false; // false: the file has no template (the config's add_bos/eos apply)
};

// Reads TemplateProcessing / ByteLevel / Roberta / Bert / Sequence post-processors; resolves
// special token names through `lookup` (returns -1 when unknown).
PostTemplate postTemplateFromJson(
    const nlohmann::json& json, const std::function<int32_t(const std::string&)>& lookup);

} // namespace shard::tokenizer
